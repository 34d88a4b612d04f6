// TCP probes that make a client reveal its sequence numbers: a bare ACK from VIP:port to the
// client's address:port whose sequence number lies outside the client's receive window. The
// client answers it with an ACK carrying its SND.NXT and RCV.NXT (RFC 9293 §3.10.7.4), which the
// node, holding no conntrack entry for the flow any more, answers with a RST the client accepts.
#pragma once

#include <napi.h>

#include <cstddef>
#include <cstdint>

namespace ballast {

// Bytes of one probe: an IPv4 header (20) or IPv6 header (40), then a TCP header (20), no options.
constexpr size_t kTcpProbeMax = 60;

// Writes one probe into `out` (at least kTcpProbeMax bytes): the IP header (IPv4: DF, TTL 64, id 0
// and header checksum 0, which the kernel fills for IP_HDRINCL; IPv6: hop limit 64), then the TCP
// header with flags ACK, window 1024 and the checksum over the pseudo-header (RFC 9293 §3.1,
// RFC 8200 §8.1). Addresses are 4 or 16 bytes in network order, ports, seq and ack in host order.
// Returns the packet's length: 40 (IPv4) or 60 (IPv6).
size_t BuildTcpProbe(uint8_t* out, int family, const uint8_t* source, uint16_t sourcePort, const uint8_t* destination,
                     uint16_t destinationPort, uint32_t seq, uint32_t ack);

// tcpProbePacket({ family, source, sourcePort, destination, destinationPort, seq, ack }) -> Buffer
Napi::Value TcpProbePacket(const Napi::CallbackInfo& info);

// sendTcpProbes({ family, source, sourcePort, mark, packetsPerSecond, clients: [{ address, port }] })
//   -> Promise<{ sent, failed, error? }>: two probes per client, sent from a worker thread
Napi::Value SendTcpProbes(const Napi::CallbackInfo& info);

}  // namespace ballast
