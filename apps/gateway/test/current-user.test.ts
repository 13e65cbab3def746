// GetCurrentUser speaks upstream's wire shape (shared/spec/openshell-v1-more.md §3): the worked
// encoding of the spec, and the response built from each kind of principal.
import { describe, expect, it } from 'vitest';
import { encodeMessage, messageType } from '@sandgate/protocols';
import { LOCAL_DEV_PRINCIPAL } from '@sandgate/core';
import { currentUser } from '../src/api/openshell-service.ts';
import { tokenPrincipal } from '../src/auth/api-tokens.ts';

describe('GetCurrentUser', () => {
  it("encodes as upstream's worked example", () => {
    const bytes = encodeMessage(messageType('openshell.v1.GetCurrentUserResponse'), {
      subject: 'u',
      roles: ['openshell-user'],
      scopes: ['openshell:all'],
      identity_provider: 'local_dev',
    });
    expect(bytes.toString('hex')).toBe('0a01751a0e6f70656e7368656c6c2d75736572220d6f70656e7368656c6c3a616c6c2a096c6f63616c5f646576');
    expect(encodeMessage(messageType('openshell.v1.GetCurrentUserRequest'), {}).length).toBe(0);
  });

  it('answers from the principal: local dev as upstream, API tokens as api_token with their role', () => {
    expect(currentUser(LOCAL_DEV_PRINCIPAL)).toEqual({
      subject: 'unauthenticated-local-dev',
      display_name: 'Unauthenticated Local Dev',
      roles: ['openshell-user', 'openshell-admin'],
      scopes: ['openshell:all'],
      identity_provider: 'local_dev',
    });
    const record = { id: 'abc', name: '', workspace: 'w', role: 'member' as const, createdAtMs: 1, expiresAtMs: 0 };
    expect(currentUser(tokenPrincipal(record))).toEqual({ subject: 'token:abc', display_name: 'token abc', roles: ['member'], scopes: [], identity_provider: 'api_token' });
    expect(tokenPrincipal({ ...record, role: 'admin' })).toMatchObject({ admin: true, roles: ['admin'], workspace: 'w' });
  });
});
