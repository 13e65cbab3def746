// How a failure reaches an HTTP client: one JSON shape for every error of every route, and the
// one table from gRPC status codes (what the services throw) to HTTP statuses.
import type { FastifyReply } from 'fastify';
import { Code } from '@sandgate/core';
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
