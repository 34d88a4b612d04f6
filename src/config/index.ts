/** Configuration: parse, validate and freeze. See docs/config.md for every setting. */
export { formatDuration, parseDuration } from './duration.js';
export { formatNote, hostFiles, parseAuthKeys, type ConfigFiles, type ConfigNote } from './files.js';
export { loadConfig, parseConfig } from './load.js';
export {
  ADVERTISEMENT_INTERVAL_MAX_MS,
  ADVERTISEMENT_INTERVAL_MIN_MS,
  AUTH_KEY_MIN_LENGTH,
  DEFAULTS,
  MAX_BACKENDS,
  MAX_ENTRIES,
  MAX_NESTING,
  MAX_VIPS,
} from './limits.js';
export { CONFIG_FIELDS } from './schema.js';
export { validateConfig } from './validate.js';
export {
  LOG_LEVELS,
  type AddressFamily,
  type AdminConfig,
  type AnnounceConfig,
  type ApiserverConfig,
  type BackendAddress,
  type ChecksumMode,
  type Config,
  type DataplaneConfig,
  type DataplaneLocalMode,
  type DataplaneVipMode,
  type DiscoveryConfig,
  type HealthConfig,
  type KeepOnStop,
  type ListenAddress,
  type LocalEndpointConfig,
  type LogConfig,
  type LogLevel,
  type PolicyConfig,
  type RebalanceConfig,
  type VrrpConfig,
} from './types.js';
export { ConfigError, DOCUMENT_PATH, type ConfigIssue } from '../errors.js';
