# swarmfault.py — what the fault tests share (tests/e2e_faults_llm.sh, tests/soak.py): a
# `swarm serve` started and stopped, completions (whole and streamed) with their timing, a
# /health poller that keeps every answer's latency, a worker's process found by its --id, a
# GGUF tensor's byte flipped in place. Not a test itself. tests/
import http.client
import json
import os
import signal
import struct
import subprocess
import sys
import threading
import time

SWARM = os.environ.get("SWARM_BIN") or os.path.abspath("bin/swarm")


def now():
    return time.monotonic()


def run(T, name, args, limit=None):
    """swarm ARGS, stdout/stderr into T/NAME.{out,err}: (rc, out, err). limit: a hang guard."""
    with open(f"{T}/{name}.out", "wb") as o, open(f"{T}/{name}.err", "wb") as e:
        try:
            rc = subprocess.run([SWARM] + args, stdout=o, stderr=e, timeout=limit).returncode
        except subprocess.TimeoutExpired:
            rc = 124
    return (rc, open(f"{T}/{name}.out", errors="replace").read(),
            open(f"{T}/{name}.err", errors="replace").read())


def corrupt_tensor(path, name, at=100):
    """Flip one bit of tensor NAME's byte AT in place, size and mtime kept (a checksum cache
    keyed by them stays valid: only a hash of the bytes can tell)."""
    f = open(path, "r+b")
    d = f.read()
    p = 8
    nt, nkv = struct.unpack_from("<QQ", d, p)
    p += 16

    def s(p):
        n, = struct.unpack_from("<Q", d, p)
        return d[p + 8:p + 8 + n].decode(), p + 8 + n
    SZ = {0: 1, 1: 1, 2: 2, 3: 2, 4: 4, 5: 4, 6: 4, 7: 1, 10: 8, 11: 8, 12: 8}

    def val(t, p):
        if t == 8:
            return s(p)
        if t == 9:
            at_, n = struct.unpack_from("<IQ", d, p)
            p += 12
            for _ in range(n):
                _, p = val(at_, p)
            return None, p
        v = struct.unpack_from({4: "<I", 5: "<i"}.get(t, "<%dx" % SZ[t]), d, p)
        return (v[0] if v else None), p + SZ[t]
    align = 32
    for _ in range(nkv):
        k, p = s(p)
        t, = struct.unpack_from("<I", d, p)
        v, p = val(t, p + 4)
        if k == "general.alignment":
            align = v
    off = None
    for _ in range(nt):
        n, p = s(p)
        nd, = struct.unpack_from("<I", d, p)
        p += 4 + 8 * nd
        t, o = struct.unpack_from("<IQ", d, p)
        p += 12
        if n == name:
            off = o
    if off is None:
        raise ValueError(f"{path}: no tensor {name}")
    base = (p + align - 1) // align * align
    st = os.stat(path)
    f.seek(base + off + at)
    b = f.read(1)
    f.seek(base + off + at)
    f.write(bytes([b[0] ^ 0x40]))
    f.close()
    os.utime(path, ns=(st.st_atime_ns, st.st_mtime_ns))


def children(pid):
    """{worker id: pid} of pid's children that are swarm workers (their --id)."""
    out = {}
    for d in os.listdir("/proc"):
        if not d.isdigit():
            continue
        try:
            stat = open(f"/proc/{d}/stat").read()
            ppid = int(stat[stat.rindex(")") + 2:].split()[1])
            if ppid != pid:
                continue
            argv = open(f"/proc/{d}/cmdline", "rb").read().split(b"\0")
        except (OSError, ValueError):
            continue
        if b"--id" in argv:
            i = argv.index(b"--id")
            if i + 1 < len(argv):
                out[argv[i + 1].decode()] = int(d)
    return out


def wait_new_child(pid, wid, old, limit, poll=0.001):
    """The pid of a process of pid's with --id wid other than old (a respawn), as soon as it
    exists (polled every ms); None after limit seconds."""
    end = now() + limit
    while now() < end:
        c = children(pid).get(wid)
        if c and c != old:
            return c
        time.sleep(poll)
    return None


def signal_pid(pid, sig):
    try:
        os.kill(pid, sig)
        return True
    except OSError:
        return False


class Server:
    """swarm serve MODEL ARGS on a free loopback port."""

    def __init__(self, T, name, model, args):
        self.T, self.name = T, name
        self.pf = f"{T}/{name}.port"
        self.errf = f"{T}/{name}.err"
        self.t0 = now()
        self.p = subprocess.Popen([SWARM, "serve", model, "--listen", "127.0.0.1:0",
                                   "--port-file", self.pf] + args,
                                  stdout=open(f"{T}/{name}.out", "wb"),
                                  stderr=open(self.errf, "wb"))
        self.pid = self.p.pid
        self.port = None
        self.ready_s = None

    def err(self):
        return open(self.errf, errors="replace").read()

    def wait_ready(self, limit):
        end = now() + limit
        while now() < end and self.p.poll() is None:
            if "serve: ready" in self.err():
                self.port = int(open(self.pf).read())
                self.ready_s = now() - self.t0
                return True
            time.sleep(0.05)
        return False

    def conn(self, timeout):
        return http.client.HTTPConnection("127.0.0.1", self.port, timeout=timeout)

    def get(self, path, timeout=30):
        """(status, body text, seconds)."""
        t = now()
        c = self.conn(timeout)
        try:
            c.request("GET", path)
            r = c.getresponse()
            body = r.read().decode(errors="replace")
            return r.status, body, now() - t
        finally:
            c.close()

    def complete(self, prompt, max_tokens, stream=False, timeout=120, first=None):
        """A /v1/completions at temperature 0: {status, text, error, done, gaps (seconds
        between streamed pieces, the first from the request)}. first: an Event set when the
        first piece of a stream arrives."""
        body = json.dumps({"prompt": prompt, "max_tokens": max_tokens, "temperature": 0,
                           "stream": stream})
        res = {"status": None, "text": "", "error": None, "done": False, "gaps": []}
        t = now()
        c = self.conn(timeout)
        try:
            c.request("POST", "/v1/completions", body, {"Content-Type": "application/json"})
            r = c.getresponse()
            res["status"] = r.status
            if not stream:
                j = json.loads(r.read() or b"{}")
                if "error" in j:
                    res["error"] = j["error"].get("message")
                else:
                    res["text"] = j["choices"][0]["text"]
                    res["done"] = True
                return res
            last = t
            while True:
                line = r.readline()
                if not line:
                    break
                line = line.decode(errors="replace").strip()
                if not line.startswith("data: "):
                    continue
                if line == "data: [DONE]":
                    res["done"] = True
                    break
                j = json.loads(line[6:])
                if "error" in j:
                    res["error"] = j["error"].get("message")
                    continue
                ch = j.get("choices") or []
                if ch and ch[0].get("text"):
                    tt = now()
                    res["gaps"].append(tt - last)
                    last = tt
                    res["text"] += ch[0]["text"]
                    if first is not None:
                        first.set()
            return res
        except (OSError, http.client.HTTPException, ValueError) as e:
            res["error"] = res["error"] or f"client: {e!r}"
            return res
        finally:
            c.close()

    def stop(self, limit=30):
        if self.p.poll() is None:
            self.p.send_signal(signal.SIGTERM)
            try:
                self.p.wait(limit)
            except subprocess.TimeoutExpired:
                self.p.kill()
                self.p.wait()
        return self.p.returncode


HEALTH_POLLER = r"""
import http.client, sys, time
port, period, limit = int(sys.argv[1]), float(sys.argv[2]), float(sys.argv[3])
while True:
    t = time.monotonic()
    try:
        c = http.client.HTTPConnection("127.0.0.1", port, timeout=limit)
        c.request("GET", "/health")
        r = c.getresponse()
        body = r.read().decode(errors="replace").replace("\n", " ")
        st = r.status
        c.close()
    except Exception as e:
        st, body = 0, repr(e)
    print("%.6f %.6f %d %s" % (t, time.monotonic() - t, st, body), flush=True)
    time.sleep(period)
"""


class HealthPoller:
    """GET /health every period seconds from a process of its own (so a busy test process
    does not add its own delays to the latencies), until stopped: each answer's (start,
    seconds, status, json) kept; a request with no answer in limit seconds counts as that
    long."""

    def __init__(self, srv, period=0.01, limit=60):
        self.srv, self.period, self.limit = srv, period, limit
        self.samples = []
        self.p = None
        self.th = None

    def start(self):
        self.p = subprocess.Popen([sys.executable, "-c", HEALTH_POLLER, str(self.srv.port),
                                   str(self.period), str(self.limit)], stdout=subprocess.PIPE,
                                  text=True)
        self.th = threading.Thread(target=self._read, daemon=True)
        self.th.start()

    def _read(self):
        for line in self.p.stdout:
            f = line.rstrip("\n").split(" ", 3)
            if len(f) < 3:
                continue
            try:
                j = json.loads(f[3]) if len(f) > 3 and f[3].startswith("{") else {}
            except ValueError:
                j = {}
            self.samples.append((float(f[0]), float(f[1]), int(f[2]) or None, j))

    def stop(self):
        if self.p:
            self.p.terminate()
            self.p.wait(10)
            self.th.join(10)

    def slowest(self, since=0.0):
        xs = [s for (t, s, _, _) in self.samples if t >= since]
        return max(xs) if xs else 0.0


class Checks:
    """ok/bad counting; the closing line tests/run.sh reads."""

    def __init__(self, name):
        self.name, self.passed, self.failed = name, 0, 0

    def check(self, cond, what):
        if cond:
            self.passed += 1
        else:
            self.failed += 1
            print(f"FAIL: {what}", flush=True)
        return cond

    def close(self):
        print(f"{self.name}: {self.passed} passed, {self.failed} failed", flush=True)
        return 0 if self.failed == 0 else 1
