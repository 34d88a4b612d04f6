/**
 * Sends forged VRRPv3 adverts from a lab namespace, for the tests that prove unicast peer lists
 * and authentication keep strangers out of the election. Bounded: `--count` adverts (at most
 * 1000), one every `--interval` ms (at least 10). Exits 0 after the last one.
 *
 *   node dist/lab/inject-vrrp.js --ifname eth0 --source 10.78.216.13 --dest 224.0.0.18 \
 *     --vrid 51 --priority 254 --vip 10.78.216.100 [--count 20] [--interval 100] \
 *     [--key-file /path] [--checksum rfc5798|rfc9568] [--max-adver-int CS]
 *
 * `--dest` may be given more than once (unicast to several nodes). With `--key-file` the
 * adverts carry the docs/auth.md trailer signed with that key. `--max-adver-int` (centiseconds,
 * 1..4095) is the Max Adver Int the adverts carry; default the sending interval.
 */
import { readFileSync } from 'node:fs';
import { parseArgs } from 'node:util';
import { VrrpSocket } from '../src/native.js';
import { encodeAdvertisement } from '../src/vrrp/packet.js';
import { AdvertAuth } from '../src/vrrp/auth.js';
import { addressFamily } from '../src/net/address.js';
import { parseAuthKeys } from '../src/config/files.js';

const { values: a } = parseArgs({
  options: {
    ifname: { type: 'string', default: 'eth0' },
    source: { type: 'string' },
    dest: { type: 'string', multiple: true },
    vrid: { type: 'string', default: '51' },
    priority: { type: 'string', default: '254' },
    vip: { type: 'string', multiple: true },
    count: { type: 'string', default: '20' },
    interval: { type: 'string', default: '100' },
    'key-file': { type: 'string' },
    checksum: { type: 'string', default: 'rfc5798' },
    'max-adver-int': { type: 'string' },
  },
});
if (!a.source || !a.dest?.length || !a.vip?.length) {
  process.stderr.write('usage: inject-vrrp --source ADDR --dest ADDR [--dest ADDR] --vip ADDR [options]\n');
  process.exit(2);
}
const family = addressFamily(a.source);
if (family === null) throw new Error(`--source ${a.source} is not an IP address`);
const count = Math.min(1000, Math.max(1, Number(a.count)));
const intervalMs = Math.max(10, Number(a.interval));
const maxAdvertIntervalCs = a['max-adver-int'] === undefined ? Math.round(intervalMs / 10) : Math.min(4095, Math.max(1, Number(a['max-adver-int'])));
let auth: AdvertAuth | null = null;
if (a['key-file']) {
  const key = parseAuthKeys(readFileSync(a['key-file']));
  if (typeof key === 'string') throw new Error(`--key-file ${a['key-file']} ${key}`);
  auth = new AdvertAuth(key, family);
}
const sock = VrrpSocket.open(
  { family, ifname: a.ifname, sourceAddress: a.source },
  () => undefined,
  () => undefined,
);
let sent = 0;
const tick = (): void => {
  for (const destination of a.dest!) {
    const msg = encodeAdvertisement(
      { vrid: Number(a.vrid), priority: Number(a.priority), maxAdvertIntervalCs, addresses: a.vip! },
      { family, checksum: a.checksum === 'rfc9568' ? 'rfc9568' : 'rfc5798', source: a.source!, destination },
    );
    sock.send(auth ? auth.sign(msg, a.source!, destination) : msg, destination);
  }
  if (++sent >= count) {
    clearInterval(timer);
    sock.close();
    process.stdout.write(`${JSON.stringify({ sent })}\n`);
  }
};
const timer = setInterval(tick, intervalMs);
tick();
