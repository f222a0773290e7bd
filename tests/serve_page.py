#!/usr/bin/env python3
"""serve_page.py — drives swarm serve's chat page in headless Chromium over the DevTools
protocol (--remote-debugging-pipe: fd 3 in, fd 4 out, NUL-separated JSON), types a message,
watches the reply grow token by token, takes a screenshot. tests/ (used by e2e_serve.sh)

usage: serve_page.py URL SCREENSHOT.png DEADLINE_S [API_KEY] [WORKERS]
Prints one line of facts; exits 0 when the page showed the server ok, streamed a reply in
several steps, showed time to first token and tokens/s (per reply too) and the context used,
and its controls work: regenerate (twice at temperature 0: the same text), edit-and-resend
(the conversation cut at the edited message), the system prompt and sampling settings reach
the request, and stop ends a reply early; 1 otherwise.
"""
import base64, json, os, shutil, subprocess, sys, tempfile, time

url, shot, deadline_s = sys.argv[1], sys.argv[2], float(sys.argv[3])
api_key = sys.argv[4] if len(sys.argv) > 4 else ""
want_workers = int(sys.argv[5]) if len(sys.argv) > 5 else 0  # rows in the page's workers table
end = time.monotonic() + deadline_s
# The binary itself: Debian's /usr/bin/chromium wrapper is a shell script that adds flags.
exe = next((p for p in ("/usr/lib/chromium/chromium", shutil.which("chromium") or "")
            if p and os.access(p, os.X_OK)), None)
if not exe:
    print("serve_page: no chromium"); sys.exit(1)
prof = tempfile.mkdtemp(prefix="serve_page.")
r_in, w_in = os.pipe()    # we write commands -> chromium reads fd 3
r_out, w_out = os.pipe()  # chromium writes fd 4 -> we read
def child():  # via fresh copies: dup2 onto the same number would keep close-on-exec
    a, b = os.dup(r_in), os.dup(w_out)
    os.dup2(a, 3); os.dup2(b, 4)
proc = subprocess.Popen([exe, "--headless=new", "--no-sandbox", "--disable-gpu",
                         "--no-first-run", "--user-data-dir=" + prof, "--window-size=1000,700",
                         "--remote-debugging-pipe", "about:blank"],
                        close_fds=False, preexec_fn=child,
                        stdout=subprocess.DEVNULL, stderr=open(shot + ".log", "w"))
os.close(r_in); os.close(w_out)
buf = b""; seq = 0
def call(method, params=None, session=None):
    global buf, seq
    seq += 1
    msg = {"id": seq, "method": method, "params": params or {}}
    if session: msg["sessionId"] = session
    os.write(w_in, json.dumps(msg).encode() + b"\0")
    while True:
        while b"\0" not in buf:
            if time.monotonic() > end:
                raise TimeoutError(method)
            import select
            r, _, _ = select.select([r_out], [], [], max(0.0, end - time.monotonic()))
            if not r:
                raise TimeoutError(method)
            chunk = os.read(r_out, 1 << 20)
            if not chunk:
                raise EOFError("chromium closed the pipe")
            buf += chunk
        line, buf = buf.split(b"\0", 1)
        m = json.loads(line)
        if m.get("id") == seq:
            if "error" in m:
                raise RuntimeError(f"{method}: {m['error']}")
            return m.get("result", {})

def ev(expr, session):
    r = call("Runtime.evaluate", {"expression": expr, "returnByValue": True,
                                  "awaitPromise": True}, session)
    return r.get("result", {}).get("value")

ok = False
facts = {}
try:
    tid = call("Target.createTarget", {"url": url})["targetId"]
    sid = call("Target.attachToTarget", {"targetId": tid, "flatten": True})["sessionId"]
    while ev("document.readyState + '|' + (document.getElementById('health')||{}).textContent",
             sid) != "complete|ok":
        time.sleep(0.05)
    facts["arm"] = ev("document.getElementById('arm').textContent", sid)
    facts["model"] = ev("document.getElementById('model').textContent", sid)
    # The reply's bytes are paced by Chromium's own network throttling (4 KiB/s, about 2 s for
    # 48 tokens' events), so it reaches the page in several reads whatever the machine's speed:
    # unthrottled, a tiny model's 48 tokens on a loaded machine arrived in one read, and the
    # page, rightly, rendered them once (seen in a full run at load 8).
    call("Network.enable", {}, sid)
    call("Network.emulateNetworkConditions", {"offline": False, "latency": 0,
         "downloadThroughput": 4096, "uploadThroughput": -1}, sid)
    # Every change of the reply's text is recorded, with its length, as it happens.
    ev("""window.__lens = [];
    new MutationObserver(() => { const r = document.getElementById('reply-1');
      if (r) window.__lens.push(r.querySelector('span').textContent.length); })
      .observe(document.getElementById('log'),
               {subtree: true, childList: true, characterData: true});
    document.getElementById('maxtok').value = 48;
    document.getElementById('key').value = %s;
    document.getElementById('input').value = 'Hello there, swarm';
    document.getElementById('form').requestSubmit(); true""" % json.dumps(api_key), sid)
    while ev("!!(document.getElementById('reply-1')||{dataset:{}}).dataset.done", sid) is not True:
        time.sleep(0.05)
    call("Network.emulateNetworkConditions", {"offline": False, "latency": 0,
         "downloadThroughput": -1, "uploadThroughput": -1}, sid)
    facts["reply"] = ev("document.getElementById('reply-1').querySelector('span').textContent", sid)
    lens = ev("window.__lens", sid) or []
    facts["updates"] = len(set(l for l in lens if l > 0))
    facts["ttft"] = ev("document.getElementById('ttft').textContent", sid)
    facts["tps"] = ev("document.getElementById('tps').textContent", sid)
    facts["workers_rows"] = ev("document.getElementById('workers').rows.length", sid)
    facts["stats1"] = ev("document.querySelector('#reply-1 .stats').textContent", sid)
    facts["ctx"] = ev("document.getElementById('ctx').textContent", sid)
    ok = (facts["reply"] and not facts["reply"].startswith("[error]") and facts["updates"] >= 2
          and facts["ttft"].endswith(" ms") and facts["tps"] not in ("", "–")
          and facts["workers_rows"] == want_workers
          and " ms · " in facts["stats1"] and " tok/s · " in facts["stats1"]
          and facts["ctx"].endswith("%)") and "/ 256 tokens" in facts["ctx"])
    # The controls. Every request body the page sends is recorded.
    ev("""window.__bodies = []; const f0 = window.fetch;
    window.fetch = (u, o) => { if (o && o.body) window.__bodies.push(JSON.parse(o.body));
                               return f0(u, o); }; true""", sid)
    def done(i):
        while ev("!!(document.getElementById('reply-%d')||{dataset:{}}).dataset.done" % i,
                 sid) is not True:
            time.sleep(0.05)
        return ev("document.querySelector('#reply-%d span').textContent" % i, sid)
    nmsg = "document.querySelectorAll('#log .msg').length"
    ev("document.getElementById('temp').value = 0; document.getElementById('maxtok').value = 16;"
       "document.getElementById('regen').click(); true", sid)
    a = done(1)
    ev("document.getElementById('regen').click(); true", sid)
    b = done(1)
    facts["regen"] = [a, b, ev(nmsg, sid)]
    ok = ok and a == b and a and not a.startswith("[error]") and facts["regen"][2] == 2
    ev("document.getElementById('edit-0').click();"
       "document.getElementById('input').value = 'Edited question';"
       "document.getElementById('form').requestSubmit(); true", sid)
    e = done(1)
    facts["edit"] = [ev("document.querySelector('#log .user span').textContent", sid),
                     ev(nmsg, sid), [m["content"] for m in ev("window.__bodies", sid)[-1]["messages"]]]
    ok = ok and facts["edit"][0] == "Edited question" and facts["edit"][1] == 2 and \
        facts["edit"][2] == ["Edited question"] and not e.startswith("[error]")
    ev("document.getElementById('system').value = 'Be brief.';"
       "document.getElementById('seed').value = 7; document.getElementById('topk').value = 5;"
       "document.getElementById('input').value = 'Next';"
       "document.getElementById('form').requestSubmit(); true", sid)
    done(3)
    last = ev("window.__bodies", sid)[-1]
    facts["settings"] = {k: last.get(k) for k in ("temperature", "top_k", "seed", "max_tokens")}
    facts["settings"]["first"] = last["messages"][0]
    ok = ok and last["messages"][0] == {"role": "system", "content": "Be brief."} and \
        facts["settings"]["temperature"] == 0 and last["top_k"] == 5 and last["seed"] == 7 and \
        len(last["messages"]) == 4 and "seed 7" in ev("document.querySelector('#reply-3 .stats')"
                                                      ".textContent", sid)
    # stop: the page clicks it itself as the reply's first piece shows (a click from here could
    # come after a fast model's last token). The reply's body is handed to the page one event
    # at a time, 20 ms apart, as a slow network would: a fast server's whole reply can arrive
    # in one read, and a stop must land while the reply is still coming.
    ev("""const f1 = window.fetch;
    window.fetch = async (u, o) => {
      const r = await f1(u, o);
      if (!r.body) return r;
      const enc = new TextEncoder(), dec = new TextDecoder();
      let buf = "";
      const ts = new TransformStream({ async transform(chunk, ctl) {
        buf += dec.decode(chunk, { stream: true });
        let i;
        while ((i = buf.indexOf("\\n\\n")) >= 0) {
          ctl.enqueue(enc.encode(buf.slice(0, i + 2))); buf = buf.slice(i + 2);
          await new Promise((res) => setTimeout(res, 20));
        } } });
      return new Response(r.body.pipeThrough(ts), { status: r.status, headers: r.headers });
    }; true""", sid)
    ev("""document.getElementById('temp').value = 1; document.getElementById('maxtok').value = 60;
    document.getElementById('seed').value = '';
    new MutationObserver((_, o) => { const r = document.getElementById('reply-5');
      if (r && r.querySelector('span').textContent.length) { document.getElementById('stop').click();
                                                             o.disconnect(); } })
      .observe(document.getElementById('log'), {subtree: true, childList: true, characterData: true});
    document.getElementById('input').value = 'Go on';
    document.getElementById('form').requestSubmit(); true""", sid)
    done(5)
    st = ev("(document.querySelector('#reply-5 .stats') || document.querySelector('#reply-5'))"
            ".textContent", sid)
    facts["stop"] = [ev("document.getElementById('reply-5').dataset.stopped", sid),
                     ev("document.getElementById('state').textContent", sid), st]
    ntok = int(st.split(" tokens")[0].split()[-1]) if " tokens" in st else -1
    ok = ok and facts["stop"][0] == "1" and facts["stop"][1] == "stopped" and 0 < ntok < 60 \
        and ev("document.getElementById('regen').disabled", sid) is False
    png = call("Page.captureScreenshot", {"format": "png"}, sid)["data"]
    with open(shot, "wb") as f:
        f.write(base64.b64decode(png))
except Exception as e:  # a timeout or a closed pipe: reported, never hung
    facts["error"] = repr(e)
    ok = False
finally:
    proc.kill(); proc.wait()
    shutil.rmtree(prof, ignore_errors=True)
print("serve_page:", json.dumps(facts, ensure_ascii=False))
sys.exit(0 if ok else 1)
