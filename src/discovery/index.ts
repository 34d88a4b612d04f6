/**
 * Backend discovery: the seed (`apiserver.backends`), the `kubernetes` Service's EndpointSlices
 * and the last-known file merged into the backend set the health checker checks. See watch.ts
 * for the flow and merge.ts for the rules.
 */
export { BackendSet, type BackendSource, type DiscoveredResult, type SourcedBackend } from './merge.js';
export { readLastKnown, writeLastKnown, type LastKnownRead } from './lastknown.js';
export { forServer, loadCredentials, type CredentialSource, type LoadedCredentials } from './credentials.js';
export {
  clientCertificateExpiry,
  denialFix,
  denialOf,
  DENIED_RETRY_MS,
  Discovery,
  endpointsOf,
  type DiscoveryDenial,
  type DiscoveryOptions,
  type DiscoveryState,
  type DiscoveryStats,
} from './watch.js';
export { DiscoveryThread, InvalidCredentials, type DiscoveryThreadOptions, type DiscoveryTiming } from './thread.js';
