/**
 * The parts of @kubernetes/client-node discovery uses, by name: the KubeConfig loader, the
 * informer (list + watch) and the DiscoveryV1 API. Imported only through {@link loadClient}
 * (credentials.ts), on discovery's own thread (thread.ts). Named here so that the discovery
 * thread's bundle (scripts/bundle.ts) carries these and what they import, not the whole package:
 * measured on Node 24, the import took 77-85 ms and 29 MiB RSS against 240-350 ms and 81 MiB
 * for the package from node_modules.
 */
export { DiscoveryV1Api, KubeConfig, makeInformer } from '@kubernetes/client-node';
