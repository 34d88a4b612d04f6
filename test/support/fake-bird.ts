/**
 * A stand-in of BIRD's control socket for unit tests: a Unix socket server speaking the reply
 * format of src/bgp/bird.ts's header (greeting, 4-digit codes, `-` continuation), with the
 * answers BIRD 2.0.12 gives to what ballast sends. It records every command. BIRD itself is
 * driven in test/integration/bgp.test.ts.
 */
import { mkdtempSync } from 'node:fs';
import { createServer, type Server, type Socket } from 'node:net';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { validateConfig, type Config } from '../../src/config/index.js';

/**
 * A mode: bgp config whose bgp.socket and bgp.configFile are in a new temporary directory
 * (`dir`, named after `prefix`; the caller removes it): VIP 10.0.0.100, one peer.
 */
export function fakeBirdConfig(prefix: string): { dir: string; socket: string; configFile: string; config: Config } {
  const dir = mkdtempSync(join(tmpdir(), prefix));
  const socket = join(dir, 'bird.ctl');
  const configFile = join(dir, 'ballast4.conf');
  const config = validateConfig({
    mode: 'bgp',
    vips: ['10.0.0.100'],
    apiserver: { backends: ['10.0.1.2:6443'], health: { insecureSkipVerify: true } },
    bgp: { socket, configFile, localAsn: 64512, peers: [{ address: '10.0.1.1', asn: 64500 }] },
  });
  return { dir, socket, configFile, config };
}

/** The fake's state. */
export interface FakeBird {
  server: Server;
  commands: string[];
  /** the static protocol's state as the fake keeps it */
  vipUp: boolean;
  reboot: string;
  close(): Promise<void>;
}

/**
 * Listens on `path`; `reboot` is what `show status` says in "Last reboot on".
 * `enable|disable ballast_vip4` answer 0011/0009 (0008 "already disabled" when it is), others 8003.
 */
export function startFakeBird(path: string, reboot = '2026-12-01 10:00:00.000'): Promise<FakeBird> {
  const socks = new Set<Socket>();
  const fake: FakeBird = {
    server: createServer((s) => {
      socks.add(s);
      s.on('close', () => socks.delete(s));
      s.write('0001 BIRD 2.0.12 ready.\n');
      let buf = '';
      s.on('data', (d) => {
        buf += d.toString();
        let nl: number;
        while ((nl = buf.indexOf('\n')) >= 0) {
          const cmd = buf.slice(0, nl);
          buf = buf.slice(nl + 1);
          fake.commands.push(cmd);
          s.write(answer(cmd));
        }
      });
    }),
    commands: [],
    vipUp: false,
    reboot,
    close: () =>
      new Promise((r) => {
        for (const s of socks) s.destroy();
        fake.server.close(() => r());
      }),
  };
  const answer = (cmd: string): string => {
    if (cmd === 'configure') return '0002-Reading configuration from bird.conf\n0003 Reconfigured\n';
    if (cmd === 'enable ballast_vip4') {
      fake.vipUp = true;
      return '0011-ballast_vip4: enabled\n0000 \n';
    }
    if (cmd === 'disable ballast_vip4') {
      const was = fake.vipUp;
      fake.vipUp = false;
      return was ? '0009-ballast_vip4: disabled\n0000 \n' : '0008-ballast_vip4: already disabled\n0000 \n';
    }
    if (/^(enable|disable) /.test(cmd)) return '8003 No protocols match\n';
    if (cmd === 'show status') return `1000-BIRD 2.0.12\n1011-Router ID is 10.0.1.2\n Last reboot on ${fake.reboot}\n0013 Daemon is up and running\n`;
    if (cmd === 'show protocols') {
      return `2002-Name       Proto      Table      State  Since         Info\n1002-ballast_vip4 Static     master4    ${fake.vipUp ? 'up' : 'down'}     10:00:00.000  \n ballast_peer4_1 BGP        ---        up     10:00:01.000  Established   \n0000 \n`;
    }
    return '9001 syntax error\n';
  };
  return new Promise((resolve) => fake.server.listen(path, () => resolve(fake)));
}
