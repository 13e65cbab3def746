// /v1 routes: exec over WebSocket (helper B).
import type { FastifyInstance } from 'fastify';
import type { RestDeps } from './index.ts';

export function execWsRoutes(_app: FastifyInstance, _deps: RestDeps): void {}
