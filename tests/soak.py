# soak.py — the swarm soaked under faults from outside (issue 19): `serve --arm resident` with
# several concurrent clients at temperature 0 while faults land at random moments — kill -9 of
# a worker, SIGSTOP of one for 0.2-5 s, its links cut (its TCP connections destroyed, ss -K), a
# respawn killed again as it starts — every completion compared with the reference arm's text.
# Reports requests done, lost, mismatched, the longest stall, /health's slowest answer and the
# detection times; fails on a loss, a mismatch, a hang, or a /health answer slower than ten
# times the healthy answers measured in the same run (and than the 50 ms goal, which is
# reported, not asserted). SOAK_SECONDS (default 60) is how long faults land; SOAK_SEED the draws.
# `make soak` runs it; tests/e2e_soak.sh a short one in `make test`. tests/
import json
import os
import random
import re
import shutil
import signal
import subprocess
import sys
import threading
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from swarmfault import (Checks, HealthPoller, Server, children, now, run,  # noqa: E402
                        signal_pid, wait_new_child)

NAME = os.environ.get("SOAK_NAME", "soak")
SECONDS = float(os.environ.get("SOAK_SECONDS", "60"))
SEED = int(os.environ.get("SOAK_SEED", str(int(time.time()) % 100000)))
CLIENTS = int(os.environ.get("SOAK_CLIENTS", "3"))
T = os.path.join(os.environ.get("SWARM_TEST_TMP", "tests/tmp"), NAME)
shutil.rmtree(T, ignore_errors=True)
os.makedirs(T)
C = Checks(NAME)
rng = random.Random(SEED)
PROMPTS = ["Once upon a time", "The cat sat on the mat and", "12 + 30 =", "In the beginning",
           "She opened the door, and", "A list of fruit: apples,"]
N_TOK = 40


def log(*a):
    print(*a, flush=True)


log(f"{NAME}: {SECONDS:.0f} s of faults, {CLIENTS} clients, seed {SEED}")
subprocess.run(f"gzip -dc tests/fixtures/tok/llama-spm.gguf.gz > {T}/vocab.gguf", shell=True,
               check=True)
rc, _, _ = run(T, "gen", ["gen", "--arch", "llama", "--dim", "256", "--layers", "6", "--heads",
                          "4", "--kv-heads", "2", "--ff", "512", "--vocab-from",
                          f"{T}/vocab.gguf", "--ctx", "512", "--seed", "11", "--type", "q8_0",
                          "-o", f"{T}/m.gguf"])
C.check(rc == 0, "gen")
M = f"{T}/m.gguf"

# The reference arm's text for every prompt, and how long a request takes here healthy.
ref = Server(T, "ref", M, ["--parallel", "1"])
REF = {}
C.check(ref.wait_ready(600), "serve --arm reference starts")
t = now()
for p in PROMPTS:
    REF[p] = ref.complete(p, N_TOK)["text"]
ref_req_s = (now() - t) / len(PROMPTS)
ref.stop()

srv = Server(T, "res", M, ["--arm", "resident", "--workers", "3", "--parallel", str(CLIENTS),
                           "--ctx", "256"])
if not C.check(srv.wait_ready(600), "serve --arm resident starts"):
    log(srv.err()[-2000:])
    srv.stop()
    sys.exit(C.close())
# A hang: a request that takes longer than this (the healthy one measured above, times a
# margin for faults: a rebuild, a stopped worker's silence, a machine shared with others).
HANG_S = 60 + 50 * (ref_req_s + srv.ready_s)


class Clients(threading.Thread):
    def __init__(self, k):
        super().__init__(daemon=True)
        self.k = k
        self.done = self.lost = self.bad = self.hung = 0
        self.stall = 0.0          # the longest wait for a streamed piece
        self.slowest = 0.0        # the longest whole request
        self.errors = []
        self.halt = threading.Event()
        self.mu = threading.Lock()

    def one(self, i):
        n = 0
        r_ = random.Random(SEED * 31 + i)
        while not self.halt.is_set():
            p = r_.choice(PROMPTS)
            n += 1
            t0 = now()
            r = srv.complete(p, N_TOK, stream=(n % 2 == 0), timeout=HANG_S)
            dt = now() - t0
            with self.mu:
                self.slowest = max(self.slowest, dt)
                if dt >= HANG_S:
                    self.hung += 1
                    self.errors.append(f"hung {dt:.1f} s")
                elif r["error"] or r["status"] != 200 or not r["done"]:
                    self.lost += 1
                    self.errors.append(f"{p!r}: {r['status']} {r['error']}")
                elif r["text"] != REF[p]:
                    self.bad += 1
                    self.errors.append(f"mismatch {p!r}: {r['text'][:60]!r}")
                else:
                    self.done += 1
                if r["gaps"]:
                    self.stall = max(self.stall, max(r["gaps"]))

    def run(self):
        ts = [threading.Thread(target=self.one, args=(i,), daemon=True) for i in range(self.k)]
        for t_ in ts:
            t_.start()
        for t_ in ts:
            t_.join()

    def stop(self):
        self.halt.set()
        self.join(HANG_S + 10)


def ports_of(pid):
    """TCP ports pid listens on (its control and data sockets)."""
    r = subprocess.run(["ss", "-tlnpH"], capture_output=True, text=True)
    out = []
    for line in r.stdout.splitlines():
        if f"pid={pid}," in line:
            m = re.search(r":(\d+)\s", line.split()[3] + " ")
            if m:
                out.append(m.group(1))
    return out


def cut(pid):
    """Its links cut: every TCP connection to its listening ports destroyed (ss -K)."""
    ports = ports_of(pid)
    for p in ports:
        subprocess.run(["ss", "-K", "sport", "=", f":{p}"], capture_output=True)
    return bool(ports)


faults = []  # (kind, worker, at)


def inject(kind):
    live = children(srv.pid)
    ws = sorted(w for w in live if w.startswith("w"))
    if not ws:
        return
    w = rng.choice(ws)
    pid = live[w]
    at = now()
    if kind == "kill":
        signal_pid(pid, signal.SIGKILL)
    elif kind == "stop":
        d = rng.uniform(0.2, 5.0)
        signal_pid(pid, signal.SIGSTOP)
        time.sleep(d)
        signal_pid(pid, signal.SIGCONT)  # moot when it was fenced meanwhile
        kind = f"stop {d:.1f} s"
    elif kind == "cut":
        if not cut(pid):
            kind = "cut (no link found)"
    elif kind == "respawn-kill":
        signal_pid(pid, signal.SIGKILL)
        again = wait_new_child(srv.pid, w, pid, HANG_S)
        if again:
            signal_pid(again, signal.SIGKILL)
        else:
            kind = "respawn-kill (no respawn seen)"
    faults.append((kind, w, at))
    log(f"  {at - t_start:7.2f} s: {kind} {w}")


def all_back(limit):
    end = now() + limit
    while now() < end:
        try:
            j = json.loads(srv.get("/health", timeout=limit)[1])
            if j.get("status") == "ok":
                return True
        except (OSError, ValueError):
            pass
        time.sleep(0.1)
    return False


cl = Clients(CLIENTS)
cl.start()
hp = HealthPoller(srv, period=0.02, limit=HANG_S)
hp.start()
# /health's healthy answers: a window before the faults and one after, under the clients'
# load (the machine's load can change during a long run: both ends are measured)
WIN = max(4.0, min(15.0, SECONDS / 8))
time.sleep(WIN)
healthy = [x[1] for x in hp.samples]
t_start = now()
kinds = os.environ.get("SOAK_KINDS", "kill,stop,cut,respawn-kill").split(",")
k = 0
while now() - t_start < SECONDS:
    # every kind in turn at first (a short soak sees each), then drawn
    inject(kinds[k] if k < len(kinds) else rng.choice(kinds))
    k += 1
    # faults at random moments, a respawn given a chance to come back now and then
    if rng.random() < 0.3:
        all_back(HANG_S)
    time.sleep(rng.uniform(0.2, 2.5))
t_end = now()
back = all_back(HANG_S)
t_post = now()
time.sleep(WIN)
healthy += [x[1] for x in hp.samples if x[0] >= t_post]
cl.stop()
hp.stop()
rc = srv.stop(HANG_S)

err = srv.err()
det = [float(x) for x in re.findall(r"detected in ([0-9.]+) ms", err)]
fos = len(re.findall(r": lost \(", err))
resp = len(re.findall(r": respawning \(attempt", err))
slow = max([x[1] for x in hp.samples if t_start <= x[0] < t_post] or [0])
p50 = sorted(healthy)[len(healthy) // 2] if healthy else 0
# ten times the slowest healthy answer; an answer within the 50 ms goal never fails
bound = max(10 * max(healthy), 0.05) if healthy else 0
det.sort()
log(f"{NAME}: {t_end - t_start:.1f} s of faults ({len(faults)}: " +
    ", ".join(f"{k_} {sum(1 for f in faults if f[0].startswith(k_))}" for k_ in kinds) + ")")
log(f"{NAME}: requests done {cl.done}, lost {cl.lost}, mismatched {cl.bad}, hung {cl.hung}; "
    f"longest stall {cl.stall:.2f} s (streamed pieces), slowest request {cl.slowest:.2f} s")
log(f"{NAME}: /health slowest {slow * 1e3:.1f} ms during the faults over {len(hp.samples)} "
    f"answers (healthy: p50 {p50 * 1e3:.1f} ms, max {max(healthy or [0]) * 1e3:.1f} ms; "
    f"bound 10x = {bound * 1e3:.1f} ms; goal 50 ms: {'met' if slow <= 0.05 else 'missed'})")
if det:
    log(f"{NAME}: failovers {fos}, respawns {resp}; detection ms min {det[0]:.1f} p50 "
        f"{det[len(det) // 2]:.1f} max {det[-1]:.1f} ({len(det)} timed)")
else:
    log(f"{NAME}: failovers {fos}, respawns {resp}; no detection timed")
worst = sorted((x for x in hp.samples if t_start <= x[0] < t_post), key=lambda x: -x[1])[:5]
log(f"{NAME}: slowest /health answers: " + ", ".join(
    f"{s_ * 1e3:.0f} ms at {t_ - t_start:.2f} s" for (t_, s_, _, _) in worst))
for e in cl.errors[:5]:
    log("  client:", e)
C.check(cl.lost == 0, f"{cl.lost} requests lost")
C.check(cl.bad == 0, f"{cl.bad} completions differ from the reference arm's")
C.check(cl.hung == 0, f"{cl.hung} requests hung (over {HANG_S:.0f} s)")
C.check(cl.done > 0, "no request completed")
C.check(slow <= bound, f"/health answered in {slow * 1e3:.1f} ms, over 10x the healthy "
        f"{max(healthy or [0]) * 1e3:.1f} ms")
C.check(back, "every worker back (health ok) once the faults stopped")
C.check(rc == 0, f"serve exit {rc} after SIGTERM")
C.check(not re.search(r"AddressSanitizer|runtime error|Segmentation", err), "no crash report")
with open(f"{T}/summary.json", "w") as f:
    json.dump({"seconds": t_end - t_start, "seed": SEED, "faults": len(faults),
               "done": cl.done, "lost": cl.lost, "mismatched": cl.bad, "hung": cl.hung,
               "longest_stall_s": cl.stall, "slowest_request_s": cl.slowest,
               "health_slowest_ms": slow * 1e3, "health_healthy_max_ms": max(healthy or [0]) * 1e3,
               "health_healthy_p50_ms": p50 * 1e3, "failovers": fos, "respawns": resp,
               "detection_ms": det}, f)
sys.exit(C.close())
