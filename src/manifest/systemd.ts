/**
 * The systemd unit of `ballast run` (systemd.service(5), systemd.exec(5)): what the Debian package
 * installs as /lib/systemd/system/ballast.service (scripts/package.sh renders it from the compiled
 * module) and what `ballast manifest systemd` prints. Every option carries a one-line comment
 * with its reason; docs/install.md explains them at length.
 */
import { UNIT_CAPABILITIES } from './capabilities.js';

/** What varies between units: where the configuration and the `ballast` command are. */
export interface SystemdUnitOptions {
  /** the configuration file `ballast run` reads (default /etc/ballast/ballast.yaml) */
  configPath: string;
  /** the `ballast` command (default /usr/bin/ballast, the package's wrapper) */
  binPath?: string;
}

/** The default configuration path of the package. */
export const DEFAULT_CONFIG_PATH = '/etc/ballast/ballast.yaml';
/** The default `ballast` command of the package. */
export const DEFAULT_BIN_PATH = '/usr/bin/ballast';

/**
 * WatchdogSec, seconds. The agent sends WATCHDOG=1 every half of it while its election runs
 * on time (vrrp/host.ts alive); a main thread stuck this long (not a GC pause, not a 5 s `nft` timeout) is a hung
 * agent that systemd should kill and restart. Failover does not wait for it: the other nodes
 * take the VIP over after Master_Down_Interval (about 3 × the advertisement interval).
 */
export const WATCHDOG_SEC = 10;

/**
 * A path as one argument of an Exec line: `%` doubled (systemd.unit(5) specifiers: `%%` is a
 * literal percent sign), quoted when it holds characters systemd would split on.
 */
function execArg(path: string): string {
  const s = path.replace(/%/g, '%%');
  if (/^[A-Za-z0-9_./:@+%-]+$/.test(s)) return s;
  return `"${s.replace(/\\/g, '\\\\').replace(/"/g, '\\"')}"`;
}

/** True when `path` can be written into a unit: absolute, no newline (a `%` is escaped). */
export function unitPathOk(path: string): boolean {
  return path.startsWith('/') && !/[\r\n]/.test(path);
}

/**
 * The unit file text (ends with a newline). A `%` in a path is written `%%` on the Exec lines.
 * @param opts.configPath must be an absolute path; opts.binPath too when given.
 * @throws TypeError when a path is not absolute or holds a newline (a unit line cannot carry it).
 */
export function systemdUnit(opts: SystemdUnitOptions): string {
  const config = opts.configPath === '' ? DEFAULT_CONFIG_PATH : opts.configPath;
  const bin = opts.binPath ?? DEFAULT_BIN_PATH;
  for (const [name, p] of [
    ['configPath', config],
    ['binPath', bin],
  ] as const) {
    if (!unitPathOk(p)) throw new TypeError(`systemdUnit: ${name} must be an absolute path without newlines: ${JSON.stringify(p)}`);
  }
  const b = execArg(bin);
  const c = execArg(config);
  const caps = UNIT_CAPABILITIES.join(' ');
  return `# ballast: one stable, highly available Kubernetes API endpoint (VRRPv3 VIP + in-kernel balancing).
# Installed by the ballast package; edit ${config}, then: systemctl enable --now ballast
# Local changes: systemctl edit ballast (a drop-in survives upgrades). See docs/install.md.

[Unit]
Description=ballast: Kubernetes API VIP and node-local API endpoint
# the VIP's interface must have its address before VRRP starts sending from it
Wants=network-online.target
After=network-online.target
# kubelet (and the static-pod apiserver it starts) should find the VIP and the local endpoint up
Before=kubelet.service

[Service]
# READY=1 once the election has its first state; RELOADING=1 / READY=1 around a reload; STOPPING=1
Type=notify
# only ballast run itself may notify, not the nft / conntrack it runs
NotifyAccess=main
# WATCHDOG=1 every ${WATCHDOG_SEC / 2} s while the election runs on time; a hung agent is killed and restarted
WatchdogSec=${WATCHDOG_SEC}s
# no ExecStartPre validate: ballast run checks the file first and exits 2 before it changes anything
ExecStart=${b} run --config ${c}
# synchronous: exits 0 once applied, 2 when the new file is refused (the agent keeps running as before)
ExecReload=${b} reload --config ${c}
# runtime failures (exit 1, a crash, the watchdog) are restarted
Restart=on-failure
RestartSec=1s
# 2 = configuration error, 4 = installation lacks something: a restart loop cannot fix either
RestartPreventExitStatus=2 4
# a stop job releases the VIP at once (a priority-0 advert) and removes what keepOnStop says; a
# restart job (systemctl restart, an upgrade) is a restart in place: the VIP stays (docs/operations.md)
KillSignal=SIGTERM
# SIGTERM to ballast only: its own nft / conntrack children finish the clean-up it started
KillMode=mixed
# a clean stop takes well under a second; nft and conntrack time out after 5 s each
TimeoutStopSec=15s

# runs as root (it reads root's /etc/kubernetes files) with only these capabilities, measured
# (src/manifest/capabilities.ts): raw VRRP and ARP sockets (CAP_NET_RAW); addresses, nftables,
# conntrack, cgroup attach (CAP_NET_ADMIN); BPF programs and maps (CAP_BPF); SCHED_FIFO for the
# advert pacer thread, used only with vrrp.realtimePriority > 0 (CAP_SYS_NICE). For a root service the
# bounding set is the limit (AmbientCapabilities= only matters with User=), nft and conntrack inherit it
CapabilityBoundingSet=${caps}
# no setuid / file capabilities can raise that set again
NoNewPrivileges=yes
# /run/ballast: the eBPF pins' lock files; kept over a restart (cleanup removes it)
RuntimeDirectory=ballast
RuntimeDirectoryPreserve=yes
# /var/lib/ballast: the last discovered backend set (discovery.lastKnownFile)
StateDirectory=ballast
# /etc/ballast: the configuration (read only)
ConfigurationDirectory=ballast
# the whole file system read-only except the directories above and bpffs (pins of the local endpoint)
ProtectSystem=strict
ReadWritePaths=/sys/fs/bpf
# nothing of ballast's lives in /home, /root or /run/user
ProtectHome=yes
# a private /tmp (ballast writes none)
PrivateTmp=yes
# a minimal /dev (null, zero, urandom, ...): ballast opens no device
PrivateDevices=yes
# NOT ProtectKernelTunables=yes: it keeps bpffs read-only whatever ReadWritePaths= says (systemd 252
# and 257), and the eBPF local endpoint could never pin its programs; the same paths are made
# read-only (or hidden) one by one below instead, and only /sys/fs/bpf is writable
ProtectKernelTunables=no
# /proc/sys and /sys read-only (ballast only reads ip_forward); and the rest of what ProtectKernelTunables=yes makes read-only
ReadOnlyPaths=/proc/sys /sys -/proc/acpi -/proc/apm -/proc/asound -/proc/bus -/proc/fs -/proc/irq -/proc/latency_stats -/proc/mtrr -/proc/scsi -/proc/sysrq-trigger -/proc/timer_stats
# no kernel symbol addresses, no kernel memory image (ProtectKernelTunables= hides them too)
InaccessiblePaths=-/proc/kallsyms -/proc/kcore
# ballast loads no kernel module (nftables' modules are auto-loaded by the kernel itself)
ProtectKernelModules=yes
# no access to the kernel log ring buffer
ProtectKernelLogs=yes
# the cgroup tree read-only: attaching BPF to a cgroup needs only an open directory
ProtectControlGroups=yes
# ballast never sets the clock
ProtectClock=yes
# nor the host name
ProtectHostname=yes
# it mounts nothing: no mount of its namespace reaches the host's (the bpffs pins are files, not mounts)
PrivateMounts=yes
# UNIX (admin socket locks, sd_notify), IPv4/IPv6 (VRRP, health checks, proxy), netlink (addresses,
# nftables, conntrack, sock_diag), packet (gratuitous ARP)
RestrictAddressFamilies=AF_UNIX AF_INET AF_INET6 AF_NETLINK AF_PACKET
# ballast creates no namespace
RestrictNamespaces=yes
# no personality(2) changes
LockPersonality=yes
# NOT RestrictRealtime=yes: vrrp.realtimePriority gives the advert pacer thread SCHED_FIFO (with
# CAP_SYS_NICE above); the agent asks for it only when that setting is > 0
RestrictRealtime=no
# no SUID/SGID files created
RestrictSUIDSGID=yes
# what it writes (the last-known backends, lock files) is root's alone
UMask=0077
# only x86-64 system calls (no 32-bit ABI)
SystemCallArchitectures=native
# NOT MemoryDenyWriteExecute=: Node's V8 JIT needs writable-executable memory

[Install]
WantedBy=multi-user.target
`;
}
