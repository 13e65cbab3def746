// What every /v1 route of the REST core shares: the gate as a hook (the caller is established
// before the body is parsed or validated, so an unauthenticated request learns nothing, not even
// that its body is wrong), and the schemas of the error body and of the sandbox address.
import type { FastifyRequest, onRequestHookHandler } from 'fastify';
import { Type } from '@sinclair/typebox';
import { GatewayError, Code, type Principal } from '@sandgate/core';
import type { Authenticator } from '../../auth/authenticator.ts';
import { httpCaller } from './gate.ts';

const callers = new WeakMap<FastifyRequest, Principal>();

/** An onRequest hook that authenticates (401 in the one shape otherwise) and keeps the caller. */
export function authenticate(authenticator: Authenticator): onRequestHookHandler {
  return async (req) => {
    callers.set(req, await httpCaller(authenticator, req.headers));
  };
}

/** The caller `authenticate` established for this request. */
export function callerOf(req: FastifyRequest): Principal {
  const caller = callers.get(req);
  if (!caller) throw new GatewayError(Code.INTERNAL, 'route has no authenticate hook');
  return caller;
}

export const ErrorSchema = Type.Object(
  {
    error: Type.Object({
      code: Type.String({ description: 'The gRPC status name, e.g. NOT_FOUND' }),
      grpc_code: Type.Integer({ description: 'The gRPC status number' }),
      message: Type.String({ description: 'What went wrong and how to fix it' }),
    }),
  },
  { title: 'Error', description: 'The body of every error answer' },
);

/** The error answers every authenticated sandbox route can give. */
export const ERROR_RESPONSES = {
  400: ErrorSchema,
  401: ErrorSchema,
  403: ErrorSchema,
  404: ErrorSchema,
  412: ErrorSchema,
  429: ErrorSchema,
  500: ErrorSchema,
  503: ErrorSchema,
} as const;

export const NameParams = Type.Object({ name: Type.String({ description: 'The sandbox name', minLength: 1 }) }, { additionalProperties: false });

export const WorkspaceField = Type.String({ description: "The sandbox's workspace (default: the caller's own), like the CLI's --workspace" });
