import { readFileSync } from 'node:fs';
import { dirname, join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { describe, expect, it } from 'vitest';
import { BallastError, ConfigError, createError, ERRORS, exitCodeOf, isBallastError, type ErrorCode } from '../../src/errors.js';

const docPath = join(dirname(fileURLToPath(import.meta.url)), '..', '..', 'docs', 'errors.md');
const doc = readFileSync(docPath, 'utf8');
const codes = Object.keys(ERRORS) as ErrorCode[];

describe('docs/errors.md is in sync with the registry', () => {
  it('documents every code in the registry, with its exit status', () => {
    // a documented code is a table row: | `BALLAST_E_X` | <exit> | ...
    const rows = new Map<string, number>();
    for (const m of doc.matchAll(/^\|\s*`(BALLAST_E_[A-Z0-9_]+)`\s*\|\s*(\d+)\s*\|/gm)) {
      expect(rows.has(m[1]!), `${m[1]} has two rows`).toBe(false);
      rows.set(m[1]!, Number(m[2]));
    }
    for (const code of codes) {
      expect(rows.get(code), `${code} in docs/errors.md`).toBe(ERRORS[code].exitCode);
    }
    expect([...rows.keys()].sort()).toStrictEqual([...codes].sort());
  });

  it('mentions no code that the registry lacks', () => {
    const mentioned = new Set(doc.match(/\bBALLAST_E_[A-Z0-9_]+\b/g) ?? []);
    for (const code of mentioned) expect(codes, `${code} is in docs/errors.md but not in src/errors.ts`).toContain(code);
  });

  it('documents every exit status the registry uses', () => {
    for (const status of new Set(codes.map((c) => ERRORS[c].exitCode))) {
      expect(doc).toMatch(new RegExp(`^\\| ${status} \\|`, 'm'));
    }
  });
});

describe('the registry', () => {
  it('has well-formed codes and one-line descriptions', () => {
    for (const code of codes) {
      expect(code).toMatch(/^BALLAST_E_[A-Z0-9_]+$/);
      expect(ERRORS[code].description.length).toBeGreaterThan(10);
      expect(ERRORS[code].description).not.toContain('\n');
    }
  });

  it('holds at least the codes the CLI and the agent rely on', () => {
    expect(codes).toEqual(
      expect.arrayContaining([
        'BALLAST_E_CONFIG',
        'BALLAST_E_CONFIG_READ',
        'BALLAST_E_ADDON_MISSING',
        'BALLAST_E_NO_INTERFACE',
        'BALLAST_E_INTERFACE_NOT_FOUND',
        'BALLAST_E_NO_PRIMARY_ADDRESS',
        'BALLAST_E_PERMISSION',
        'BALLAST_E_SOCKET',
        'BALLAST_E_NETLINK',
        'BALLAST_E_ADMIN_LISTEN',
        'BALLAST_E_STATUS_UNREACHABLE',
      ]),
    );
    expect(ERRORS.BALLAST_E_CONFIG.exitCode).toBe(2);
    expect(ERRORS.BALLAST_E_CONFIG_READ.exitCode).toBe(2);
    expect(ERRORS.BALLAST_E_NO_INTERFACE.exitCode).toBe(2);
    expect(ERRORS.BALLAST_E_INTERFACE_NOT_FOUND.exitCode).toBe(2);
  });
});

describe('createError / BallastError', () => {
  it('carries the code, the exit status from the registry, and the cause', () => {
    const cause = Object.assign(new Error('socket: Operation not permitted'), { code: 'EPERM', syscall: 'socket' });
    const err = createError('BALLAST_E_PERMISSION', 'opening the VRRP socket needs CAP_NET_RAW', { cause });
    expect(err).toBeInstanceOf(BallastError);
    expect(err).toBeInstanceOf(Error);
    expect(err.name).toBe('BallastError');
    expect(err.code).toBe('BALLAST_E_PERMISSION');
    expect(err.exitCode).toBe(ERRORS.BALLAST_E_PERMISSION.exitCode);
    expect(err.message).toBe('opening the VRRP socket needs CAP_NET_RAW');
    expect(err.cause).toBe(cause);
    expect(err.stack).toContain('opening the VRRP socket');
  });

  it('has no cause property when none is given', () => {
    const err = createError('BALLAST_E_SOCKET', 'x');
    expect('cause' in err).toBe(false);
  });

  it('isBallastError and exitCodeOf', () => {
    const err = createError('BALLAST_E_STATUS_UNREACHABLE', 'no agent');
    expect(isBallastError(err)).toBe(true);
    expect(isBallastError(err, 'BALLAST_E_STATUS_UNREACHABLE')).toBe(true);
    expect(isBallastError(err, 'BALLAST_E_SOCKET')).toBe(false);
    expect(isBallastError(new Error('x'))).toBe(false);
    expect(isBallastError({ code: 'BALLAST_E_SOCKET' })).toBe(false);
    expect(exitCodeOf(err)).toBe(3);
    expect(exitCodeOf(new Error('bug'))).toBe(1);
    expect(exitCodeOf('a string')).toBe(1);
  });
});

describe('ConfigError', () => {
  const err = new ConfigError(
    [
      { path: 'vrrp.vrid', message: 'must be an integer from 1 to 255, got 0', line: 3, column: 9 },
      { path: 'vips', message: 'required: a list' },
    ],
    { source: '/etc/ballast/ballast.yaml' },
  );

  it('is a BallastError with code BALLAST_E_CONFIG and exit status 2', () => {
    expect(err).toBeInstanceOf(BallastError);
    expect(err.name).toBe('ConfigError');
    expect(err.code).toBe('BALLAST_E_CONFIG');
    expect(err.exitCode).toBe(2);
    expect(isBallastError(err, 'BALLAST_E_CONFIG')).toBe(true);
  });

  it('lists one issue per line in its message', () => {
    expect(err.message).toBe('vrrp.vrid: must be an integer from 1 to 255, got 0\nvips: required: a list');
  });

  it('freezes its issues', () => {
    expect(Object.isFrozen(err.issues)).toBe(true);
    expect(Object.isFrozen(err.issues[0])).toBe(true);
  });

  it('formats for stderr', () => {
    expect(err.format()).toBe(
      [
        'ballast: invalid configuration in /etc/ballast/ballast.yaml (2 problems):',
        '  line 3: vrrp.vrid: must be an integer from 1 to 255, got 0',
        '  vips: required: a list',
        '(BALLAST_E_CONFIG; every setting is described in docs/config.md, /usr/share/doc/ballast/docs/config.md with the package)',
        '',
      ].join('\n'),
    );
  });
});
