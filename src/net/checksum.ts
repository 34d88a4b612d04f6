/**
 * The Internet checksum (RFC 1071), shared by the VRRP codec (vrrp/packet.ts) and the frames that
 * carry ICMPv6 (vip/frames.ts, check/probe.ts).
 */
/**
 * The RFC 1071 Internet checksum of the concatenation of `parts`: the 16-bit one's complement of
 * the one's complement sum of its big-endian 16-bit words (an odd total length is padded with one
 * zero byte at the end).
 *
 * Computing it over data whose checksum field is already filled in gives 0 when that field is right.
 * @param parts byte strings, summed as if concatenated (odd-length parts are handled).
 * @returns the checksum, 0..0xffff, to be written big-endian.
 */
export function internetChecksum(...parts: Uint8Array[]): number {
  let sum = 0;
  let high = true; // whether the next byte is the high half of a word, across part boundaries
  for (const part of parts) {
    for (let i = 0; i < part.length; i++) {
      sum += high ? part[i]! * 256 : part[i]!;
      high = !high;
    }
    // fold now and then so the number stays exact however long the input
    if (sum > 0xffffffff) sum = (sum % 0x10000) + Math.floor(sum / 0x10000);
  }
  while (sum > 0xffff) sum = (sum % 0x10000) + Math.floor(sum / 0x10000);
  return ~sum & 0xffff;
}
