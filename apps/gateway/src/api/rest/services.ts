// /v1 routes: exposed services' management routes (helper D).
import type { FastifyInstance } from 'fastify';
import type { RestDeps } from './index.ts';

export function serviceRoutes(_app: FastifyInstance, _deps: RestDeps): void {}
