// /v1 routes: exec, unary, JSON in and out (helper A).
import type { FastifyInstance } from 'fastify';
import type { RestDeps } from './index.ts';

export function execRoutes(_app: FastifyInstance, _deps: RestDeps): void {}
