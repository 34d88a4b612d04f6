/**
 * The Linux capabilities `ballast run` needs, one list for every way it is installed: the
 * systemd unit's CapabilityBoundingSet (systemd.ts), the Kubernetes manifests'
 * `securityContext.capabilities.add` and the OCI image.
 *
 * Measured, not guessed (test/integration/package.test.ts runs the installed agent with exactly
 * this bounding set and no other capability): an agent running as root in a lab node with an
 * election, `dataplane.vip: nftables`, health checks and `dataplane.local: ebpf`, started under
 * `setpriv --bounding-set` with one capability left out at a time, on Linux 6.18:
 *   - without CAP_NET_RAW it exits 4 (BALLAST_E_PERMISSION): the raw VRRP socket (IPPROTO 112)
 *     and the packet socket that sends gratuitous ARP / unsolicited NA need it;
 *   - without CAP_NET_ADMIN it exits 4: adding and removing the VIP over rtnetlink, `nft -f`,
 *     `conntrack` (flushing a dead backend's entries, the ctnetlink event subscription) and
 *     attaching BPF programs to a cgroup (a CGROUP_SOCK_ADDR program) need it;
 *   - without CAP_BPF the local endpoint falls back to the proxy: loading the programs and
 *     creating their maps needs it (Linux ≥ 5.8; older kernels wanted CAP_SYS_ADMIN instead);
 *   - CAP_SYS_ADMIN, CAP_PERFMON, CAP_SYS_RESOURCE and CAP_DAC_OVERRIDE are not needed: the pins
 *     on bpffs, /run/ballast (lock files), /var/lib/ballast and /etc/kubernetes are root's own
 *     files, and the kernel charges BPF memory to the cgroup, not RLIMIT_MEMLOCK.
 * The programs the agent runs (`nft`, `conntrack`) inherit the same set.
 */

/** The capabilities of `ballast run`, in capabilities(7) spelling (`CAP_…`), sorted. */
export const AGENT_CAPABILITIES: readonly string[] = Object.freeze(['CAP_BPF', 'CAP_NET_ADMIN', 'CAP_NET_RAW']);

/**
 * Without the eBPF local endpoint (`dataplane.local: proxy` or `off`) CAP_BPF is not used: an
 * agent without it runs the proxy instead of the eBPF programs.
 */
export const AGENT_CAPABILITIES_EBPF_FREE: readonly string[] = Object.freeze(['CAP_NET_ADMIN', 'CAP_NET_RAW']);

/**
 * What `vrrp.realtimePriority` > 0 needs beyond AGENT_CAPABILITIES: CAP_SYS_NICE, to give the
 * advert pacer thread SCHED_FIFO (sched_setscheduler(2) refuses EPERM without it, and the agent
 * then only warns and paces at normal priority). Measured under the packaged unit on a booted
 * Debian 12 (test/integration/systemd-nodes.test.ts): with it and RestrictRealtime=no the
 * `vrrp-pacer` thread runs SCHED_FIFO at the configured priority.
 */
export const REALTIME_CAPABILITIES: readonly string[] = Object.freeze(['CAP_SYS_NICE']);

/**
 * The systemd unit's CapabilityBoundingSet (sorted): AGENT_CAPABILITIES plus
 * REALTIME_CAPABILITIES, because a unit file cannot follow the configuration file and the README
 * recommends `vrrp.realtimePriority` for loaded nodes. The agent only uses CAP_SYS_NICE when
 * that setting is > 0 (docs/install.md says how to take it away with a drop-in).
 */
export const UNIT_CAPABILITIES: readonly string[] = Object.freeze([...new Set([...AGENT_CAPABILITIES, ...REALTIME_CAPABILITIES])].sort());
