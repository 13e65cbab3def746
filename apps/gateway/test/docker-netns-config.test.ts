import { describe, expect, it } from 'vitest';
import { parseReplicaConfig } from '../src/index.ts';

const facts = { hostname: 'test', pid: 1, homedir: '/nonexistent', randomHex: () => '0000' };

describe('SANDGATE_DOCKER_NETNS_SPARES', () => {
  it('defaults to 2, takes 0 to 64, and refuses anything else naming the variable', () => {
    expect(parseReplicaConfig({}, {}, facts).dockerNetnsSpares).toBe(2);
    expect(parseReplicaConfig({}, { SANDGATE_DOCKER_NETNS_SPARES: '0' }, facts).dockerNetnsSpares).toBe(0);
    expect(parseReplicaConfig({}, { SANDGATE_DOCKER_NETNS_SPARES: '64' }, facts).dockerNetnsSpares).toBe(64);
    expect(() => parseReplicaConfig({}, { SANDGATE_DOCKER_NETNS_SPARES: '65' }, facts)).toThrow(/SANDGATE_DOCKER_NETNS_SPARES must be between 0 and 64, got '65'/);
    expect(() => parseReplicaConfig({}, { SANDGATE_DOCKER_NETNS_SPARES: 'two' }, facts)).toThrow(/SANDGATE_DOCKER_NETNS_SPARES must be a whole number from 0 to 64/);
  });
});
