/**
 * The one reader of classic libpcap files (pcap-savefile(5); not pcapng) for the lab and the
 * tests: the soak's bridge capture (lab/soak/capture.ts) and the keepalived fixtures and test
 * captures (test/support/pcap.ts).
 *
 * File layout (all fields in the writer's byte order, told by the magic number):
 *   global header, 24 bytes: magic(4) version_major(2) version_minor(2) thiszone(4) sigfigs(4)
 *                            snaplen(4) network(4)
 *   per record, 16 bytes:    ts_sec(4) ts_usec(4; nanoseconds for the 0xa1b23c4d magic)
 *                            incl_len(4) orig_len(4), then incl_len bytes of frame
 */

/** One captured frame. */
export interface PcapRecord {
  /** Seconds since the epoch. */
  tsSec: number;
  /** Microseconds within the second (converted from nanoseconds for nanosecond captures; fractions kept). */
  tsUsec: number;
  /** The captured bytes (incl_len of them), from the Ethernet header on. */
  data: Buffer;
  /** The frame's length on the wire (orig_len); more than data.length when the capture was cut. */
  origLen: number;
}

const MAGIC_USEC = 0xa1b2c3d4;
const MAGIC_NSEC = 0xa1b23c4d;
/** LINKTYPE_ETHERNET. */
export const LINKTYPE_ETHERNET = 1;

/**
 * The records of a classic pcap file, in file order, one at a time (a 30-minute soak capture
 * holds ~14 million), either byte order, µs or ns timestamps, link type 1 (Ethernet) only.
 * `truncated`: what a last record cut short does — `'throw'` (default) or `'stop'` (a capture
 * stopped mid-write).
 * @throws Error (at the first step) when the file is not a pcap file or its link type is not
 *   Ethernet; with `truncated: 'throw'`, when a record is cut short.
 */
export function* pcapRecords(file: Buffer, o: { truncated?: 'throw' | 'stop' } = {}): Generator<PcapRecord> {
  if (file.length < 24) throw new Error(`not a pcap file: ${file.length} bytes`);
  const le = file.readUInt32LE(0);
  const be = file.readUInt32BE(0);
  const little = le === MAGIC_USEC || le === MAGIC_NSEC;
  if (!little && be !== MAGIC_USEC && be !== MAGIC_NSEC) throw new Error(`not a pcap file: magic 0x${le.toString(16)}`);
  const u32 = (at: number): number => (little ? file.readUInt32LE(at) : file.readUInt32BE(at));
  const nanos = (little ? le : be) === MAGIC_NSEC;
  const linkType = u32(20) & 0x0fffffff; // the top bits may carry FCS information
  if (linkType !== LINKTYPE_ETHERNET) throw new Error(`pcap link type ${linkType}, expected 1 (Ethernet)`);
  for (let at = 24; at < file.length;) {
    if (at + 16 > file.length) {
      if (o.truncated === 'stop') return;
      throw new Error(`pcap: truncated record header at offset ${at}`);
    }
    const tsSec = u32(at);
    const frac = u32(at + 4);
    const inclLen = u32(at + 8);
    const origLen = u32(at + 12);
    at += 16;
    if (at + inclLen > file.length) {
      if (o.truncated === 'stop') return;
      throw new Error(`pcap: truncated record at offset ${at}`);
    }
    yield { tsSec, tsUsec: nanos ? frac / 1000 : frac, data: file.subarray(at, at + inclLen), origLen };
    at += inclLen;
  }
}
