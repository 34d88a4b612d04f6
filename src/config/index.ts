/** Configuration: parse, validate and freeze. See docs/config.md for every setting. */
export { formatDuration, parseDuration } from './duration.js';
export { hostFiles, parseAuthKeys, type ConfigFiles } from './files.js';
export { loadConfig, parseConfig } from './load.js';
export {
  ADVERTISEMENT_INTERVAL_MAX_MS,
  ADVERTISEMENT_INTERVAL_MIN_MS,
  CONFIG_FIELDS,
  DEFAULTS,
  LOG_LEVELS,
  MAX_BACKENDS,
  MAX_VIPS,
  validateConfig,
  type AddressFamily,
  type AdminConfig,
  type AnnounceConfig,
  type ApiserverConfig,
  type BackendAddress,
  type ChecksumMode,
  type Config,
  type DataplaneConfig,
  type DataplaneVipMode,
  type HealthConfig,
  type ListenAddress,
  type LogConfig,
  type LogLevel,
  type PolicyConfig,
  type VrrpConfig,
} from './schema.js';
export { ConfigError, DOCUMENT_PATH, type ConfigIssue } from '../errors.js';
