// node_redlock.js -- the real node-redlock (npm `redlock`, pinned in
// bench/peers/package.json) on the given redis-servers, driven line by line
// from a test (tests/test_redlock_node.c): the other side of RedLock's
// interop in the simple format.
//
// Usage: NODE_PATH=bench/peers/node_modules node node_redlock.js NAME PORT...
// Commands on stdin, one answer line each on stdout:
//   acquire DURATION_MS RETRIES  redlock.acquire([NAME], DURATION_MS) with
//                                retryCount RETRIES (retryDelay 100 ms)
//                                -> "ok" | "busy"
//   release                      -> "released" | "error <message>"
//   value                        -> the value this lock stored
//   quit
'use strict';
const readline = require('readline');
const Redis = require('ioredis');
const Redlock = require('redlock').default;

const [name, ...ports] = process.argv.slice(2);
const clients = ports.map((p) => new Redis({ host: '127.0.0.1', port: Number(p), maxRetriesPerRequest: 1 }));
let lock = null;

async function run(words) {
  switch (words[0]) {
    case 'acquire': {
      const rl = new Redlock(clients, { retryCount: Number(words[2]), retryDelay: 100, retryJitter: 50 });
      rl.on('error', () => {});
      try {
        lock = await rl.acquire([name], Number(words[1]));
        return 'ok';
      } catch (e) {
        return 'busy';
      }
    }
    case 'release':
      try {
        await lock.release();
        return 'released';
      } catch (e) {
        return 'error ' + String(e && e.message).replace(/\n/g, ' ');
      }
    case 'value':
      return lock ? lock.value : '';
    default:
      return 'unknown command';
  }
}

const rd = readline.createInterface({ input: process.stdin });
let chain = Promise.resolve();
rd.on('line', (line) => {
  const words = line.trim().split(/\s+/);
  if (words[0] === 'quit') {
    chain = chain.then(async () => {
      await Promise.all(clients.map((c) => c.quit()));
      process.exit(0);
    });
    return;
  }
  chain = chain.then(async () => process.stdout.write((await run(words)) + '\n'));
});
Promise.all(clients.map((c) => new Promise((ok) => c.once('ready', ok)))).then(() => process.stdout.write('ready\n'));
