/**
 * The Linux capabilities the agent needs (owner: helper `pkg`, who measures the minimal list;
 * the systemd unit, the image and the Kubernetes manifests all take it from here).
 *
 * TODO(pkg): a placeholder until the measured list lands: NET_ADMIN (VIPs, nftables, netlink),
 * NET_RAW (the VRRP raw socket, gratuitous ARP), BPF and SYS_ADMIN (the eBPF local endpoint:
 * loading, pinning, cgroup attach).
 */
export const AGENT_CAPABILITIES: readonly string[] = Object.freeze(['CAP_NET_ADMIN', 'CAP_NET_RAW', 'CAP_BPF', 'CAP_SYS_ADMIN']);
