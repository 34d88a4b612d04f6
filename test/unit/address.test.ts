import { describe, expect, it } from 'vitest';
import { addressFamily, addressToBytes, bytesToAddress, canonicalAddress, compareAddresses } from '../../src/net/address.js';

describe('address bytes', () => {
  it.each([
    ['10.77.0.100', '0a4d0064'],
    ['0.0.0.0', '00000000'],
    ['255.255.255.255', 'ffffffff'],
    ['fd77::100', 'fd770000000000000000000000000100'],
    ['fe80::77:ff:fe00:11', 'fe80000000000000007700fffe000011'],
    ['::', '00000000000000000000000000000000'],
    ['::1', '00000000000000000000000000000001'],
    ['ff02::12', 'ff020000000000000000000000000012'],
    ['1:2:3:4:5:6:7:8', '00010002000300040005000600070008'],
    ['::ffff:10.0.0.1', '00000000000000000000ffff0a000001'],
    ['FD77:0:0:0:0:0:0:100', 'fd770000000000000000000000000100'],
  ])('%s', (text, hex) => {
    expect(addressToBytes(text).toString('hex')).toBe(hex);
  });
  it.each(['', '10.0.0', 'x', '1::2::3', 'fe80::1%eth0', '256.0.0.1'])('rejects %j', (bad) => {
    expect(() => addressToBytes(bad)).toThrow(TypeError);
  });
  it('RFC 5952 canonical text', () => {
    expect(bytesToAddress(Buffer.from('fd770000000000000000000000000100', 'hex'))).toBe('fd77::100');
    expect(bytesToAddress(Buffer.from('00010000000100000000000000000001', 'hex'))).toBe('1:0:1::1');
    expect(bytesToAddress(Buffer.from('00010000000000010000000000010001', 'hex'))).toBe('1::1:0:0:1:1');
    expect(bytesToAddress(Buffer.from('00010002000300040005000600070008', 'hex'))).toBe('1:2:3:4:5:6:7:8');
    expect(bytesToAddress(Buffer.from('00010002000300040005000600070000', 'hex'))).toBe('1:2:3:4:5:6:7:0');
    expect(canonicalAddress('FD77:0000::0100')).toBe('fd77::100');
    expect(() => bytesToAddress(Buffer.alloc(5))).toThrow(RangeError);
  });
  it('families', () => {
    expect(addressFamily('10.0.0.1')).toBe(4);
    expect(addressFamily('fd00::1')).toBe(6);
    expect(addressFamily('fe80::1%eth0')).toBeNull();
    expect(addressFamily('nope')).toBeNull();
  });
  it('compares as unsigned integers in network order', () => {
    expect(compareAddresses('10.0.0.9', '10.0.0.10')).toBeLessThan(0);
    expect(compareAddresses('10.0.0.200', '10.0.0.13')).toBeGreaterThan(0);
    expect(compareAddresses('fe80::13', 'fe80::12')).toBeGreaterThan(0);
    expect(compareAddresses('10.0.0.1', '10.0.0.1')).toBe(0);
    expect(() => compareAddresses('10.0.0.1', '::1')).toThrow(RangeError);
  });
});
