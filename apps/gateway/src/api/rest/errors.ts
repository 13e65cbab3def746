// How a failure reaches an HTTP client: one JSON shape for every error of every route, and the
// one table from gRPC status codes (what the services throw) to HTTP statuses.
import type { FastifyInstance, FastifyReply } from 'fastify';
import { Code, GatewayError } from '@sandgate/core';
import type { Logger } from '@sandgate/telemetry';
import { toStatus } from '../grpc-errors.ts';

/** gRPC status code → HTTP status (as Google's API design guide maps them). */
export const HTTP_STATUS_FOR_CODE: Readonly<Record<number, number>> = {
  [Code.OK]: 200,
  [Code.CANCELLED]: 499,
  [Code.UNKNOWN]: 500,
  [Code.INVALID_ARGUMENT]: 400,
  [Code.DEADLINE_EXCEEDED]: 504,
  [Code.NOT_FOUND]: 404,
  [Code.ALREADY_EXISTS]: 409,
  [Code.PERMISSION_DENIED]: 403,
  [Code.RESOURCE_EXHAUSTED]: 429,
  [Code.FAILED_PRECONDITION]: 412,
  [Code.ABORTED]: 409,
  [Code.OUT_OF_RANGE]: 400,
  [Code.UNIMPLEMENTED]: 501,
  [Code.INTERNAL]: 500,
  [Code.UNAVAILABLE]: 503,
  [Code.DATA_LOSS]: 500,
  [Code.UNAUTHENTICATED]: 401,
};

const CODE_NAMES: Readonly<Record<number, string>> = Object.fromEntries(Object.entries(Code).map(([name, n]) => [n, name]));

/** The body of every error answer: `{"error":{"code":"NOT_FOUND","grpc_code":5,"message":"…"}}`. */
export interface ErrorBody {
  error: { code: string; grpc_code: number; message: string };
}

/** The HTTP status and body for any thrown error (a GatewayError keeps its code and message). */
export function httpError(err: unknown, log?: Logger): { status: number; body: ErrorBody } {
  if (err instanceof HttpStatusError) {
    return { status: err.status, body: { error: { code: CODE_NAMES[err.code] ?? 'UNKNOWN', grpc_code: err.code, message: err.message } } };
  }
  const s = toStatus(err, log);
  return {
    status: HTTP_STATUS_FOR_CODE[s.code] ?? 500,
    body: { error: { code: CODE_NAMES[s.code] ?? 'UNKNOWN', grpc_code: s.code, message: s.details } },
  };
}

/** Answers the request with `err` in the one error shape. */
export function sendError(reply: FastifyReply, err: unknown, log?: Logger): FastifyReply {
  const { status, body } = httpError(err, log);
  if (status === 401) reply.header('www-authenticate', 'Bearer realm="sandgate"');
  return reply.code(status).type('application/json').send(body);
}

/**
 * A failure that exists only on the HTTP side and whose status the gRPC table cannot express
 * (e.g. 413: an exec's output passed its cap). The body still carries a gRPC code, so a client
 * that reads `grpc_code` sees the same meaning as over gRPC; the status is the explicit case.
 */
export class HttpStatusError extends Error {
  readonly status: number;
  readonly code: Code;
  constructor(status: number, code: Code, message: string) {
    super(message);
    this.name = 'HttpStatusError';
    this.status = status;
    this.code = code;
  }
}

/** An error fastify raised itself (schema validation, a body it cannot parse, a body too large). */
interface FastifyOwnError {
  statusCode?: number;
  code?: string;
  message: string;
  validation?: { instancePath?: string; keyword?: string; params?: Record<string, unknown>; message?: string }[];
  validationContext?: string;
}

/**
 * The message for a schema-validation failure: names the field, and for a field the API does not
 * have, says so (`unknown field 'colour' in body`), since fastify's own wording does not name it.
 */
export function validationMessage(err: FastifyOwnError): string {
  const where = err.validationContext ?? 'request';
  const first = err.validation?.[0];
  if (!first) return `invalid ${where}: ${err.message}`;
  const path = (first.instancePath ?? '').replace(/^\//, '').replace(/\//g, '.');
  if (first.keyword === 'additionalProperties' && typeof first.params?.additionalProperty === 'string') {
    const field = path ? `${path}.${first.params.additionalProperty}` : first.params.additionalProperty;
    return `unknown field '${field}' in ${where}: this API has no such field (see /openapi.json); remove it`;
  }
  if (first.keyword === 'required' && typeof first.params?.missingProperty === 'string') {
    const field = path ? `${path}.${first.params.missingProperty}` : first.params.missingProperty;
    return `field '${field}' is required in ${where}`;
  }
  return `${where}${path ? `.${path}` : ''} ${first.message ?? 'is invalid'}`;
}

/** fastify's own errors in the one shape: a status fastify chose maps to the code that means it. */
function fromFastify(err: FastifyOwnError): unknown {
  if (err.validation) return new GatewayError(Code.INVALID_ARGUMENT, validationMessage(err));
  const status = err.statusCode;
  if (status === undefined || status >= 500) return err;
  if (status === 413) return new HttpStatusError(413, Code.RESOURCE_EXHAUSTED, `request body too large: ${err.message}`);
  if (status === 415) return new HttpStatusError(415, Code.INVALID_ARGUMENT, `${err.message}; send Content-Type: application/json`);
  if (status === 404) return new GatewayError(Code.NOT_FOUND, err.message);
  return new GatewayError(Code.INVALID_ARGUMENT, err.message);
}

/**
 * Every failure of a route of `scope` in the one shape, including fastify's schema validation and
 * unparsable bodies, and routes that do not exist under it (404 NOT_FOUND).
 */
export function installErrorHandling(scope: FastifyInstance, log?: Logger): void {
  scope.setErrorHandler((err, _req, reply) => {
    const known = err instanceof GatewayError || err instanceof HttpStatusError;
    return sendError(reply, known ? err : fromFastify(err as FastifyOwnError), log);
  });
  scope.setNotFoundHandler((req, reply) =>
    sendError(reply, new GatewayError(Code.NOT_FOUND, `no route ${req.method} ${req.url.split('?')[0]}: see /openapi.json for the API's routes`), log),
  );
}
