// /v1 routes: sandboxes: create / list / get / delete / stop / start (helper A).
import type { FastifyInstance } from 'fastify';
import type { RestDeps } from './index.ts';

export function sandboxRoutes(_app: FastifyInstance, _deps: RestDeps): void {}
