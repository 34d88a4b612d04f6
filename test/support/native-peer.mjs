// A child process that drives src/native.ts inside a network namespace, for
// test/integration/native.test.ts (the test process itself cannot enter a namespace):
//
//   ip netns exec bnat-a node test/support/native-peer.mjs <native.js>
//
// <native.js> is src/native.ts transpiled by the test (see native-peer.ts), so children run the
// same wrapper code as the agent. Protocol: one JSON object per line.
//   stdin:  { id, op, ...args }
//   stdout: { id, ok: true, result } | { id, ok: false, error }      (replies)
//           { event: 'packet', handle, payload: hex, source, destination, ttl, ifindex }
//           { event: 'error', handle, error }
// Buffers travel as hex. The process exits when stdin ends or on { op: 'exit' }.
import { createInterface } from 'node:readline';
import { pathToFileURL } from 'node:url';

const native = await import(pathToFileURL(process.argv[2]).href);
const handles = new Map();
let next = 1;

const write = (message) => process.stdout.write(`${JSON.stringify(message)}\n`);

function serializeError(e) {
  return {
    name: e?.name,
    message: e?.message,
    code: e?.code,
    errno: e?.errno,
    syscall: e?.syscall,
    isTypeError: e instanceof TypeError,
    isNativeError: native.isNativeError(e),
  };
}

function socket(handle) {
  const s = handles.get(handle);
  if (s === undefined) throw new Error(`no handle ${handle}`);
  return s;
}

const ops = {
  openVrrp({ family, ifname, sourceAddress }) {
    const handle = next++;
    const s = native.VrrpSocket.open(
      { family, ifname, ...(sourceAddress === undefined ? {} : { sourceAddress }) },
      (p) => write({ event: 'packet', handle, payload: p.payload.toString('hex'), source: p.source, destination: p.destination, ttl: p.ttl, ifindex: p.ifindex }),
      (e) => write({ event: 'error', handle, error: serializeError(e) }),
    );
    handles.set(handle, s);
    return { handle, ifindex: s.ifindex };
  },
  openPacket({ ifname }) {
    const handle = next++;
    const s = native.PacketSocket.open(ifname);
    handles.set(handle, s);
    return { handle, ifindex: s.ifindex, hardwareAddress: s.hardwareAddress.toString('hex') };
  },
  join: ({ handle }) => socket(handle).joinGroup(),
  leave: ({ handle }) => socket(handle).leaveGroup(),
  send: ({ handle, payload, destination }) => socket(handle).send(Buffer.from(payload, 'hex'), destination),
  sendFrame: ({ handle, frame }) => socket(handle).send(Buffer.from(frame, 'hex')),
  stats: ({ handle }) => socket(handle).stats(),
  close: ({ handle }) => socket(handle).close(),
  exit: () => setImmediate(() => process.exit(0)),
};

const lines = createInterface({ input: process.stdin });
lines.on('line', (line) => {
  let request;
  try {
    request = JSON.parse(line);
  } catch {
    return;
  }
  const { id, op, ...args } = request;
  try {
    const fn = ops[op];
    if (fn === undefined) throw new Error(`unknown op ${op}`);
    const result = fn(args);
    write({ id, ok: true, result: result ?? null });
  } catch (e) {
    write({ id, ok: false, error: serializeError(e) });
  }
});
lines.on('close', () => {
  for (const s of handles.values()) s.close();
  process.exit(0);
});
write({ event: 'ready', pid: process.pid });
