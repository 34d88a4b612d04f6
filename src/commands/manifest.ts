/**
 * `ballast manifest static-pod | daemonset | rbac | systemd`: what an operator commits, generated
 * from the configuration (docs/kubeadm.md, docs/cluster-api.md).
 *
 *   --config FILE   the configuration (default /etc/ballast/ballast.yaml), loaded and validated
 *                   as `ballast validate` does: an invalid one prints the same problems and exits
 *                   2 with nothing written. Its absolute path is the one the manifest runs with.
 *   --node-config PATH  the configuration's path on the node when it is not --config's
 *                   (generating on another machine, e.g. for a KubeadmControlPlane)
 *   --image REF     the image (default localhost/ballast:<version>, the name scripts/image.sh gives it),
 *                   checked against the image reference grammar (src/manifest/image.ts): exit 2
 *   --output FILE   write FILE atomically (a temporary file in the same directory, fsync,
 *                   rename; an existing FILE keeps its mode, a symbolic link there is replaced
 *                   by the file); without it the manifest goes to stdout
 */
import { closeSync, fchmodSync, fsyncSync, openSync, readFileSync, renameSync, statSync, unlinkSync, writeSync } from 'node:fs';
import { basename, dirname, isAbsolute, join, resolve } from 'node:path';
import { randomBytes } from 'node:crypto';
import type { Command } from 'commander';
import type { Config, ConfigNote } from '../config/index.js';
import { ConfigError, createError } from '../errors.js';
import { defaultImage as imageOf, imageRefProblem } from '../manifest/image.js';
import { DEFAULT_CONFIG_PATH, systemdUnit, unitPathOk } from '../manifest/systemd.js';

/** What the subcommands need, loaded when one runs (the CLI's other commands start without the
 * configuration schema and the YAML printer). */
const parts = (): Promise<[typeof import('../config/index.js'), typeof import('../manifest/kubernetes.js')]> =>
  Promise.all([import('../config/index.js'), import('../manifest/kubernetes.js')]);

/** The file operations writeAtomic uses (node:fs by default; tests make one fail). */
export interface AtomicWriteOps {
  openSync: typeof openSync;
  writeSync: (fd: number, data: Buffer, offset: number, length: number) => number;
  fsyncSync: typeof fsyncSync;
  closeSync: typeof closeSync;
  renameSync: typeof renameSync;
  unlinkSync: typeof unlinkSync;
}

const NODE_FS: AtomicWriteOps = { openSync, writeSync: (fd, d, o, l) => writeSync(fd, d, o, l), fsyncSync, closeSync, renameSync, unlinkSync };

/** The permission bits of the file at `path` (through a symbolic link), or null when there is no such file. */
function existingMode(path: string): number | null {
  try {
    const st = statSync(path);
    return st.isFile() ? st.mode & 0o7777 : null;
  } catch {
    return null;
  }
}

/**
 * Writes `text` to `path` so that a reader sees either the old file or the whole new one: a
 * temporary file `.<name>.<random>.tmp` in the same directory (mode 0644, created exclusively;
 * an existing `path`'s mode when there is one), written in full, fsync'ed, renamed over `path`,
 * then the directory fsync'ed. The leading dot matters in /etc/kubernetes/manifests: the kubelet
 * ignores hidden files there, so it never starts the half-written one. A symbolic link at `path`
 * is replaced by the new file (rename(2) replaces the link, not what it points to; the file it
 * pointed to is left as it was): writing through it could not be atomic in `path`'s directory.
 * @throws BallastError BALLAST_E_OUTPUT (exit 1) when any step fails; the temporary file is
 *   removed and an existing `path` is untouched.
 */
export function writeAtomic(path: string, text: string, ops: AtomicWriteOps = NODE_FS): void {
  const dir = dirname(path);
  const tmp = join(dir, `.${basename(path)}.${randomBytes(6).toString('hex')}.tmp`);
  let fd: number | null = null;
  let created = false;
  try {
    fd = ops.openSync(tmp, 'wx', 0o644);
    created = true;
    // an existing file keeps its mode (e.g. 0600 for a manifest only root should read)
    const mode = existingMode(path);
    if (mode !== null) fchmodSync(fd, mode);
    const data = Buffer.from(text, 'utf8');
    for (let off = 0; off < data.length;) off += ops.writeSync(fd, data, off, data.length - off);
    ops.fsyncSync(fd);
    ops.closeSync(fd);
    fd = null;
    ops.renameSync(tmp, path);
    created = false;
  } catch (err) {
    if (fd !== null) {
      try {
        ops.closeSync(fd);
      } catch {
        // already failing: the first error is the one reported
      }
    }
    if (created) {
      try {
        ops.unlinkSync(tmp);
      } catch {
        // nothing more to do: the first error is the one reported
      }
    }
    throw createError('BALLAST_E_OUTPUT', `cannot write ${path}: ${failure(err)}`, { cause: err });
  }
  // the rename is durable once the directory is synced; a failure here changes nothing written
  try {
    const d = ops.openSync(dir, 'r');
    try {
      ops.fsyncSync(d);
    } finally {
      ops.closeSync(d);
    }
  } catch {
    // some file systems cannot fsync a directory: the file itself is complete and in place
  }
}

/**
 * An fs error as `CODE what happened`: Node's message (`ENOENT: no such file or directory, open
 * '/dir/.f.tmp'`) without the code it starts with and the temporary file's path it ends with.
 */
function failure(err: unknown): string {
  const e = err as NodeJS.ErrnoException;
  const code = typeof e.code === 'string' ? e.code : '';
  let text = err instanceof Error ? err.message : String(err);
  if (code !== '' && text.startsWith(`${code}: `)) text = text.slice(code.length + 2);
  if (typeof e.syscall === 'string') text = text.replace(new RegExp(`, ${e.syscall}( '.*')?$`, 's'), ` (${e.syscall})`);
  return `${code} ${text}`.trim();
}

/** Where a command's text goes. */
export interface ManifestIo {
  stdout: (s: string) => void;
  stderr: (s: string) => void;
  write?: (path: string, text: string) => void;
}

const PROCESS_IO: ManifestIo = { stdout: (s) => process.stdout.write(s), stderr: (s) => process.stderr.write(s) };

/** Loads and validates `--config` like `ballast validate`, notes (files to wait for) to stderr. @throws ConfigError (exit 2). */
function load(path: string, io: ManifestIo, { loadConfig, formatNote }: typeof import('../config/index.js')): Config {
  const notes: ConfigNote[] = [];
  const config = loadConfig(path, { notes });
  for (const n of notes) io.stderr(`${path}: ${formatNote(n)}\n`);
  return config;
}

/** Runs `fn`; a ConfigError it throws about the configuration (no source yet) names `path`. */
function about<T>(path: string, fn: () => T): T {
  try {
    return fn();
  } catch (err) {
    if (err instanceof ConfigError && err.source === undefined) throw new ConfigError(err.issues, { source: path, cause: err });
    throw err;
  }
}

function emit(text: string, output: string | undefined, io: ManifestIo): void {
  if (output === undefined) io.stdout(text);
  else (io.write ?? writeAtomic)(resolve(output), text);
}

/**
 * The files discovery.kubeconfig refers to, read from it now (kubeconfigReferences()); when it
 * cannot be read or parsed yet (before `kubeadm init` writes it) a note to stderr says only its
 * directory is mounted, and the result is undefined.
 */
function kubeconfigFiles(config: Config, io: ManifestIo, refs: (text: string, path: string) => string[]): string[] | undefined {
  const k = config.discovery?.kubeconfig;
  if (k === undefined) return undefined;
  try {
    return refs(readFileSync(k, 'utf8'), k);
  } catch (err) {
    const e = err as NodeJS.ErrnoException;
    io.stderr(
      `${k}: note: cannot read it now (${e.code ?? e.message}): only its directory ${dirname(k)} is mounted, not those of the files it refers to (certificate-authority, client-certificate, client-key, tokenFile); generate again once it exists if they are elsewhere\n`,
    );
    return undefined;
  }
}

/** `--image`, checked against the image reference grammar. @throws ConfigError naming --image (exit 2). */
function imageRef(image: string): string {
  const problem = imageRefProblem(image);
  if (problem !== null) throw new ConfigError([{ path: '--image', message: `${JSON.stringify(image)} ${problem}` }]);
  return image;
}

/** The configuration's path on the node: --node-config, else --config made absolute. */
function nodePath(o: { config: string; nodeConfig?: string }): string {
  if (o.nodeConfig === undefined) return resolve(o.config);
  if (!isAbsolute(o.nodeConfig)) throw new ConfigError([{ path: '--node-config', message: `${JSON.stringify(o.nodeConfig)} is not an absolute path` }]);
  return o.nodeConfig;
}

interface CommonOptions {
  config: string;
  nodeConfig?: string;
  image?: string;
  output?: string;
}

/**
 * Adds the `manifest` command and its four subcommands to `program` (they inherit its settings:
 * exitOverride, help after an error).
 * @param run receives each invocation's result (the exit status), as commands/index.ts runs them.
 * @param version the package version, for the default image `localhost/ballast:<version>`.
 */
export function addManifestCommand(program: Command, run: (result: Promise<number>) => void, version: string, io: ManifestIo = PROCESS_IO): Command {
  const defaultImage = imageOf(version);
  const header = (what: string, configPath: string | null): string =>
    [
      `${what}, generated by ballast ${version}${configPath !== null ? ` from ${configPath}` : ''}.`,
      'Regenerate it with `ballast manifest` after changing the configuration.',
    ].join('\n');
  const cmd = program
    .command('manifest')
    .description("print (or --output) what an operator commits: the kubeadm static pod, the workers' DaemonSet, the RBAC of discovery, the systemd unit");
  const common = (c: Command, image: boolean): Command => {
    c.option('-c, --config <file>', 'the configuration (validated first; invalid: exit 2, nothing written)', DEFAULT_CONFIG_PATH);
    c.option('--node-config <path>', "the configuration's absolute path on the node, when it is not --config's");
    if (image) c.option('--image <ref>', 'the image reference', defaultImage);
    return c.option('-o, --output <file>', 'write this file atomically instead of stdout');
  };
  /** The pod-running manifests: the image, the configuration (and the files its kubeconfig names), then `render`. */
  const workload =
    (
      title: string,
      render: (
        k: typeof import('../manifest/kubernetes.js'),
        config: Config,
        opts: { configPath: string; image: string; kubeconfigFiles?: string[] },
        configFile: string,
      ) => object[],
    ) =>
    (o: CommonOptions): void => {
      run(
        parts().then(([cfg, k]) => {
          const image = imageRef(o.image ?? defaultImage);
          const configPath = nodePath(o);
          const config = load(o.config, io, cfg);
          const files = kubeconfigFiles(config, io, k.kubeconfigReferences);
          const objects = about(o.config, () => render(k, config, { configPath, image, ...(files ? { kubeconfigFiles: files } : {}) }, o.config));
          emit(k.toYaml(objects, header(title, configPath)), o.output, io);
          return 0;
        }),
      );
    };
  common(cmd.command('static-pod').description('the kubeadm static pod, for /etc/kubernetes/manifests/ballast.yaml'), true).action(
    workload('The ballast static pod (kubeadm: /etc/kubernetes/manifests/ballast.yaml)', (k, config, opts) => [k.staticPod(config, opts)]),
  );
  common(
    cmd
      .command('daemonset')
      .description(
        'a ConfigMap holding the configuration and the DaemonSet that runs the node-local endpoint on the workers (a configuration with localEndpoint and no vrrp)',
      ),
    true,
  ).action(
    workload(
      'The ballast node-local endpoint on the workers (kubectl apply -f; the RBAC of `ballast manifest rbac` when discovery.inCluster)',
      (k, config, opts, file) => k.daemonSet(config, readFileSync(file, 'utf8'), opts),
    ),
  );
  const collect = (v: string, prev: string[]): string[] => [...prev, v];
  cmd
    .command('rbac')
    .description('the ServiceAccount, Role and RoleBinding discovery needs: get, list and watch on the EndpointSlices of namespace default')
    .option('--user <name>', "also bind this user (the CN of a kubeconfig's client certificate); repeatable", collect, [])
    .option('--group <name>', 'also bind this group (the O of a client certificate); repeatable', collect, [])
    .option('-o, --output <file>', 'write this file atomically instead of stdout')
    .action((o: { user: string[]; group: string[]; output?: string }) => {
      run(
        parts().then(([, { rbac, toYaml }]) => {
          const empty = [...(o.user.includes('') ? ['--user'] : []), ...(o.group.includes('') ? ['--group'] : [])];
          if (empty.length > 0) throw new ConfigError(empty.map((flag) => ({ path: flag, message: 'is empty: a RoleBinding subject needs a name' })));
          emit(toYaml(rbac({ users: o.user, groups: o.group }), header('What ballast discovery needs (kubectl apply -f)', null)), o.output, io);
          return 0;
        }),
      );
    });
  common(cmd.command('systemd').description('the systemd unit (ballast.service) running the agent with --config'), false).action((o: CommonOptions) => {
    run(
      parts().then(([cfg]) => {
        const configPath = nodePath(o);
        if (!unitPathOk(configPath)) {
          throw new ConfigError([
            {
              path: o.nodeConfig !== undefined ? '--node-config' : '--config',
              message: `${JSON.stringify(configPath)} holds a newline: a systemd unit line cannot carry it`,
            },
          ]);
        }
        load(o.config, io, cfg);
        emit(systemdUnit({ configPath }), o.output, io);
        return 0;
      }),
    );
  });
  return cmd;
}
