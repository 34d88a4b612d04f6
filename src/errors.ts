/**
 * The one error registry: every error ballast reports to an operator has a stable code
 * (`BALLAST_E_…`), a one-line description and the exit status the CLI uses for it.
 * docs/errors.md documents each code; test/unit/errors.test.ts keeps the two in sync.
 *
 * Exit statuses, chosen so a supervisor can tell "restart me" from "a human must act"
 * (a systemd unit can set `RestartPreventExitStatus=2 4`):
 *
 *   1  runtime failure; restarting may help (a socket, netlink, a busy port). Also the
 *      status of an unexpected error that is not a BallastError (a bug).
 *   2  the configuration (or the host's interfaces) does not fit; fix it, then restart.
 *   3  `ballast status` found no agent (the LSB convention for "program is not running").
 *   4  the installation lacks something (the native addon, privileges); fix it, then restart.
 */

/** One entry of the registry. */
export interface ErrorDefinition {
  /** Exit status of the CLI when this error ends it. */
  readonly exitCode: 1 | 2 | 3 | 4;
  /** One line, for operators: what went wrong. */
  readonly description: string;
}

/** Every error code, its exit status and its one-line description. */
export const ERRORS = {
  BALLAST_E_CONFIG: {
    exitCode: 2,
    description: 'The configuration is invalid; every problem is listed with the path of its setting.',
  },
  BALLAST_E_CONFIG_READ: {
    exitCode: 2,
    description: 'The configuration file could not be read (missing, unreadable, or a directory).',
  },
  BALLAST_E_ADDON_MISSING: {
    exitCode: 4,
    description: 'The native addon (raw VRRP socket, packet socket, BPF) is not built or fails to load.',
  },
  BALLAST_E_NO_INTERFACE: {
    exitCode: 2,
    description: 'No interface is set and no interface has a subnet that holds the first VIP.',
  },
  BALLAST_E_INTERFACE_NOT_FOUND: {
    exitCode: 2,
    description: 'The configured interface does not exist on this host.',
  },
  BALLAST_E_NO_PRIMARY_ADDRESS: {
    exitCode: 1,
    description: 'The interface has no primary IPv4 address (IPv4) or link-local address (IPv6) to send adverts from.',
  },
  BALLAST_E_PERMISSION: {
    exitCode: 4,
    description: 'The agent lacks a privilege it needs: root, or CAP_NET_RAW and CAP_NET_ADMIN.',
  },
  BALLAST_E_SOCKET: {
    exitCode: 1,
    description: 'A raw VRRP or packet socket could not be opened, bound, or used.',
  },
  BALLAST_E_NETLINK: {
    exitCode: 1,
    description: 'A netlink request (address add/remove, interface query) failed.',
  },
  BALLAST_E_ADMIN_LISTEN: {
    exitCode: 1,
    description: 'The admin endpoint (admin.listen) could not listen: the port is in use or the address is not local.',
  },
  BALLAST_E_ADMIN_ADDRESS: {
    exitCode: 2,
    description: 'admin.listen is not an address of this node (nor 0.0.0.0 / ::): binding it fails with EADDRNOTAVAIL.',
  },
  BALLAST_E_ALREADY_RUNNING: {
    exitCode: 2,
    description: 'Another ballast agent already runs the same VRID on the same interface, or manages one of the same VIPs, in this network namespace.',
  },
  BALLAST_E_NOT_OWNER: {
    exitCode: 2,
    description: 'Priority 255 (address owner) is configured, but the VIPs are not addresses of the interface.',
  },
  BALLAST_E_VIP_IS_NODE_ADDRESS: {
    exitCode: 2,
    description: "A VIP is this node's own address (a primary address of an interface), not a virtual IP.",
  },
  BALLAST_E_INTERFACE_GONE: {
    exitCode: 1,
    description: 'The interface VRRP runs on was deleted while the agent ran.',
  },
  BALLAST_E_DATAPLANE: {
    exitCode: 1,
    description:
      'The data plane could not be programmed: an nft or conntrack command failed (the kernel kept the previous ballast table), or the local endpoint could be served neither by eBPF nor by the proxy.',
  },
  BALLAST_E_BGP: {
    exitCode: 1,
    description: 'BIRD refused the configuration snippet ballast wrote for mode: bgp (a parse error, or a protocol name already taken).',
  },
  BALLAST_E_BGP_CONFIG_FILE: {
    exitCode: 2,
    description: "bgp.configFile exists and is not a snippet ballast wrote (it may be BIRD's own configuration): ballast refuses to overwrite it.",
  },
  BALLAST_E_CGROUP: {
    exitCode: 2,
    description: 'localEndpoint.cgroup is not an existing directory of the mounted cgroup-v2 hierarchy.',
  },
  BALLAST_E_LOCAL_ENDPOINT_IN_USE: {
    exitCode: 2,
    description:
      'Something on the node already listens on the port of localEndpoint.address, or another agent on the host already serves the local endpoint of that cgroup.',
  },
  BALLAST_E_LOCAL_ENDPOINT_ADDRESS: {
    exitCode: 2,
    description: 'An address of localEndpoint.address is not an address of this node (nor loopback): binding it fails with EADDRNOTAVAIL.',
  },
  BALLAST_E_STATUS_UNREACHABLE: {
    exitCode: 3,
    description: '`ballast status` could not reach the agent at admin.listen.',
  },
  BALLAST_E_RELOAD_UNREACHABLE: {
    exitCode: 1,
    description: '`ballast reload` could not reach the agent at admin.listen, or the agent could not reload now (it is stopping).',
  },
  BALLAST_E_OUTPUT: {
    exitCode: 1,
    description: '`ballast manifest --output FILE` could not write FILE; an existing FILE is left as it was.',
  },
  BALLAST_E_NODE_VERSION: {
    exitCode: 2,
    description: 'The Node.js running ballast is older than 24; nothing was changed (src/cli.ts checks it first).',
  },
} as const satisfies Readonly<Record<`BALLAST_E_${string}`, ErrorDefinition>>;

/** A stable error code, one key of {@link ERRORS}. */
export type ErrorCode = keyof typeof ERRORS;

/** Exit status for an error that is not a {@link BallastError} (an unexpected failure). */
export const EXIT_UNEXPECTED = 1;

/**
 * Base class of every error ballast reports to an operator.
 * `code` is stable (branch on it, never on the message); `exitCode` comes from the registry;
 * `cause` is the underlying error (an errno error from the addon, an fs error, …) when there is one.
 */
export class BallastError extends Error {
  override name = 'BallastError';
  readonly code: ErrorCode;
  readonly exitCode: ErrorDefinition['exitCode'];

  /**
   * @param code a registry code; its exit status is looked up in {@link ERRORS}.
   * @param message operator-facing text: what failed and, where possible, what to do.
   * @param options.cause the underlying error, kept as `this.cause`.
   */
  constructor(code: ErrorCode, message: string, options?: { cause?: unknown }) {
    super(message, options && 'cause' in options ? { cause: options.cause } : undefined);
    this.code = code;
    this.exitCode = ERRORS[code].exitCode;
  }
}

/**
 * Makes a {@link BallastError}. BALLAST_E_CONFIG is excluded: use {@link ConfigError}, which
 * carries the list of issues.
 * @example throw createError('BALLAST_E_PERMISSION', 'opening the VRRP socket needs CAP_NET_RAW', { cause: err })
 */
export function createError(code: Exclude<ErrorCode, 'BALLAST_E_CONFIG'>, message: string, options?: { cause?: unknown }): BallastError {
  return new BallastError(code, message, options);
}

/** True when `err` is a {@link BallastError}, and, if `code` is given, has that code. */
export function isBallastError(err: unknown, code?: ErrorCode): err is BallastError {
  return err instanceof BallastError && (code === undefined || err.code === code);
}

/** The CLI's exit status for `err`: the registry's for a BallastError, else {@link EXIT_UNEXPECTED}. */
export function exitCodeOf(err: unknown): number {
  return err instanceof BallastError ? err.exitCode : EXIT_UNEXPECTED;
}

/** One problem found in the configuration. */
export interface ConfigIssue {
  /**
   * Where: the setting's path as written in the file, e.g. `vrrp.advertisementInterval`,
   * `vips[1]`; {@link DOCUMENT_PATH} for the file as a whole (empty, not a mapping, bad YAML).
   */
  readonly path: string;
  /** Why, for an operator, e.g. `must be an integer from 1 to 255, got 0`. */
  readonly message: string;
  /** 1-based line in the source text, when the problem has a place in it. */
  readonly line?: number;
  /** 1-based column in the source text, when the problem has a place in it. */
  readonly column?: number;
}

/** The {@link ConfigIssue.path} of a problem with the file as a whole. */
export const DOCUMENT_PATH = '(document)';

/**
 * The configuration is invalid (code BALLAST_E_CONFIG, exit status 2).
 * `issues` lists every problem found, not only the first; `message` is one line per issue,
 * `<path>: <reason>`.
 */
export class ConfigError extends BallastError {
  override name = 'ConfigError';
  readonly issues: readonly ConfigIssue[];
  /** The file (or other origin) the configuration came from, when known. */
  readonly source: string | undefined;

  /**
   * @param issues at least one problem.
   * @param options.source a file path or other origin, shown by {@link ConfigError.format}.
   */
  constructor(issues: readonly ConfigIssue[], options?: { source?: string | undefined; cause?: unknown }) {
    super('BALLAST_E_CONFIG', issues.map((i) => `${i.path}: ${i.message}`).join('\n'), options);
    this.issues = Object.freeze(issues.map((i) => Object.freeze({ ...i })));
    this.source = options?.source;
  }

  /**
   * One line per issue, as {@link format} prints them (without the indent): `line N: <path>:
   * <reason>` when the line is known, else `<path>: <reason>`. A reload logs and returns these.
   */
  problemLines(): string[] {
    return this.issues.map((i) => {
      // a whole-document issue (YAML syntax) already names its line and column in its message
      const at = i.line === undefined || i.path === DOCUMENT_PATH ? '' : `line ${i.line}: `;
      return `${at}${i.path}: ${i.message}`;
    });
  }

  /**
   * Text for the CLI to print to stderr before exiting with `exitCode` (2): a header naming the
   * source and the count, then one indented line per issue (`line N: <path>: <reason>` when the
   * line is known), then the code and where the settings are documented. Ends with a newline.
   */
  format(): string {
    const n = this.issues.length;
    const where = this.source === undefined ? '' : ` in ${this.source}`;
    const lines = [`ballast: invalid configuration${where} (${n} ${n === 1 ? 'problem' : 'problems'}):`];
    for (const l of this.problemLines()) lines.push(`  ${l}`);
    lines.push(`(${this.code}; every setting is described in docs/config.md, /usr/share/doc/ballast/docs/config.md with the package)`);
    return lines.join('\n') + '\n';
  }
}
