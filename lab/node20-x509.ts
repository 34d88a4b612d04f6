/**
 * A test hook, preloaded into an agent with NODE_OPTIONS="--import <this file, compiled>":
 * X509Certificate as Node.js 20 has it, without `validToDate` (added in Node 22): reading it
 * gives undefined, so the certificate report's `validToDate.getTime()` throws the TypeError
 * an agent started on Node 20 would meet, which the observe paths must contain. Never loaded by
 * the product.
 */
import { X509Certificate } from 'node:crypto';

Object.defineProperty(X509Certificate.prototype, 'validToDate', { configurable: true, get: () => undefined });
