#!/usr/bin/python3
"""run.py -- the driver of the benchmark harness (issues 3 and 10), started by
scripts/bench once everything is installed and built. It starts its own
redis-server on a free loopback port in a temporary directory (always removed),
measures the limits (hiredis PING loop; redis-benchmark EVALSHA of
lua/reentrant_acquire.lua; the bare hiredis Redisson-format reference client
bench/redisson_ref.c), runs scenarios 1-6 for rlock (bench/rlock_bench.c) and
the peers (bench/peers/), and writes bench/results/latest.md plus PNG charts
(gnuplot) of the latency distributions, with the goals of issue 10 met or not.
Beside them (issues 8 and 9): scenario 2 for rlock on a 3-master Redis Cluster
(made with redis-cli --cluster create, in the same rounds as the single-server
runs), and scenarios 1 and 4 on a RedLock over 3 independent redis-servers, for
rlock's RedLock (both formats) and node-redlock. The lock family (issues 24
and 25): scenarios 3 and 4 on the fair lock (rlock and Redisson's RFairLock),
scenario 8 (read-mostly: rlock's read-write lock, its reentrant lock on the
same ops, Redisson's RReadWriteLock) and scenario 9 (semaphore, 8 processes
sharing 3 permits: rlock, redis-semaphore's Semaphore, Redisson's RSemaphore).
Every figure comes from this run.

With --compare-bindir DIR --compare-rev REV (scripts/bench --compare REV) it
runs only rlock's rows, those of the current tree beside those of DIR's
rlock_bench (built from REV), interleaved for --rounds rounds, and writes
bench/results/compare-REV.md with the ratios.

With --only s2 it runs the limits and scenario 2 only (every row, peers and
cluster row included) and writes bench/results/latest-s2.md instead.

usage: run.py --repo DIR --bindir DIR [--quick] [--out DIR] [--only s2]
              [--compare-bindir DIR --compare-rev REV [--rounds N]]
"""
import argparse
import csv
import io
import json
import os
import pickle
import platform
import re
import select
import shutil
import signal
import socket
import statistics
import subprocess
import sys
import tempfile
import time

# ------------------------------------------------------------------ settings

FULL = dict(
    mode="full", reps=3,
    ping_n=20000, ping_warm=2000,
    ceil_n=200000,
    s1_pairs=20000, s1_warm=1000,
    g1_blocks=16, g1_pairs=2000, g1_warm=200,
    s2_workers=50, s2_secs=10.0, s2_warm=0.5,
    s3_workers=8, s3_iters=500, s3_cap=8.0, s3_cap_redisson=60.0,
    s4_handoffs=10000, s4_warm=100, s4_warm_peer=3, s4_delay_us=500, s4_cap_rlock=60.0, s4_cap_peer=2.0,
    s5_locks=100000, s5_hold=20.0, s5_watchdog_ms=3000, s5_reps_peer=1, s5_hold_peer=6.0,
    s6_pairs=(300, 1300),
    r1_pairs=5000, r1_warm=200, r4_warm=3, r4_cap=10.0,
    s8_iters=500, s8_read_pct=90, s9_iters=300, s9_permits=3, s9_cap=30.0, fam_reps_redisson=1,
)
QUICK = dict(
    mode="quick", reps=1,
    ping_n=5000, ping_warm=500,
    ceil_n=150000,
    s1_pairs=3000, s1_warm=300,
    g1_blocks=4, g1_pairs=1000, g1_warm=100,
    s2_workers=50, s2_secs=2.0, s2_warm=0.5,
    s3_workers=8, s3_iters=100, s3_cap=6.0, s3_cap_redisson=30.0,
    s4_handoffs=1000, s4_warm=50, s4_warm_peer=3, s4_delay_us=500, s4_cap_rlock=20.0, s4_cap_peer=1.5,
    s5_locks=10000, s5_hold=4.0, s5_watchdog_ms=3000, s5_reps_peer=1, s5_hold_peer=4.0,
    s6_pairs=(200, 700),
    r1_pairs=2000, r1_warm=100, r4_warm=3, r4_cap=3.0,
    s8_iters=200, s8_read_pct=90, s9_iters=200, s9_permits=3, s9_cap=20.0, fam_reps_redisson=1,
)
# --compare: the quick sizes, scenario 1 longer (its ratio is the one that
# judges the engine's per-call path; short runs follow the machine's load).
COMPARE = dict(QUICK, mode="compare (quick sizes, scenario 1 longer)", s1_pairs=10000, s1_warm=500)

# Implementations: (label, kind, setting). "best" = shortest retry delay.
PEER_SETTINGS = {
    "redis-py": {"default": "Lock(sleep=0.1) (redis-py default; no lease)",
                 "best": "Lock(sleep=0.001)"},
    "redlock": {"default": "retryDelay 200 ms, retryJitter 100 ms, retryCount 10 (defaults); lease 30 s",
                "best": "retryDelay 1 ms, retryJitter 1 ms, retryCount -1 (unlimited); lease 30 s"},
    "redis-semaphore": {"default": "Mutex: retryInterval 10 ms, acquireTimeout 10 s, lockTimeout 10 s (defaults)",
                        "best": "Mutex: retryInterval 1 ms"},
    "node-redisson": {"default": "watchdog lease 30 s, waits on pub/sub (defaults; it has no retry delay)"},
    "redisson": {"default": "Redisson %s, the Java client (tests/interop/redisson, Bench.java): JVM and Redisson "
                            "defaults, lock() with the 30 s watchdog, waits on pub/sub (no retry delay to tune); "
                            "the JVM warmed up first (scenario 1: 5,000 pairs; 3: 3,000 iterations per worker, 50 contended, then until "
                            "its JIT is idle; 4: 3,000 pairs per owner)" % "4.7.0"},
}
RLOCK_SETTING = "rlock_options_init() defaults; rlock_lock_lock(RLOCK_LEASE_WATCHDOG) (30 s watchdog lease)"
# Scenario 2 has two rlock rows: "default" = 50 OS threads making sync calls
# (rlock_bench s2), "async" = 50 explicit owners chained through completion
# callbacks on the client's I/O thread (rlock_bench s2a): the Node peers' model.
RLOCK_S2 = {"default": "sync, 50 threads", "async": "async, 50 owners on one event loop"}
RLOCK_ASYNC = ("rlock", "async")

CONTENDED = [("rlock", "default")] + [
    (p, s) for p in ("redis-py", "redlock", "redis-semaphore", "node-redisson", "redisson")
    for s in PEER_SETTINGS[p]]
UNCONTENDED = [("rlock", "default"), ("redis-py", "default"), ("redlock", "default"),
               ("redis-semaphore", "default"), ("node-redisson", "default"), ("redisson", "default")]
REDISSON = ("redisson", "default")  # the real Redisson (Java): issue 21's goals
REFERENCE = ("redisson-ref", "default")  # bench/redisson_ref.c: a limit, not a peer
NODE_NAME = {"redlock": "redlock", "redis-semaphore": "semaphore", "node-redisson": "redisson"}
# The lock family (issues 24 and 25): scenario 3 and 4 on the fair lock
# (rlock_bench s3f / s4f, Redisson's getFairLock), the read-mostly scenario 8
# (rlock's read-write lock and, on the same ops, its reentrant lock; Redisson's
# RReadWriteLock) and the semaphore scenario 9 (8 processes, 3 permits).
FAIR = [("rlock", "fair"), ("redisson", "fair")]
READ_MOSTLY = [("rlock", "rw"), ("rlock", "lock"), ("redisson", "rw")]
SEMAPHORE = [("rlock", "default"), ("redis-semaphore", "default"), ("redis-semaphore", "best"),
             ("redisson", "default")]

problems = []  # library errors, stalls, wrong results: all go to the results file


def log(msg):
    sys.stderr.write("[bench %6.1fs] %s\n" % (time.monotonic() - T0, msg))
    sys.stderr.flush()


T0 = time.monotonic()

# ------------------------------------------------------------------ redis


def free_port():
    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    port = s.getsockname()[1]
    s.close()
    return port


class Redis:
    """Our own redis-server on a free loopback port in a temp dir (extra:
    more redis-server arguments, e.g. a cluster node's)."""

    def __init__(self, extra=()):
        self.dir = tempfile.mkdtemp(prefix="rlock-bench-")
        self.port = free_port()
        self.proc = subprocess.Popen(
            ["redis-server", "--port", str(self.port), "--bind", "127.0.0.1", "--save", "",
             "--appendonly", "no", "--dir", self.dir, "--daemonize", "no",
             "--logfile", os.path.join(self.dir, "redis.log")] + list(extra),
            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        for _ in range(100):
            if self.cli("PING", check=False) == "PONG":
                break
            time.sleep(0.05)
        else:
            self.close()  # no server left behind (a cluster node, a RedLock node)
            raise SystemExit("run.py: redis-server did not start")
        self.url = "redis://127.0.0.1:%d" % self.port

    def cli(self, *args, check=True, stdin=None):
        r = subprocess.run(["redis-cli", "-p", str(self.port)] + list(args), input=stdin,
                           capture_output=True, text=True)
        if check and r.returncode != 0:
            raise RuntimeError("redis-cli %s: %s" % (args, r.stderr))
        return r.stdout.strip()

    def info(self, key):
        out = self.cli("INFO", "server")
        m = re.search(r"^%s:(.*)$" % key, out, re.M)
        return m.group(1).strip() if m else "?"

    def flush(self):
        self.cli("FLUSHALL")

    def script_usec(self):
        """(calls, µs) of EVALSHA and EVAL since the last CONFIG RESETSTAT:
        the server's time in the lock scripts (their inner commands included)."""
        calls = usec = 0
        for m in re.finditer(r"^cmdstat_(?:evalsha|eval):calls=(\d+),usec=(\d+)", self.cli("INFO", "commandstats"), re.M):
            calls += int(m.group(1))
            usec += int(m.group(2))
        return calls, usec

    def close(self):
        if self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(5)
            except subprocess.TimeoutExpired:
                self.proc.kill()
        shutil.rmtree(self.dir, ignore_errors=True)


class Cluster:
    """A Redis Cluster of n masters, no replicas (issue 8's scenario 2 row):
    n redis-servers with cluster-enabled (own temp dirs, free client and bus
    ports), joined by `redis-cli --cluster create`; ready when every node
    reports cluster_state:ok. close() stops them all, also after a failed
    start."""

    def __init__(self, n=3):
        self.nodes = []
        try:
            for _ in range(n):
                self.nodes.append(Redis(["--cluster-enabled", "yes", "--cluster-config-file", "nodes.conf",
                                         "--cluster-port", str(free_port())]))
            addrs = ["127.0.0.1:%d" % r.port for r in self.nodes]
            r = subprocess.run(["redis-cli", "--cluster", "create"] + addrs +
                               ["--cluster-replicas", "0", "--cluster-yes"],
                               capture_output=True, text=True, timeout=60)
            if r.returncode != 0:
                raise RuntimeError("redis-cli --cluster create failed: " + (r.stdout + r.stderr)[-400:])
            deadline = time.monotonic() + 30
            while not all("cluster_state:ok" in x.cli("CLUSTER", "INFO", check=False) for x in self.nodes):
                if time.monotonic() > deadline:
                    raise RuntimeError("the cluster did not reach cluster_state:ok within 30 s")
                time.sleep(0.1)
        except BaseException:
            self.close()
            raise
        self.url = "redis+cluster://" + ",".join(addrs)

    def flush(self):
        for r in self.nodes:
            r.cli("FLUSHALL")

    def names_per_master(self, names):
        """How many of names each master serves: [count per node]."""
        ranges = []
        for r in self.nodes:
            mine = [ln for ln in r.cli("CLUSTER", "NODES").splitlines() if "myself" in ln]
            spans = [tuple(int(x) for x in f.split("-")) if "-" in f else (int(f), int(f))
                     for f in (mine[0].split()[8:] if mine else []) if f[0].isdigit()]
            ranges.append(spans)
        slots = self.nodes[0].cli(stdin="".join("CLUSTER KEYSLOT %s\n" % n for n in names)).split()
        counts = [0] * len(self.nodes)
        for sl in slots:
            for i, spans in enumerate(ranges):
                if any(a <= int(sl) <= b for a, b in spans):
                    counts[i] += 1
        return counts

    def close(self):
        for r in self.nodes:
            r.close()


# ------------------------------------------------------------------ helpers


def pct(sorted_vals, p):
    if not sorted_vals:
        return float("nan")
    k = min(len(sorted_vals) - 1, max(0, int(round(p / 100.0 * (len(sorted_vals) - 1)))))
    return sorted_vals[k]


def load_samples(path, col=0):
    vals = []
    try:
        with open(path) as f:
            for line in f:
                parts = line.split()
                if parts:
                    vals.append(float(parts[col]))
    except FileNotFoundError:
        pass
    return vals


def s4_figures(path):
    """Scenario 4's samples: one line "RET CALL" per handoff (acquire returned
    in one process minus unlock returned, and minus unlock called, in the
    other; µs on one clock). CALL is the figure every row is compared on; RET
    is issue 10's goal 5 and --compare's (an rlock_bench older than CALL
    writes RET alone: its CALL figures are None)."""
    ret, call = [], []
    try:
        with open(path) as f:
            for line in f:
                parts = line.split()
                if parts:
                    ret.append(float(parts[0]))
                    call.append(float(parts[1]) if len(parts) > 1 else None)
    except FileNotFoundError:
        pass
    ret.sort()
    if any(x is None for x in call):
        call = None
    else:
        call.sort()
    d = dict(p50_ret=pct(ret, 50), p99_ret=pct(ret, 99), neg_ret=sum(1 for x in ret if x < 0),
             recorded_ret=len(ret))
    if call is None:
        d.update(p50=None, p99=None, max=None, samples=[])
    else:
        d.update(p50=pct(call, 50), p99=pct(call, 99), max=call[-1] if call else None, samples=call)
    return d


def med(xs):
    xs = [x for x in xs if x is not None]
    return statistics.median(xs) if xs else None


def spread(xs):
    xs = [x for x in xs if x is not None]
    if len(xs) < 2:
        return ""
    m = statistics.median(xs)
    if not m:
        return ""
    return " ±%.0f%%" % (100.0 * (max(xs) - min(xs)) / 2 / m)


def fmt(x, nd=0):
    if x is None or x != x:
        return "n/a"
    if nd == 0:
        return "{:,.0f}".format(x)
    return "{:,.{}f}".format(x, nd)


def fmt_ms(us):
    if us is None or us != us:
        return "n/a"
    if us >= 1000:
        return "%.1f ms" % (us / 1000)
    return "%.0f µs" % us


class Ctx:
    def __init__(self, args, cfg, redis):
        self.args, self.cfg, self.redis = args, cfg, redis
        self.tmp = tempfile.mkdtemp(prefix="rlock-bench-data-")
        self.bindir = os.path.abspath(args.bindir)
        self.repo = os.path.abspath(args.repo)
        self.peers = os.path.join(self.repo, "bench", "peers")
        self.n = 0
        self.cluster = None  # Cluster: scenario 2's cluster row
        self.nodes = []      # [Redis]: the RedLock rows' independent servers

    def path(self, stem):
        self.n += 1
        return os.path.join(self.tmp, "%03d-%s" % (self.n, stem))

    def command(self, impl, setting, scen, args, bindir=None):
        """argv for one run of scenario scen of one implementation (rlock:
        the rlock_bench of bindir, default --bindir; --compare passes the
        other commit's)."""
        if impl == "rlock":
            return [os.path.join(bindir or self.bindir, "rlock_bench"), scen, self.redis.url] + args
        if impl == "rlock-cluster":  # rlock on the cluster (scenario 2)
            return [os.path.join(self.bindir, "rlock_bench"), scen, self.cluster.url] + args
        if impl == "rlock-redlock":  # rlock's RedLock, setting = format (r1, r4)
            return [os.path.join(self.bindir, "rlock_bench"), "r" + scen[1:],
                    ",".join(r.url for r in self.nodes), setting] + args
        if impl == "redlock-3":  # node-redlock over the same nodes
            return ["node", os.path.join(self.peers, "peers.js"), "redlock", setting, scen,
                    ",".join(str(r.port) for r in self.nodes)] + args
        if impl == "redisson-ref":  # scenario 1 and the cost runs only
            return [os.path.join(self.bindir, "redisson_ref"), "127.0.0.1", str(self.redis.port)] + args
        if impl == "redis-py":
            return ["/usr/bin/python3", os.path.join(self.peers, "redis_py.py"), setting, scen,
                    str(self.redis.port)] + args
        if impl == "redisson":  # the jar scripts/bench builds beside bench/build/bin
            jar = os.path.join(os.path.dirname(self.bindir), "redisson-peer", "redisson-peer.jar")
            return ["java", "-cp", jar, "rlock.interop.Bench", setting, scen, str(self.redis.port)] + args
        return ["node", os.path.join(self.peers, "peers.js"), NODE_NAME[impl], setting, scen,
                str(self.redis.port)] + args

    def run_json(self, impl, setting, scen, args, timeout, what, bindir=None):
        argv = self.command(impl, setting, scen, args, bindir)
        try:
            r = subprocess.run(argv, capture_output=True, text=True, timeout=timeout)
        except subprocess.TimeoutExpired:
            problems.append("%s: %s (%s) did not finish within %.0f s (killed): hang?" %
                            (what, impl, setting, timeout))
            log("TIMEOUT %s %s %s" % (what, impl, setting))
            return None
        if r.returncode != 0:
            problems.append("%s: %s (%s) failed with status %d: %s" %
                            (what, impl, setting, r.returncode, r.stderr.strip()[-600:]))
            log("FAILED %s %s %s: %s" % (what, impl, setting, r.stderr.strip()[-300:]))
            return None
        try:
            return json.loads(r.stdout.strip().splitlines()[-1])
        except (ValueError, IndexError):
            problems.append("%s: %s (%s) printed no result: %r" % (what, impl, setting, r.stdout[-300:]))
            return None


# ------------------------------------------------------------------ limits


def limit_ping(ctx):
    cfg = ctx.cfg
    reps = []
    for _ in range(cfg["reps"]):
        sp = ctx.path("ping.txt")
        r = subprocess.run([os.path.join(ctx.bindir, "ping_rtt"), "127.0.0.1", str(ctx.redis.port),
                            str(cfg["ping_n"]), str(cfg["ping_warm"]), sp],
                           capture_output=True, text=True, timeout=120)
        if r.returncode != 0:
            raise SystemExit("run.py: ping_rtt failed: " + r.stderr)
        j = json.loads(r.stdout)
        s = sorted(load_samples(sp))
        reps.append(dict(mean_us=j["elapsed_s"] * 1e6 / j["pings"], p50_us=pct(s, 50),
                         p99_us=pct(s, 99), samples=s))
    reps.sort(key=lambda x: x["mean_us"])
    mid = reps[len(reps) // 2]
    return dict(mean_us=mid["mean_us"], p50_us=mid["p50_us"], p99_us=mid["p99_us"],
                spread=spread([x["mean_us"] for x in reps]), samples=mid["samples"],
                reps=[x["mean_us"] for x in reps])


def limit_ceiling(ctx):
    cfg = ctx.cfg
    with open(os.path.join(ctx.repo, "lua", "reentrant_acquire.lua")) as f:
        script = f.read()
    sha = ctx.redis.cli("SCRIPT", "LOAD", script)
    if not re.fullmatch(r"[0-9a-f]{40}", sha):
        raise SystemExit("run.py: SCRIPT LOAD failed: " + sha)
    # Each call takes a distinct, free lock: the lock name and the latch key
    # carry independent random numbers out of 10^8 (what scenario 2 does).
    argv = ["redis-benchmark", "-h", "127.0.0.1", "-p", str(ctx.redis.port), "-c", "50", "-P", "16",
            "-n", str(cfg["ceil_n"]), "-r", "100000000", "--csv",
            "EVALSHA", sha, "2", "bench:ceil:__rand_int__",
            "rlock_acquire_latch:{bench:ceil:__rand_int__}:__rand_int__",
            "30000", "00000000-0000-4000-8000-000000000000:1", "10000"]
    rates = []
    for _ in range(cfg["reps"]):
        ctx.redis.flush()
        r = subprocess.run(argv, capture_output=True, text=True, timeout=300)
        rows = list(csv.reader(io.StringIO(r.stdout)))
        rate = None
        for i, row in enumerate(rows):
            if row and row[0] == "test" and i + 1 < len(rows):
                rate = float(rows[i + 1][row.index("rps")])
        if rate is None:
            raise SystemExit("run.py: redis-benchmark gave no rate: " + r.stdout + r.stderr)
        rates.append(rate)
    ctx.redis.flush()
    return dict(rate=med(rates), spread=spread(rates), reps=rates, sha=sha,
                cmd=" ".join(argv[:2] + ["127.0.0.1", "-p", "PORT"] + argv[5:]).replace(sha, "<sha>"))


# ------------------------------------------------------------------ scenarios


def s1_once(ctx, impl, setting, bindir=None):
    """One run of scenario 1 (also the reference client's row)."""
    cfg = ctx.cfg
    ctx.redis.flush()
    ctx.redis.cli("CONFIG", "RESETSTAT")
    sp = ctx.path("s1-%s.txt" % impl)
    j = ctx.run_json(impl, setting, "s1", [str(cfg["s1_pairs"]), str(cfg["s1_warm"]), sp],
                     300, "scenario 1", bindir)
    if j is None:
        return None
    s = sorted(load_samples(sp))
    calls, usec = ctx.redis.script_usec()
    j.update(rate=j["pairs"] / j["elapsed_s"], p50=pct(s, 50), p99=pct(s, 99), samples=s,
             script_calls=calls, script_us_per_pair=usec / max(1, cfg["s1_pairs"] + cfg["s1_warm"]))
    return j


def interleaved(ctx, once, impls, key):
    """Runs once(ctx, impl, setting) for every implementation, then again,
    cfg["reps"] rounds (A B C A B C ...): a slow phase of the machine hits
    every row alike. Returns {(impl, setting): summary}."""
    reps = {k: [] for k in impls}
    for rnd in range(ctx.cfg["reps"]):
        for impl, setting in impls:
            j = once(ctx, impl, setting)
            if j is not None:
                j["round"] = rnd
                reps[(impl, setting)].append(j)
    return {k: summarize(v, key) for k, v in reps.items()}


def goal1_paired(ctx):
    """Goal 1's ratio, measured for itself: scenario 1 of rlock and of the
    reference client in short alternating blocks, in the order A B B A A B ...
    (a machine that speeds up or slows down across the run favours neither),
    one ratio (rlock / reference, pairs/s) per adjacent pair of blocks. The
    figure is their median: on a shared machine a figure from a block 10 s
    away is another machine; the block next to it is the same one."""
    cfg = ctx.cfg
    args = [str(cfg["g1_pairs"]), str(cfg["g1_warm"]), os.devnull]  # both time every pair, as in scenario 1
    rl = ("rlock", "default")
    ratios = []
    for b in range(cfg["g1_blocks"]):
        rate = {}
        for impl, setting in ((REFERENCE, rl) if b % 2 == 0 else (rl, REFERENCE)):
            ctx.redis.flush()
            j = ctx.run_json(impl, setting, "s1", args, 120, "goal 1 (paired blocks)")
            if j is None:
                return None
            rate[impl] = j["pairs"] / j["elapsed_s"]
        ratios.append(rate["rlock"] / rate["redisson-ref"])
    rs = sorted(ratios)
    return dict(ratios=ratios, median=med(ratios), q1=pct(rs, 25), q3=pct(rs, 75), n=len(ratios),
                pairs=cfg["g1_pairs"])


def summarize(reps, key):
    if not reps:
        return None
    reps.sort(key=lambda x: x[key])
    mid = dict(reps[len(reps) // 2])
    mid["median"] = med([x[key] for x in reps])
    mid["spread"] = spread([x[key] for x in reps])
    mid["reps"] = [x[key] for x in reps]
    mid["by_round"] = {x["round"]: x[key] for x in reps if "round" in x}
    return mid


def round_ratios(a, b):
    """' (per round: 0.61, 0.65, 0.63)': a / b of the runs of the same round."""
    rs = [a["by_round"][i] / b["by_round"][i] for i in sorted(a.get("by_round", {}))
          if i in b.get("by_round", {}) and b["by_round"][i]]
    return " (per round: %s)" % ", ".join("%.2f" % r for r in rs) if len(rs) > 1 else ""


def s2_once(ctx, impl, setting, bindir=None):
    cfg = ctx.cfg
    (ctx.cluster if impl == "rlock-cluster" else ctx.redis).flush()
    sp = ctx.path("s2-%s-%s.txt" % (impl, setting))
    scen = "s2a" if (impl, setting) == RLOCK_ASYNC else "s2"
    j = ctx.run_json(impl, setting, scen, [str(cfg["s2_workers"]), str(cfg["s2_secs"]),
                                            str(cfg["s2_warm"]), sp],
                     cfg["s2_secs"] + cfg["s2_warm"] + 60, "scenario 2", bindir)
    if j is None:
        return None
    s = load_samples(sp)
    if len(s) > 200000:  # enough for the percentiles and the chart
        s = s[:: len(s) // 200000 + 1]
    s.sort()
    j.update(rate=j["pairs"] / j["elapsed_s"], p50=pct(s, 50), p99=pct(s, 99), samples=s,
             cpu_us_per_pair=j.get("client_cpu_pct", 0) / 100 * j["elapsed_s"] * 1e6 / max(1, j["pairs"]))
    return j


def s3_cap(cfg, impl):
    """Scenario 3's cap: a run not finished by then is killed and marked
    stalled. Redisson's 8 JVMs on a small machine are CPU-bound (their JIT
    compilers still run while measuring), not stalled: they get their own."""
    return cfg["s3_cap_redisson"] if impl == "redisson" else cfg["s3_cap"]


def run_workers(ctx, impl, setting, argvs, cap, what):
    """Starts one process per argv (the workers of scenarios 3, 8 and 9),
    waits for each one's "ready" (after its warm-up), tells them all "go" at
    once and waits at most cap seconds for them to end. Returns (outs, stalled,
    wall): outs[i] = (returncode, stdout, stderr), or None for a worker killed
    at the cap; None if a worker was not ready (a problem is recorded)."""
    procs = [subprocess.Popen(argv, stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                              stderr=subprocess.PIPE, text=True) for argv in argvs]
    # Each worker warms up (20 lock+unlock pairs, contended) and prints "ready";
    # a worker stuck in its warm-up (lost wake-up) must not hold the run up.
    # (8 JVMs starting at once on a small machine take seconds before any
    # warm-up, and Redisson's workers warm the JVM up first, see Bench.java:
    # they get 120 s more)
    go0 = time.monotonic()
    ready_deadline = go0 + cap + (120 if impl == "redisson" else 0)
    for p in procs:
        left = ready_deadline - time.monotonic()
        ok = left > 0 and select.select([p.stdout], [], [], left)[0]
        line = p.stdout.readline() if ok else ""
        if line.strip() != "ready":
            for q in procs:
                q.kill()
            for q in procs:
                q.wait()
            problems.append("%s: %s (%s) a worker was not ready (warm-up of 20 lock+unlock "
                            "pairs) within %.0f s: %s" %
                            (what, impl, setting, ready_deadline - go0, "stalled in warm-up" if not ok
                             else p.stderr.read()[-400:]))
            return None
    go = time.monotonic()
    for p in procs:
        p.stdin.write("go\n")
        p.stdin.flush()
    deadline = go + cap
    stalled = False
    outs = []
    for p in procs:
        try:
            out, err = p.communicate(timeout=max(0.1, deadline - time.monotonic()))
            outs.append((p.returncode, out, err))
        except subprocess.TimeoutExpired:
            stalled = True
            outs.append(None)
    if stalled:
        for p in procs:
            if p.poll() is None:
                p.kill()
        for p in procs:
            p.wait()
    wall = time.monotonic() - go
    return outs, stalled, wall


def worker_results(outs, what, impl, setting):
    """(first start ns, last end ns, acquire tries, [cpu s]) of the workers that
    ended well; a failed worker is a problem."""
    starts, ends, cpu = [], [], []
    tries = 0
    for o in outs:
        if o is None:
            continue
        rc, out, err = o
        if rc != 0:
            problems.append("%s: %s (%s) worker failed (status %d): %s" %
                            (what, impl, setting, rc, err.strip()[-400:]))
            continue
        j = json.loads(out.strip().splitlines()[-1])
        starts.append(int(j["start_ns"]))
        tries += j.get("acquire_tries", 0)
        if "cpu_s" in j:
            cpu.append(float(j["cpu_s"]))
        ends.append(int(j["end_ns"]))
    return starts, ends, tries, cpu


def s3_once(ctx, impl, setting, bindir=None):
    cfg = ctx.cfg
    ctx.redis.flush()
    name, counter = "bench:s3:%s:%s" % (impl, setting), "bench:s3:counter"
    cap = s3_cap(cfg, impl)
    files, argvs = [], []
    scen = "s3f" if (impl, setting) == ("rlock", "fair") else "s3"
    for w in range(cfg["s3_workers"]):
        sp = ctx.path("s3-%s-%s-%d.txt" % (impl, setting, w))
        files.append(sp)
        argvs.append(ctx.command(impl, setting, scen, [name, counter, str(cfg["s3_iters"]), sp], bindir))
    r = run_workers(ctx, impl, setting, argvs, cap, "scenario 3")
    if r is None:
        return None
    outs, stalled, wall = r
    starts, ends, tries, cpu = worker_results(outs, "scenario 3", impl, setting)
    owner_of, waits = {}, []
    times = {}  # counter value -> (acquire returned ns, unlock called ns): rlock and Redisson
    css = []    # critical sections: unlock called - acquire returned, µs
    dup = False
    for w, sp in enumerate(files):
        try:
            with open(sp) as f:
                for line in f:
                    parts = line.split()
                    v, wt = int(parts[0]), parts[1]
                    if v in owner_of:
                        dup = True
                    owner_of[v] = w
                    waits.append(float(wt))
                    if len(parts) >= 4:
                        times[v] = (int(parts[2]), int(parts[3]))
                        css.append((int(parts[3]) - int(parts[2])) / 1000.0)
        except FileNotFoundError:
            pass  # a killed worker writes nothing
    counter_val = int(ctx.redis.cli("GET", counter) or 0)
    done = len(waits)
    expected = cfg["s3_workers"] * cfg["s3_iters"]
    if stalled:
        # killed workers lose their sample files: count from the counter
        exact = None
        elapsed = wall
        ops = counter_val
    else:
        exact = (not dup) and counter_val == done == expected and sorted(owner_of) == list(range(done))
        elapsed = (max(ends) - min(starts)) / 1e9 if starts else wall
        ops = done
    changes = sum(1 for v in range(1, done) if v in owner_of and v - 1 in owner_of
                  and owner_of[v] != owner_of[v - 1])
    # the handoff under contention: at each owner change, the new owner's
    # acquire returned - the old owner's unlock called (one clock)
    hand = sorted((times[v][0] - times[v - 1][1]) / 1000.0 for v in range(1, done)
                  if v in times and v - 1 in times and owner_of[v] != owner_of[v - 1])
    css.sort()
    waits.sort()
    if exact is False:
        problems.append("scenario 3: %s (%s) counter NOT exact: counter=%d, critical sections=%d, "
                        "expected %d, duplicate values read: %s" %
                        (impl, setting, counter_val, done, expected, dup))
    if stalled:
        problems.append("scenario 3: %s (%s) did not finish %d iterations within %.0f s "
                        "(counter reached %d); workers killed" %
                        (impl, setting, expected, cap, counter_val))
    return dict(rate=ops / elapsed if elapsed > 0 else 0, ops=ops, elapsed_s=elapsed,
                changes=changes if not stalled else None, exact=exact, stalled=stalled,
                p50=pct(waits, 50), p99=pct(waits, 99), max=waits[-1] if waits else None,
                samples=waits, counter=counter_val,
                hand_p50=pct(hand, 50) if hand else None, hand_p99=pct(hand, 99) if hand else None,
                cs_p50=pct(css, 50) if css else None,
                cpu_us_per_op=1e6 * sum(cpu) / ops if ops and not stalled and len(cpu) == len(files) else None,
                tries_per_acquire=tries / ops if tries and ops and not stalled else None)


def scen_s3(ctx, impl, setting, nreps=None):
    reps = [r for r in (s3_once(ctx, impl, setting) for _ in range(nreps or ctx.cfg["reps"])) if r]
    res = summarize(reps, "rate")
    if res:
        res["p50_med"] = med([r["p50"] for r in reps])
        res["p99_med"] = med([r["p99"] for r in reps])
        res["max_med"] = med([r["max"] for r in reps])
        res["max_max"] = max(r["max"] for r in reps if r["max"] is not None) if any(
            r["max"] is not None for r in reps) else None
        res["changes_med"] = med([r["changes"] for r in reps])
        res["tries_med"] = med([r["tries_per_acquire"] for r in reps])
        res["cpu_med"] = med([r.get("cpu_us_per_op") for r in reps])
        res["hand_med"] = med([r.get("hand_p50") for r in reps])
        res["hand99_med"] = med([r.get("hand_p99") for r in reps])
        res["cs_med"] = med([r.get("cs_p50") for r in reps])
        res["exact_all"] = all(r["exact"] for r in reps)
        res["stalled_any"] = any(r["stalled"] for r in reps)
    return res


def s4_once(ctx, impl, setting, bindir=None):
    cfg = ctx.cfg
    cap = cfg["s4_cap_rlock"] if impl == "rlock" else cfg["s4_cap_peer"]
    warm = cfg["s4_warm"] if impl == "rlock" else cfg["s4_warm_peer"]
    ctx.redis.flush()
    sp = ctx.path("s4-%s-%s.txt" % (impl, setting))
    scen = "s4f" if (impl, setting) == ("rlock", "fair") else "s4"
    j = ctx.run_json(impl, setting, scen, ["bench:s4:%s:%s" % (impl, setting), str(cfg["s4_handoffs"]),
                                            str(warm), str(cfg["s4_delay_us"]),
                                            str(cap), sp], cap + 90, "scenario 4", bindir)
    if j is None:
        return None
    j.update(s4_figures(sp))
    if j.get("stalled"):
        problems.append("scenario 4: %s (%s) stalled: a waiter was not woken by the unlock "
                        "and waited past the %.0f s cap (%d handoffs done)" %
                        (impl, setting, cap, j["handoffs"]))
    return j


def scen_s4(ctx, impl, setting, nreps=None):
    reps = [r for r in (s4_once(ctx, impl, setting) for _ in range(nreps or ctx.cfg["reps"])) if r]
    res = summarize([r for r in reps if r["p50"] == r["p50"]] or reps, "p50")
    if res:
        res["p99_med"] = med([r["p99"] for r in reps if r["p99"] == r["p99"]])
        res["p50_ret_med"] = med([r["p50_ret"] for r in reps if r["p50_ret"] == r["p50_ret"]])
        res["neg_ret"] = sum(r["neg_ret"] for r in reps)
        res["recorded_ret"] = sum(r["recorded_ret"] for r in reps)
        res["handoffs_med"] = med([r["handoffs"] for r in reps])
        res["capped_any"] = any(r.get("capped") for r in reps)
        res["stalled_any"] = any(r.get("stalled") for r in reps)
    return res


# ------------------------------------------------------------------ family (issues 24, 25)


def s8_once(ctx, impl, setting):
    """Scenario 8, read-mostly: 8 workers x s8_iters ops, s8_read_pct % reads
    (read lock, GET counter, unlock), the rest writes (write lock, GET, SET
    counter+1, unlock); every worker's op sequence is the same xorshift32 for
    every row. rlock rw: its read-write lock; rlock lock: its reentrant lock
    for every op (the same work, all exclusive); Redisson rw: RReadWriteLock."""
    cfg = ctx.cfg
    ctx.redis.flush()
    name, counter = "bench:s8:%s:%s" % (impl, setting), "bench:s8:counter"
    files, argvs = [], []
    for w in range(cfg["s3_workers"]):
        sp = ctx.path("s8-%s-%s-%d.txt" % (impl, setting, w))
        files.append(sp)
        args = [name, counter, str(cfg["s8_iters"]), str(cfg["s8_read_pct"]), str(w), sp]
        argvs.append(ctx.command(impl, setting, "s8", ([setting] if impl == "rlock" else []) + args))
    r = run_workers(ctx, impl, setting, argvs, s3_cap(cfg, impl), "scenario 8")
    if r is None:
        return None
    outs, stalled, wall = r
    starts, ends, _, cpu = worker_results(outs, "scenario 8", impl, setting)
    reads, writes, wvals = [], [], []
    for sp in files:
        try:
            with open(sp) as f:
                for line in f:
                    op, wt, v = line.split()
                    (reads if op == "r" else writes).append(float(wt))
                    if op == "w":
                        wvals.append(int(v))
        except FileNotFoundError:
            pass
    counter_val = int(ctx.redis.cli("GET", counter) or 0)
    ops = len(reads) + len(writes)
    expected = cfg["s3_workers"] * cfg["s8_iters"]
    exact = None if stalled else (ops == expected and counter_val == len(writes)
                                   and sorted(wvals) == list(range(len(writes))))
    if exact is False:
        problems.append("scenario 8: %s (%s) NOT exact: counter=%d, writes=%d, ops=%d of %d, write values "
                        "unique and 0..writes-1: %s" % (impl, setting, counter_val, len(writes), ops, expected,
                                                        sorted(wvals) == list(range(len(writes)))))
    if stalled:
        problems.append("scenario 8: %s (%s) did not finish within %.0f s; workers killed" %
                        (impl, setting, s3_cap(cfg, impl)))
        ops = counter_val  # only the writes are known
    elapsed = (max(ends) - min(starts)) / 1e9 if starts and not stalled else wall
    reads.sort()
    writes.sort()
    return dict(rate=ops / elapsed if elapsed > 0 else 0, ops=ops, reads=len(reads), writes=len(writes),
                elapsed_s=elapsed, exact=exact, stalled=stalled,
                r_p50=pct(reads, 50), r_p99=pct(reads, 99), r_max=reads[-1] if reads else None,
                w_p50=pct(writes, 50), w_p99=pct(writes, 99), w_max=writes[-1] if writes else None,
                samples=sorted(reads + writes),
                cpu_us_per_op=1e6 * sum(cpu) / ops if ops and not stalled and len(cpu) == len(files) else None)


def s9_once(ctx, impl, setting):
    """Scenario 9, semaphore: 8 workers share s9_permits permits, each
    s9_iters x (acquire 1, INCR in-use, DECR in-use, release 1). rlock and
    Redisson use one RSemaphore-format key (set to the permits here first);
    redis-semaphore's Semaphore gets the limit in its constructor."""
    cfg = ctx.cfg
    ctx.redis.flush()
    name, inuse = "bench:s9:%s:%s" % (impl, setting), "bench:s9:inuse"
    if impl != "redis-semaphore":
        ctx.redis.cli("SET", name, str(cfg["s9_permits"]))
    files, argvs = [], []
    for w in range(cfg["s3_workers"]):
        sp = ctx.path("s9-%s-%s-%d.txt" % (impl, setting, w))
        files.append(sp)
        args = [name] + ([str(cfg["s9_permits"])] if impl == "redis-semaphore" else []) + \
            [inuse, str(cfg["s9_iters"]), sp]
        argvs.append(ctx.command(impl, setting, "s9", args))
    cap = cfg["s9_cap"] + (cfg["s3_cap_redisson"] if impl == "redisson" else 0)
    r = run_workers(ctx, impl, setting, argvs, cap, "scenario 9")
    if r is None:
        return None
    outs, stalled, wall = r
    starts, ends, _, cpu = worker_results(outs, "scenario 9", impl, setting)
    failures = sum(json.loads(o[1].strip().splitlines()[-1]).get("failures", 0) for o in outs
                   if o is not None and o[0] == 0)
    waits, most = [], 0
    for sp in files:
        try:
            with open(sp) as f:
                for line in f:
                    wt, n = line.split()
                    waits.append(float(wt))
                    most = max(most, int(n))
        except FileNotFoundError:
            pass
    ops = len(waits)
    expected = cfg["s3_workers"] * cfg["s9_iters"]
    ok = not stalled and ops == expected and most <= cfg["s9_permits"]
    if most > cfg["s9_permits"]:
        problems.append("scenario 9: %s (%s) %d holders at once with %d permits" %
                        (impl, setting, most, cfg["s9_permits"]))
    if stalled:
        problems.append("scenario 9: %s (%s) did not finish %d acquires within %.0f s; workers killed" %
                        (impl, setting, expected, cap))
    elapsed = (max(ends) - min(starts)) / 1e9 if starts and not stalled else wall
    waits.sort()
    return dict(rate=ops / elapsed if elapsed > 0 else 0, ops=ops, elapsed_s=elapsed, stalled=stalled, ok=ok,
                most=most, failures=failures, p50=pct(waits, 50), p99=pct(waits, 99),
                max=waits[-1] if waits else None, samples=waits,
                cpu_us_per_op=1e6 * sum(cpu) / ops if ops and not stalled and len(cpu) == len(files) else None)


def fam_reps(ctx, impl):
    """Repetitions of a family row: Redisson's (8 JVMs warming up, about 30 s
    a run on 2 cores) run once, to keep the full run's time modest."""
    return ctx.cfg["fam_reps_redisson"] if impl == "redisson" else ctx.cfg["reps"]


def scen_reps(ctx, once, impl, setting, fields):
    """fam_reps runs of once; the summary by throughput, with the median
    of each of fields over the runs (key + "_med")."""
    reps = [r for r in (once(ctx, impl, setting) for _ in range(fam_reps(ctx, impl))) if r]
    res = summarize(reps, "rate")
    if res:
        for k in fields:
            res[k + "_med"] = med([r.get(k) for r in reps])
        res["stalled_any"] = any(r["stalled"] for r in reps)
        res["exact_all"] = all(r.get("exact", r.get("ok")) for r in reps)
    return res


def run_family(ctx, R):
    """The lock family's rows: R["s3f"], R["s4f"] (fair lock), R["s8"]
    (read-mostly), R["s9"] (semaphore)."""
    R["s3f"], R["s4f"], R["s8"], R["s9"] = {}, {}, {}, {}
    for impl, setting in FAIR:
        r = R["s3f"][(impl, setting)] = scen_s3(ctx, impl, setting, fam_reps(ctx, impl))
        log("s3 fair %-10s %s" % (impl, "FAILED" if r is None else "median %.1f ops/s, max wait %s" %
                                  (r["median"], fmt_ms(r["max_med"]))))
        r = R["s4f"][(impl, setting)] = scen_s4(ctx, impl, setting, fam_reps(ctx, impl))
        log("s4 fair %-10s %s" % (impl, "FAILED" if r is None else "p50 %s" % fmt_ms(r["median"])))
    for impl, setting in READ_MOSTLY:
        r = R["s8"][(impl, setting)] = scen_reps(ctx, s8_once, impl, setting,
                                                 ("r_p50", "r_p99", "r_max", "w_p50", "w_p99", "w_max", "cpu_us_per_op"))
        log("s8 %-10s %-8s %s" % (impl, setting, "FAILED" if r is None else "median %.1f ops/s" % r["median"]))
    for impl, setting in SEMAPHORE:
        r = R["s9"][(impl, setting)] = scen_reps(ctx, s9_once, impl, setting,
                                                 ("p50", "p99", "max", "most", "cpu_us_per_op", "failures"))
        log("s9 %-16s %-8s %s" % (impl, setting, "FAILED" if r is None else "median %.1f ops/s, max wait %s" %
                                  (r["median"], fmt_ms(r["max_med"]))))


# ------------------------------------------------------------------ RedLock (issue 9)

# rlock's RedLock in both formats and node-redlock over the same 3 servers;
# scenario 1 never waits, so node-redlock runs it at its defaults only.
REDLOCK_S1 = [("rlock-redlock", "simple"), ("rlock-redlock", "reentrant"), ("redlock-3", "default")]
REDLOCK_S4 = REDLOCK_S1 + [("redlock-3", "best")]


def flush_nodes(ctx):
    for r in ctx.nodes:
        r.flush()


def r1_once(ctx, impl, setting):
    """Scenario 1 on the RedLock of the 3 nodes (rlock_bench r1 / peers.js s1)."""
    cfg = ctx.cfg
    flush_nodes(ctx)
    sp = ctx.path("r1-%s-%s.txt" % (impl, setting))
    j = ctx.run_json(impl, setting, "s1", [str(cfg["r1_pairs"]), str(cfg["r1_warm"]), sp], 300,
                     "RedLock scenario 1")
    if j is None:
        return None
    s = sorted(load_samples(sp))
    j.update(rate=j["pairs"] / j["elapsed_s"], p50=pct(s, 50), p99=pct(s, 99), samples=s)
    return j


def r4_once(ctx, impl, setting):
    """Scenario 4 on the RedLock of the 3 nodes; every row stops at r4_cap."""
    cfg = ctx.cfg
    flush_nodes(ctx)
    sp = ctx.path("r4-%s-%s.txt" % (impl, setting))
    j = ctx.run_json(impl, setting, "s4", ["bench:r4:%s" % impl, str(cfg["s4_handoffs"]), str(cfg["r4_warm"]),
                                            str(cfg["s4_delay_us"]), str(cfg["r4_cap"]), sp],
                     cfg["r4_cap"] + 90, "RedLock scenario 4")
    if j is None:
        return None
    j.update(s4_figures(sp))
    if j.get("stalled"):
        problems.append("RedLock scenario 4: %s (%s) stalled: a waiter was still waiting 3 s after the "
                        "cap (killed; %d handoffs done)" % (impl, setting, j["handoffs"]))
    return j


def scen_r4(ctx, impl, setting):
    reps = [r for r in (r4_once(ctx, impl, setting) for _ in range(ctx.cfg["reps"])) if r]
    res = summarize([r for r in reps if r["p50"] == r["p50"]] or reps, "p50")
    if res:
        res["p99_med"] = med([r["p99"] for r in reps if r["p99"] == r["p99"]])
        res["handoffs_med"] = med([r["handoffs"] for r in reps])
        res["stalled_any"] = any(r.get("stalled") for r in reps)
    return res


def run_redlock(ctx, R):
    """R["r1"], R["r4"]: the RedLock rows, on 3 fresh independent servers
    (stopped afterwards); None (and a problem) if they could not start."""
    R["r1"] = R["r4"] = None
    try:
        for _ in range(3):
            ctx.nodes.append(Redis())  # appended one by one: a failed start stops the others (finally)
        R["r1"] = interleaved(ctx, r1_once, REDLOCK_S1, "rate")
        for k, r in R["r1"].items():
            log("r1 %-16s %-9s %s" % (k[0], k[1], "FAILED" if r is None else "median %.1f" % r["median"]))
        R["r4"] = {}
        for impl, setting in REDLOCK_S4:
            r = R["r4"][(impl, setting)] = scen_r4(ctx, impl, setting)
            log("r4 %-16s %-9s %s" % (impl, setting, "FAILED" if r is None else "p50 %.1f" % r["median"]))
    except (OSError, SystemExit, RuntimeError) as e:
        problems.append("RedLock rows: the 3 servers did not start: %s" % e)
    finally:
        for r in ctx.nodes:
            r.close()
        ctx.nodes = []


def run_s2_with_cluster(ctx, R):
    """Scenario 2: the single-server rows and, in the same rounds, rlock on a
    3-master cluster (R["s2_cluster"]; None and a problem if it could not be
    made)."""
    impls = list(UNCONTENDED)
    impls.insert(impls.index(("rlock", "default")) + 1, RLOCK_ASYNC)
    R["s2_cluster"] = R["cluster_names"] = None
    try:
        ctx.cluster = Cluster(3)
        impls.append(("rlock-cluster", "default"))
        R["cluster_names"] = ctx.cluster.names_per_master(
            ["bench:s2:rlock:%d" % i for i in range(ctx.cfg["s2_workers"])])
        log("cluster of 3 masters up: %s" % ctx.cluster.url)
    except (OSError, SystemExit, RuntimeError, subprocess.TimeoutExpired) as e:
        problems.append("scenario 2, cluster row: the 3-master cluster could not be made: %s" % e)
    try:
        R["s2"] = interleaved(ctx, s2_once, impls, "rate")
    finally:
        if ctx.cluster:
            ctx.cluster.close()
            ctx.cluster = None
    R["s2_cluster"] = R["s2"].pop(("rlock-cluster", "default"), None)


def s5_once(ctx, impl, setting, bindir=None):
    cfg = ctx.cfg
    hold = cfg["s5_hold"] if impl == "rlock" else cfg["s5_hold_peer"]
    ctx.redis.flush()
    args = [str(cfg["s5_locks"]), str(hold), str(cfg["s5_watchdog_ms"])]
    j = ctx.run_json(impl, setting, "s5", args, hold + 300, "scenario 5", bindir)
    if j is None:
        return None
    ok = j["still_held"] == cfg["s5_locks"] and j.get("lost", 0) == 0 and j.get("failed", 0) == 0
    j["ok"] = ok
    if not ok:
        problems.append("scenario 5: %s (%s): %d of %d locks still held after %.0f s, %d lost "
                        "notifications, %d failed calls" %
                        (impl, setting, j["still_held"], cfg["s5_locks"], hold, j.get("lost", 0),
                         j.get("failed", 0)))
    j["cmd_rate"] = j.get("renewal_calls_per_s", j.get("server_script_calls_per_s"))
    return j


def scen_s5(ctx, impl, setting):
    cfg = ctx.cfg
    reps_n = cfg["reps"] if impl == "rlock" else cfg["s5_reps_peer"]
    reps = [r for r in (s5_once(ctx, impl, setting) for _ in range(reps_n)) if r]
    res = summarize(reps, "client_cpu_pct")
    if res:
        res["hold"] = cfg["s5_hold"] if impl == "rlock" else cfg["s5_hold_peer"]
        res["ok_all"] = all(r["ok"] for r in reps)
        res["server_cmd_med"] = med([r.get("server_script_calls_per_s") for r in reps])
        res["rss_med"] = med([r["rss_bytes_per_lock"] for r in reps])
        # Issue 21's goal: (RSS after the hold - RSS after connecting) / the
        # locks still held then. A client whose watchdog falls behind loses
        # locks during the hold and drops their state: / N would not be per
        # held lock (Redisson at 100,000 locks and a 3 s lease). Beside it,
        # with all N held: RSS right after the last acquire (a JVM after
        # System.gc(), with the acquire burst's heap still committed).
        res["rss_still_med"] = med([(r["rss_kb_end"] - r["rss_kb_client"]) * 1024.0 / r["still_held"]
                                    for r in reps if "rss_kb_end" in r and "rss_kb_client" in r
                                    and r.get("still_held")])
        res["rss_held_med"] = med([(r["rss_kb_held"] - r["rss_kb_client"]) * 1024.0 / cfg["s5_locks"]
                                   for r in reps if "rss_kb_held" in r and "rss_kb_client" in r])
        res["acquire_med"] = med([r["acquire_s"] for r in reps])
        res["nreps"] = len(reps)
    return res


def cost_argv(ctx, impl, n, bindir=None):
    """The plain loop of n lock+unlock pairs that the cost tools wrap."""
    if impl == "rlock":
        return [os.path.join(bindir or ctx.bindir, "rlock_bench"), "s6", ctx.redis.url, str(n)]
    return [os.path.join(ctx.bindir, "redisson_ref"), "127.0.0.1", str(ctx.redis.port), str(n), "0", "-"]


def run_tool(ctx, argv, what, env=None):
    ctx.redis.flush()
    r = subprocess.run(argv, capture_output=True, text=True, timeout=600,
                       env=dict(os.environ, **(env or {})))
    if r.returncode != 0:
        problems.append("scenario 6: %s failed (status %d): %s" % (what, r.returncode, r.stderr.strip()[-400:]))
        return None
    return r


def callgrind_ir(ctx, impl, n, bindir=None):
    """(total instructions, {function: self instructions}) of n pairs."""
    out = ctx.path("callgrind.out")
    r = run_tool(ctx, ["valgrind", "--tool=callgrind", "--callgrind-out-file=" + out] +
                 cost_argv(ctx, impl, n, bindir), "callgrind (%s)" % impl)
    m = r and re.search(r"Collected\s*:\s*(\d+)", r.stderr)
    return (int(m.group(1)), callgrind_functions(out)) if m else (None, {})


def callgrind_functions(out):
    """{'function (object)': self instructions} from callgrind_annotate."""
    r = subprocess.run(["callgrind_annotate", "--threshold=100", "--auto=no", out], capture_output=True, text=True)
    funcs, obj_of = {}, {}
    for line in r.stdout.splitlines():
        m = re.match(r"^\s*([\d,]+) \(\s*[\d.]+%\)\s+(\S.*?)(?: \[(.*)\])?$", line)
        if not m or m.group(2) == "PROGRAM TOTALS":
            continue
        fn = m.group(2).rsplit(":", 1)[-1]
        # a function met again (code inlined from another source file) comes
        # without its object: the one of its first line
        obj = obj_of.setdefault(fn, os.path.basename(m.group(3) or "").split(".so")[0])
        key = "%s (%s)" % (fn, obj) if obj else fn
        funcs[key] = funcs.get(key, 0) + int(m.group(1).replace(",", ""))
    return funcs


def malloc_calls(ctx, impl, n, bindir=None):
    out = ctx.path("malloc.json")
    r = run_tool(ctx, cost_argv(ctx, impl, n, bindir), "malloc_count (%s)" % impl,
                 {"LD_PRELOAD": os.path.join(ctx.bindir, "malloc_count.so"), "MALLOC_COUNT_OUT": out})
    try:
        with open(out) as f:
            return json.load(f)["allocations"] if r else None
    except (OSError, ValueError, KeyError):
        problems.append("scenario 6: malloc_count (%s) wrote no count" % impl)
        return None


def strace_calls(ctx, impl, n, bindir=None):
    """{syscall: calls} of every thread (strace -c -f), "total" included."""
    out = ctx.path("strace.txt")
    r = run_tool(ctx, ["strace", "-c", "-f", "-o", out] + cost_argv(ctx, impl, n, bindir),
                 "strace (%s)" % impl)
    if not r:
        return None
    calls = {}
    with open(out) as f:
        for line in f:
            parts = line.split()
            if len(parts) >= 5 and parts[0][0].isdigit():
                calls[parts[-1]] = int(parts[3])
    return calls


def cost_once(ctx, impl, bindir=None):
    """Per-pair client cost, steady state: every figure is (count for n2
    pairs - count for n1 pairs) / (n2 - n1), so set-up and exit cancel."""
    n1, n2 = ctx.cfg["s6_pairs"]
    per = lambda a, b: (b - a) / (n2 - n1) if a is not None and b is not None else None
    (ir1, f1), (ir2, f2) = callgrind_ir(ctx, impl, n1, bindir), callgrind_ir(ctx, impl, n2, bindir)
    res = dict(ir=per(ir1, ir2), by_func={k: per(f1.get(k, 0), v) for k, v in f2.items()},
               allocs=per(malloc_calls(ctx, impl, n1, bindir), malloc_calls(ctx, impl, n2, bindir)))
    s1, s2 = strace_calls(ctx, impl, n1, bindir), strace_calls(ctx, impl, n2, bindir)
    if s1 and s2:
        res["syscalls"] = per(s1.get("total", 0), s2.get("total", 0))
        res["by_call"] = {k: per(s1.get(k, 0), v) for k, v in s2.items() if k != "total"}
    else:
        res["syscalls"], res["by_call"] = None, {}
    return res


def scen_s6(ctx):
    """rlock and the reference client, interleaved, cfg["reps"] rounds."""
    runs = {"rlock": [], "redisson-ref": []}
    for _ in range(ctx.cfg["reps"]):
        for impl in runs:
            runs[impl].append(cost_once(ctx, impl))
    res = {}
    for impl, rs in runs.items():
        x = {}
        for key in ("ir", "allocs", "syscalls"):
            vals = [r[key] for r in rs if r[key] is not None]
            x[key], x[key + "_spread"], x[key + "_reps"] = med(vals), spread(vals), vals
        calls = {k for r in rs for k in r["by_call"]}
        x["by_call"] = {k: med([r["by_call"].get(k, 0) for r in rs if r["by_call"]]) for k in calls}
        funcs = {k for r in rs for k in r["by_func"]}
        x["by_func"] = {k: med([r["by_func"].get(k, 0) for r in rs if r["by_func"]]) for k in funcs}
        res[impl] = x
    n1, n2 = ctx.cfg["s6_pairs"]
    res.update(n1=n1, n2=n2)
    return res


# ------------------------------------------------------------------ compare


# (key, label, unit, better): the rlock figures --compare puts side by side.
COMPARE_METRICS = [
    ("s1_rate", "1: uncontended pairs/s", "pairs/s", "higher"),
    ("s1_cpu", "1: client CPU per pair", "µs", "lower"),
    ("s2_rate", "2: 50 owners pairs/s (sync, 50 threads)", "pairs/s", "higher"),
    ("s2_cpu", "2: client CPU per pair (sync, 50 threads)", "µs", "lower"),
    ("s2a_rate", "2: 50 owners pairs/s (async, 50 owners on one event loop)", "pairs/s", "higher"),
    ("s2a_cpu", "2: client CPU per pair (async, 50 owners on one event loop)", "µs", "lower"),
    ("s3_rate", "3: hot lock ops/s", "ops/s", "higher"),
    ("s3_max", "3: max acquire wait", "µs", "lower"),
    ("s4_p50", "4: handoff p50 (unlock returned -> acquire returned)", "µs", "lower"),
    ("s5_cpu", "5: watchdog client CPU", "% of a core", "lower"),
    ("s5_rss", "5: watchdog RSS per held lock", "B", "lower"),
    ("ir", "6: instructions per pair", "", "lower"),
    ("allocs", "6: allocations per pair", "", "lower"),
    ("syscalls", "6: system calls per pair", "", "lower"),
]


def compare_round(ctx, bindir):
    """Every rlock figure of COMPARE_METRICS once, with the rlock_bench of bindir."""
    x = {}
    j = s1_once(ctx, "rlock", "default", bindir)
    if j:
        x.update(s1_rate=j["rate"], s1_cpu=j.get("cpu_us_per_pair"))
    j = s2_once(ctx, "rlock", "default", bindir)
    if j:
        x.update(s2_rate=j["rate"], s2_cpu=j["cpu_us_per_pair"])
    if has_subcommand(ctx, bindir, "s2a"):  # an rlock_bench older than s2a has no async row
        j = s2_once(ctx, "rlock", "async", bindir)
        if j:
            x.update(s2a_rate=j["rate"], s2a_cpu=j["cpu_us_per_pair"])
    j = s3_once(ctx, "rlock", "default", bindir)
    if j and not j["stalled"]:
        x.update(s3_rate=j["rate"], s3_max=j["max"])
    j = s4_once(ctx, "rlock", "default", bindir)
    if j:
        x.update(s4_p50=j["p50_ret"])  # unlock returned: an older rlock_bench records no unlock call
    j = s5_once(ctx, "rlock", "default", bindir)
    if j:
        x.update(s5_cpu=j["client_cpu_pct"], s5_rss=j["rss_bytes_per_lock"])
    c = cost_once(ctx, "rlock", bindir)
    x.update(ir=c["ir"], allocs=c["allocs"], syscalls=c["syscalls"])
    return x


_SUBCOMMANDS = {}


def has_subcommand(ctx, bindir, sub):
    """Whether the rlock_bench of bindir (default --bindir) has subcommand sub
    (its usage line lists them: "rlock_bench s1|s2|s2a|...")."""
    exe = os.path.join(bindir or ctx.bindir, "rlock_bench")
    if exe not in _SUBCOMMANDS:
        r = subprocess.run([exe], capture_output=True, text=True)
        m = re.search(r"rlock_bench ([a-z0-9|]+)", r.stderr)
        _SUBCOMMANDS[exe] = set(m.group(1).split("|")) if m else set()
    return sub in _SUBCOMMANDS[exe]


def run_compare(ctx, outdir):
    """--compare: the current tree's rlock rows (A) and REV's (B), A B, then
    B A, ... for --rounds rounds in one run against one server; each round
    gives a ratio A / B per figure."""
    cfg, args = ctx.cfg, ctx.args
    load_before = "%.2f %.2f %.2f" % os.getloadavg()
    sides = [("current", None), ("rev", os.path.abspath(args.compare_bindir))]
    runs = {"current": [], "rev": []}
    for rnd in range(args.rounds):
        for name, bindir in (sides if rnd % 2 == 0 else sides[::-1]):
            runs[name].append(compare_round(ctx, bindir))
            log("round %d/%d %s done" % (rnd + 1, args.rounds, name))
    write_compare(ctx, outdir, runs, load_before)


def write_compare(ctx, outdir, runs, load_before):
    cfg, args = ctx.cfg, ctx.args
    v = versions(ctx)
    L = []
    w = L.append
    w("# rlock benchmarks: %s compared with %s" % (v["git"], args.compare_rev))
    w("")
    w("Written by `./scripts/bench --compare %s` (bench/run.py) on %s; every figure below comes from this run. "
      "**A** = the current tree (git %s), **B** = commit %s (its own librlock and rlock_bench, built from "
      "`git archive` of that commit into a temporary directory, removed afterwards). Both run against the same "
      "redis-server (%s, 127.0.0.1), in %d round(s); each round runs every scenario for A then B (odd rounds B "
      "then A), so a slow phase of the machine hits both alike. Sizes: %s mode (scenario 1: %s pairs; 2: %d "
      "threads x %.0f s; 3: %d workers x %d; 4: %s handoffs; 5: %s locks held %.0f s, watchdog %d ms; "
      "6: N = %d and %d pairs). Machine: %s; load average at start %s, at the end %s. Total run time %.0f s." %
      (args.compare_rev, time.strftime("%Y-%m-%d %H:%M:%S %Z"), v["git"], args.compare_rev, v["redis"],
       args.rounds, cfg["mode"], fmt(cfg["s1_pairs"]), cfg["s2_workers"], cfg["s2_secs"], cfg["s3_workers"],
       cfg["s3_iters"], fmt(cfg["s4_handoffs"]), fmt(cfg["s5_locks"]), cfg["s5_hold"], cfg["s5_watchdog_ms"],
       cfg["s6_pairs"][0], cfg["s6_pairs"][1], v["cpu"], load_before, "%.2f %.2f %.2f" % os.getloadavg(),
       time.monotonic() - T0))
    w("")
    w("Ratio = A / B per round (the rounds pair the runs that ran next to each other); the table gives the "
      "median ratio and the smallest and largest round. *better* says which direction is an improvement; "
      "**verdict** (at least 3 rounds): better / worse when every round agrees beyond ±2 %, else *same within "
      "noise*.")
    w("")
    w("| figure | A (median) | B (median) | ratio A/B (median) | min - max over rounds | better | verdict |")
    w("| --- | --- | --- | --- | --- | --- | --- |")
    for key, name, unit, better in COMPARE_METRICS:
        pairs = [(a.get(key), b.get(key)) for a, b in zip(runs["current"], runs["rev"])]
        ratios = [a / b for a, b in pairs if a is not None and b]
        am = med([a for a, _ in pairs])
        bm = med([b for _, b in pairs])
        nd = 1 if key in ("s1_cpu", "s2_cpu", "s2a_cpu", "s5_cpu", "allocs", "syscalls") else 0
        if not ratios:
            why = "failed: see problems"
            if key.startswith("s2a") and not any(b.get(key) is not None for b in runs["rev"]) and \
                    not has_subcommand(ctx, os.path.abspath(args.compare_bindir), "s2a"):
                why = "B's rlock_bench has no s2a (older than the async row): A only"
            w("| %s (%s) | %s | %s | n/a | | %s | %s |" % (name, unit or "count", fmt(am, nd), fmt(bm, nd), better, why))
            continue
        lo, hi = min(ratios), max(ratios)
        up = lo > 1.02 if better == "higher" else hi < 0.98
        down = hi < 0.98 if better == "higher" else lo > 1.02
        verdict = ("no verdict (fewer than 3 rounds)" if len(ratios) < 3 else
                   "**better**" if up else "**worse**" if down else "same within noise")
        w("| %s (%s) | %s | %s | %.3f | %.3f - %.3f | %s | %s |" %
          (name, unit or "count", fmt(am, nd), fmt(bm, nd), med(ratios), lo, hi, better, verdict))
    w("")
    w("## Problems seen in this run")
    w("")
    for p in problems or ["none"]:
        w("- " + p.replace("\n", " "))
    path = os.path.join(outdir, "compare-%s.md" % args.compare_rev)
    with open(path, "w") as f:
        f.write("\n".join(L) + "\n")
    log("wrote %s" % path)


# ------------------------------------------------------------------ charts


def write_cdf(path, samples, points=400):
    with open(path, "w") as f:
        n = len(samples)
        if not n:
            f.write("1 0\n")
            return
        for i in range(points + 1):
            q = i / points
            v = samples[min(n - 1, int(q * (n - 1)))]
            f.write("%.3f %.5f\n" % (max(v, 0.1), q))


def chart(ctx, outdir, fname, title, series, xlabel="latency (µs, log scale)"):
    """series: [(label, sorted samples)]. A CDF per series, log x."""
    series = [(l, s) for l, s in series if s]
    if not series:
        return None
    plots = []
    for i, (label, s) in enumerate(series):
        dat = os.path.join(ctx.tmp, "%s-%d.dat" % (fname, i))
        write_cdf(dat, s)
        plots.append("'%s' using 1:2 with lines lw 2 title '%s'" % (dat, label.replace("'", "")))
    gp = os.path.join(ctx.tmp, fname + ".gp")
    png = os.path.join(outdir, fname + ".png")
    with open(gp, "w") as f:
        f.write("set terminal pngcairo size 1000,600 font ',10'\n")
        f.write("set output '%s'\n" % png)
        f.write("set title '%s'\n" % title.replace("'", ""))
        f.write("set logscale x\nset grid\nset key bottom right\n")
        f.write("set xlabel '%s'\nset ylabel 'fraction of samples <= x (CDF)'\n" % xlabel)
        f.write("set yrange [0:1]\n")
        f.write("plot " + ", \\\n  ".join(plots) + "\n")
    r = subprocess.run(["gnuplot", gp], capture_output=True, text=True)
    if r.returncode != 0:
        problems.append("chart %s: gnuplot failed: %s" % (fname, r.stderr[-300:]))
        return None
    return fname + ".png"


# ------------------------------------------------------------------ goals


def top_calls(by_call, n=4):
    """'futex 4.0, epoll_wait 5.3, ...': the n most frequent system calls per pair."""
    items = sorted(((v, k) for k, v in by_call.items() if v and v > 0.05), reverse=True)[:n]
    return ", ".join("%s %.1f" % (k, v) for v, k in items)


STDIO_FORMAT = re.compile(r"printf|^_IO_|_itoa|strchrnul")


def where_instructions(c6):
    """Where the instructions of a pair go, from callgrind's self costs."""
    funcs = c6.get("by_func") or {}
    if not funcs:
        return "see section 6"
    by_obj = {}
    for k, v in funcs.items():
        o = k.rsplit(" (", 1)[1].rstrip(")") if " (" in k else "?"
        by_obj[o] = by_obj.get(o, 0) + v
    stdio = sum(v for k, v in funcs.items() if STDIO_FORMAT.search(k.split(" (")[0]))
    objs = ", ".join("%s %s" % (o, fmt(v)) for o, v in sorted(by_obj.items(), key=lambda kv: -kv[1])[:5])
    mine = sorted(((v, k) for k, v in funcs.items() if "(librlock)" in k), reverse=True)[:4]
    top = ", ".join("%s %s" % (k.split(" (")[0], fmt(v)) for v, k in mine)
    return ("per object: %s; of these, libc's string formatting (functions named *printf*, _IO_*, _itoa*, "
            "strchrnul) %s; librlock's costliest functions: %s (section 6 lists the top 20)" %
            (objs, fmt(stdio), top))


def goals_s2(s2, half_ceiling):
    """Issue 10 goal 2 for both rlock rows of scenario 2: the thread row (50
    threads, sync calls) and the async row (50 owners on the I/O thread, the
    Node peers' model). Each line names its row; the last line says which row
    meets which part."""
    goals = []
    peers2 = [(k, x["cpu_us_per_pair"]) for k, x in s2.items() if k[0] != "rlock" and x]
    best = min(peers2, key=lambda kv: kv[1]) if peers2 else None
    met = {}  # setting -> (ceiling part, CPU part)
    for setting in ("default", "async"):
        r2 = s2.get(("rlock", setting))
        row = label2("rlock", setting)
        if not r2:
            if ("rlock", setting) in s2:
                goals.append(("2, %s" % row, False, "the row failed: see problems"))
            continue
        ratio = r2["median"] / half_ceiling
        why = ""
        if ratio < 0.8 and setting == "default":
            why = (" Why: %.1f commands per socket write (pipelining works) and the server ceiling is %s pairs/s, "
                   "so the client limits: %.1f µs of CPU per pair, %.0f%% of a core on a 2-core machine shared "
                   "with redis-server; each of the 2 sync calls per pair is a hand-off to the I/O thread and "
                   "a wake-up of one of %d threads." %
                   (r2.get("commands_per_write", 0), fmt(half_ceiling), r2.get("cpu_us_per_pair", 0),
                    r2.get("client_cpu_pct", 0), r2.get("threads", 50)))
        elif ratio < 0.8:
            why = (" Why: the client uses %.0f%% of one core (%.1f µs per pair) and sends %.1f commands per socket "
                   "write, %s; ceiling / 2 counts two acquire scripts per pair, a pair here is an acquire and an "
                   "unlock script." % (r2.get("client_cpu_pct", 0), r2.get("cpu_us_per_pair", 0),
                                       r2.get("commands_per_write", 0),
                                       "so it mostly waits for redis-server, which shares the machine's %d cores "
                                       "with it" % (os.cpu_count() or 0) if r2.get("client_cpu_pct", 0) < 60 else
                                       "so the client's I/O thread limits"))
        goals.append(("2, %s: 50 owners >= 0.8 of ceiling/2" % row, ratio >= 0.8,
                      "%s pairs/s = %.2f of %s%s" % (fmt(r2["median"]), ratio, fmt(half_ceiling), why)))
        cpu_ok = None
        if best:
            bk, bv = best
            cpu_ok = r2["cpu_us_per_pair"] <= bv / 3
            why = ""
            if not cpu_ok and setting == "default":
                why = (" Why: 50 threads share one client; the fast connection serves one thread at a time, so "
                       "most calls go through the I/O thread: a futex wake and wait per call (a hand-off the "
                       "node peers, one event loop each, do not pay), and the I/O thread's passes are shared by "
                       "fewer calls than 50 would allow")
            elif not cpu_ok:
                why = (" Why: no thread hand-off here (every call is made by a callback on the I/O thread); "
                       "see docs/benchmarks.md for where the I/O thread's time goes")
            goals.append(("2, %s: client CPU per pair <= 1/3 of the best peer's (the lowest CPU per pair)" % row,
                          cpu_ok, "%s %.1f µs vs %s %.1f µs (%.2fx; goal <= 0.33x)%s" %
                          (row, r2["cpu_us_per_pair"], label(*bk), bv, r2["cpu_us_per_pair"] / bv, why)))
        met[setting] = (ratio >= 0.8, cpu_ok)
    if met:
        def says(setting):
            c, u = met[setting]
            parts = ["ceiling part %s" % ("met" if c else "NOT met"),
                     "CPU part %s" % ("n/a (no peer row)" if u is None else "met" if u else "NOT met")]
            return "rlock (%s): %s" % (RLOCK_S2[setting], ", ".join(parts))
        both = [st for st, (c, u) in met.items() if c and u]
        goals.append(("2: verdict (both parts by one row)", bool(both) if best else None,
                      "; ".join(says(st) for st in met) + ". " +
                      ("Met by the row rlock (%s) only%s" %
                       (RLOCK_S2[both[0]], ". The like-for-like comparison with the peers (one event loop, logical "
                        "owners) is the async row; the thread row shows what 50 OS threads making blocking calls "
                        "on one client cost." if both == ["async"] else ".")
                       if both and len(both) < len(met) else "Met by both rows." if both else
                       "Met by neither row.")))
    return goals


def goals_issue10(R, rtt, half_ceiling, rt_unit):
    """[(goal, met: True/False/None, figures and why)] for issue 10's goals."""
    s1, s2, s4, s5, s6, ref = R["s1"], R["s2"], R["s4"], R["s5"], R["s6"], R["ref"]
    goals = []
    r1 = s1.get(("rlock", "default"))
    c6 = (s6 or {}).get("rlock") or {}
    f6 = (s6 or {}).get("redisson-ref") or {}
    g1 = R.get("g1")
    if r1 and ref:
        of_medians = r1["median"] / ref["median"]
        ratio = g1["median"] if g1 else of_medians
        why = ""
        if ratio < 0.95 and r1.get("fast_per_pair", 0) >= 1.9:
            why = (" Why: both send 2 commands per pair from the calling thread (rlock: %.2f of its 2 calls per "
                   "pair on the fast path), so what differs is the work per pair: %.0f µs of client CPU per pair "
                   "against the reference's %.0f µs; per pair rlock runs %s instructions, %s allocations and %s "
                   "system calls (%s) against the reference's %s, %s and %s (%s)." %
                   (r1.get("fast_per_pair", 0), r1.get("cpu_us_per_pair", 0), ref.get("cpu_us_per_pair", 0),
                    fmt(c6.get("ir")), fmt(c6.get("allocs"), 1), fmt(c6.get("syscalls"), 1),
                    top_calls(c6.get("by_call", {})), fmt(f6.get("ir")), fmt(f6.get("allocs"), 1),
                    fmt(f6.get("syscalls"), 1), top_calls(f6.get("by_call", {}))))
        elif ratio < 0.95:
            why = (" Why: both send 2 commands per pair (rlock %.2f commands in %.2f socket writes), so the "
                   "difference is client work: %.0f µs of client CPU per pair against the reference's %.0f µs; "
                   "per pair rlock runs %s instructions, %s allocations and %s system calls (%s) against the "
                   "reference's %s, %s and %s (%s). rlock's extra calls are the hand-off between the calling "
                   "thread and its I/O thread (futex wake/wait, eventfd write/read, epoll); the reference "
                   "thread writes and reads the socket itself." %
                   (r1.get("commands_per_pair", 0), r1.get("writes_per_pair", 0), r1.get("cpu_us_per_pair", 0),
                    ref.get("cpu_us_per_pair", 0), fmt(c6.get("ir")), fmt(c6.get("allocs"), 1),
                    fmt(c6.get("syscalls"), 1), top_calls(c6.get("by_call", {})), fmt(f6.get("ir")),
                    fmt(f6.get("allocs"), 1), fmt(f6.get("syscalls"), 1), top_calls(f6.get("by_call", {}))))
        if ratio < 0.95 and "script_us_per_pair" in r1 and "script_us_per_pair" in ref:
            why += (" Server time in the scripts per pair (INFO commandstats, EVALSHA): rlock %.1f µs, the "
                    "reference %.1f µs (on the fast path rlock writes no latch, but its scripts still check "
                    "the request's latch key (one EXISTS per acquire and per unlock) and their arguments)." %
                    (r1["script_us_per_pair"], ref["script_us_per_pair"]))
        table = "%s pairs/s = %.2f of %s%s" % (fmt(r1["median"]), of_medians, fmt(ref["median"]), round_ratios(r1, ref))
        if g1:
            fig = ("%.2f: the median of %d ratios of paired blocks (%s pairs each, rlock and the reference "
                   "alternating A B B A ..., quartiles %.2f-%.2f; see docs/benchmarks.md); the main table's "
                   "medians: %s" % (ratio, g1["n"], fmt(g1["pairs"]), g1["q1"], g1["q3"], table))
        else:
            fig = table + " (the paired blocks failed: the main table's medians)"
        goals.append(("1: uncontended >= 0.95 of the bare hiredis Redisson-format client", ratio >= 0.95,
                      "%s.%s" % (fig, why)))
    peers1 = [(k, x["median"]) for k, x in s1.items() if k[0] != "rlock" and x]
    if r1 and peers1:
        bk, bv = max(peers1, key=lambda kv: kv[1])
        ok = r1["median"] > bv
        goals.append(("1: uncontended above every peer", ok,
                      "rlock %s pairs/s vs best peer %s %s pairs/s (%.2fx)%s" %
                      (fmt(r1["median"]), label(*bk), fmt(bv), r1["median"] / bv,
                       "" if ok else " Why: the same client cost as the row above")))
    goals += goals_s2(s2, half_ceiling)
    if c6.get("ir") is not None:
        ok = c6["ir"] <= 12000
        goals.append(("3: <= 12,000 instructions per pair (callgrind, steady state)", ok,
                      "%s instructions per pair (reference client: %s)%s" %
                      (fmt(c6["ir"]), fmt(f6.get("ir")), "" if ok else " Why: " + where_instructions(c6))))
    if c6.get("allocs") is not None:
        ok = c6["allocs"] <= 2
        goals.append(("3: <= 2 allocations per pair (steady state)", ok,
                      "%s allocation calls per pair (malloc, calloc, realloc, aligned; reference client: %s)%s" %
                      (fmt(c6["allocs"], 1), fmt(f6.get("allocs"), 1),
                       "" if ok else " Why: rlock allocates per request (op, command buffer, reply objects, "
                       "timers) and hiredis allocates each reply; see docs/benchmarks.md for how it is counted")))
    if c6.get("syscalls") is not None:
        goals.append(("3: system calls per pair (no goal: a figure for the engine work)", None,
                      "rlock %s (%s); reference client %s (%s)" %
                      (fmt(c6["syscalls"], 1), top_calls(c6.get("by_call", {}), 6), fmt(f6.get("syscalls"), 1),
                       top_calls(f6.get("by_call", {}), 6))))
    r5 = s5.get(("rlock", "default"))
    if r5:
        n = fmt(r5["locks"])
        ok = r5["median"] < 5
        goals.append(("4: watchdog, %s held locks: < 5%% of one core" % n, ok,
                      "%.1f%% of one core (client CPU / wall time over the %.0f s hold)%s" %
                      (r5["median"], r5["hold"], "" if ok else " Why: renewal work per hold on the I/O thread "
                       "(%s renew-script calls/s renewing %s holds/s)" %
                       (fmt(r5.get("renewal_calls_per_s"), 1), fmt(r5.get("renewed_locks_per_s"))))))
        ok = r5["rss_med"] < 256
        goals.append(("4: watchdog, %s held locks: < 256 B of client RSS per held lock" % n, ok,
                      "%s B per held lock (RSS after the hold - RSS after connecting, / locks)%s" %
                      (fmt(r5["rss_med"]), "" if ok else " Why: per hold the client keeps a lock handle, a hold "
                       "registry entry and a timer (the bench's own lock handles count too)")))
        goals.append(("4: watchdog: 0 locks lost", r5["ok_all"],
                      "%s of %s still held after %.0f s, %d lost" %
                      (fmt(r5["still_held"]), n, r5["hold"], r5.get("lost", 0))))
    r4 = s4.get(("rlock", "default"))
    if r4 and r4.get("p50_ret_med") is not None:
        # issue 10's yardstick: from the unlock returning (section 4 gives both)
        rts = r4["p50_ret_med"] / rt_unit
        goals.append(("5: handoff p50 <= 1.5 round trips (from the unlock returning, issue 10's measure)", rts <= 1.5,
                      "p50 %s = %.2f round trips (PING p50 %.1f µs); from the unlock call: %s = %.2f round trips%s" %
                      (fmt_ms(r4["p50_ret_med"]), rts, rt_unit, fmt_ms(r4["p50"]), r4["p50"] / rt_unit,
                       "" if rts <= 1.5 else
                       " Why: unlock -> pub/sub message -> wake-up of the waiting thread -> acquire script")))
    return goals


def goals_hot_lock(s3):
    """Issue 3's hot-lock rows (against the peers of the same run)."""
    goals = []
    r3 = s3.get(("rlock", "default"))
    if r3:
        peers3 = [(k, x) for k, x in s3.items() if k[0] != "rlock" and x and not x["stalled_any"]]
        if peers3:
            bk, bx = max(peers3, key=lambda kv: kv[1]["median"])
            ok = r3["median"] >= bx["median"]
            why = ""
            if not ok:
                why = (" Why: on a hot lock every hand-off goes unlock -> pub/sub message -> woken waiter "
                       "-> acquire script (about 3 round trips plus the thread wake-ups of scenario 1), while a "
                       "polling peer's owner often re-takes the lock it just released in one round trip (owner "
                       "changes: that peer %s, rlock %s); each rlock owner change pays the slow path." %
                       (fmt(bx.get("changes_med")), fmt(r3.get("changes_med"))))
            goals.append(("issue 3, hot lock: throughput >= the best peer", ok,
                          "%s ops/s vs %s %s ops/s%s" % (fmt(r3["median"]), label(*bk), fmt(bx["median"]), why)))
        peers3d = [(k, x) for k, x in s3.items() if k[0] != "rlock" and k[1] == "default" and x
                   and x["max_med"] is not None and not x["stalled_any"]]
        if peers3d:
            lk, lx = min(peers3d, key=lambda kv: kv[1]["max_med"])
            ok = r3["max_med"] is not None and r3["max_med"] * 4 <= lx["max_med"]
            why = ""
            if not ok:
                herd = (r3.get("changes_med") or 0) > 0.5 * max(1, r3["ops"])
                why = (" Why: rlock's RLock (like Redisson's) is not fair: an unlock publishes one message, "
                       "every waiting process retries and only one wins (%s acquire scripts per lock taken, "
                       "%s owner changes in %s critical sections); %s, so an unlucky waiter can lose many "
                       "rounds in a row. What the engine would need: a hand-off that favours the longest "
                       "waiter (the fair lock of a later issue: a queue, one waiter woken per unlock)." %
                       (fmt(r3.get("tries_med"), 2), fmt(r3.get("changes_med")), fmt(r3["ops"]),
                        "the winner among the woken waiters is whoever's retry reaches the server first"
                        if herd else "the owner that just unlocked often wins again because its next acquire "
                        "reaches the server before the woken waiters' retries"))
            goals.append(("issue 3, hot lock: max acquire wait far below the peers' defaults (criterion: <= 1/4 of the "
                          "smallest max of a peer at its defaults that did not stall)", ok,
                          "rlock %s vs smallest peer max %s (%s)%s" %
                          (fmt_ms(r3["max_med"]), fmt_ms(lx["max_med"]), label(*lk), why)))
        goals.append(("issue 3, hot lock: counter exact (rlock)", r3["exact_all"],
                      "counter = %s after %s critical sections in every repetition" %
                      (fmt(r3["counter"]), fmt(r3["ops"])) if r3["exact_all"] else "see problems below"))
    return goals


def goals_issue21(R, n_locks):
    """Issue 21: rlock against the real Redisson (Java), same server, same run."""
    goals = []

    def pair(key, field="median"):
        a, b = R[key].get(("rlock", "default")), R[key].get(REDISSON)
        return (a, b) if a and b and a.get(field) is not None and b.get(field) is not None else (None, None)
    for key, what, unit in (("s1", "1 (uncontended)", "pairs/s"), ("s2", "2 (50 owners)", "pairs/s"),
                            ("s3", "3 (hot lock)", "ops/s")):
        a, b = pair(key)
        goals.append(("issue 21: throughput >= Redisson's, scenario %s" % what,
                      None if a is None else a["median"] >= b["median"],
                      "n/a (a row failed)" if a is None else "rlock %s %s vs Redisson %s" %
                      (fmt(a["median"]), unit, fmt(b["median"]))))
    a, b = pair("s1", "cpu_us_per_pair")
    goals.append(("issue 21: client CPU per pair <= 1/5 of Redisson's (scenario 1)",
                  None if a is None else a["cpu_us_per_pair"] * 5 <= b["cpu_us_per_pair"],
                  "n/a (a row failed)" if a is None else "rlock %.1f µs vs Redisson %.1f µs (ratio %.2f)" %
                  (a["cpu_us_per_pair"], b["cpu_us_per_pair"], a["cpu_us_per_pair"] / max(1e-9, b["cpu_us_per_pair"]))))
    a, b = pair("s5", "rss_still_med")
    goals.append(("issue 21: RSS per held watchdog lock <= 1/10 of Redisson's (scenario 5, %s locks)" % fmt(n_locks),
                  None if a is None else a["rss_still_med"] * 10 <= b["rss_still_med"],
                  "n/a (a row failed)" if a is None else
                  "rlock %s B vs Redisson %s B (ratio %.3f): RSS after the hold / locks still held (rlock %s, "
                  "Redisson %s of %s). Per lock with all held, right after acquiring: rlock %s B, Redisson %s B" %
                  (fmt(a["rss_still_med"]), fmt(b["rss_still_med"]), a["rss_still_med"] / max(1e-9, b["rss_still_med"]),
                   fmt(a.get("still_held")), fmt(b.get("still_held")), fmt(n_locks),
                   fmt(a.get("rss_held_med")), fmt(b.get("rss_held_med")))))
    a, b = pair("s4")  # the median of the repetitions' p50
    goals.append(("issue 21: handoff p50 no worse than Redisson's (scenario 4)",
                  None if a is None else a["median"] <= b["median"],
                  "n/a (a row failed)" if a is None else "rlock %s vs Redisson %s" %
                  (fmt_ms(a["median"]), fmt_ms(b["median"]))))
    return goals


def goals_family(R, cfg, rt_unit):
    """Issues 24 and 25: the fair lock's rows of scenarios 3 and 4, the
    read-mostly scenario 8, the semaphore scenario 9; issue 21's rows against
    Redisson for each."""
    goals = []
    if "s3f" not in R:
        return goals  # a report from an older saved run
    s3, s3f, s4f, s8, s9 = R["s3"], R["s3f"], R["s4f"], R["s8"], R["s9"]
    waiters = cfg["s3_workers"] - 1
    f = s3f.get(("rlock", "fair"))
    if f:
        peers = [(k, x) for k, x in list(s3.items()) + list(s3f.items())
                 if k[0] != "rlock" and x and x.get("max_med") is not None and not x["stalled_any"]]
        if peers:
            lk, lx = min(peers, key=lambda kv: kv[1]["max_med"])
            ok = f["max_med"] * 4 <= lx["max_med"]
            dk, dx = min([(k, x) for k, x in peers if k[1] != "best"] or peers, key=lambda kv: kv[1]["max_med"])
            goals.append(("issue 24, fair lock, scenario 3: max acquire wait <= 1/4 of the smallest peer's "
                          "(every peer row of scenario 3 that did not stall, both settings, and Redisson's "
                          "RFairLock)", ok,
                          "rlock fair %s vs smallest peer max %s (%s): ratio %.2f (goal <= 0.25); among the "
                          "peers at their defaults the smallest is %s (%s); rlock's reentrant lock in the same "
                          "run: %s" %
                          (fmt_ms(f["max_med"]), fmt_ms(lx["max_med"]), label3(*lk), f["max_med"] / lx["max_med"],
                           fmt_ms(dx["max_med"]), label3(*dk),
                           fmt_ms((s3.get(("rlock", "default")) or {}).get("max_med")))))
        if f.get("cs_med") is not None:
            bound = waiters * (f["cs_med"] + 2 * rt_unit)
            ok = f["max_med"] <= bound
            why = ""
            if not ok:
                why = (" The bound assumes every handoff costs 2 round trips; here a handoff under contention "
                       "(unlock called -> next owner's acquire returned, p50) took %s = %.1f round trips, so "
                       "%d of them take %s: %d processes share %d cores with redis-server, and a woken waiter "
                       "is often not scheduled at once." %
                       (fmt_ms(f.get("hand_med")), (f.get("hand_med") or 0) / rt_unit, waiters,
                        fmt_ms(waiters * (f["cs_med"] + (f.get("hand_med") or 0))), cfg["s3_workers"],
                        os.cpu_count() or 0))
            goals.append(("issue 24, fair lock, scenario 3: max acquire wait <= waiters x (critical section + "
                          "2 round trips)", ok,
                          "max %s vs %d x (critical section p50 %s + 2 x PING p50 %.1f µs) = %s.%s" %
                          (fmt_ms(f["max_med"]), waiters, fmt_ms(f["cs_med"]), rt_unit, fmt_ms(bound), why)))
    h = s4f.get(("rlock", "fair"))
    if h and h.get("p50_ret_med") is not None:
        rts = h["p50_ret_med"] / rt_unit
        goals.append(("issue 24, fair lock: handoff p50 <= 1.5 round trips (scenario 4 on the fair lock, timed "
                      "from the unlock returning: issue 10's goal 5 measure)", rts <= 1.5,
                      "p50 %s = %.2f round trips (PING p50 %.1f µs); from the unlock call %s = %.2f; under "
                      "contention (scenario 3, unlock called -> next owner's acquire returned) %s = %.2f.%s" %
                      (fmt_ms(h["p50_ret_med"]), rts, rt_unit, fmt_ms(h["p50"]), h["p50"] / rt_unit,
                       fmt_ms((f or {}).get("hand_med")), ((f or {}).get("hand_med") or float("nan")) / rt_unit,
                       "" if rts <= 1.5 else " Why: unlock -> message on the head waiter's channel -> wake-up "
                       "of the waiting thread -> acquire script (one round trip after the message)")))
    for key, what, unit in (("s3f", "3 on the fair lock (RFairLock)", "ops/s"),
                            ("s8", "8, read-mostly (read-write lock vs RReadWriteLock)", "ops/s"),
                            ("s9", "9, semaphore (RSemaphore)", "acquires/s")):
        mine = ("rlock", "fair") if key == "s3f" else ("rlock", "rw") if key == "s8" else ("rlock", "default")
        other = ("redisson", "fair") if key == "s3f" else ("redisson", "rw") if key == "s8" else REDISSON
        a, b = R[key].get(mine), R[key].get(other)
        goals.append(("issue 21: throughput >= Redisson's, scenario %s" % what,
                      None if not (a and b) else a["median"] >= b["median"],
                      "n/a (a row failed)" if not (a and b) else "rlock %s %s vs Redisson %s (%.1fx)" %
                      (fmt(a["median"]), unit, fmt(b["median"]), a["median"] / max(1e-9, b["median"]))))
    a, b = s4f.get(("rlock", "fair")), s4f.get(("redisson", "fair"))
    goals.append(("issue 21: handoff p50 no worse than Redisson's, fair lock (scenario 4 on RFairLock, from the "
                  "unlock call)", None if not (a and b) else a["median"] <= b["median"],
                  "n/a (a row failed)" if not (a and b) else "rlock %s vs Redisson %s" %
                  (fmt_ms(a["median"]), fmt_ms(b["median"]))))
    rw, lk = s8.get(("rlock", "rw")), s8.get(("rlock", "lock"))
    if rw and lk:
        goals.append(("issue 24, scenario 8 (read-mostly, %d %% reads): the read-write lock beside the reentrant "
                      "lock on the same ops (a figure, no goal)" % cfg["s8_read_pct"], None,
                      "read-write lock %s ops/s vs reentrant lock %s ops/s (%.2fx); read wait p50 %s vs %s, max "
                      "%s vs %s" %
                      (fmt(rw["median"]), fmt(lk["median"]), rw["median"] / max(1e-9, lk["median"]),
                       fmt_ms(rw["r_p50_med"]), fmt_ms(lk["r_p50_med"]), fmt_ms(rw["r_max_med"]),
                       fmt_ms(lk["r_max_med"]))))
    r9 = s9.get(("rlock", "default"))
    peers9 = [(k, x) for k, x in s9.items() if k[0] != "rlock" and x and not x["stalled_any"]]
    if r9 and peers9:
        bk, bx = max(peers9, key=lambda kv: kv[1]["median"])
        goals.append(("issue 25, semaphore (scenario 9): throughput >= the best peer's", r9["median"] >= bx["median"],
                      "rlock %s acquires/s vs %s %s (%.2fx)" %
                      (fmt(r9["median"]), label3(*bk), fmt(bx["median"]), r9["median"] / max(1e-9, bx["median"]))))
        lk9, lx9 = min(peers9, key=lambda kv: kv[1]["max_med"])
        ok = r9["max_med"] * 4 <= lx9["max_med"]
        why = ""
        if not ok:
            why = (" Why: rlock's waiters are served in order only once they waited semaphore_fair_after_ms "
                   "(2 ms); before that a release's permit goes to whichever try reaches the server first, and "
                   "8 processes on 2 cores wait for a core besides: the wait's p99 is %s (docs/benchmarks.md, "
                   "the semaphore's queue)." % fmt_ms(r9["p99_med"]))
        goals.append(("issue 25, semaphore (scenario 9): max wait <= 1/4 of the smallest peer's (every peer row "
                      "that did not stall)", ok,
                      "rlock %s vs %s %s: ratio %.2f (goal <= 0.25).%s" %
                      (fmt_ms(r9["max_med"]), label3(*lk9), fmt_ms(lx9["max_med"]),
                       r9["max_med"] / max(1e-9, lx9["max_med"]), why)))
    if r9:
        goals.append(("issue 25, semaphore (scenario 9): never more holders than permits (rlock)", r9["exact_all"],
                      "at most %d of %d permits in use at once (INCR of an in-use counter inside each hold), "
                      "%s acquires" % (r9["most_med"], cfg["s9_permits"], fmt(r9["ops"]))))
    return goals


def label3(impl, setting):
    """The family's labels: the setting says which object."""
    names = {("rlock", "fair"): "rlock fair lock", ("redisson", "fair"): "Redisson 4.7.0 RFairLock (Java)",
             ("rlock", "rw"): "rlock read-write lock", ("rlock", "lock"): "rlock reentrant lock (every op exclusive)",
             ("redisson", "rw"): "Redisson 4.7.0 RReadWriteLock (Java)",
             ("redisson", "default"): "Redisson 4.7.0, Java (default = best)"}
    return names.get((impl, setting)) or label(impl, setting)


# ------------------------------------------------------------------ report


def label(impl, setting):
    if impl == "rlock":
        return "rlock" if setting == "default" else "rlock (%s)" % RLOCK_S2[setting]
    if impl == "redisson-ref":
        return "reference: bare hiredis, Redisson's scripts"
    if impl == "node-redisson":
        return "node-redisson (default = best)"
    if impl == "redisson":
        return "Redisson 4.7.0, Java (default = best)"
    return "%s (%s)" % (impl, setting)


def label2(impl, setting):
    """Scenario 2's labels: both rlock rows say which model they run."""
    return "rlock (%s)" % RLOCK_S2[setting] if impl == "rlock" else label(impl, setting)


def git_label(repo):
    """The commit of the tree being measured (and whether lib/include/lua differ from it)."""
    rev = subprocess.run(["git", "-C", repo, "rev-parse", "--short", "HEAD"],
                         capture_output=True, text=True).stdout.strip()
    dirty = subprocess.run(["git", "-C", repo, "status", "--porcelain", "lib", "include", "lua"],
                           capture_output=True, text=True).stdout.strip()
    return rev + (" (lib/include/lua modified in the work tree)" if dirty else "")


# read when the run starts (the binaries were built from that tree): a commit
# made while the run goes on must not label its figures
GIT_AT_START = None


def versions(ctx):
    v = {}
    try:
        with open(os.path.join(ctx.peers, "package-lock.json")) as f:
            lock = json.load(f)
        for p in ("redlock", "ioredis", "redis-semaphore", "node-redisson"):
            v[p] = lock["packages"].get("node_modules/" + p, {}).get("version", "?")
    except (OSError, ValueError, KeyError):
        pass
    try:
        v["redis-py"] = subprocess.run(["/usr/bin/python3", "-c", "import redis; print(redis.__version__)"],
                                       capture_output=True, text=True).stdout.strip()
    except OSError:
        v["redis-py"] = "?"
    v["node"] = subprocess.run(["node", "--version"], capture_output=True, text=True).stdout.strip()
    try:
        v["java"] = subprocess.run(["java", "-version"], capture_output=True, text=True).stderr.splitlines()[0]
    except (OSError, IndexError):
        v["java"] = "?"
    v["python"] = platform.python_version()
    v["redis"] = ctx.redis.info("redis_version")
    v["git"] = GIT_AT_START or git_label(ctx.repo)
    cpu = "?"
    try:
        with open("/proc/cpuinfo") as f:
            for line in f:
                if line.startswith("model name"):
                    cpu = line.split(":", 1)[1].strip()
                    break
    except OSError:
        pass
    v["cpu"] = "%s x %d" % (cpu, os.cpu_count() or 0)
    v["load"] = "%.2f %.2f %.2f" % os.getloadavg()
    return v


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--repo", required=True)
    ap.add_argument("--bindir", required=True)
    ap.add_argument("--out", default=None)
    ap.add_argument("--quick", action="store_true")
    ap.add_argument("--compare-bindir", help="--compare: the rlock_bench built from the other commit")
    ap.add_argument("--compare-rev", help="--compare: that commit (short hash, for the results)")
    ap.add_argument("--rounds", type=int, default=5, help="--compare: rounds (default 5)")
    ap.add_argument("--report-from", help="write the report again from a saved run (no measuring)")
    ap.add_argument("--only", choices=["s2"], help="the limits and scenario 2 only, into latest-s2.md")
    args = ap.parse_args()
    global GIT_AT_START
    GIT_AT_START = git_label(args.repo)
    if bool(args.compare_bindir) != bool(args.compare_rev) or args.rounds < 1:
        ap.error("--compare-bindir and --compare-rev go together; --rounds >= 1")
    if args.only and (args.compare_bindir or args.report_from):
        ap.error("--only goes with neither --compare-bindir nor --report-from")
    # --compare has its own sizes: the ratios come from the rounds.
    cfg = dict(COMPARE if args.compare_bindir else QUICK if args.quick else FULL)
    outdir = os.path.abspath(args.out or os.path.join(args.repo, "bench", "results"))
    os.makedirs(outdir, exist_ok=True)

    def on_signal(signum, frame):
        raise KeyboardInterrupt

    signal.signal(signal.SIGTERM, on_signal)
    if args.report_from:
        with open(args.report_from, "rb") as f:
            saved = pickle.load(f)
        problems.extend(saved["problems"])
        redis = Redis()  # versions() asks the server's version
        try:
            ctx = Ctx(args, saved["cfg"], redis)
            write_report(ctx, outdir, saved["R"])
        finally:
            redis.close()
            shutil.rmtree(ctx.tmp, ignore_errors=True)
        return
    redis = Redis()
    ctx = Ctx(args, cfg, redis)
    try:
        (run_compare if args.compare_bindir else run_only_s2 if args.only == "s2" else run_all)(ctx, outdir)
    finally:
        if ctx.cluster:
            ctx.cluster.close()
        for r in ctx.nodes:
            r.close()
        redis.close()
        shutil.rmtree(ctx.tmp, ignore_errors=True)


def run_all(ctx, outdir):
    cfg = ctx.cfg
    R = {}
    load_before = "%.2f %.2f %.2f" % os.getloadavg()
    log("redis-server on 127.0.0.1:%d (%s mode)" % (ctx.redis.port, cfg["mode"]))
    R["ping"] = limit_ping(ctx)
    log("PING round trip: mean %.1f µs, p50 %.1f µs" % (R["ping"]["mean_us"], R["ping"]["p50_us"]))
    R["ceil"] = limit_ceiling(ctx)
    log("acquire-script ceiling: %.0f calls/s" % R["ceil"]["rate"])
    R["s1"] = interleaved(ctx, s1_once, [REFERENCE] + UNCONTENDED, "rate")
    run_s2_with_cluster(ctx, R)
    for key in ("s1", "s2"):
        rows = list(R[key].items()) + ([(("rlock-cluster", "default"), R["s2_cluster"])] if key == "s2" else [])
        for (impl, setting), r in rows:
            log("%s %-16s %-8s %s" % (key, impl, setting,
                                      "FAILED" if r is None else "median %.1f%s" % (r["median"], r["spread"])))
    R["ref"] = R["s1"].pop(REFERENCE)
    R["g1"] = goal1_paired(ctx)
    if R["g1"]:
        log("goal 1, paired blocks: median ratio %.3f (quartiles %.3f-%.3f)" %
            (R["g1"]["median"], R["g1"]["q1"], R["g1"]["q3"]))
    for key, fn, impls in (("s3", scen_s3, CONTENDED), ("s4", scen_s4, CONTENDED)):
        R[key] = {}
        for impl, setting in impls:
            R[key][(impl, setting)] = fn(ctx, impl, setting)
            r = R[key][(impl, setting)]
            log("%s %-16s %-8s %s" % (key, impl, setting,
                                      "FAILED" if r is None else "median %.1f%s" % (r["median"], r["spread"])))
    run_redlock(ctx, R)
    run_family(ctx, R)
    R["s5"] = {}
    for impl, setting in (("rlock", "default"), ("redlock", "default"), ("redis-semaphore", "default"),
                          ("node-redisson", "default"), REDISSON):
        R["s5"][(impl, setting)] = scen_s5(ctx, impl, setting)
        log("s5 %s done" % impl)
    R["s6"] = scen_s6(ctx)
    log("s6 done")
    R["elapsed"] = time.monotonic() - T0
    R["load_before"] = load_before
    R["load_after"] = "%.2f %.2f %.2f" % os.getloadavg()
    R["date"] = time.strftime("%Y-%m-%d %H:%M:%S %Z")
    # Kept so that a report can be written again from the same figures
    # (run.py --report-from FILE) if writing it fails.
    with open(os.path.join(tempfile.gettempdir(), "rlock-bench-last-run.pickle"), "wb") as f:
        pickle.dump(dict(R=R, cfg=cfg, problems=problems), f)
    write_report(ctx, outdir, R)
    log("wrote %s" % os.path.join(outdir, "latest.md"))


def run_only_s2(ctx, outdir):
    """--only s2: the limits (ceiling / 2 is scenario 2's reference) and
    scenario 2, every row; the report goes to latest-s2.md."""
    cfg = ctx.cfg
    R = {"load_before": "%.2f %.2f %.2f" % os.getloadavg()}
    log("redis-server on 127.0.0.1:%d (%s mode, scenario 2 only)" % (ctx.redis.port, cfg["mode"]))
    R["ping"] = limit_ping(ctx)
    R["ceil"] = limit_ceiling(ctx)
    log("acquire-script ceiling: %.0f calls/s" % R["ceil"]["rate"])
    run_s2_with_cluster(ctx, R)
    for (impl, setting), r in list(R["s2"].items()) + [(("rlock-cluster", "default"), R["s2_cluster"])]:
        log("s2 %-16s %-8s %s" % (impl, setting, "FAILED" if r is None else
                                  "median %.1f%s, %.1f µs CPU per pair" % (r["median"], r["spread"],
                                                                          r["cpu_us_per_pair"])))
    R["elapsed"] = time.monotonic() - T0
    R["load_after"] = "%.2f %.2f %.2f" % os.getloadavg()
    v = versions(ctx)
    half_ceiling = R["ceil"]["rate"] / 2
    L = []
    w = L.append
    w("# rlock benchmarks: scenario 2 only")
    w("")
    w("Written by `./scripts/bench%s --only s2` (bench/run.py) on %s; every figure below comes from this run. "
      "Mode: **%s** (%d repetition%s per figure, rows interleaved; median, ± half the min-max spread). Total "
      "run time %.0f s. Machine: %s; load average at start %s, at the end %s. redis-server %s (127.0.0.1, no "
      "persistence). rlock git %s." %
      (" --quick" if cfg["mode"] == "quick" else "", time.strftime("%Y-%m-%d %H:%M:%S %Z"), cfg["mode"],
       cfg["reps"], "" if cfg["reps"] == 1 else "s", R["elapsed"], v["cpu"], R["load_before"], R["load_after"],
       v["redis"], v["git"]))
    w("")
    w("Limits: loopback round trip (hiredis PING) mean %.1f µs; server ceiling of rlock's acquire script "
      "(redis-benchmark EVALSHA, distinct free locks) %s calls/s%s; **ceiling / 2 = %s pairs/s**." %
      (R["ping"]["mean_us"], fmt(R["ceil"]["rate"]), R["ceil"]["spread"], fmt(half_ceiling)))
    w("")
    write_s2_section(w, cfg, R["s2"], half_ceiling, s2_chart(ctx, outdir, R["s2"], "s2_only_pair_latency"))
    write_cluster_rows(w, cfg, R)
    w("## Goal 2 of issue 10")
    w("")
    w("| goal | met? | figures and reason |\n| --- | --- | --- |")
    for g, ok, txt in goals_s2(R["s2"], half_ceiling):
        w("| %s | %s | %s |" % (g, "n/a" if ok is None else "**yes**" if ok else "**NO**", txt))
    w("")
    w("## Problems seen in this run")
    w("")
    for p in problems or ["none"]:
        w("- " + p.replace("\n", " "))
    path = os.path.join(outdir, "latest-s2.md")
    with open(path, "w") as f:
        f.write("\n".join(L) + "\n")
    log("wrote %s" % path)


def write_cluster_rows(w, cfg, R):
    """Section 2's cluster rows (issue 8): rlock on a 3-master cluster beside
    its single-server row of the same rounds."""
    single, clu = R["s2"].get(("rlock", "default")), R.get("s2_cluster")
    if "s2_cluster" not in R:
        return  # a report from an older saved run
    w("### Scenario 2 on a 3-master Redis Cluster")
    w("")
    names = R.get("cluster_names")
    w("The same %d threads on one rlock client, URL `redis+cluster://` with the 3 masters as seeds. The cluster: "
      "3 redis-servers with `cluster-enabled yes` (same version, loopback, no persistence, no replicas) joined by "
      "`redis-cli --cluster create ... --cluster-replicas 0`; the %d lock names (`bench:s2:rlock:0` ...) hash to "
      "slots of all masters (%s names per master). It ran in the same rounds as the single-server rows above "
      "(every row once per round). Client CPU per pair = client CPU time / pairs; commands per write: rlock's "
      "own counters (commands sent / socket writes, over all its connections)." %
      (cfg["s2_workers"], cfg["s2_workers"], " / ".join(str(n) for n in names) if names else "n/a"))
    w("")
    w("| deployment | pairs/s | pair p50 | pair p99 | client CPU (CPU per pair) | commands per socket write |")
    w("| --- | --- | --- | --- | --- | --- |")
    for what, x in (("single server (the %s row above)" % RLOCK_S2["default"], single),
                    ("3-master cluster", clu)):
        if not x:
            w("| %s | failed | | | | see problems |" % what)
            continue
        w("| %s | %s%s | %s | %s | %.0f%% (%.1f µs) | %.1f |" %
          (what, fmt(x["median"]), x["spread"], fmt_ms(x["p50"]), fmt_ms(x["p99"]),
           x.get("client_cpu_pct", float("nan")), x.get("cpu_us_per_pair", float("nan")),
           x.get("commands_per_write", 0)))
    w("")
    if single and clu:
        w("Cluster / single server: pairs/s %.2f%s, client CPU per pair %.2f. On this machine (%d cores) the 3 "
          "masters share the cores with each other and with the client, so the cluster cannot add server "
          "capacity here: the row shows what the cluster costs the client, whose I/O thread routes each lock's "
          "commands to its master's connection and serves 3 connections instead of one." %
          (clu["median"] / single["median"], round_ratios(clu, single),
           clu["cpu_us_per_pair"] / single["cpu_us_per_pair"], os.cpu_count() or 0))
        w("")


def write_redlock_rows(w, cfg, R):
    """Section 7 (issue 9): RedLock over 3 independent servers, scenarios 1
    and 4, rlock's RedLock (both formats) beside node-redlock."""
    if "r1" not in R:
        return  # a report from an older saved run
    r1, r4 = R["r1"] or {}, R["r4"] or {}
    lab = {("rlock-redlock", "simple"): "rlock RedLock, simple format (node-redlock's)",
           ("rlock-redlock", "reentrant"): "rlock RedLock, reentrant format (Redisson's)",
           ("redlock-3", "default"): "redlock (default)", ("redlock-3", "best"): "redlock (best)"}
    w("## 7. RedLock over 3 independent redis-servers (scenarios 1 and 4)")
    w("")
    w("3 more redis-servers (own ports, no replication between them), started for these rows only. rlock: "
      "`rlock_redlock_new` over the 3 URLs (one client per node), `rlock_redlock_acquire(wait forever, lease "
      "%d ms)` / `rlock_redlock_release` (`rlock_bench r1`, `r4`), in the simple format (RLOCK_REDLOCK_SIMPLE: "
      "`SET NX PX`, node-redlock's keys) and in the reentrant format. redlock %s: `new Redlock([3 ioredis "
      "clients])`, `acquire([name], %d)` / `release()`, settings as in the settings list above (*best* only "
      "matters when waiting). Scenario 1: %s pairs after %s warm-up, the rows interleaved, %d round(s). "
      "Scenario 4: as in section 4 (%d µs before each unlock), %d warm-up handoffs, every row stopped after "
      "%.0f s (the retry delays make handoffs slow), so the rows have different sample counts (column "
      "'handoffs')." %
      (30000, "(node-redlock)", 30000, fmt(cfg["r1_pairs"]), fmt(cfg["r1_warm"]), cfg["reps"],
       cfg["s4_delay_us"], cfg["r4_warm"], cfg["r4_cap"]))
    w("")
    w("| implementation | 1: pairs/s | 1: pair p50 | 1: pair p99 | 1: client CPU per pair | 4: handoffs | "
      "4: handoff p50 | 4: handoff p99 | 4: max |")
    w("| --- | --- | --- | --- | --- | --- | --- | --- | --- |")
    for k in REDLOCK_S4:
        a, d = r1.get(k), r4.get(k)
        c1 = ("%s%s | %s | %s | %.0f µs" % (fmt(a["median"]), a["spread"], fmt_ms(a["p50"]), fmt_ms(a["p99"]),
                                           a.get("cpu_us_per_pair", float("nan")))) if a else \
            ("not run (never waits: same as default) | | |" if k[1] == "best" else "failed | | |")
        c4 = ("%s%s | %s%s | %s | %s" % (fmt(d["handoffs_med"]), " (stalled)" if d["stalled_any"] else "",
                                          fmt_ms(d["p50"]), d["spread"], fmt_ms(d["p99_med"]), fmt_ms(d["max"]))) \
            if d else "failed | | |"
        w("| %s | %s | %s |" % (lab[k], c1, c4))
    single = R["s1"].get(("rlock", "default"))
    if single:
        w("| for scale: rlock, one lock on one server (section 1) | %s | %s | %s | %.0f µs | | | | |" %
          (fmt(single["median"]), fmt_ms(single["p50"]), fmt_ms(single["p99"]), single.get("cpu_us_per_pair", 0)))
    w("")
    w("Where rlock is slower, why:")
    w("")
    rs, nd = r1.get(("rlock-redlock", "simple")), r1.get(("redlock-3", "default"))
    if rs and nd:
        if rs["median"] < nd["median"]:
            w("- Scenario 1: rlock's RedLock (simple format) does %.2f of node-redlock's pairs/s (client CPU per "
              "pair %.0f µs against %.0f µs). A RedLock pair is two fan-outs to 3 nodes. rlock's RedLock has one "
              "client per node, each with its own I/O thread, so every acquire and every release hands work to 3 "
              "I/O threads and waits for their 3 answers: the thread hand-off that the Goals section explains "
              "for one lock, paid on 3 threads; node-redlock writes the 3 sockets from its one event loop." %
              (rs["median"] / nd["median"], rs.get("cpu_us_per_pair", 0), nd.get("cpu_us_per_pair", 0)))
        else:
            w("- Scenario 1: rlock's RedLock (simple format) is not slower: %.2f of node-redlock's pairs/s." %
              (rs["median"] / nd["median"]))
    hs, hb = r4.get(("rlock-redlock", "simple")), r4.get(("redlock-3", "best"))
    if hs:
        w("- Scenario 4: a RedLock waiter is not woken by the unlock: neither format subscribes to anything (the "
          "simple format shares node-redlock's keys, and node-redlock publishes nothing; rlock's RedLock waits "
          "the same way in the reentrant format). The waiter's first round finds the lock held, is given back "
          "and retried after a random delay of 10 to 200 ms, so a handoff takes about one such delay (median "
          "105 ms): p50 %s here. node-redlock at its defaults retries after 200 ms ± 100 ms%s." %
          (fmt_ms(hs["p50"]),
           ("; at *best* (1 ms retry delay) it polls 3 servers every millisecond per waiter, which is faster "
            "(p50 %s) and costs a round of 3 `SET NX` per millisecond per waiter" % fmt_ms(hb["p50"])) if hb else ""))
    w("")


def label9(impl, setting):
    """Scenario 9's labels: the semaphore of each library."""
    return {("rlock", "default"): "rlock semaphore", ("redisson", "default"): "Redisson 4.7.0 RSemaphore (Java)",
            ("redis-semaphore", "default"): "redis-semaphore Semaphore (default)",
            ("redis-semaphore", "best"): "redis-semaphore Semaphore (best)"}.get((impl, setting)) or label(impl, setting)


def write_fair_rows(w, cfg, R, rt_unit):
    """Section 3's fair-lock rows (issue 24): their scenario-4 handoff."""
    w("The fair-lock rows (issue 24) run the same workers on `rlock_lock_new_fair` (`rlock_bench s3f`) and on "
      "Redisson's `getFairLock` (RFairLock), lock() with the watchdog, FIFO across the %d processes. Beside "
      "them, scenario 4 (section 4's two processes, %d µs before each unlock) on each fair lock: the handoff "
      "from the unlock call and, issue 10's measure, from the unlock returning (round trip unit = PING p50 "
      "%.1f µs)." % (cfg["s3_workers"], cfg["s4_delay_us"], rt_unit))
    w("")
    w("| scenario 4 on | handoffs | p50 (from unlock call) | p99 | p50 in round trips | p50 from unlock returned | in round trips | negative |")
    w("| --- | --- | --- | --- | --- | --- | --- | --- |")
    for k, x in R["s4f"].items():
        if not x:
            w("| %s | failed | | | | | | |" % label3(*k))
            continue
        w("| %s | %s%s | %s%s | %s | %.1f | %s | %.1f | %s of %s |" %
          (label3(*k), fmt(x["handoffs_med"]), " (stalled)" if x["stalled_any"] else "", fmt_ms(x["p50"]),
           x["spread"], fmt_ms(x["p99_med"]), x["p50"] / rt_unit, fmt_ms(x.get("p50_ret_med")),
           (x.get("p50_ret_med") or float("nan")) / rt_unit, fmt(x.get("neg_ret")), fmt(x.get("recorded_ret"))))
    w("")


def write_family_sections(w, cfg, R, chart9):
    """Sections 8 (read-mostly) and 9 (semaphore): issues 24 and 25."""
    if "s8" not in R:
        return  # a report from an older saved run
    w("## 8. Read-mostly: %d worker processes x %d ops, %d %% reads" %
      (cfg["s3_workers"], cfg["s8_iters"], cfg["s8_read_pct"]))
    w("")
    w("Each op is a read (read lock, GET counter, unlock) or a write (write lock, GET counter, SET counter+1, "
      "unlock), chosen by a xorshift32 sequence per worker that is the same for every row (`rlock_bench s8`, "
      "Bench.java `s8`), so every row does the same work. *rlock read-write lock*: `rlock_rwlock_new`'s read and "
      "write handles; *rlock reentrant lock*: one `rlock_lock_new` lock for every op (what a program without a "
      "read-write lock does: reads exclude each other too); Redisson: `getReadWriteLock` (RReadWriteLock). "
      "Lease: the watchdog. Workers start together after 20 warm-up ops (Redisson's JVMs warm up first as in "
      "scenario 3). Throughput = ops / (last end - first start); counter exact = the counter equals the writes "
      "and every write read a distinct value.")
    w("")
    w("| implementation | ops/s | reads / writes | read wait p50 | read p99 | read max | write wait p50 | write p99 | write max | counter exact | client CPU per op |")
    w("| --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- |")
    for k, x in R["s8"].items():
        if not x:
            w("| %s | failed | | | | | | | | | |" % label3(*k))
            continue
        exact = "yes" if x["exact_all"] else ("unknown (stalled)" if x["stalled_any"] else "**NO**")
        w("| %s | %s%s%s | %s / %s | %s | %s | %s | %s | %s | %s | %s | %s |" %
          (label3(*k), fmt(x["median"]), x["spread"], " (stalled)" if x["stalled_any"] else "", fmt(x["reads"]),
           fmt(x["writes"]), fmt_ms(x["r_p50_med"]), fmt_ms(x["r_p99_med"]), fmt_ms(x["r_max_med"]),
           fmt_ms(x["w_p50_med"]), fmt_ms(x["w_p99_med"]), fmt_ms(x["w_max_med"]), exact,
           fmt_ms(x["cpu_us_per_op_med"]) if x.get("cpu_us_per_op_med") is not None else ""))
    w("")
    w("## 9. Semaphore: %d worker processes share %d permits, %d acquires each" %
      (cfg["s3_workers"], cfg["s9_permits"], cfg["s9_iters"]))
    w("")
    w("Each iteration: acquire 1 permit (waiting as long as it takes), INCR an in-use counter, DECR it, release "
      "the permit. rlock: `rlock_semaphore_acquire(sem, 1, RLOCK_WAIT_FOREVER)` / `rlock_semaphore_release` "
      "(`rlock_bench s9`); Redisson: `getSemaphore` (RSemaphore) `acquire()` / `release()`; both on one key set "
      "to %d permits before the workers start (the same format). redis-semaphore %s: `new Semaphore(redis, "
      "name, %d, options)` `acquire()` / `release()` (a sorted set of holders; it polls: retryInterval 10 ms "
      "by default, 1 ms at *best*; an acquire that gives up after its acquireTimeout, 10 s, is called again "
      "and counted). Workers start together after 20 warm-up acquires (Redisson's JVMs warm up first). "
      "Throughput = acquires / (last end - first start); wait = time in the acquire call; *most in use* = the "
      "largest INCR answer (never above the permits if the semaphore holds)." %
      (cfg["s9_permits"], "5.8.0", cfg["s9_permits"]))
    w("")
    w("| implementation | acquires/s | wait p50 | wait p99 | wait max | most in use | gave up (re-called) | client CPU per acquire |")
    w("| --- | --- | --- | --- | --- | --- | --- | --- |")
    for k, x in R["s9"].items():
        if not x:
            w("| %s | failed | | | | | | |" % label9(*k))
            continue
        w("| %s | %s%s%s | %s | %s | %s | %s of %d | %s | %s |" %
          (label9(*k), fmt(x["median"]), x["spread"], " (stalled)" if x["stalled_any"] else "",
           fmt_ms(x["p50_med"]), fmt_ms(x["p99_med"]), fmt_ms(x["max_med"]), fmt(x["most_med"]),
           cfg["s9_permits"], fmt(x["failures_med"]),
           fmt_ms(x["cpu_us_per_op_med"]) if x.get("cpu_us_per_op_med") is not None else ""))
    w("")
    if chart9:
        w("![scenario 9](%s)" % chart9)
        w("")


def s2_chart(ctx, outdir, s2, fname):
    return chart(ctx, outdir, fname, "Scenario 2: 50 owners, pair latency",
                 [(label2(*k), x["samples"]) for k, x in s2.items() if x])


def write_s2_section(w, cfg, s2, half_ceiling, chart_png):
    """Section 2's text, table and chart (the full report and --only s2)."""
    w("## 2. Many owners, distinct names: %d owners on one client (rlock) / %d concurrent tasks (peers), %.0f s" %
      (cfg["s2_workers"], cfg["s2_workers"], cfg["s2_secs"]))
    w("")
    w("%.1f s warm-up first. Two rlock rows, both on **one client** (one command connection), lock names "
      "distinct per owner, watchdog lease: **rlock (%s)** (`rlock_bench s2`): %d OS threads, each making "
      "blocking `rlock_lock_lock` / `rlock_lock_unlock` calls on its own name (every call a hand-off to the "
      "I/O thread and a wake-up of the calling thread); **rlock (%s)** (`rlock_bench s2a`): %d explicit owners "
      "(`rlock_owner_t` 1..%d), no thread each: each owner chains `rlock_lock_acquire_async` -> "
      "`rlock_lock_release_async` -> the next acquire through completion callbacks on the client's I/O "
      "thread, the model of the Node peers. Peers: %d async tasks in one process sharing one connection "
      "(redis-py: redis.asyncio with its default pool). Client CPU: the whole process (getrusage / "
      "process.cpuUsage) over the measured seconds. Reference: ceiling / 2 = %s pairs/s." %
      (cfg["s2_warm"], RLOCK_S2["default"], cfg["s2_workers"], RLOCK_S2["async"], cfg["s2_workers"],
       cfg["s2_workers"], cfg["s2_workers"], fmt(half_ceiling)))
    w("")
    w("| implementation | pairs/s | ratio to ceiling/2 | pair p50 | pair p99 | client CPU (CPU per pair) | notes |")
    w("| --- | --- | --- | --- | --- | --- | --- |")
    for k, x in s2.items():
        if not x:
            w("| %s | failed | | | | | see problems |" % label2(*k))
            continue
        note = ""
        if k[0] == "rlock":
            note = "%.1f commands per socket write (automatic pipelining)" % x.get("commands_per_write", 0)
        w("| %s | %s%s | %.2f | %s | %s | %.0f%% (%.1f µs) | %s |" %
          (label2(*k), fmt(x["median"]), x["spread"], x["median"] / half_ceiling, fmt_ms(x["p50"]),
           fmt_ms(x["p99"]), x.get("client_cpu_pct", float("nan")), x.get("cpu_us_per_pair", float("nan")),
           note))
    w("")
    if chart_png:
        w("![scenario 2](%s)" % chart_png)
        w("")


def write_report(ctx, outdir, R):
    cfg = ctx.cfg
    v = versions(ctx)
    ping, ceil = R["ping"], R["ceil"]
    rtt = ping["mean_us"]
    bound1 = 1e6 / (2 * rtt)
    half_ceiling = ceil["rate"] / 2
    L = []
    w = L.append
    w("# rlock benchmarks: latest run")
    w("")
    w("Written by `./scripts/bench%s` (bench/run.py) on %s; every figure below comes from this run "
      "(nothing is typed in by hand). Mode: **%s** (%d repetition%s per figure; figures are the median, "
      "± is half the min-max spread in %% of the median). Total run time %.0f s." %
      (" --quick" if cfg["mode"] == "quick" else "", R.get("date") or time.strftime("%Y-%m-%d %H:%M:%S %Z"),
       cfg["mode"], cfg["reps"], "" if cfg["reps"] == 1 else "s", R["elapsed"]))
    w("")
    w("| | |\n| --- | --- |")
    w("| machine | %s; load average at start %s, at the end %s (other work on the machine shares the cores) |" %
      (v["cpu"], R["load_before"], R.get("load_after", "?")))
    w("| redis-server | %s, our own instance on 127.0.0.1 (no persistence), same for every figure except the "
      "cluster rows of section 2 and the RedLock rows of section 7, which start their own servers (same "
      "binary) |" % v["redis"])
    w("| rlock | %s, git %s, built RelWithDebInfo (the project's default) by scripts/bench |" %
      (open(os.path.join(ctx.repo, "include", "rlock.h")).read().split('RLOCK_VERSION_STRING "')[1].split('"')[0],
       v["git"]))
    w("| peers | redis-py %s (Debian python3-redis, Python %s); node %s: redlock %s + ioredis %s, "
      "redis-semaphore %s, node-redisson %s (pinned in bench/peers/package-lock.json); %s: Redisson 4.7.0 "
      "(pinned in tests/interop/redisson/pom.xml) |" %
      (v.get("redis-py"), v["python"], v["node"], v.get("redlock"), v.get("ioredis"),
       v.get("redis-semaphore"), v.get("node-redisson"), v.get("java")))
    w("")
    w("Settings. **rlock**: %s. Peers: *default* = the library's defaults, *best* = shortest retry delay:" %
      RLOCK_SETTING)
    w("")
    for p, ss in PEER_SETTINGS.items():
        for s, d in ss.items():
            w("- %s *%s*: %s" % (p, s, d))
    w("")
    w("Scenarios 1 and 2 never wait for a lock (one owner per name), so a retry delay changes nothing there: "
      "the peers run them at their defaults only. node-redisson waits on pub/sub and has no retry delay: its "
      "default is its best.")
    w("")

    # ---- limits
    w("## Limits (same run, same server)")
    w("")
    w("| limit | figure | settings |\n| --- | --- | --- |")
    w("| loopback round trip (hiredis PING loop, 1 in flight) | mean **%.1f µs**%s, p50 %.1f µs, p99 %.1f µs "
      "(= %s PING/s) | %d PINGs after %d warm-up, bench/ping_rtt.c |" %
      (rtt, ping["spread"], ping["p50_us"], ping["p99_us"], fmt(1e6 / rtt), cfg["ping_n"], cfg["ping_warm"]))
    w("| 2-round-trip bound for lock+unlock pairs (scenario 1) | **%s pairs/s** | 1 / (2 x mean round trip) |" %
      fmt(bound1))
    w("| server ceiling, rlock's acquire script (redis-benchmark EVALSHA) | **%s calls/s**%s | `%s`, "
      "%s calls; SCRIPT LOAD of lua/reentrant_acquire.lua first; every call takes a **distinct, free** lock "
      "(random name out of 10^8, random latch key), as in scenario 2 |" %
      (fmt(ceil["rate"]), ceil["spread"], ceil["cmd"], fmt(cfg["ceil_n"])))
    w("| ceiling / 2 (two scripts per lock+unlock pair) | **%s pairs/s** | the scenario 2 reference |" %
      fmt(half_ceiling))
    ref, f6 = R["ref"], (R["s6"] or {}).get("redisson-ref") or {}
    w("| reference client: bare blocking hiredis, Redisson's acquire + unlock scripts (scenario 1) | %s | "
      "bench/redisson_ref.c: one connection, EVALSHA of Redisson's acquire script (KEYS name; ARGV lease 30000, "
      "owner) and its unlock script without a latch (KEYS name, channel; ARGV 0, lease, owner), 2 round trips "
      "per pair; run in the same rounds as scenario 1 (%s pairs after %s warm-up, interleaved with the rows of "
      "section 1) |" %
      (("**%s pairs/s**%s = %.2f of the 2-round-trip bound; %.0f µs client CPU, %s instructions, %s "
        "allocations, %s system calls per pair; %.1f µs of server time per pair in the scripts (rlock: %.1f)" %
        (fmt(ref["median"]), ref["spread"], ref["median"] / bound1, ref.get("cpu_us_per_pair", 0),
         fmt(f6.get("ir")), fmt(f6.get("allocs"), 1), fmt(f6.get("syscalls"), 1),
         ref.get("script_us_per_pair", float("nan")),
         (R["s1"].get(("rlock", "default")) or {}).get("script_us_per_pair", float("nan")))) if ref else "failed",
       fmt(cfg["s1_pairs"]), fmt(cfg["s1_warm"])))
    w("")

    # ---- main table
    s1, s2, s3, s4, s5 = R["s1"], R["s2"], R["s3"], R["s4"], R["s5"]
    w("## Main table")
    w("")
    w("| implementation | 1: uncontended pairs/s | 2: 50 owners pairs/s | 3: hot lock ops/s | "
      "3: max acquire wait | 4: handoff p50 / p99 | 5: watchdog client CPU |")
    w("| --- | --- | --- | --- | --- | --- | --- |")
    for impl, setting in CONTENDED:
        a = s1.get((impl, setting)) if setting == "default" else None
        b = s2.get((impl, setting)) if setting == "default" else None
        c = s3.get((impl, setting))
        d = s4.get((impl, setting))
        e = s5.get((impl, setting)) if setting == "default" else None
        cell1 = (fmt(a["median"]) + a["spread"]) if a else ("same as default" if setting == "best" else "failed")
        cell2 = (fmt(b["median"]) + b["spread"]) if b else ("same as default" if setting == "best" else "failed")
        cell3 = (fmt(c["median"]) + c["spread"] + (" (stalled)" if c["stalled_any"] else "")) if c else "failed"
        cell3b = fmt_ms(c["max_med"]) if c else "n/a"
        cell4 = ("%s / %s%s" % (fmt_ms(d["p50"]), fmt_ms(d["p99_med"]),
                                " (stalled)" if d["stalled_any"] else "")) if d else "failed"
        if impl == "redis-py":
            cell5 = "n/a (no watchdog)" if setting == "default" else ""
        elif setting == "best":
            cell5 = ""
        else:
            cell5 = ("%.1f%%" % e["median"]) if e else "failed"
        w("| %s | %s | %s | %s | %s | %s | %s |" % (label(impl, setting), cell1, cell2, cell3, cell3b, cell4, cell5))
        if (impl, setting) == ("rlock", "default") and RLOCK_ASYNC in s2:
            b = s2[RLOCK_ASYNC]
            w("| %s | | %s | | | | |" % (label(*RLOCK_ASYNC), (fmt(b["median"]) + b["spread"]) if b else "failed"))
    w("")
    if RLOCK_ASYNC in s2:
        w("Scenario 2 has two rlock rows: *rlock* is %d OS threads making blocking calls on one client, *%s* is "
          "%d logical owners chained through completion callbacks on the client's I/O thread (the Node peers' "
          "model: one event loop, async owners); see section 2." %
          (cfg["s2_workers"], label(*RLOCK_ASYNC), cfg["s2_workers"]))
        w("")
    c6 = (R["s6"] or {}).get("rlock") or {}
    if c6.get("ir") is not None:
        w("Scenario 6: rlock costs **%s instructions, %s allocations and %s system calls per lock+unlock pair** "
          "on the client (callgrind, malloc_count, strace)." %
          (fmt(c6["ir"]), fmt(c6.get("allocs"), 1), fmt(c6.get("syscalls"), 1)))
        w("")

    # ---- goals (issue 10; the hot-lock rows of issue 3 stay)
    goals = goals_issue10(R, rtt, half_ceiling, ping["p50_us"]) + goals_hot_lock(s3) + goals_issue21(R, cfg["s5_locks"]) \
        + goals_family(R, cfg, ping["p50_us"])
    w("## Goals")
    w("")
    w("Issue 10's goals, judged on this run's figures only (its goal 5, *hot-lock figures at least as good*, "
      "compares two commits: `./scripts/bench --compare REV` does that, in one run, see docs/benchmarks.md; the "
      "hot-lock rows below are issue 3's goals against the peers).")
    w("")
    w("| goal | met? | figures and reason |\n| --- | --- | --- |")
    for g, ok, txt in goals:
        w("| %s | %s | %s |" % (g, "n/a" if ok is None else "**yes**" if ok else "**NO**", txt))
    w("")

    # ---- charts
    charts = {}
    charts["s1"] = chart(ctx, outdir, "s1_pair_latency", "Scenario 1: uncontended lock+unlock pair latency",
                         [("PING round trip (hiredis)", ping["samples"])] +
                         [(label(*k), x["samples"]) for k, x in [(REFERENCE, R["ref"])] + list(s1.items()) if x])
    charts["s2"] = s2_chart(ctx, outdir, s2, "s2_pair_latency")
    charts["s3"] = chart(ctx, outdir, "s3_acquire_wait", "Scenario 3: hot lock, acquire wait",
                         [(label(*k), x["samples"]) for k, x in s3.items() if x] +
                         [(label3(*k), x["samples"]) for k, x in (R.get("s3f") or {}).items() if x])
    charts["s9"] = chart(ctx, outdir, "s9_semaphore_wait", "Scenario 9: 8 processes, 3 permits, acquire wait",
                         [(label9(*k), x["samples"]) for k, x in (R.get("s9") or {}).items() if x])
    charts["s4"] = chart(ctx, outdir, "s4_handoff_latency", "Scenario 4: handoff latency (unlock called -> acquire returned)",
                         [(label(*k), x["samples"]) for k, x in s4.items() if x])

    # ---- scenario tables
    w("## 1. Uncontended: one owner, %s sequential lock+unlock pairs on one name" % fmt(cfg["s1_pairs"]))
    w("")
    w("%s warm-up pairs first. Bound = %s pairs/s (2 round trips per pair)." % (fmt(cfg["s1_warm"]), fmt(bound1)))
    w("")
    w("| implementation | pairs/s | ratio to bound | pair p50 | pair p99 | client CPU per pair | notes |")
    w("| --- | --- | --- | --- | --- | --- | --- |")
    for k, x in [(REFERENCE, R["ref"])] + list(s1.items()):
        if not x:
            w("| %s | failed | | | | | see problems |" % label(*k))
            continue
        note = ""
        if k[0] == "rlock":
            note = "%.1f commands, %.1f writes per pair" % (x.get("commands_per_pair", 0), x.get("writes_per_pair", 0))
            if "fast_per_pair" in x:
                note += ", %.2f of 2 calls on the fast path" % x["fast_per_pair"]
        w("| %s | %s%s | %.2f | %s | %s | %.0f µs | %s |" %
          (label(*k), fmt(x["median"]), x["spread"], x["median"] / bound1, fmt_ms(x["p50"]), fmt_ms(x["p99"]),
           x.get("cpu_us_per_pair", float("nan")), note))
    w("")
    if charts["s1"]:
        w("![scenario 1](%s)" % charts["s1"])
        w("")

    write_s2_section(w, cfg, s2, half_ceiling, charts["s2"])
    write_cluster_rows(w, cfg, R)

    w("## 3. Hot lock: %d worker processes x %d iterations of lock, GET, SET counter+1, unlock" %
      (cfg["s3_workers"], cfg["s3_iters"]))
    w("")
    w("All workers connect, then start together. Throughput = critical sections / (last end - first start). "
      "Owner changes = consecutive critical sections (by counter value) run by different workers. Acquire "
      "wait = time in the lock call. A run that has not finished after %.0f s is killed and marked stalled "
      "(its throughput is then counter / elapsed); Redisson's row has %.0f s: its 8 JVMs on this machine are "
      "slow, not stalled (each worker first warms its JVM up: %s, see Bench.java). Client CPU per lock op = "
      "the CPU time of all workers over their iterations / critical sections (rlock and Redisson only)." %
      (cfg["s3_cap"], cfg["s3_cap_redisson"], "3,000 uncontended iterations, 50 on a shared lock, then a wait "
       "until its JIT compiler has been idle for 1 s (at most 15 s)"))
    w("")
    w("Handoff (rlock and Redisson rows): at each owner change, the new owner's acquire returned - the old "
      "owner's unlock called, both CLOCK_MONOTONIC (`System.nanoTime()` in the JVMs), p50.")
    w("")
    w("| implementation | lock ops/s | owner changes | wait p50 | wait p99 | wait max (median / worst rep) | handoff p50 | counter exact | acquire scripts per lock | client CPU per lock op |")
    w("| --- | --- | --- | --- | --- | --- | --- | --- | --- | --- |")
    rows3 = [(k, x, label(*k)) for k, x in s3.items()] + [(k, x, label3(*k)) for k, x in (R.get("s3f") or {}).items()]
    for k, x, lab in rows3:
        if not x:
            w("| %s | failed | | | | | | | | |" % lab)
            continue
        exact = "yes" if x["exact_all"] else ("unknown (stalled)" if x["stalled_any"] else "**NO**")
        w("| %s | %s%s%s | %s | %s | %s | %s / %s | %s | %s | %s | %s |" %
          (lab, fmt(x["median"]), x["spread"], " (stalled)" if x["stalled_any"] else "",
           fmt(x["changes_med"]), fmt_ms(x["p50_med"]), fmt_ms(x["p99_med"]), fmt_ms(x["max_med"]),
           fmt_ms(x["max_max"]), fmt_ms(x.get("hand_med")) if x.get("hand_med") is not None else "",
           exact, fmt(x["tries_med"], 2) if x.get("tries_med") else "",
           fmt_ms(x["cpu_med"]) if x.get("cpu_med") is not None else ""))
    w("")
    if R.get("s3f"):
        write_fair_rows(w, cfg, R, ping["p50_us"])
    w("")
    if charts["s3"]:
        w("![scenario 3](%s)" % charts["s3"])
        w("")

    w("## 4. Handoff latency: two processes pass one lock back and forth")
    w("")
    w("Target %s handoffs (+%d warm-up for rlock, %d for the peers, not counted). Before each unlock the holder tells the other process "
      "(pipe / IPC) to start waiting and sleeps %d µs so that the waiter is parked. The handoff is timed the "
      "same way for every row: **from the holder's unlock call (just before it) to the waiter's acquire call "
      "returning**, both read on one clock: rlock and the Node and Python peers run the two owners as two "
      "processes and read CLOCK_MONOTONIC (one clock for every process of a Linux machine: `clock_gettime`, "
      "`process.hrtime`, `time.monotonic_ns`); Redisson runs them as two threads of one JVM, each with its own "
      "RedissonClient (own connections), and reads `System.nanoTime()` (one clock within a JVM). The column "
      "*from unlock returned* times from the unlock call's return instead (issue 10's measure, kept for goal 5): "
      "Redisson's `unlock()` is 2 round trips (the unlock script, which publishes, then a `DEL` of its unlock "
      "latch key), so its waiter often returns before the holder's `unlock()` does and that measure goes "
      "negative (column *negative*): it says when the holder's call returns, not how fast the lock passes. "
      "Round trip unit = PING p50 %.1f µs. rlock runs to the end (cap %.0f s); a "
      "peer run stops after %.1f s (a slow poller would need hours for %s handoffs), so peers have fewer "
      "samples (column 'handoffs')." %
      (fmt(cfg["s4_handoffs"]), cfg["s4_warm"], cfg["s4_warm_peer"], cfg["s4_delay_us"], ping["p50_us"], cfg["s4_cap_rlock"],
       cfg["s4_cap_peer"], fmt(cfg["s4_handoffs"])))
    w("")
    w("| implementation | handoffs | p50 | p99 | p50 in round trips | p99 in round trips | max | p50 from unlock returned | negative |")
    w("| --- | --- | --- | --- | --- | --- | --- | --- | --- |")
    for k, x in s4.items():
        if not x:
            w("| %s | failed | | | | | | | |" % label(*k))
            continue
        w("| %s | %s%s | %s%s | %s | %.1f | %.1f | %s | %s | %s of %s |" %
          (label(*k), fmt(x["handoffs_med"]), " (stalled)" if x["stalled_any"] else "",
           fmt_ms(x["p50"]), x["spread"], fmt_ms(x["p99_med"]), x["p50"] / ping["p50_us"],
           (x["p99_med"] or float("nan")) / ping["p50_us"], fmt_ms(x["max"]),
           fmt_ms(x.get("p50_ret_med")), fmt(x.get("neg_ret")), fmt(x.get("recorded_ret"))))
    w("")
    if charts["s4"]:
        w("![scenario 4](%s)" % charts["s4"])
        w("")

    w("## 5. Watchdog at scale: %s locks held under the watchdog (lease %d ms)" %
      (fmt(cfg["s5_locks"]), cfg["s5_watchdog_ms"]))
    w("")
    w("rlock: one client, watchdog_timeout_ms = %d (**non-default**, the scenario's setting; renewal every "
      "third of it), all locks taken with rlock_lock_acquire_async, 500 in flight at a time (the peers take theirs in batches of 500 too), held %.0f s, %d repetition(s). Peers (1 "
      "repetition, held %.0f s, to stay in the time budget): node-redisson lockWatchdogTimeout %d ms; "
      "redis-semaphore Mutex lockTimeout %d ms (refresh every 0.8 of it); redlock `using()` with duration %d ms "
      "(auto-extension 500 ms before expiry). redis-py's Lock has no automatic renewal: not applicable. "
      "Renewal commands/s: rlock's own counter (renew script calls) and, for all, the server's EVAL/EVALSHA "
      "calls per second during the hold. RSS per lock = (RSS after the hold - RSS after connecting) / locks "
      "(issue 10's goal); *per lock still held* = the same / the locks still held after the hold (issue 21's "
      "goal: a client whose watchdog falls behind loses locks during the hold and drops their state); *all "
      "held* = (RSS right after the last acquire returned, a JVM after `System.gc()`, - RSS after connecting) "
      "/ locks (a JVM's heap still holds the acquire burst's garbage then). "
      "Verified after the hold: every lock key still exists and is held." %
      (cfg["s5_watchdog_ms"], cfg["s5_hold"], cfg["reps"], cfg["s5_hold_peer"], cfg["s5_watchdog_ms"],
       cfg["s5_watchdog_ms"], cfg["s5_watchdog_ms"]))
    w("")
    w("| implementation | acquire all | renewal commands/s (client) | server script calls/s | client CPU | "
      "RSS per lock | RSS per lock still held | RSS per lock, all held | still held | lost |")
    w("| --- | --- | --- | --- | --- | --- | --- | --- | --- | --- |")
    for k, x in s5.items():
        if not x:
            w("| %s | failed | | | | | | | | |" % label(*k))
            continue
        w("| %s | %.1f s | %s | %s | %.1f%%%s | %s B | %s | %s | %s / %s | %d |" %
          (label(*k), x["acquire_med"], fmt(x.get("renewal_calls_per_s"), 1) if "renewal_calls_per_s" in x else "n/a",
           fmt(x["server_cmd_med"], 1), x["median"], x["spread"], fmt(x["rss_med"]),
           "n/a" if x.get("rss_still_med") is None else fmt(x["rss_still_med"]) + " B",
           "n/a" if x.get("rss_held_med") is None else fmt(x["rss_held_med"]) + " B",
           fmt(x["still_held"]), fmt(cfg["s5_locks"]), x.get("lost", 0)))
    w("| redis-py | n/a | | | | | | | | no watchdog |")
    w("")
    r5 = s5.get(("rlock", "default"))
    if r5 and "renewed_locks_per_s" in r5:
        w("rlock renewed %s holds per second with %s renew-script calls per second (batches of up to 500)." %
          (fmt(r5["renewed_locks_per_s"]), fmt(r5["renewal_calls_per_s"], 1)))
        w("")

    w("## 6. Client cost per pair (callgrind, allocations, system calls)")
    w("")
    s6 = R["s6"]
    if s6:
        w("Each tool wraps a plain loop of N uncontended lock+unlock pairs (`rlock_bench s6 URL N`; the reference: "
          "`redisson_ref 127.0.0.1 PORT N 0 -`) for N = %d and N = %d; per pair = (count(N2) - count(N1)) / "
          "(N2 - N1), so connection set-up and exit cancel out (steady state). Every thread of the client counts. "
          "Instructions: `valgrind --tool=callgrind` (user space: the library, libevent, hiredis, libc). "
          "Allocations: `LD_PRELOAD=malloc_count.so` (bench/malloc_count.c: calls to malloc, calloc, realloc, "
          "posix_memalign, aligned_alloc, memalign). System calls: `strace -c -f`. %d round(s), rlock and the "
          "reference interleaved; median, ± half the spread." % (s6["n1"], s6["n2"], len(s6["rlock"]["ir_reps"])))
        w("")
        w("| implementation | instructions per pair | allocations per pair | system calls per pair | most frequent "
          "system calls per pair |")
        w("| --- | --- | --- | --- | --- |")
        for impl in ("rlock", "redisson-ref"):
            x = s6[impl]
            w("| %s | **%s**%s | **%s**%s | **%s**%s | %s |" %
              (label(impl, "default"), fmt(x["ir"]), x["ir_spread"], fmt(x["allocs"], 1), x["allocs_spread"],
               fmt(x["syscalls"], 1), x["syscalls_spread"], top_calls(x["by_call"], 8)))
        w("| goal (issue 10) | <= 12,000 | <= 2 | | |")
        w("")
        for impl, top in (("rlock", 20), ("redisson-ref", 8)):
            funcs = sorted(((v, k) for k, v in s6[impl].get("by_func", {}).items() if v and v > 0), reverse=True)
            if not funcs:
                continue
            w("Where %s instructions go: self cost per pair of the %d costliest functions (callgrind_annotate, "
              "same difference of two runs; together %s of %s):" %
              ("rlock's" if impl == "rlock" else "the reference client's", min(top, len(funcs)),
               fmt(sum(v for v, _ in funcs[:top])), fmt(s6[impl]["ir"])))
            w("")
            w("| function (object) | instructions per pair |\n| --- | --- |")
            for v, k in funcs[:top]:
                w("| `%s` | %s |" % (k.replace("|", "/"), fmt(v)))
            w("")
        w("The peers run on JIT-compiling (node) or interpreting (Python) runtimes where these counts measure "
          "the runtime more than the library; their client cost is the CPU per pair of scenarios 1 and 2.")
    else:
        w("The cost runs failed: see problems.")
    w("")

    write_redlock_rows(w, cfg, R)
    write_family_sections(w, cfg, R, charts.get("s9"))

    w("## Problems seen in this run")
    w("")
    mine = [p for p in problems if re.search(r": rlock[a-z-]* \(", p) or not re.search(r": [a-z0-9-]+ \(", p)]
    theirs = [p for p in problems if p not in mine]
    w("rlock (library errors, hangs, stalls, wrong results, harness failures):")
    w("")
    for p in mine or ["none: no library error, hang, stall or wrong counter in this run."]:
        w("- " + p.replace("\n", " "))
    w("")
    w("Peers:")
    w("")
    for p in theirs or ["none"]:
        w("- " + p.replace("\n", " "))
    w("")
    w("## Notes on the peers")
    w("")
    w("- node-redisson (from reading its code): it tries the lock, and only then subscribes to the unlock channel; an unlock published "
      "between the two is lost and the waiter sleeps until its next try after the lock's TTL (30 s with the "
      "watchdog lease). Runs that hit this show as *stalled* above (the harness kills them at the cap).")
    w("- redlock's default retryCount (10) makes an acquire give up after about 2 s under contention; the "
      "harness calls it again (waiting forever, as the other libraries do) and the time counts as wait.")
    w("- redis-py's Lock has no lease by default (timeout=None): a crashed holder keeps the lock forever.")
    if any(x and x.get("stalled_any") for k, x in (R.get("r4") or {}).items() if k[0] == "redlock-3"):
        w("- redlock over 3 servers (section 7) stalled in this run. Cause (from reading its code, and seen once "
          "outside the harness: after such a stall the key was on all 3 servers with the value of the waiter's "
          "pending acquire): one `acquire` call retries with the same value, its acquire script counts a key "
          "that holds that very value as taken, and the keys set by a failed attempt stay until the whole call "
          "gives up. A waiter whose attempts land on the nodes one by one, while the holder releases them one "
          "by one, ends up holding every node with its own value and then loses every attempt until the 30 s "
          "lease runs out. A short retry delay (*best*) hits this often. rlock's RedLock gives back what a "
          "failed round got before the next round.")
    with open(os.path.join(outdir, "latest.md"), "w") as f:
        f.write("\n".join(L) + "\n")


if __name__ == "__main__":
    try:
        main()
    except KeyboardInterrupt:
        sys.stderr.write("run.py: interrupted\n")
        sys.exit(130)
