// /v1 routes: file upload and download through the supervisor (helper C).
import type { FastifyInstance } from 'fastify';
import type { RestDeps } from './index.ts';

export function fileRoutes(_app: FastifyInstance, _deps: RestDeps): void {}
