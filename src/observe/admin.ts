/**
 * The admin HTTP endpoint (node:http), meant for localhost: GET /status (JSON), GET /healthz,
 * GET /metrics (Prometheus text format).
 */
import { createServer, type Server } from 'node:http';
import type { StatusDocument } from './status.js';

/** What the admin server asks of the agent. */
export interface AdminHandlers {
  /** The current status; rejects when the election worker does not answer. */
  status(): Promise<StatusDocument>;
  /** The Prometheus exposition: content type and body. */
  metrics(): Promise<{ contentType: string; body: string }>;
}

/**
 * Starts listening on `host`:`port`.
 * @throws Error with `code` EADDRINUSE / EACCES / EADDRNOTAVAIL when the address cannot be bound.
 */
export async function startAdmin(host: string, port: number, h: AdminHandlers): Promise<Server> {
  const server = createServer((req, res) => {
    const url = (req.url ?? '/').split('?')[0];
    if (req.method !== 'GET' && req.method !== 'HEAD') {
      res.writeHead(405, { allow: 'GET, HEAD' }).end();
      return;
    }
    if (url === '/status' || url === '/healthz') {
      h.status().then(
        (doc) => {
          if (url === '/status') {
            res.writeHead(200, { 'content-type': 'application/json' }).end(`${JSON.stringify(doc)}\n`);
          } else {
            res.writeHead(200, { 'content-type': 'text/plain' }).end('ok\n');
          }
        },
        (err: Error) => {
          res.writeHead(503, { 'content-type': 'text/plain' }).end(`election engine not answering: ${err.message}\n`);
        },
      );
      return;
    }
    if (url === '/metrics') {
      h.metrics().then(
        (m) => res.writeHead(200, { 'content-type': m.contentType }).end(m.body),
        (err: Error) => res.writeHead(503, { 'content-type': 'text/plain' }).end(`metrics unavailable: ${err.message}\n`),
      );
      return;
    }
    res.writeHead(404, { 'content-type': 'text/plain' }).end('not found; try /status, /healthz or /metrics\n');
  });
  server.keepAliveTimeout = 5000;
  await new Promise<void>((resolve, reject) => {
    server.once('error', reject);
    server.listen(port, host, () => {
      server.off('error', reject);
      resolve();
    });
  });
  return server;
}
