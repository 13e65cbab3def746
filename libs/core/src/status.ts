// gRPC status codes as plain numbers, so the core stays free of any transport dependency.
export const Code = {
  OK: 0,
  CANCELLED: 1,
  UNKNOWN: 2,
  INVALID_ARGUMENT: 3,
  DEADLINE_EXCEEDED: 4,
  NOT_FOUND: 5,
  ALREADY_EXISTS: 6,
  PERMISSION_DENIED: 7,
  RESOURCE_EXHAUSTED: 8,
  FAILED_PRECONDITION: 9,
  ABORTED: 10,
  OUT_OF_RANGE: 11,
  UNIMPLEMENTED: 12,
  INTERNAL: 13,
  UNAVAILABLE: 14,
  DATA_LOSS: 15,
  UNAUTHENTICATED: 16,
} as const;
export type Code = (typeof Code)[keyof typeof Code];

const CODE_NAMES = Object.fromEntries(Object.entries(Code).map(([name, code]) => [code, name])) as Record<number, string>;

/** `UNAVAILABLE` for 14: a status's name, `UNKNOWN` for a number outside the spec's. */
export function codeName(code: number): string {
  return CODE_NAMES[code] ?? 'UNKNOWN';
}

/** An error meant for the client: a status code and a message that says what to fix. */
export class GatewayError extends Error {
  readonly code: Code;
  constructor(code: Code, message: string) {
    super(message);
    this.name = 'GatewayError';
    this.code = code;
  }
}

export const invalid = (message: string) => new GatewayError(Code.INVALID_ARGUMENT, message);
export const notFound = (message = 'sandbox not found') => new GatewayError(Code.NOT_FOUND, message);
