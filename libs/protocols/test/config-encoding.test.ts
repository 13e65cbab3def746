// The worked encodings of openshell-v1-more.md §5.1 and §11.2, byte for byte, through the
// schema the gateway serves (GetSandboxConfig, UpdateConfig).
import { describe, expect, it } from 'vitest';
import { decodeMessage, encodeMessage, messageType } from '@sandgate/protocols';

const hex = (s: string) => Buffer.from(s.replace(/\s+/g, ''), 'hex');
const enc = (type: string, value: object) => encodeMessage(messageType(type), value);

describe('config RPC encodings', () => {
  it('GetSandboxConfigRequest{sandbox_id="abc"}', () => {
    expect(enc('openshell.sandbox.v1.GetSandboxConfigRequest', { sandbox_id: 'abc' })).toEqual(hex('0a 03 61 62 63'));
  });

  it('GetSandboxConfigResponse with a setting, source, workspace and failure mode', () => {
    const bytes = hex(
      '22 1b 0a 11 6f 63 73 66 5f 6a 73 6f 6e 5f 65 6e 61 62 6c 65 64 12 06 0a 02 10 01 10 02 30 01 52 07 64 65 66 61 75 6c 74 5a 0b 66 61 69 6c 5f 63 6c 6f 73 65 64',
    );
    const value = {
      settings: { ocsf_json_enabled: { value: { bool_value: true }, scope: 2 } },
      policy_source: 1,
      workspace: 'default',
      policy_validation_failure_mode: 'fail_closed',
    };
    expect(enc('openshell.sandbox.v1.GetSandboxConfigResponse', value)).toEqual(bytes);
    expect(decodeMessage(messageType('openshell.sandbox.v1.GetSandboxConfigResponse'), bytes)).toMatchObject(value);
  });

  it('UpdateConfigRequest and Response', () => {
    expect(enc('openshell.v1.UpdateConfigRequest', { name: 'demo', setting_key: 'ocsf_json_enabled', setting_value: { bool_value: true } })).toEqual(
      hex('0a 04 64 65 6d 6f 1a 11 6f 63 73 66 5f 6a 73 6f 6e 5f 65 6e 61 62 6c 65 64 22 02 10 01'),
    );
    expect(enc('openshell.v1.UpdateConfigRequest', { name: 'demo', merge_operations: [{ remove_rule: { rule_name: 'web' } }], workspace: 'default' })).toEqual(
      hex('0a 04 64 65 6d 6f 3a 07 1a 05 0a 03 77 65 62 52 07 64 65 66 61 75 6c 74'),
    );
    expect(enc('openshell.v1.UpdateConfigResponse', { settings_revision: 3, deleted: true })).toEqual(hex('18 03 20 01'));
  });
});
