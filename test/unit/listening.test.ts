import { describe, expect, it } from 'vitest';
import { listeningOn, parseProcNetTcp } from '../../src/net/listening.js';

// lines as /proc/net/tcp{,6} print them (little-endian words on x86-64)
const TCP = `  sl  local_address rem_address   st tx_queue rx_queue tr tm->when retrnsmt   uid  timeout inode
   0: 0100007F:1D13 00000000:0000 0A 00000000:00000000 00:00000000 00000000     0        0 1001 1 0000000000000000 100 0 0 10 0
   1: 00000000:1A0B 00000000:0000 0A 00000000:00000000 00:00000000 00000000     0        0 1002 1 0000000000000000 100 0 0 10 0
   2: 0B094E0A:D2F0 0C094E0A:1A0B 01 00000000:00000000 00:00000000 00000000     0        0 1003 1 0000000000000000 20 4 30 10 -1
   3: garbage
`;
const TCP6 = `  sl  local_address                         remote_address                        st tx_queue rx_queue tr tm->when retrnsmt   uid  timeout inode
   0: 00000000000000000000000001000000:1D13 00000000000000000000000000000000:0000 0A 00000000:00000000 00:00000000 00000000     0        0 2001 1 0000000000000000 100 0 0 10 0
   1: 00000000000000000000000000000000:2329 00000000000000000000000000000000:0000 0A 00000000:00000000 00:00000000 00000000     0        0 2002 1 0000000000000000 100 0 0 10 0
   2: 000078FD000000000000000012000000:1A0B 00000000000000000000000000000000:0000 0A 00000000:00000000 00:00000000 00000000     0        0 2003 1 0000000000000000 100 0 0 10 0
`;

describe('parseProcNetTcp', () => {
  it('lists the listeners (st 0A) with decoded addresses and inodes, skipping connections and garbage', () => {
    expect(parseProcNetTcp(TCP)).toStrictEqual([
      { address: '127.0.0.1', port: 7443, inode: 1001 },
      { address: '0.0.0.0', port: 6667, inode: 1002 },
    ]);
    expect(parseProcNetTcp(TCP6)).toStrictEqual([
      { address: '::1', port: 7443, inode: 2001 },
      { address: '::', port: 9001, inode: 2002 },
      { address: 'fd78::12', port: 6667, inode: 2003 },
    ]);
    expect(parseProcNetTcp('')).toStrictEqual([]);
  });
});

describe('listeningOn', () => {
  const l = [...parseProcNetTcp(TCP), ...parseProcNetTcp(TCP6)];
  it('the exact address, the family wildcard, or [::] (which takes IPv4 too unless V6ONLY)', () => {
    expect(listeningOn('127.0.0.1', 7443, l)).toBe(true);
    expect(listeningOn('::1', 7443, l)).toBe(true);
    expect(listeningOn('127.0.0.2', 7443, l)).toBe(false);
    expect(listeningOn('127.0.0.2', 6667, l)).toBe(true); // 0.0.0.0:6667
    expect(listeningOn('::1', 6667, l)).toBe(false); // 0.0.0.0 is IPv4 only; fd78::12 is another address
    expect(listeningOn('127.0.0.1', 9001, l)).toBe(true); // [::]:9001
    expect(listeningOn('127.0.0.1', 7444, l)).toBe(false);
  });
});
