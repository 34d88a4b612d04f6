import { defineConfig } from 'vitest/config';

// Integration tests drive real network namespaces and real timing bounds on a 2-core machine:
// files run one after another so one lab's CPU load does not eat another's protocol margins.
export default defineConfig({
  test: {
    include: ['test/**/*.test.ts'],
    // prints the Node.js version the run uses, once
    globalSetup: ['test/support/global-setup.ts'],
    fileParallelism: false,
    testTimeout: 30_000,
    hookTimeout: 60_000,
    reporters: ['default'],
  },
});
