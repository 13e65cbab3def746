// Programmatic surface of @sandgate/cli, for tests and load tests.
export {
  createClient,
  isServiceError,
  statusName,
  readyConditionMessage,
  SandboxNotReadyError,
  type SandgateClient,
  type ClientOptions,
  type CreateSandboxInput,
  type ExecResult,
  type WaitForReadyOptions,
} from './client.ts';
export { normaliseEndpoint, DEFAULT_GATEWAY } from './args.ts';
export { resolveEndpoint, provisionTimeoutMs, CLIENT_OPTIONS } from './client-config.ts';
export { resolveReplicaConfig, resolveUpConfig } from './replica-config.ts';
export { run, main } from './main.ts';
