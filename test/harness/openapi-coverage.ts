// Issue 14: every operation /openapi.json describes is exercised by an e2e test, checked at run
// time. Each operation is owned by one e2e file; that file ends with a test asking its replicas'
// /metrics (http.server.request.duration, labelled by method, route pattern and status) whether
// the operation was answered with a success. http-api.test.ts checks that this table and the
// served description name the same operations, methods and paths.
import { expect } from 'vitest';

export interface OwnedOperation {
  method: 'GET' | 'POST' | 'PUT' | 'DELETE';
  /** fastify's route pattern, as the metric labels it (`:name`, not OpenAPI's `{name}`). */
  route: string;
  /** The e2e file (under test/e2e) whose run must get a success from it. */
  file: string;
}

export const OPERATIONS: Record<string, OwnedOperation> = {
  createSandbox: { method: 'POST', route: '/v1/sandboxes', file: 'http-api.test.ts' },
  listSandboxes: { method: 'GET', route: '/v1/sandboxes', file: 'http-api.test.ts' },
  getSandbox: { method: 'GET', route: '/v1/sandboxes/:name', file: 'http-api.test.ts' },
  deleteSandbox: { method: 'DELETE', route: '/v1/sandboxes/:name', file: 'http-api.test.ts' },
  stopSandbox: { method: 'POST', route: '/v1/sandboxes/:name/stop', file: 'http-api.test.ts' },
  startSandbox: { method: 'POST', route: '/v1/sandboxes/:name/start', file: 'http-api.test.ts' },
  execSandbox: { method: 'POST', route: '/v1/sandboxes/:name/exec', file: 'http-api.test.ts' },
  getSandboxLogs: { method: 'GET', route: '/v1/sandboxes/:name/logs', file: 'http-api.test.ts' },
  watchSandbox: { method: 'GET', route: '/v1/sandboxes/:name/events', file: 'http-api.test.ts' },
  execWebSocket: { method: 'GET', route: '/v1/sandboxes/:name/exec/ws', file: 'exec-ws.test.ts' },
  uploadFile: { method: 'PUT', route: '/v1/sandboxes/:name/files', file: 'files.test.ts' },
  downloadFile: { method: 'GET', route: '/v1/sandboxes/:name/files', file: 'files.test.ts' },
  exposeService: { method: 'PUT', route: '/v1/sandboxes/:name/services/:service', file: 'services.test.ts' },
  getService: { method: 'GET', route: '/v1/sandboxes/:name/services/:service', file: 'services.test.ts' },
  listSandboxServices: { method: 'GET', route: '/v1/sandboxes/:name/services', file: 'services.test.ts' },
  listServices: { method: 'GET', route: '/v1/services', file: 'services.test.ts' },
  createServiceLink: { method: 'POST', route: '/v1/sandboxes/:name/services/:service/links', file: 'services.test.ts' },
  deleteService: { method: 'DELETE', route: '/v1/sandboxes/:name/services/:service', file: 'services.test.ts' },
  setPool: { method: 'PUT', route: '/v1/pools/:name', file: 'pools.test.ts' },
  listPools: { method: 'GET', route: '/v1/pools', file: 'pools.test.ts' },
  deletePool: { method: 'DELETE', route: '/v1/pools/:name', file: 'pools.test.ts' },
};

/** OpenAPI's path (`/v1/sandboxes/{name}`) as fastify's route pattern (`/v1/sandboxes/:name`). */
export const routeOfPath = (openApiPath: string): string => openApiPath.replace(/\{([^}]+)\}/g, ':$1');

/** `METHOD route` of every request the replicas answered with a 1xx or 2xx status. */
async function succeeded(httpUrls: string[]): Promise<Set<string>> {
  const seen = new Set<string>();
  const line = /^http_server_request_duration_count\{([^}]*)\} (\d+)/;
  for (const url of httpUrls) {
    const text = await (await fetch(`${url}/metrics`)).text();
    for (const m of text.split('\n').map((l) => line.exec(l))) {
      if (!m || Number(m[2]) === 0) continue;
      const labels = Object.fromEntries([...m[1]!.matchAll(/(\w+)="([^"]*)"/g)].map((x) => [x[1], x[2]]));
      if (/^[12]\d\d$/.test(labels.http_response_status_code ?? '')) seen.add(`${labels.http_request_method} ${labels.http_route}`);
    }
  }
  return seen;
}

/** Fails unless every operation `file` owns was answered with a success by one of the replicas. */
export async function expectOwnedOperationsServed(file: string, httpUrls: string[]): Promise<void> {
  const owned = Object.entries(OPERATIONS).filter(([, op]) => op.file === file);
  expect(owned.length, `no operation is owned by ${file}`).toBeGreaterThan(0);
  const seen = await succeeded(httpUrls);
  const missing = owned.filter(([, op]) => !seen.has(`${op.method} ${op.route}`)).map(([id, op]) => `${id} (${op.method} ${op.route})`);
  expect(missing, `operations ${file} owns that no replica answered with a success; answered: ${[...seen].sort().join(', ')}`).toEqual([]);
}
