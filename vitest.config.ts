import { configDefaults, defineConfig } from 'vitest/config';

// Two projects, run one after the other (sequence.groupOrder):
// - unit: pure, no root, no timing bounds: files run in parallel, one worker per core, and share
//   their worker's modules (isolate: false; about 2.3 times faster here): a unit test restores
//   what it changes (fake timers, process.env, globals);
// - integration (every other test file): real network namespaces and real timing bounds on a
//   2-core machine: files run one after another, after every unit file, so that no other file's
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
      // every other test file (test/integration/, and any new folder) is an integration test
      { extends: true, test: { name: 'integration', include: ['test/**/*.test.ts'], exclude: [...configDefaults.exclude, 'test/unit/**'], fileParallelism: false, sequence: { groupOrder: 1 } } },
    ],
  },
});
