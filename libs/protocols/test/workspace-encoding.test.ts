// The worked encodings of openshell-v1-more.md §10.2 (workspace RPCs), byte for byte, through the
// schema the gateway serves; and GetGatewayInfoResponse's typed ComputeDriverInfo.
import { describe, expect, it } from 'vitest';
import { decodeMessage, encodeMessage, messageType } from '@sandgate/protocols';

const hex = (s: string) => Buffer.from(s.replace(/\s+/g, ''), 'hex');
const enc = (type: string, value: object) => encodeMessage(messageType(type), value);

describe('workspace RPC encodings', () => {
  it('CreateWorkspaceRequest{name="team-a", labels={"env":"dev"}}', () => {
    const bytes = hex('0a 06 74 65 61 6d 2d 61 12 0a 0a 03 65 6e 76 12 03 64 65 76');
    expect(enc('openshell.v1.CreateWorkspaceRequest', { name: 'team-a', labels: { env: 'dev' } })).toEqual(bytes);
    expect(decodeMessage(messageType('openshell.v1.CreateWorkspaceRequest'), bytes)).toEqual({ name: 'team-a', labels: { env: 'dev' } });
  });

  it('Workspace{metadata{id="w1", name="team-a", resource_version=1}, status{phase=ACTIVE}}', () => {
    const value = { metadata: { id: 'w1', name: 'team-a', resource_version: 1 }, status: { phase: 1 } };
    expect(enc('openshell.datamodel.v1.Workspace', value)).toEqual(hex('0a 0e 0a 02 77 31 12 06 74 65 61 6d 2d 61 28 01 12 02 08 01'));
  });

  it('AddWorkspaceMemberRequest{workspace="team-a", principal_subject="alice", role=ADMIN}', () => {
    expect(enc('openshell.v1.AddWorkspaceMemberRequest', { workspace: 'team-a', principal_subject: 'alice', role: 2 })).toEqual(
      hex('0a 06 74 65 61 6d 2d 61 12 05 61 6c 69 63 65 18 02'),
    );
  });

  it('DeleteWorkspaceResponse{deleted=true}', () => {
    expect(enc('openshell.v1.DeleteWorkspaceResponse', { deleted: true })).toEqual(hex('08 01'));
  });

  it('GetGatewayInfoResponse: status, version, one compute driver (fields 1-3; ComputeDriverInfo 1-2; capabilities 1-2)', () => {
    const value = { status: 1, gateway_version: '1', compute_drivers: [{ name: 'l', capabilities: { driver_name: 'l', driver_version: '1' } }] };
    expect(enc('openshell.v1.GetGatewayInfoResponse', value)).toEqual(hex('08 01 12 01 31 1a 0b 0a 01 6c 12 06 0a 01 6c 12 01 31'));
  });
});
