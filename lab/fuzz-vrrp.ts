/**
 * Sends malformed VRRP packets (IP protocol 112) to 224.0.0.18 on an interface, for the
 * robustness test: random bytes, truncated, padded and corrupted adverts, other versions, a
 * VRRPv2 advert, zero address count, zero interval. Bounded: at most `count` packets (<= 5000),
 * one per millisecond. Run inside a lab namespace:
 *   node dist/lab/fuzz-vrrp.js <ifname> <count>
 * Every mutation starts from a valid advert of priority 1 for VRID 51, so even an accidentally
 * valid packet cannot win an election.
 */
import { VrrpSocket } from '../src/native.js';
import { encodeAdvertisement, VRRP_MULTICAST_V4 } from '../src/vrrp/packet.js';
import { sleep } from './wait.js';

const [ifname = 'eth0', countArg = '600'] = process.argv.slice(2);
const count = Math.min(5000, Math.max(1, Number(countArg) || 600));

/** xorshift32: reproducible randomness. */
let seed = 0x9e3779b9;
function rand(n: number): number {
  seed ^= seed << 13;
  seed ^= seed >>> 17;
  seed ^= seed << 5;
  return (seed >>> 0) % n;
}

const valid = encodeAdvertisement(
  { vrid: 51, priority: 1, maxAdvertIntervalCs: 10, addresses: ['10.0.0.1'] },
  { family: 4, checksum: 'rfc9568', source: '0.0.0.0', destination: VRRP_MULTICAST_V4 },
);

/** The mutations, in turn. */
const kinds: ((i: number) => Buffer)[] = [
  () => Buffer.from(Array.from({ length: 1 + rand(80) }, () => rand(256))), // random
  () => valid.subarray(0, rand(valid.length)), // truncated
  () => Buffer.concat([valid, Buffer.alloc(1 + rand(8))]), // trailing bytes
  () => {
    const b = Buffer.from(valid);
    b[6] = b[6]! ^ (1 + rand(255));
    return b;
  }, // corrupted checksum
  () => {
    const b = Buffer.from(valid);
    b[0] = (((4 + rand(12)) << 4) | 1) & 0xff;
    return b;
  }, // other versions
  () => {
    const b = Buffer.from(valid);
    b[0] = 0x21;
    return b;
  }, // VRRPv2 header
];

const sock = VrrpSocket.open(
  { family: 4, ifname },
  () => undefined,
  () => undefined,
);
let sent = 0;
for (let i = 0; i < count; i++) {
  const pkt = kinds[i % kinds.length]!(i);
  if (pkt.length === 0) continue;
  try {
    sock.send(pkt, VRRP_MULTICAST_V4);
    sent++;
  } catch {
    // a send refused locally is not what this tests
  }
  await sleep(1);
}
sock.close();
process.stdout.write(`${sent}\n`);
