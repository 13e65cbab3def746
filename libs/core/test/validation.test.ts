import { describe, expect, it } from 'vitest';
import {
  Code,
  GatewayError,
  decideAccess,
  generateName,
  matchesSelector,
  normaliseExit,
  parseLabelSelector,
  Phase,
  validateCreate,
  validateExec,
  validateSandboxName,
} from '@sandgate/core';

function rejects(fn: () => unknown, code: number, message: string | RegExp) {
  try {
    fn();
  } catch (err) {
    expect(err).toBeInstanceOf(GatewayError);
    expect((err as GatewayError).code).toBe(code);
    if (typeof message === 'string') expect((err as GatewayError).message).toBe(message);
    else expect((err as GatewayError).message).toMatch(message);
    return;
  }
  throw new Error('expected a GatewayError');
}

const emptySpec = () => ({ environment: {}, providers: [] as string[], command: [] as string[], tty: undefined as boolean | undefined, restart_policy: undefined as number | undefined });
const createReq = (over: Record<string, unknown> = {}) => ({ spec: emptySpec(), labels: {}, annotations: {}, ...over });

describe('CreateSandbox validation', () => {
  it('requires a spec', () => rejects(() => validateCreate({ labels: {}, annotations: {} }), Code.INVALID_ARGUMENT, 'spec is required'));

  it('defaults the main command to a login shell with a tty', () => {
    const { request, workspace } = validateCreate(createReq());
    expect(request.spec.command).toEqual(['/bin/bash', '-l']);
    expect(request.spec.tty).toBe(true);
    expect(request.spec.restart_policy).toBe(1);
    expect(workspace).toBe('default');
  });

  it('checks names: length, DNS label, no double dash', () => {
    rejects(() => validateSandboxName('a'.repeat(20)), Code.INVALID_ARGUMENT, 'name exceeds maximum length (20 > 19)');
    rejects(() => validateSandboxName('Upper'), Code.INVALID_ARGUMENT, /name 'Upper' is invalid/);
    rejects(() => validateSandboxName('-lead'), Code.INVALID_ARGUMENT, /is invalid/);
    rejects(() => validateSandboxName('a--b'), Code.INVALID_ARGUMENT, /must not contain '--'/);
    expect(() => validateSandboxName('my-box-1')).not.toThrow();
  });

  it('checks labels and annotations like Kubernetes', () => {
    rejects(() => validateCreate(createReq({ labels: { 'bad key': 'v' } })), Code.INVALID_ARGUMENT, /label key 'bad key' is invalid/);
    rejects(() => validateCreate(createReq({ labels: { k: 'bad value!' } })), Code.INVALID_ARGUMENT, /invalid value/);
    rejects(() => validateCreate(createReq({ labels: { 'Bad_Prefix/k': 'v' } })), Code.INVALID_ARGUMENT, /invalid prefix/);
    expect(() => validateCreate(createReq({ labels: { 'example.com/team': 'a.b-c_d', empty: '' } }))).not.toThrow();
    rejects(() => validateCreate(createReq({ annotations: { k: 'x'.repeat(8193) } })), Code.INVALID_ARGUMENT, /annotation 'k' value exceeds/);
  });

  it('checks the sandbox environment', () => {
    const spec = { ...emptySpec(), environment: { '1BAD': 'x' } };
    rejects(() => validateCreate(createReq({ spec })), Code.INVALID_ARGUMENT, 'environment keys must match ^[A-Za-z_][A-Za-z0-9_]*$');
    const reserved = { ...emptySpec(), environment: { OPENSHELL_X: 'x' } };
    rejects(() => validateCreate(createReq({ spec: reserved })), Code.INVALID_ARGUMENT, /reserved/);
    const newline = { ...emptySpec(), environment: { A: 'x\ny' } };
    rejects(() => validateCreate(createReq({ spec: newline })), Code.INVALID_ARGUMENT, /must not contain NUL, CR or LF/);
  });

  it('checks the main command', () => {
    rejects(() => validateCreate(createReq({ spec: { ...emptySpec(), command: ['', 'x'] } })), Code.INVALID_ARGUMENT, 'spec.command[0] must not be empty');
    rejects(() => validateCreate(createReq({ spec: { ...emptySpec(), command: ['a\0b'] } })), Code.INVALID_ARGUMENT, /must not contain NUL/);
    rejects(
      () => validateCreate(createReq({ spec: { ...emptySpec(), command: Array(257).fill('x') } })),
      Code.INVALID_ARGUMENT,
      /too many arguments \(257 > 256\)/,
    );
  });

  it('rejects unknown providers and restart policies', () => {
    rejects(() => validateCreate(createReq({ spec: { ...emptySpec(), providers: ['gh'] } })), Code.FAILED_PRECONDITION, "provider 'gh' not found");
    rejects(() => validateCreate(createReq({ spec: { ...emptySpec(), restart_policy: 7 } })), Code.INVALID_ARGUMENT, /restart_policy 7 is unknown/);
  });
});

describe('Exec validation', () => {
  const exec = (over: Record<string, unknown> = {}) => ({ sandbox_id: 'abc', command: ['echo'], environment: {}, ...over });
  it('requires sandbox_id and command', () => {
    rejects(() => validateExec(exec({ sandbox_id: '' })), Code.INVALID_ARGUMENT, 'sandbox_id is required');
    rejects(() => validateExec(exec({ command: [] })), Code.INVALID_ARGUMENT, 'command is required');
  });
  it('checks environment keys and values', () => {
    rejects(() => validateExec(exec({ environment: { 'A-B': '1' } })), Code.INVALID_ARGUMENT, 'environment keys must match ^[A-Za-z_][A-Za-z0-9_]*$');
    rejects(() => validateExec(exec({ environment: { A: 'a\rb' } })), Code.INVALID_ARGUMENT, /must not contain NUL, CR or LF/);
    expect(() => validateExec(exec({ environment: { OPENSHELL_PYFUNC_B64: 'x' } }))).not.toThrow();
  });
  it('checks argv and workdir limits', () => {
    rejects(() => validateExec(exec({ command: Array(1025).fill('x') })), Code.INVALID_ARGUMENT, /too many arguments/);
    rejects(() => validateExec(exec({ command: ['x'.repeat(32 * 1024 + 1)] })), Code.INVALID_ARGUMENT, /command\[0\] exceeds maximum length/);
    rejects(() => validateExec(exec({ workdir: '/a\nb' })), Code.INVALID_ARGUMENT, 'workdir must not contain NUL, CR or LF');
    expect(validateExec(exec({ command: ['sh', '-c', 'echo a\necho b'] }))).toBe('abc');
  });
});

describe('label selectors', () => {
  it('parses equality terms and matches', () => {
    const sel = parseLabelSelector('app=web, tier=db');
    expect(matchesSelector({ app: 'web', tier: 'db', x: 'y' }, sel)).toBe(true);
    expect(matchesSelector({ app: 'web' }, sel)).toBe(false);
    expect(parseLabelSelector('')).toEqual([]);
  });
  it('rejects what it cannot parse', () => {
    rejects(() => parseLabelSelector('app'), Code.INVALID_ARGUMENT, /expected key=value/);
    rejects(() => parseLabelSelector('app!=web'), Code.INVALID_ARGUMENT, /invalid/);
  });
});

describe('access rule', () => {
  it('allows Ready, and Completed/Error only while the session is live', () => {
    expect(decideAccess(Phase.READY, false).allowed).toBe(true);
    expect(decideAccess(Phase.COMPLETED, true).allowed).toBe(true);
    expect(decideAccess(Phase.ERROR, true).allowed).toBe(true);
    expect(decideAccess(Phase.COMPLETED, false)).toEqual({ allowed: false, message: 'sandbox is not ready' });
    for (const p of [Phase.PROVISIONING, Phase.STOPPED, Phase.STOPPING, Phase.DELETING, Phase.STARTING]) {
      expect(decideAccess(p, true).allowed).toBe(false);
    }
  });
});

describe('names and exit codes', () => {
  it('generates routable names', () => {
    let i = 0;
    const name = generateName((n) => (i++ * 7) % n);
    expect(() => validateSandboxName(name)).not.toThrow();
  });
  it('normalises signal exits to 128+N', () => {
    expect(normaliseExit(null, 15)).toBe(143);
    expect(normaliseExit(3, null)).toBe(3);
  });
});
