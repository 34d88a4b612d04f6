import { describe, expect, it } from 'vitest';
import { formatHostPort, parseHostPort, sameHostPort, tryParseHostPort } from '../../src/net/hostport.js';

describe('net/hostport: the one host:port parser', () => {
  it('parses IPv4 and bracketed IPv6 into a canonical, frozen value', () => {
    expect(parseHostPort('10.0.0.11:6443')).toStrictEqual({ host: '10.0.0.11', port: 6443, family: 4 });
    const v6 = parseHostPort('[FD00:0:0::11]:443');
    expect(v6).toStrictEqual({ host: 'fd00::11', port: 443, family: 6 });
    expect(Object.isFrozen(v6)).toBe(true);
  });
  it('says what is wrong instead of throwing (tryParseHostPort)', () => {
    expect(tryParseHostPort('fd00::11:443')).toBe('is not host:port with an IP address (IPv6 as [addr]:port)');
    expect(tryParseHostPort('[10.0.0.1]:443')).toBe('is not host:port with an IP address (IPv6 as [addr]:port)');
    expect(tryParseHostPort('[fe80::1%eth0]:443')).toBe('is not host:port with an IP address (IPv6 as [addr]:port)');
    expect(tryParseHostPort('host.example:443')).toBe('is not host:port with an IP address (IPv6 as [addr]:port)');
    expect(tryParseHostPort('10.0.0.1:0')).toBe('has port 0, outside 1..65535');
    expect(tryParseHostPort('10.0.0.1:65536')).toBe('has port 65536, outside 1..65535');
  });
  it('throws a TypeError naming the text (parseHostPort)', () => {
    expect(() => parseHostPort('10.0.0.1')).toThrow(new TypeError('"10.0.0.1" is not host:port with an IP address (IPv6 as [addr]:port)'));
  });
  it('formats back to the same text, and compares canonically', () => {
    for (const t of ['10.0.0.11:6443', '[fd00::11]:6443']) expect(formatHostPort(parseHostPort(t))).toBe(t);
    expect(sameHostPort({ host: 'FD00::0011', port: 1 }, { host: 'fd00::11', port: 1 })).toBe(true);
    expect(sameHostPort({ host: '10.0.0.1', port: 1 }, { host: '10.0.0.1', port: 2 })).toBe(false);
  });
});
