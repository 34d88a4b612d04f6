// Environment-teardown scenarios for the addon, run inside a network namespace by
// test/integration/native.test.ts:
//
//   ip netns exec bnat-a node test/support/native-worker.mjs <native.js> <mode> <ifname>
//
// The process must never crash (no signal, no abort); it prints "ok" when the scenario went as
// expected and exits 0, or prints why and exits 1. Every wait is bounded.
//   terminate         3 workers open sockets (IPv4 + IPv6 VRRP, joined; a packet socket), each is
//                     terminated while they are open; then the main thread opens and closes one
//   exit              3 workers open sockets and call process.exit(7) with them open
//   exit-in-callback  a worker calls process.exit(5) from inside onPacket (needs traffic)
//   throw-in-callback a worker's onPacket throws: the worker reports an uncaught error
//   close-in-callback the main thread closes the socket from inside onPacket: no more deliveries
//   main-exit         the main thread calls process.exit(0) with sockets open
//   unref             the main thread opens a socket and unrefs it: the process ends by itself
//   ref               the main thread opens a socket and keeps it: the process stays (killed by the test)
import { Worker, isMainThread, parentPort, workerData } from 'node:worker_threads';
import { setTimeout as sleep } from 'node:timers/promises';
import { pathToFileURL } from 'node:url';

const [nativePath, mode, ifname] = isMainThread ? process.argv.slice(2) : [workerData.nativePath, workerData.mode, workerData.ifname];
const native = await import(pathToFileURL(nativePath).href);
const ignore = () => undefined;

function openAll(onPacket = ignore) {
  const v4 = native.VrrpSocket.open({ family: 4, ifname }, onPacket, ignore);
  v4.joinGroup();
  const v6 = native.VrrpSocket.open({ family: 6, ifname }, onPacket, ignore);
  v6.joinGroup();
  const frames = native.PacketSocket.open(ifname);
  return [v4, v6, frames];
}

function fail(why) {
  process.stdout.write(`FAIL ${why}\n`);
  process.exit(1);
}

const deadline = setTimeout(() => fail(`timeout in mode ${mode}`), 15_000);
deadline.unref();

if (!isMainThread) {
  // ---- worker side --------------------------------------------------------------------------
  if (mode === 'terminate') {
    openAll();
    parentPort.postMessage('ready');
  } else if (mode === 'exit') {
    openAll();
    parentPort.postMessage('ready');
    setTimeout(() => process.exit(7), 50);
  } else if (mode === 'exit-in-callback') {
    openAll(() => process.exit(5));
    parentPort.postMessage('ready');
  } else if (mode === 'throw-in-callback') {
    openAll(() => {
      throw new Error('thrown by onPacket');
    });
    parentPort.postMessage('ready');
  }
} else {
  // ---- main thread --------------------------------------------------------------------------
  const runWorker = (onReady) =>
    new Promise((resolve) => {
      const worker = new Worker(new URL(import.meta.url), { workerData: { nativePath, mode, ifname } });
      let error = null;
      worker.on('message', (m) => m === 'ready' && onReady(worker));
      worker.on('error', (e) => (error = e));
      worker.on('exit', (code) => resolve({ code, error }));
    });

  if (mode === 'terminate') {
    for (let round = 0; round < 3; round++) {
      const { code } = await runWorker((w) => setTimeout(() => void w.terminate(), 100));
      if (code !== 1) fail(`terminated worker exited with ${code}, expected 1`);
    }
    const s = native.VrrpSocket.open({ family: 4, ifname }, ignore, ignore);
    s.joinGroup();
    s.close();
    process.stdout.write('ok\n');
  } else if (mode === 'exit') {
    for (let round = 0; round < 3; round++) {
      const { code } = await runWorker(ignore);
      if (code !== 7) fail(`worker exited with ${code}, expected 7`);
    }
    process.stdout.write('ok\n');
  } else if (mode === 'exit-in-callback') {
    const { code } = await runWorker(ignore);
    if (code !== 5) fail(`worker exited with ${code}, expected 5`);
    await sleep(50);
    process.stdout.write('ok\n');
  } else if (mode === 'throw-in-callback') {
    const { code, error } = await runWorker(ignore);
    if (code !== 1 || error?.message !== 'thrown by onPacket') fail(`worker exited with ${code}, error ${error?.message}`);
    process.stdout.write('ok\n');
  } else if (mode === 'close-in-callback') {
    let calls = 0;
    const s = native.VrrpSocket.open({ family: 4, ifname }, () => {
      calls++;
      s.close();
    }, ignore);
    s.joinGroup();
    while (calls === 0) await sleep(10); // bounded by the deadline above
    await sleep(300);
    if (calls !== 1) fail(`onPacket ran ${calls} times, expected 1`);
    s.close();
    process.stdout.write('ok\n');
  } else if (mode === 'main-exit') {
    openAll();
    await sleep(50);
    process.stdout.write('ok\n');
    process.exit(0);
  } else if (mode === 'unref') {
    const s = native.VrrpSocket.open({ family: 4, ifname }, ignore, ignore);
    s.joinGroup();
    s.unref();
    process.on('exit', () => process.stdout.write('ok\n'));
    process.stdout.write('opened\n');
  } else if (mode === 'ref') {
    const s = native.VrrpSocket.open({ family: 4, ifname }, ignore, ignore);
    s.unref();
    s.ref();
    process.stdout.write('opened\n');
  } else {
    fail(`unknown mode ${mode}`);
  }
}
