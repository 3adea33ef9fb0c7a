// peers.js -- the node peers of the benchmark harness (issue 3): the same
// scenarios as bench/rlock_bench.c, run on `redlock` (+ ioredis),
// `redis-semaphore` Mutex and `node-redisson`, installed from the pinned
// package-lock.json beside this file. bench/run.py drives it:
//
//   node peers.js PEER SETTING s1 PORT PAIRS WARMUP SAMPLES
//   node peers.js PEER SETTING s2 PORT TASKS SECONDS WARMUP_S SAMPLES
//   node peers.js PEER SETTING s3 PORT NAME COUNTER ITERS SAMPLES   (one worker)
//   node peers.js PEER SETTING s4 PORT NAME HANDOFFS WARMUP DELAY_US CAP_S SAMPLES
//   node peers.js PEER SETTING s5 PORT LOCKS HOLD_S LEASE_MS
//   node peers.js semaphore SETTING s9 PORT NAME LIMIT INUSE ITERS SAMPLES   (one worker)
//
// s9 is the semaphore scenario: redis-semaphore's Semaphore (LIMIT permits),
// not its Mutex.
//
// PEER: redlock | semaphore | redisson. SETTING: default | best (shortest
// retry delay; see SETTINGS below). Each prints one JSON object on stdout.
// redlock also takes PORT as a comma-separated list (e.g. 7001,7002,7003):
// one ioredis client per port, a RedLock over those independent servers
// (the RedLock rows of scenarios 1 and 4).
'use strict';
const fs = require('fs');
const { fork } = require('child_process');
const Redis = require('ioredis');

// The settings of each peer: "default" is the library's own default; "best"
// only shortens the retry delay (what a user tuning for latency would do).
const SETTINGS = {
  redlock: {
    default: {},
    best: { retryDelay: 1, retryJitter: 1, retryCount: -1 },
  },
  semaphore: {
    default: {},
    best: { retryInterval: 1 },
  },
  redisson: { default: {}, best: {} }, // waits on pub/sub: no retry delay to tune
};
const REDLOCK_DURATION_MS = 30000; // redlock has no default lease; rlock's watchdog lease

const nowNs = () => process.hrtime.bigint(); // CLOCK_MONOTONIC, as in the C programs
const usSince = (t) => Number(nowNs() - t) / 1000;
const sleepShared = new Int32Array(new SharedArrayBuffer(4));
const sleepUs = (us) => Atomics.wait(sleepShared, 0, 0, us / 1000); // blocks, does not spin

function redisClient(port) {
  return new Redis({ host: '127.0.0.1', port, lazyConnect: false, maxRetriesPerRequest: 3 });
}

// makePeer returns { redis, owner(name) -> {lock(), unlock()}, failures, close() }.
// lock() waits until acquired: a peer whose acquire gives up (redlock's retry
// count, redis-semaphore's acquireTimeout) is called again and the give-up is
// counted in `failures` (reported beside the figures).
async function makePeer(peer, setting, port, extra = {}) {
  const st = { failures: 0 };
  if (peer === 'redlock') {
    const Redlock = require('redlock').default;
    const clients = [].concat(port).map(redisClient);
    const rl = new Redlock(clients, { ...SETTINGS.redlock[setting], ...extra });
    rl.on('error', () => {}); // resource-locked errors during retries are expected
    st.redis = clients[0];
    st.lib = rl;
    st.owner = (name) => {
      let lock = null;
      return {
        async lock() {
          for (;;) {
            try {
              lock = await rl.acquire([name], REDLOCK_DURATION_MS);
              return;
            } catch (e) {
              if (e && e.name === 'ExecutionError') st.failures++;
              else throw e;
            }
          }
        },
        async unlock() {
          await lock.release();
          lock = null;
        },
      };
    };
    st.close = async () => Promise.all(clients.map((c) => c.quit()));
  } else if (peer === 'semaphore') {
    const { Mutex } = require('redis-semaphore');
    const redis = redisClient(port);
    st.redis = redis;
    st.owner = (name, opts = {}) => {
      const m = new Mutex(redis, name, { ...SETTINGS.semaphore[setting], ...extra, ...opts });
      return {
        mutex: m,
        async lock() {
          for (;;) {
            try {
              await m.acquire();
              return;
            } catch (e) {
              if (e && /timeout|limit/i.test(String(e.message))) st.failures++;
              else throw e;
            }
          }
        },
        async unlock() {
          await m.release();
        },
      };
    };
    st.close = async () => redis.quit();
  } else if (peer === 'redisson') {
    const { Redisson } = require('node-redisson');
    const rs = new Redisson({ redis: { options: { host: '127.0.0.1', port } }, ...extra });
    st.redis = rs.redis;
    st.owner = (name) => {
      const l = rs.getLock(name); // one lock object = one owner (random client id)
      return { lock: () => l.lock(), unlock: () => l.unlock() };
    };
    st.close = async () => rs.quit();
  } else {
    throw new Error(`unknown peer ${peer}`);
  }
  await st.redis.ping();
  return st;
}

function writeSamples(path, arr) {
  fs.writeFileSync(path, arr.map((x) => x.toFixed(3)).join('\n') + (arr.length ? '\n' : ''));
}

async function s1(p, [pairs, warm, samples]) {
  const o = p.owner(`bench:s1:${process.argv[2]}`);
  for (let i = 0; i < +warm; i++) {
    await o.lock();
    await o.unlock();
  }
  const s = new Array(+pairs);
  const c0 = process.cpuUsage();
  const t0 = nowNs();
  for (let i = 0; i < +pairs; i++) {
    const a = nowNs();
    await o.lock();
    await o.unlock();
    s[i] = usSince(a);
  }
  const el = Number(nowNs() - t0) / 1e9;
  const c = process.cpuUsage(c0);
  writeSamples(samples, s);
  return { pairs: +pairs, elapsed_s: el, cpu_us_per_pair: (c.user + c.system) / +pairs,
    failures: p.failures };
}

async function s2(p, [tasks, secs, warm, samples]) {
  let phase = 0;
  const s = [];
  let counted = 0;
  const run = async (i) => {
    const o = p.owner(`bench:s2:${process.argv[2]}:${i}`);
    while (phase !== 2) {
      const ph = phase;
      const a = nowNs();
      await o.lock();
      await o.unlock();
      if (ph === 1 && phase === 1) {
        counted++;
        s.push(usSince(a));
      }
    }
  };
  const all = [];
  for (let i = 0; i < +tasks; i++) all.push(run(i));
  await new Promise((r) => setTimeout(r, +warm * 1000));
  const c0 = process.cpuUsage();
  const t0 = nowNs();
  phase = 1;
  await new Promise((r) => setTimeout(r, +secs * 1000));
  phase = 2;
  const el = Number(nowNs() - t0) / 1e9;
  const c = process.cpuUsage(c0);
  await Promise.all(all);
  writeSamples(samples, s);
  return { pairs: counted, elapsed_s: el, tasks: +tasks, failures: p.failures,
    client_cpu_pct: (100 * (c.user + c.system)) / 1e6 / el };
}

async function s3(p, [name, counter, iters, samples]) {
  const o = p.owner(name);
  const redis = p.redis;
  for (let i = 0; i < 20; i++) { // warm-up, as in rlock_bench.c
    await o.lock();
    await o.unlock();
  }
  process.stdout.write('ready\n');
  await new Promise((r) => process.stdin.once('data', r));
  process.stdin.pause();
  const lines = [];
  const start = nowNs();
  for (let i = 0; i < +iters; i++) {
    const a = nowNs();
    await o.lock();
    const w = usSince(a);
    const v = parseInt((await redis.get(counter)) || '0', 10);
    await redis.set(counter, String(v + 1));
    await o.unlock();
    lines.push(`${v} ${w.toFixed(3)}`);
  }
  const end = nowNs();
  fs.writeFileSync(samples, lines.join('\n') + '\n');
  return { start_ns: start.toString(), end_ns: end.toString(), iters: +iters, failures: p.failures };
}

// s4: the parent forks two children (A first holder, B) and relays their
// messages; the relay is outside the measured interval. Per handoff one
// line "RET CALL", as rlock_bench.c: acquire returned in one child minus
// unlock returned (RET) and minus unlock called (CALL, the figure compared
// across implementations) in the other; hrtime is CLOCK_MONOTONIC, one
// clock for both children.
async function s4parent(peer, setting, port, [name, handoffs, warm, delayUs, cap, samples]) {
  const total = +handoffs + +warm;
  const rel = new Map();
  const relc = new Map();
  const acq = new Map();
  const deadline = Date.now() + +cap * 1000;
  const args = (role) => [peer, setting, 's4child', String(port), name, String(total), delayUs,
    String(deadline), role];
  const a = fork(__filename, args('A'));
  const b = fork(__filename, args('B'));
  const other = (c) => (c === a ? b : a);
  const t0 = nowNs();
  let failures = 0;
  let stalled = false;
  // A waiter that never wakes (lost wake-up) would hold the run up to its
  // lease: past the cap (+3 s grace) both children are killed and the run is
  // reported as stalled.
  const killer = setTimeout(() => {
    stalled = true;
    a.kill('SIGKILL');
    b.kill('SIGKILL');
  }, Math.max(0, deadline - Date.now()) + 3000);
  const done = Promise.all([a, b].map((c) => new Promise((resolve, reject) => {
    c.on('message', (m) => {
      if (m.rel !== undefined) rel.set(m.h, BigInt(m.rel));
      if (m.relc !== undefined) relc.set(m.h, BigInt(m.relc));
      if (m.acq !== undefined) acq.set(m.h, BigInt(m.acq));
      if (m.go !== undefined) other(c).send({ go: m.go });
      if (m.failures !== undefined) failures += m.failures;
    });
    c.on('close', (code) => (code === 0 || stalled ? resolve() : reject(new Error(`s4 child exit ${code}`))));
  })));
  await done;
  clearTimeout(killer);
  const el = Number(nowNs() - t0) / 1e9;
  const s = [];
  let n = 0;
  for (let h = 0; h < total; h++) {
    if (!acq.has(h)) break;
    n++;
    if (h >= +warm && rel.has(h) && relc.has(h)) {
      s.push(`${(Number(acq.get(h) - rel.get(h)) / 1000).toFixed(3)} ${(Number(acq.get(h) - relc.get(h)) / 1000).toFixed(3)}`);
    }
  }
  fs.writeFileSync(samples, s.length ? s.join('\n') + '\n' : '');
  return { handoffs: n, recorded: s.length, elapsed_s: el, capped: n < total, stalled, failures };
}

async function s4child(p, [name, total, delayUs, deadline, role]) {
  const o = p.owner(name);
  const first = role === 'A';
  const inbox = [];
  let waiter = null;
  process.on('message', (m) => {
    if (waiter) {
      const w = waiter;
      waiter = null;
      w(m.go);
    } else inbox.push(m.go);
  });
  const recv = () => (inbox.length ? Promise.resolve(inbox.shift()) : new Promise((r) => (waiter = r)));
  let h = first ? 0 : 1;
  if (first) await o.lock();
  else {
    if ((await recv()) !== 'G') return null;
    await o.lock();
    process.send({ h: 0, acq: nowNs().toString() });
  }
  for (;;) {
    if (h >= +total || Date.now() > +deadline) {
      process.send({ go: 'S' });
      await o.unlock();
      break;
    }
    process.send({ go: 'G' });
    sleepUs(+delayUs);
    const relc = nowNs();
    await o.unlock();
    process.send({ h, rel: nowNs().toString(), relc: relc.toString() });
    if ((await recv()) !== 'G') break;
    await o.lock();
    process.send({ h: h + 1, acq: nowNs().toString() });
    h += 2;
  }
  await new Promise((r) => process.send({ failures: p.failures }, r));
  return null;
}

// s9: one semaphore worker, as rlock_bench.c's s9: ITERS x (acquire 1 of
// LIMIT permits, INCR INUSE, DECR INUSE, release); "<wait us> <INCR's answer>"
// per iteration. An acquire that gives up (acquireTimeout) is called again
// and counted in failures.
async function s9(setting, port, [name, limit, inuse, iters, samples]) {
  const { Semaphore } = require('redis-semaphore');
  const redis = redisClient(port);
  await redis.ping();
  let failures = 0;
  const sem = new Semaphore(redis, name, +limit, { ...SETTINGS.semaphore[setting] });
  const acquire = async () => {
    for (;;) {
      try {
        await sem.acquire();
        return;
      } catch (e) {
        if (e && /timeout|limit/i.test(String(e.message))) failures++;
        else throw e;
      }
    }
  };
  for (let i = 0; i < 20; i++) { // warm-up, as in rlock_bench.c
    await acquire();
    await sem.release();
  }
  process.stdout.write('ready\n');
  await new Promise((r) => process.stdin.once('data', r));
  process.stdin.pause();
  const lines = [];
  const c0 = process.cpuUsage();
  const start = nowNs();
  for (let i = 0; i < +iters; i++) {
    const a = nowNs();
    await acquire();
    const w = usSince(a);
    const n = await redis.incr(inuse);
    await redis.decr(inuse);
    await sem.release();
    lines.push(`${w.toFixed(3)} ${n}`);
  }
  const end = nowNs();
  const c = process.cpuUsage(c0);
  fs.writeFileSync(samples, lines.join('\n') + '\n');
  await redis.quit();
  return { start_ns: start.toString(), end_ns: end.toString(), iters: +iters, failures,
    cpu_s: (c.user + c.system) / 1e6 };
}

async function serverCounts(redis) {
  const info = await redis.info('commandstats');
  const stats = await redis.info('stats');
  const m = /total_commands_processed:(\d+)/.exec(stats);
  let scripts = 0;
  for (const k of ['cmdstat_evalsha', 'cmdstat_eval']) {
    const mm = new RegExp(`${k}:calls=(\\d+)`).exec(info);
    if (mm) scripts += +mm[1];
  }
  return { commands: m ? +m[1] : 0, scripts };
}

// s5: LOCKS locks held under the peer's automatic renewal, lease LEASE_MS.
async function s5(peer, setting, port, [n, hold, leaseMs]) {
  n = +n;
  let lost = 0;
  let p;
  const holders = [];
  const rssBase = process.memoryUsage().rss;
  if (peer === 'redisson') {
    p = await makePeer(peer, setting, port, { lockWatchdogTimeout: BigInt(leaseMs) });
  } else if (peer === 'semaphore') {
    p = await makePeer(peer, setting, port, {
      lockTimeout: +leaseMs,
      onLockLost: () => { lost++; },
    });
  } else if (peer === 'redlock') {
    p = await makePeer(peer, setting, port);
  }
  const rssClient = process.memoryUsage().rss;
  const keys = [];
  let release = null;
  const released = new Promise((r) => (release = r));
  const a0 = nowNs();
  const BATCH = 500;
  for (let i = 0; i < n; i += BATCH) {
    const batch = [];
    for (let j = i; j < Math.min(n, i + BATCH); j++) {
      const name = `bench:s5:${peer}:${j}`;
      if (peer === 'redlock') {
        keys.push(name);
        // using(): redlock's auto-extension routine; the lock is held until `released`.
        let ok; // per lock: true = held to the end, undefined = lost or never acquired
        batch.push(new Promise((acquired) => {
          holders.push(p.lib.using([name], +leaseMs, async (signal) => {
            acquired();
            await released;
            if (signal.aborted) { lost++; ok = false; } // counted once, even if using() then rejects
            else ok = true;
          }).catch(() => { if (ok === undefined) lost++; acquired(); }));
        }));
      } else {
        keys.push(peer === 'semaphore' ? `mutex:${name}` : name);
        const o = p.owner(name);
        holders.push(o);
        batch.push(o.lock());
      }
    }
    await Promise.all(batch);
  }
  const acquireS = Number(nowNs() - a0) / 1e9;
  global.gc && global.gc();
  const rssHeld = process.memoryUsage().rss;
  const sc0 = await serverCounts(p.redis);
  const c0 = process.cpuUsage();
  const t0 = nowNs();
  await new Promise((r) => setTimeout(r, +hold * 1000));
  const el = Number(nowNs() - t0) / 1e9;
  const c = process.cpuUsage(c0);
  const sc1 = await serverCounts(p.redis);
  const rssEnd = process.memoryUsage().rss;
  let present = 0;
  for (let i = 0; i < keys.length; i += 1000) {
    present += await p.redis.exists(...keys.slice(i, i + 1000));
  }
  if (peer === 'redlock') {
    release();
    await Promise.all(holders);
  } else {
    for (let i = 0; i < holders.length; i += BATCH) {
      await Promise.all(holders.slice(i, i + BATCH).map((o) => o.unlock().catch(() => {})));
    }
  }
  await p.close();
  return {
    locks: n, acquire_s: acquireS, hold_s: el,
    server_commands_per_s: (sc1.commands - sc0.commands - 2) / el,
    server_script_calls_per_s: (sc1.scripts - sc0.scripts) / el,
    client_cpu_pct: (100 * (c.user + c.system)) / 1e6 / el,
    rss_kb_base: Math.round(rssBase / 1024), rss_kb_client: Math.round(rssClient / 1024),
    rss_kb_held: Math.round(rssHeld / 1024), rss_kb_end: Math.round(rssEnd / 1024),
    rss_bytes_per_lock: (rssEnd - rssClient) / n,
    still_held: present, lost, failures: p.failures,
  };
}

async function main() {
  const [peer, setting, scen, portS, ...rest] = process.argv.slice(2);
  const ports = portS.split(',').map(Number);
  if (ports.length > 1 && peer !== 'redlock') throw new Error(`${peer}: one port only`);
  const port = ports.length > 1 ? ports : ports[0];
  let out;
  if (scen === 's4') out = await s4parent(peer, setting, port, rest);
  else if (scen === 's5') out = await s5(peer, setting, port, rest);
  else if (scen === 's9' && peer === 'semaphore') out = await s9(setting, port, rest);
  else {
    const p = await makePeer(peer, setting, port);
    if (scen === 's1') out = await s1(p, rest);
    else if (scen === 's2') out = await s2(p, rest);
    else if (scen === 's3') out = await s3(p, rest);
    else if (scen === 's4child') out = await s4child(p, rest);
    else throw new Error(`unknown scenario ${scen}`);
    await p.close();
  }
  if (out) process.stdout.write(JSON.stringify(out) + '\n');
  process.exit(0);
}

main().catch((e) => {
  process.stderr.write(`peers.js: ${e && e.stack ? e.stack : e}\n`);
  process.exit(2);
});
