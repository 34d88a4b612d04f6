/**
 * The agent's admin endpoint as `ballast status` and `ballast reload` name it (`--admin`).
 */
import { InvalidArgumentError } from 'commander';
import { tryParseHostPort, type HostPort } from '../net/hostport.js';

/** Where an agent with the default `admin.listen` answers. */
export const DEFAULT_ADMIN = '127.0.0.1:9641';

/** Parses `--admin`: an IP literal and a port, "127.0.0.1:9641" or "[::1]:9641" (net/hostport.ts). */
export function parseAdmin(s: string): HostPort {
  const hp = tryParseHostPort(s);
  if (typeof hp === 'string')
    throw new InvalidArgumentError(`expected host:port with an IP address, e.g. 127.0.0.1:9641 or [::1]:9641 (${JSON.stringify(s)} ${hp})`);
  return hp;
}
