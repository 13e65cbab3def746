// The REST error table and shape: every gRPC code has an HTTP status; the HTTP-only cases (413)
// keep a gRPC code in the body; fastify's validation errors name the field.
import { describe, expect, it } from 'vitest';
import { Code, GatewayError } from '@sandgate/core';
import { HTTP_STATUS_FOR_CODE, HttpStatusError, httpError, validationMessage } from '../src/api/rest/errors.ts';

describe('the one error table', () => {
  it('maps every gRPC code to an HTTP status', () => {
    for (const code of Object.values(Code)) expect(HTTP_STATUS_FOR_CODE[code], `code ${code}`).toBeGreaterThanOrEqual(200);
  });

  it('answers a GatewayError with its code, name and message', () => {
    expect(httpError(new GatewayError(Code.NOT_FOUND, 'sandbox not found'))).toEqual({
      status: 404,
      body: { error: { code: 'NOT_FOUND', grpc_code: Code.NOT_FOUND, message: 'sandbox not found' } },
    });
    expect(httpError(new GatewayError(Code.UNAUTHENTICATED, 'no token')).status).toBe(401);
    expect(httpError(new GatewayError(Code.FAILED_PRECONDITION, 'stopped')).status).toBe(412);
  });

  it('answers a grpc-js style error (what services emit on a call) by its code', () => {
    expect(httpError({ code: Code.RESOURCE_EXHAUSTED, details: 'too many execs' })).toMatchObject({ status: 429, body: { error: { code: 'RESOURCE_EXHAUSTED', message: 'too many execs' } } });
  });

  it('keeps an HTTP-only status with the gRPC code in the body', () => {
    expect(httpError(new HttpStatusError(413, Code.RESOURCE_EXHAUSTED, 'output past its cap'))).toEqual({
      status: 413,
      body: { error: { code: 'RESOURCE_EXHAUSTED', grpc_code: Code.RESOURCE_EXHAUSTED, message: 'output past its cap' } },
    });
  });

  it('answers anything else as INTERNAL without losing the message', () => {
    expect(httpError(new Error('boom'))).toMatchObject({ status: 500, body: { error: { code: 'INTERNAL', message: 'internal error: boom' } } });
  });
});

describe('validation messages', () => {
  it('names an unknown field, nested ones by their path', () => {
    expect(validationMessage({ message: 'x', validationContext: 'body', validation: [{ instancePath: '', keyword: 'additionalProperties', params: { additionalProperty: 'colour' } }] })).toContain(
      "unknown field 'colour' in body",
    );
    expect(
      validationMessage({ message: 'x', validationContext: 'body', validation: [{ instancePath: '/resources', keyword: 'additionalProperties', params: { additionalProperty: 'gpu' } }] }),
    ).toContain("unknown field 'resources.gpu'");
    expect(validationMessage({ message: 'x', validationContext: 'querystring', validation: [{ instancePath: '', keyword: 'additionalProperties', params: { additionalProperty: 'lable' } }] })).toContain(
      'in querystring',
    );
  });

  it('names a missing field and a wrong value', () => {
    expect(validationMessage({ message: 'x', validationContext: 'body', validation: [{ instancePath: '', keyword: 'required', params: { missingProperty: 'argv' } }] })).toBe(
      "field 'argv' is required in body",
    );
    expect(validationMessage({ message: 'x', validationContext: 'body', validation: [{ instancePath: '/timeout_seconds', keyword: 'type', message: 'must be integer' }] })).toBe(
      'body.timeout_seconds must be integer',
    );
  });
});
