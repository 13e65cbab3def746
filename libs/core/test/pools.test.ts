import { describe, expect, it } from 'vitest';
import { encodeStruct } from '@sandgate/protocols';
import { checkClaimMatchesPool, createMatchesPoolTemplate, isPoolWorkspace, poolMayStartMembers, LOCAL_DEV_PRINCIPAL, mayUseWorkspace, poolWorkspace, validatePoolSettings, type PoolDefinition } from '../src/index.ts';

const memory = encodeStruct({ limits: { memory: '256Mi' } });
const pool: PoolDefinition = {
  name: 'warm',
  size: 2,
  template: { image: '', resources: memory.toString('base64'), policy: Buffer.from([0x0a, 0x00]).toString('base64') },
  generation: 1,
  createdAtMs: 0,
  failures: 0,
  retryAtMs: 0,
  lastError: '',
  autoMatch: true,
};
const check = (spec: Parameters<typeof checkClaimMatchesPool>[0]) => () => checkClaimMatchesPool(spec, pool, 'host');

describe('warm pools: what a claim may ask for', () => {
  it('takes what the claim applies, and the pool template restated', () => {
    expect(check({})).not.toThrow();
    expect(check({ template: { image: 'host', resources: encodeStruct({ limits: { memory: '256Mi' } }) }, policy: Buffer.from([0x0a, 0x00]), log_level: 'info' })).not.toThrow();
    // The same limits written another way are the same limits.
    expect(check({ template: { resources: encodeStruct({ limits: { memory: `${256 * 1024 * 1024}` } }) } })).not.toThrow();
  });

  it('refuses what the members were not launched with, naming the field', () => {
    expect(check({ template: { image: 'other' } })).toThrow(/spec\.template\.image 'other' differs from pool 'warm''s image 'host'/);
    expect(check({ template: { resources: encodeStruct({ limits: { memory: '512Mi' } }) } })).toThrow(/spec\.template\.resources differ/);
    expect(check({ policy: Buffer.from([0x0a, 0x01]) })).toThrow(/spec\.policy differs/);
    expect(check({ template: { runtime_class_name: 'gvisor' } })).toThrow(/spec\.template\.runtime_class_name cannot be set/);
    expect(check({ template: { agent_socket: '/x' } })).toThrow(/spec\.template\.agent_socket/);
    expect(check({ template: { driver_config: Buffer.from([1]) } })).toThrow(/spec\.template\.driver_config/);
    expect(check({ template: { user_namespaces: true } })).toThrow(/spec\.template\.user_namespaces/);
    expect(check({ log_level: 'debug' })).toThrow(/spec\.log_level 'debug'/);
  });
});

describe('warm pools: names, sizes, and their workspace', () => {
  it('checks a pool name as a sandbox name and the size against the cap', () => {
    expect(validatePoolSettings('warm', 3)).toEqual({ name: 'warm', size: 3 });
    expect(validatePoolSettings('warm', undefined)).toEqual({ name: 'warm', size: 0 });
    expect(() => validatePoolSettings('', 1)).toThrow(/name is required/);
    expect(() => validatePoolSettings('a--b', 1)).toThrow(/pool name 'a--b' is invalid/);
    expect(() => validatePoolSettings('warm', -1)).toThrow(/out of range/);
    expect(() => validatePoolSettings('warm', 1.5)).toThrow(/out of range/);
  });

  it('a pool workspace is usable by no one, admins included', () => {
    const ws = poolWorkspace('warm');
    expect(isPoolWorkspace(ws)).toBe(true);
    expect(isPoolWorkspace('default')).toBe(false);
    expect(mayUseWorkspace({ ...LOCAL_DEV_PRINCIPAL, admin: true }, ws)).toBe(false);
    expect(mayUseWorkspace({ ...LOCAL_DEV_PRINCIPAL, admin: false, workspace: ws }, ws)).toBe(false);
    expect(mayUseWorkspace({ ...LOCAL_DEV_PRINCIPAL, admin: false }, ws, 'admin')).toBe(false);
  });
});

describe('warm pools: back-off', () => {
  it('starts members only once the retry time has passed', () => {
    expect(poolMayStartMembers(pool, 1_000)).toBe(true);
    const failing = { ...pool, failures: 2, retryAtMs: 5_000, lastError: 'no such image' };
    expect(poolMayStartMembers(failing, 4_999)).toBe(false);
    expect(poolMayStartMembers(failing, 5_000)).toBe(true);
  });
});

describe('warm pools: a create naming no pool matches an auto-match pool only by its exact template', () => {
  const plain: PoolDefinition = { ...pool, template: { image: '', resources: '', policy: '' } };
  const matches = (spec: Parameters<typeof createMatchesPoolTemplate>[0], p = pool) => createMatchesPoolTemplate(spec, p, 'host');

  it('the same image, limits (however written) and policy match', () => {
    expect(matches({ template: { resources: memory }, policy: Buffer.from([0x0a, 0x00]) })).toBe(true);
    expect(matches({ template: { image: 'host', resources: encodeStruct({ limits: { memory: `${256 * 1024 * 1024}` } }) }, policy: Buffer.from([0x0a, 0x00]), log_level: 'info' })).toBe(true);
    expect(matches({}, plain)).toBe(true);
    expect(matches({ template: { image: 'host' } }, plain)).toBe(true);
  });

  it('unset means what a cold create gets, not the pool\'s: no limits, no policy, the default image', () => {
    expect(matches({})).toBe(false); // the pool has limits and a policy the create did not ask for
    expect(matches({ template: { resources: memory } })).toBe(false);
    expect(matches({}, { ...plain, template: { ...plain.template, image: 'other:1' } })).toBe(false);
  });

  it('anything else asked for is no match', () => {
    expect(matches({ template: { image: 'other:1' } }, plain)).toBe(false);
    expect(matches({ template: { resources: encodeStruct({ limits: { memory: '256Mi', cpu: '1' } }) }, policy: Buffer.from([0x0a, 0x00]) })).toBe(false);
    expect(matches({ policy: Buffer.from([0x0a, 0x00]) }, plain)).toBe(false);
    expect(matches({ template: { runtime_class_name: 'gvisor' } }, plain)).toBe(false);
    expect(matches({ template: { user_namespaces: true } }, plain)).toBe(false);
    expect(matches({ template: { driver_config: Buffer.from([1]) } }, plain)).toBe(false);
    expect(matches({ log_level: 'debug' }, plain)).toBe(false);
  });
});
