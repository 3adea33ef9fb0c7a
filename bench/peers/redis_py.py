#!/usr/bin/python3
"""redis_py.py -- the redis-py peer of the benchmark harness (issue 3): the
same scenarios as bench/rlock_bench.c on redis-py's Lock (Debian's
python3-redis, run with /usr/bin/python3). bench/run.py drives it:

  redis_py.py SETTING s1 PORT PAIRS WARMUP SAMPLES
  redis_py.py SETTING s2 PORT TASKS SECONDS WARMUP_S SAMPLES   (asyncio tasks)
  redis_py.py SETTING s3 PORT NAME COUNTER ITERS SAMPLES       (one worker)
  redis_py.py SETTING s4 PORT NAME HANDOFFS WARMUP DELAY_US CAP_S SAMPLES

SETTING: default (Lock(sleep=0.1), redis-py's default) or best (sleep=0.001,
the shortest retry delay). redis-py's Lock has no automatic renewal, so
scenario 5 does not apply. Each prints one JSON object on stdout.
"""
import asyncio
import json
import os
import resource
import sys
import time

import redis

SETTINGS = {"default": {}, "best": {"sleep": 0.001}}


def now_ns():
    return time.monotonic_ns()  # CLOCK_MONOTONIC, as in the C programs


def client(port):
    return redis.Redis(host="127.0.0.1", port=port)


def write_samples(path, arr):
    with open(path, "w") as f:
        f.write("".join("%.3f\n" % x for x in arr))


def s1(setting, port, pairs, warm, samples):
    r = client(port)
    lock = r.lock("bench:s1:redis-py", **SETTINGS[setting])
    for _ in range(int(warm)):
        lock.acquire()
        lock.release()
    out = []
    ru0 = resource.getrusage(resource.RUSAGE_SELF)
    t0 = now_ns()
    for _ in range(int(pairs)):
        a = now_ns()
        lock.acquire()
        lock.release()
        out.append((now_ns() - a) / 1000)
    el = (now_ns() - t0) / 1e9
    ru1 = resource.getrusage(resource.RUSAGE_SELF)
    cpu = (ru1.ru_utime - ru0.ru_utime) + (ru1.ru_stime - ru0.ru_stime)
    write_samples(samples, out)
    return {"pairs": int(pairs), "elapsed_s": el, "cpu_us_per_pair": cpu * 1e6 / int(pairs)}


def s2(setting, port, tasks, secs, warm, samples):
    import redis.asyncio as aredis

    async def main():
        r = aredis.Redis(host="127.0.0.1", port=port)
        state = {"phase": 0, "counted": 0}
        out = []

        async def run(i):
            lock = r.lock("bench:s2:redis-py:%d" % i, **SETTINGS[setting])
            while state["phase"] != 2:
                ph = state["phase"]
                a = now_ns()
                await lock.acquire()
                await lock.release()
                if ph == 1 and state["phase"] == 1:
                    state["counted"] += 1
                    out.append((now_ns() - a) / 1000)

        ts = [asyncio.create_task(run(i)) for i in range(int(tasks))]
        await asyncio.sleep(float(warm))
        ru0 = resource.getrusage(resource.RUSAGE_SELF)
        t0 = now_ns()
        state["phase"] = 1
        await asyncio.sleep(float(secs))
        state["phase"] = 2
        el = (now_ns() - t0) / 1e9
        ru1 = resource.getrusage(resource.RUSAGE_SELF)
        await asyncio.gather(*ts)
        await r.close()
        cpu = (ru1.ru_utime - ru0.ru_utime) + (ru1.ru_stime - ru0.ru_stime)
        write_samples(samples, out)
        return {"pairs": state["counted"], "elapsed_s": el, "tasks": int(tasks),
                "client_cpu_pct": 100 * cpu / el}

    return asyncio.run(main())


def s3(setting, port, name, counter, iters, samples):
    r = client(port)
    lock = r.lock(name, **SETTINGS[setting])
    for _ in range(20):  # warm-up, as in rlock_bench.c
        lock.acquire()
        lock.release()
    sys.stdout.write("ready\n")
    sys.stdout.flush()
    sys.stdin.readline()
    lines = []
    start = now_ns()
    for _ in range(int(iters)):
        a = now_ns()
        lock.acquire()
        w = (now_ns() - a) / 1000
        v = int(r.get(counter) or 0)
        r.set(counter, v + 1)
        lock.release()
        lines.append("%d %.3f\n" % (v, w))
    end = now_ns()
    with open(samples, "w") as f:
        f.write("".join(lines))
    return {"start_ns": start, "end_ns": end, "iters": int(iters)}


def s4_role(first, rd, wr, setting, port, name, total, delay_us, deadline, rel_w):
    """One of the two processes; writes 'relc h t' (unlock called), 'rel h t'
    (unlock returned) and 'acq h t' lines to rel_w."""
    r = client(port)
    lock = r.lock(name, **SETTINGS[setting])
    ev = os.fdopen(rel_w, "w")
    h = 0 if first else 1
    if first:
        lock.acquire()
    else:
        if os.read(rd, 1) != b"G":
            return
        lock.acquire()
        ev.write("acq 0 %d\n" % now_ns())
    while True:
        if h >= total or time.monotonic() > deadline:
            os.write(wr, b"S")
            lock.release()
            break
        os.write(wr, b"G")
        time.sleep(delay_us / 1e6)
        relc = now_ns()
        lock.release()
        ev.write("relc %d %d\nrel %d %d\n" % (h, relc, h, now_ns()))
        if os.read(rd, 1) != b"G":
            break
        lock.acquire()
        ev.write("acq %d %d\n" % (h + 1, now_ns()))
        h += 2
    ev.close()


def s4(setting, port, name, handoffs, warm, delay_us, cap, samples):
    total = int(handoffs) + int(warm)
    deadline = time.monotonic() + float(cap)
    ab, ba = os.pipe(), os.pipe()
    t0 = now_ns()
    evfiles = []
    pids = []
    for first in (True, False):
        er, ew = os.pipe()
        pid = os.fork()
        if pid == 0:
            os.close(er)
            try:
                if first:
                    s4_role(True, ba[0], ab[1], setting, port, name, total, int(delay_us), deadline, ew)
                else:
                    s4_role(False, ab[0], ba[1], setting, port, name, total, int(delay_us), deadline, ew)
                os._exit(0)
            except BaseException as e:  # report, never hide
                sys.stderr.write("redis_py.py s4 child: %r\n" % (e,))
                os._exit(2)
        os.close(ew)
        evfiles.append(os.fdopen(er))
        pids.append(pid)
    for fd in ab + ba:
        os.close(fd)
    ev = {"rel": {}, "relc": {}, "acq": {}}
    for f in evfiles:  # each child writes its events at the end (buffered)
        for line in f:
            kind, h, t = line.split()
            ev[kind][int(h)] = int(t)
    rel, relc, acq = ev["rel"], ev["relc"], ev["acq"]
    ok = all(os.waitpid(p, 0)[1] == 0 for p in pids)
    el = (now_ns() - t0) / 1e9
    out, n = [], 0
    for h in range(total):
        if h not in acq:
            break
        n += 1
        if h >= int(warm) and h in rel and h in relc:
            out.append("%.3f %.3f" % ((acq[h] - rel[h]) / 1000, (acq[h] - relc[h]) / 1000))
    with open(samples, "w") as f:  # "RET CALL" per handoff, as rlock_bench.c
        f.write("".join(x + "\n" for x in out))
    if not ok:
        raise SystemExit("redis_py.py s4: a child failed")
    return {"handoffs": n, "recorded": len(out), "elapsed_s": el, "capped": n < total}


def main():
    setting, scen, port = sys.argv[1], sys.argv[2], int(sys.argv[3])
    args = sys.argv[4:]
    fn = {"s1": s1, "s2": s2, "s3": s3, "s4": s4}.get(scen)
    if fn is None:
        raise SystemExit("redis_py.py: unknown scenario %s" % scen)
    print(json.dumps(fn(setting, port, *args)), flush=True)


if __name__ == "__main__":
    main()
