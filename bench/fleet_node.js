// bench/fleet_node.js: the node-redlock anchor of redlock-bench's section 12 (fleet).
// N processes, each with its own ioredis client and Redlock (node-redlock 5.0.0-beta.2 with its
// default settings: retryCount 10, retryDelay 200 ms, retryJitter 100 ms), loop acquire / hold /
// release on one key for WARM_UP + SECONDS. Once every process is connected, this one prints
//   start <epoch ms>
// (the window opens then, in every process, WARM_UP seconds after the loops start), and each
// process prints, when the window is over,
//   acq <acquisitions inside the window> <longest wait in ms>
// A wait runs from a release (or the start) to the next acquire, across the acquire calls whose
// retries ran out, up to the end of the window; only waits that end inside the window count.
// Usage: NODE_PATH=bench/node/node_modules node fleet_node.js PORT KEY N SECONDS HOLD_MS WARM_UP
'use strict';
const { fork } = require('child_process');

const [port, key, n, seconds, holdMs, warmUp] = process.argv.slice(2);
const sleep = (ms) => new Promise((resolve) => setTimeout(resolve, Math.max(0, ms)));
const nowMs = () => Number(process.hrtime.bigint()) / 1e6;

async function loop(redlock, startMs) {
  await sleep(startMs - Number(warmUp) * 1000 - Date.now());
  const end = startMs + Number(seconds) * 1000;
  const endHr = nowMs() + (end - Date.now());
  let acquisitions = 0;
  let maxWait = 0;
  let waitStart = nowMs();
  while (Date.now() < end) {
    let lock;
    try {
      lock = await redlock.acquire([key], 10000);
    } catch (e) {
      continue;  // the retries ran out (ExecutionError): try again until the window ends
    }
    if (Date.now() >= startMs) {
      maxWait = Math.max(maxWait, Math.min(nowMs(), endHr) - waitStart);  // cut at the end
      if (Date.now() < end) acquisitions++;
    }
    await sleep(Number(holdMs));
    await lock.release().catch(() => {});
    waitStart = nowMs();
  }
  maxWait = Math.max(maxWait, Math.min(nowMs(), endHr) - waitStart);
  return `acq ${acquisitions} ${maxWait.toFixed(3)}\n`;
}

function worker() {
  const Redis = require('ioredis');
  const Redlock = require('redlock').default;
  const client = new Redis({ host: '127.0.0.1', port: Number(port) });
  const redlock = new Redlock([client]);
  client.once('ready', () => process.send('ready'));
  process.once('disconnect', () => process.exit(1));  // never outlive the harness
  process.once('message', (startMs) => {
    loop(redlock, Number(startMs))
      .then((line) => process.stdout.write(line, () => {
        client.disconnect();
        process.exit(0);
      }))
      .catch((e) => {
        process.stderr.write(`fleet_node worker: ${e}\n`);
        process.exit(1);
      });
  });
}

function main() {
  const children = [];
  let ready = 0;
  let left = Number(n);
  for (let i = 0; i < Number(n); i++) {
    const child = fork(__filename, process.argv.slice(2), {
      env: { ...process.env, FLEET_WORKER: '1' },
    });
    children.push(child);
    child.once('message', () => {
      if (++ready < children.length) return;  // every child was forked before any message
      const startMs = Date.now() + 200 + Number(warmUp) * 1000;
      process.stdout.write(`start ${startMs}\n`);
      for (const c of children) c.send(startMs);
    });
    child.on('exit', () => {
      if (--left === 0) process.exit(0);
    });
  }
}

if (process.env.FLEET_WORKER) worker(); else main();
