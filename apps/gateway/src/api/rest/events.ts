// /v1 routes: logs and watch as Server-Sent Events (helper A).
import type { FastifyInstance } from 'fastify';
import type { RestDeps } from './index.ts';

export function eventRoutes(_app: FastifyInstance, _deps: RestDeps): void {}
