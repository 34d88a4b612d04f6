import { configDefaults, defineConfig } from 'vitest/config';

/**
 * Integration files that assert no protocol timing bound (no Master_Down_Interval, Skew_Time,
 * fall × interval, outage or start-up budget), only results, and whose waits are generous limits
 * on what they wait for, not measurements: ballast's CLI, `ballast check` and certificate checks,
 * start-up refusals, the addon's sockets, the eBPF and nftables data planes driven directly, the
 * OCI image, the watch fleet's endings (a quiet window, a RST, a FIN, a dead link: results, with
 * 3 s of silence as the line for hung). Each has its own lab prefix and subnet (and locks that are per network namespace or
 * per pin directory), so three of them run side by side on the 2 cores — most of them run one
 * child process at a time, or wait on the kernel, podman or apt, and leave a core idle (measured
 * here: the group takes 29-32 s three at a time, 38-41 s two at a time, on a loaded machine).
 */
const UNTIMED = ['cli', 'certificates', 'agent-defects', 'native', 'ebpf', 'check', 'nftables', 'image', 'watch-fleet'].map(
  (f) => `test/integration/${f}.test.ts`,
);

// Three projects, run one after the other (sequence.groupOrder):
// - unit: pure, no root, no timing bounds: files run in parallel, one worker per core, and share
//   their worker's modules (isolate: false; about 2.3 times faster here): a unit test restores
//   what it changes (fake timers, process.env, globals);
// - integration-untimed (UNTIMED above): three files at a time, after every unit file;
// - integration (every other test file): real network namespaces and real timing bounds on a
//   2-core machine: files run one after another, after every other file, so that no other file's
//   CPU load eats a lab's protocol margins.
export default defineConfig({
  test: {
    // prints the Node.js version the run uses, once
    globalSetup: ['test/support/global-setup.ts'],
    testTimeout: 30_000,
    hookTimeout: 60_000,
    reporters: ['default'],
    projects: [
      { extends: true, test: { name: 'unit', include: ['test/unit/**/*.test.ts'], isolate: false, sequence: { groupOrder: 0 } } },
      { extends: true, test: { name: 'integration-untimed', include: UNTIMED, fileParallelism: true, maxWorkers: 3, sequence: { groupOrder: 1 } } },
      // every other test file (test/integration/, and any new folder) is an integration test
      {
        extends: true,
        test: {
          name: 'integration',
          include: ['test/**/*.test.ts'],
          exclude: [...configDefaults.exclude, 'test/unit/**', ...UNTIMED],
          fileParallelism: false,
          sequence: { groupOrder: 2 },
        },
      },
    ],
  },
});
