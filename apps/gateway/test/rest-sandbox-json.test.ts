// The REST sandbox JSON: a create body becomes the CreateSandboxRequest the gRPC API takes (and
// the same validation judges it), and a record reads back with its opaque fields made readable.
import { describe, expect, it } from 'vitest';
import { decodeStruct, encodeStruct, SandboxPhase } from '@sandgate/protocols';
import { RETENTION_ANNOTATION, validateCreate } from '@sandgate/core';
import { createRequestOf, sandboxJson } from '../src/api/rest/sandbox-json.ts';

describe('createRequestOf', () => {
  it('maps every field to its place in CreateSandboxRequest', () => {
    const req = createRequestOf({
      name: 'web',
      workspace: 'team-a',
      image: 'python:3.12',
      command: ['python', '-m', 'http.server'],
      environment: { A: 'b' },
      tty: true,
      restart_policy: 'on-failure',
      resources: { cpu: '500m', memory: '256Mi', disk: '2Gi' },
      labels: { app: 'web' },
      annotations: { note: 'x' },
      ephemeral: true,
      log_level: 'debug',
    });
    expect(req).toMatchObject({
      name: 'web',
      workspace: 'team-a',
      labels: { app: 'web' },
      annotations: { note: 'x', [RETENTION_ANNOTATION]: 'ephemeral' },
      spec: { command: ['python', '-m', 'http.server'], environment: { A: 'b' }, tty: true, restart_policy: 2, log_level: 'debug', providers: [] },
    });
    expect(req.spec!.template!.image).toBe('python:3.12');
    expect(decodeStruct(req.spec!.template!.resources!)).toEqual({ limits: { cpu: '500m', memory: '256Mi', 'ephemeral-storage': '2Gi' } });
    expect(() => validateCreate(req)).not.toThrow();
  });

  it('leaves out what the body leaves out (the gateway fills the defaults)', () => {
    const req = createRequestOf({});
    expect(req.spec).toEqual({ environment: {}, providers: [], command: [] });
    expect(req.annotations).toEqual({});
  });
});

describe('sandboxJson', () => {
  it('names the phase and the restart policy, and decodes template.resources', () => {
    const json = sandboxJson({
      metadata: { id: 'i', name: 'n', workspace: 'w', created_at_ms: 5, resource_version: 3, labels: { a: 'b' }, annotations: { [RETENTION_ANNOTATION]: 'ephemeral' } },
      spec: {
        environment: {},
        providers: [],
        command: ['sleep', '1'],
        restart_policy: 3,
        template: { image: 'img', labels: {}, annotations: {}, environment: {}, resources: encodeStruct({ limits: { cpu: '1' } }) },
      },
      status: { conditions: [{ type: 'Ready', status: 'True', reason: 'R', message: 'M', last_transition_time: 't' }], phase: SandboxPhase.COMPLETED, exit_code: 3 },
    });
    expect(json).toEqual({
      metadata: { id: 'i', name: 'n', workspace: 'w', created_at_ms: 5, resource_version: 3, labels: { a: 'b' }, annotations: { [RETENTION_ANNOTATION]: 'ephemeral' }, ephemeral: true },
      spec: { image: 'img', command: ['sleep', '1'], environment: {}, tty: false, restart_policy: 'always', resources: { limits: { cpu: '1' } } },
      status: { phase: 'COMPLETED', conditions: [{ type: 'Ready', status: 'True', reason: 'R', message: 'M', last_transition_time: 't' }], exit_code: 3, restart_count: 0 },
    });
  });
});
