import { describe, expect, it } from 'vitest';
import { parseCapture, wireTimes } from '../../bench/failover-run.js';
import {
  ballastMasterEntries,
  falseFailovers,
  holderGaps,
  keepalivedMasterEntries,
  perHour,
  rateRatio,
  summarizeRates,
  takeoverEpisodes,
  vipAddressEvents,
} from '../../bench/stress-count.js';

const advert = (t: number, src: string, prio: number): string =>
  `${t.toFixed(6)} 02:78:70:00:00:11 > 01:00:5e:00:00:12, ethertype IPv4 (0x0800), length 60: ${src} > 224.0.0.18: VRRPv3, Advertisement, vrid 51, prio ${prio}, intvl 1cs, length 12`;

describe('false-failover witnesses', () => {
  it('counts ballast entries into master, not other transitions or other lines', () => {
    const log = [
      JSON.stringify({ level: 30, msg: 'state change', from: 'init', to: 'backup' }),
      JSON.stringify({ level: 30, msg: 'state change', from: 'backup', to: 'master' }),
      JSON.stringify({ level: 30, msg: 'new master', master: '10.0.0.1' }),
      'not json "state change"',
      JSON.stringify({ level: 30, msg: 'state change', from: 'master', to: 'backup' }),
      JSON.stringify({ level: 30, msg: 'state change', from: 'backup', to: 'master' }),
    ].join('\n');
    expect(ballastMasterEntries(log)).toBe(2);
  });

  it('counts keepalived MASTER entries of the named instance only', () => {
    const log = [
      '(VI_51) Entering BACKUP STATE',
      '(VI_51) Entering MASTER STATE',
      '(VI_52) Entering MASTER STATE',
      'Tue ... (VI_51) Entering MASTER STATE',
    ].join('\n');
    expect(keepalivedMasterEntries(log, 'VI_51')).toBe(2);
  });

  it('counts VIP additions and deletions from ip -o monitor address, not other addresses', () => {
    const text = [
      '2: eth0    inet 10.78.112.100/32 scope global eth0\\       valid_lft forever preferred_lft forever',
      'Deleted 2: eth0    inet 10.78.112.100/32 scope global eth0\\       valid_lft forever preferred_lft forever',
      '2: eth0    inet 10.78.112.1000/32 scope global eth0',
      '2: eth0    inet 10.78.112.12/24 brd 10.78.112.255 scope global eth0',
      '2: eth0    inet 10.78.112.100/32 scope global eth0',
    ].join('\n');
    expect(vipAddressEvents(text, '10.78.112.100')).toEqual({ added: 2, deleted: 1 });
  });

  it('splits non-holder adverts into takeover episodes by source and silence; priority 0 and the holder do not count', () => {
    const lines = [
      advert(1000.0, '10.0.0.11', 150),
      advert(1000.05, '10.0.0.12', 100), // episode 1
      advert(1000.06, '10.0.0.12', 100),
      advert(1000.07, '10.0.0.13', 50), // episode 2 (another source)
      advert(1000.5, '10.0.0.12', 0), // a resign: not a takeover
      advert(1001.06, '10.0.0.12', 100), // exactly 1 s after its last: episode 3
      advert(1001.5, '10.0.0.11', 150),
    ].join('\n');
    const pkts = parseCapture(lines);
    expect(pkts).toHaveLength(7);
    expect(takeoverEpisodes(pkts, '10.0.0.11')).toBe(3);
    expect(takeoverEpisodes(parseCapture([advert(1, '10.0.0.11', 150), advert(2, '10.0.0.11', 150)].join('\n')), '10.0.0.11')).toBe(0);
  });

  it("measures the holder's gaps against the interval and Master_Down_Interval", () => {
    // gaps 10, 10, 16, 25, 40 ms (10 ms interval, MDI 36.1 ms)
    const ts = [0, 10, 20, 36, 61, 101];
    const text = [...ts.map((t) => advert(5000 + t / 1000, '10.0.0.11', 150)), advert(5000.2, '10.0.0.12', 100)].join('\n');
    const g = holderGaps(parseCapture(text), '10.0.0.11', 10, 36.1);
    expect(g.adverts).toBe(6);
    expect(g.maxMs).toBeCloseTo(40, 3);
    expect(g.p50Ms).toBeCloseTo(16, 3);
    expect([g.over1_5, g.over2, g.over3, g.overMasterDown]).toEqual([3, 2, 1, 1]);
    expect(holderGaps([], '10.0.0.11', 10, 36.1)).toMatchObject({ adverts: 0, maxMs: null, p99Ms: null, over1_5: 0 });
  });

  it('takes the largest witness count as the false failovers', () => {
    expect(falseFailovers({ log: 1, wire: 2, address: 0 })).toBe(2);
    expect(falseFailovers({ log: 0, wire: 0, address: 0 })).toBe(0);
  });
});

describe('rates', () => {
  it('extrapolates to an hour from the observed minutes', () => {
    expect(perHour(1, 1)).toBe(60);
    expect(perHour(2, 3)).toBe(40);
    expect(perHour(0, 5)).toBe(0);
    expect(perHour(3, 0)).toBeNull();
  });

  it("gives the median of the rounds' rates and the pooled rate", () => {
    const s = summarizeRates([
      { falseFailovers: 0, minutes: 1 },
      { falseFailovers: 2, minutes: 1 },
      { falseFailovers: 1, minutes: 2 },
      { falseFailovers: 0, minutes: 1 },
      { falseFailovers: 0, minutes: 1 },
    ]);
    expect(s).toEqual({ rounds: 5, minutes: 6, falseFailovers: 3, medianPerHour: 0, pooledPerHour: 30 });
    expect(
      summarizeRates([
        { falseFailovers: 1, minutes: 1 },
        { falseFailovers: 3, minutes: 1 },
      ]).medianPerHour,
    ).toBe(120);
    expect(summarizeRates([])).toEqual({ rounds: 0, minutes: 0, falseFailovers: 0, medianPerHour: null, pooledPerHour: null });
  });

  it('forms ratios only where keepalived has a rate', () => {
    expect(rateRatio(6, 12)).toBe(0.5);
    expect(rateRatio(0, 0)).toBe('0/0');
    expect(rateRatio(3, 0)).toBeNull();
    expect(rateRatio(null, 4)).toBeNull();
    expect(rateRatio(0, 4)).toBe(0);
  });
});

describe('the node-death capture (bench/failover-run.ts wireTimes)', () => {
  const mac = (n: number): string => `02:78:70:00:00:1${n}`;
  const adv = (t: number, n: number, prio: number): string =>
    `${t.toFixed(6)} ${mac(n)} > 01:00:5e:00:00:12, ethertype IPv4 (0x0800), length 60: 10.0.0.1${n} > 224.0.0.18: VRRPv3, Advertisement, vrid 51, prio ${prio}, intvl 1cs, length 12`;
  const garp = (t: number, n: number): string =>
    `${t.toFixed(6)} ${mac(n)} > ff:ff:ff:ff:ff:ff, ethertype ARP (0x0806), length 42: Request who-has 10.0.0.100 tell 10.0.0.100, length 28`;
  const synAck = (t: number, n: number): string =>
    `${t.toFixed(6)} ${mac(n)} > 02:78:70:00:00:fe, ethertype IPv4 (0x0800), length 74: 10.0.0.100.6443 > 10.0.0.254.45678: Flags [S.], seq 1, ack 2, win 65160, options [mss 1460], length 0`;
  const node = (n: number) => ({ ipv4: `10.0.0.1${n}`, mac: mac(n) }) as unknown as Parameters<typeof wireTimes>[1];

  it('gives the server side of the outage (first SYN-ACK from the new holder) and counts a third node that raced it', () => {
    const text = [
      adv(1000.0, 1, 150),
      synAck(1000.005, 1),
      adv(1000.0383, 3, 50), // n3 fired first
      garp(1000.039, 3),
      adv(1000.0385, 2, 100),
      garp(1000.0395, 2),
      synAck(1000.08, 2),
    ].join('\n');
    const w = wireTimes(parseCapture(text), node(1), node(2), '10.0.0.100', '10.0.0.254', 1000_004);
    expect(w.silenceMs).toBe(38.5);
    expect(w.synAckLagMs).toBe(41.5);
    expect(w.rivalAdverts).toBe(1);
    expect(w.rivalGarps).toBe(1);
    expect(w.garpBurst).toBe(1);
  });
});
