/**
 * podman for the image test, with everything it keeps in a temp directory the test owns and
 * removes: the storage (--root, --runroot; overlay), libpod's state (--tmpdir), crun's state
 * (--runtime-flag root=…), the network and volume dirs, and TMPDIR (where `podman load` unpacks).
 * The machine's containers-storage is never opened. containers/image writes a blob-info cache
 * to /var/lib/containers/cache for root whatever the storage root: when that directory did not
 * exist before, destroy() removes it (as it does /run/crun, made by podman's runtime probe).
 *
 * crun ≤ 1.8 refuses to start a container on a hybrid cgroup host whose cgroup2 mount
 * (/sys/fs/cgroup/unified) has controllers ("cgroups in hybrid mode not supported"), even with
 * --cgroups=disabled: there each podman call runs in a private mount namespace without that
 * mount (unshare(1); the machine's mounts are untouched). Containers run with --cgroups=disabled
 * (no cgroup is made; on cgroupfs podman would leave libpod_parent/ behind).
 */
import { execFile, spawn, type ChildProcess } from 'node:child_process';
import { existsSync, mkdirSync, mkdtempSync, readdirSync, readFileSync, rmdirSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';

/** Whether crun here needs the cgroup2 mount hidden (see the file comment). */
function hybridWithV2Controllers(): boolean {
  const mounts = readFileSync('/proc/self/mounts', 'utf8');
  if (!/ \/sys\/fs\/cgroup\/unified cgroup2 /.test(mounts)) return false;
  try {
    return readFileSync('/sys/fs/cgroup/unified/cgroup.controllers', 'utf8').trim() !== '';
  } catch {
    return false;
  }
}

/**
 * This process's RLIMIT_NOFILE (soft, hard) from /proc/self/limits (proc(5)): crun sets the
 * container's limits after podman, and without CAP_SYS_RESOURCE it cannot raise them to podman's
 * defaults for root (1048576).
 */
function openFilesLimit(): [number, number] {
  const m = /^Max open files\s+(\d+)\s+(\d+)/m.exec(readFileSync('/proc/self/limits', 'utf8'));
  return m ? [Number(m[1]), Number(m[2])] : [1024, 4096];
}

/** The result of one podman command. */
export interface PodmanResult {
  code: number;
  stdout: string;
  stderr: string;
}

/** A podman with test-owned storage; `await Podman.create()`, then `destroy()` in afterAll. */
export class Podman {
  readonly dir: string;
  readonly #global: string[];
  readonly #env: NodeJS.ProcessEnv;
  readonly #hideCgroup2 = hybridWithV2Controllers();
  readonly #hadContainersDir = existsSync('/var/lib/containers');
  readonly #hadCrunDir = existsSync('/run/crun');

  constructor() {
    this.dir = mkdtempSync(join(tmpdir(), 'ballast-podman-'));
    for (const d of ['root', 'run', 'tmp', 'crun', 'net', 'vol', 'vartmp']) mkdirSync(join(this.dir, d));
    this.#global = [
      '--root',
      join(this.dir, 'root'),
      '--runroot',
      join(this.dir, 'run'),
      '--tmpdir',
      join(this.dir, 'tmp'),
      '--storage-driver',
      'overlay',
      '--events-backend',
      'none',
      '--cgroup-manager',
      'cgroupfs',
      '--runtime',
      'crun',
      '--runtime-flag',
      `root=${join(this.dir, 'crun')}`,
      '--network-config-dir',
      join(this.dir, 'net'),
      '--volumepath',
      join(this.dir, 'vol'),
    ];
    this.#env = { ...process.env, TMPDIR: join(this.dir, 'vartmp') };
  }

  /** argv for `podman ARGS` (inside a private mount namespace where needed). */
  #argv(args: readonly string[]): [string, string[]] {
    const podman = ['podman', ...this.#global, ...args];
    if (!this.#hideCgroup2) return [podman[0]!, podman.slice(1)];
    return ['unshare', ['--mount', '--propagation', 'private', '--', 'sh', '-c', 'umount /sys/fs/cgroup/unified && exec "$@"', 'sh', ...podman]];
  }

  /** Runs `podman ARGS` to completion (timeoutMs default 60 s). @throws when it exits non-zero, unless allowFail. */
  run(args: readonly string[], o: { timeoutMs?: number; allowFail?: boolean } = {}): Promise<PodmanResult> {
    const [file, argv] = this.#argv(args);
    return new Promise((resolve, reject) => {
      execFile(
        file,
        argv,
        { env: this.#env, timeout: o.timeoutMs ?? 60_000, killSignal: 'SIGKILL', maxBuffer: 16 << 20, encoding: 'utf8' },
        (err, stdout, stderr) => {
          const code = err ? (typeof err.code === 'number' ? err.code : 1) : 0;
          if (code !== 0 && !o.allowFail) reject(new Error(`podman ${args.join(' ')} exited ${code}: ${stderr.trim()}`));
          else resolve({ code, stdout, stderr });
        },
      );
    });
  }

  /** Starts `podman ARGS` (e.g. an attached `run --rm`) and returns the child; output is collected by the caller. */
  spawn(args: readonly string[]): ChildProcess {
    const [file, argv] = this.#argv(args);
    return spawn(file, argv, { env: this.#env, stdio: ['ignore', 'pipe', 'pipe'] });
  }

  /**
   * The `--ulimit` flags a container needs here: the open-files limit this process has, and as
   * many processes as there can be PIDs (kernel.pid_max; podman's default for root, 4194304, is
   * refused here like a raised nofile).
   */
  ulimits(): string[] {
    const [soft, hard] = openFilesLimit();
    const pids = Number(readFileSync('/proc/sys/kernel/pid_max', 'utf8').trim());
    return ['--ulimit', `nofile=${soft}:${hard}`, '--ulimit', `nproc=${pids}:${pids}`];
  }

  /** Removes every container and image of this storage, then the directory (and what podman made outside it). */
  async destroy(): Promise<void> {
    try {
      await this.run(['rm', '--all', '--force', '--time', '0'], { allowFail: true, timeoutMs: 30_000 });
      await this.run(['rmi', '--all', '--force'], { allowFail: true, timeoutMs: 30_000 });
    } finally {
      rmSync(this.dir, { recursive: true, force: true });
      if (!this.#hadContainersDir) rmSync('/var/lib/containers', { recursive: true, force: true });
      if (!this.#hadCrunDir && existsSync('/run/crun') && readdirSync('/run/crun').length === 0) rmdirSync('/run/crun');
    }
  }
}
