// The client commands' configuration, documented like the replica's: each option with its flag,
// its variable, its default and a line saying what it does (README.md's client table is checked
// against CLIENT_OPTIONS). The provisioning deadline is the replica's own option: one idea, one name.
import { ConfigError, PROVISION_TIMEOUT_OPTION, readOption, type OptionSpec } from '@sandgate/gateway/config';
import { DEFAULT_GATEWAY, UsageError, normaliseEndpoint, type Env } from './args.ts';

export const CLIENT_OPTIONS = {
  gateway: {
    flag: 'gateway',
    env: 'SANDGATE_GATEWAY',
    default: DEFAULT_GATEWAY,
    description: 'the gateway client commands talk to: host:port, http://host:port or unix:/path',
    parse: (raw: string) => normaliseEndpoint(raw),
  },
  provisionTimeoutMs: PROVISION_TIMEOUT_OPTION,
} satisfies Record<string, OptionSpec<unknown>>;

function resolve<T>(spec: OptionSpec<T>, flag: string | undefined, env: Env): T {
  try {
    const given = readOption(spec, flag, env);
    return spec.parse(given?.value ?? (spec.default as string), given?.what ?? 'default');
  } catch (err) {
    if (err instanceof ConfigError) throw new UsageError(err.message);
    throw err;
  }
}

/** The endpoint from `--gateway`, else SANDGATE_GATEWAY, else 127.0.0.1:8080. */
export function resolveEndpoint(flag: string | undefined, env: Env): string {
  return resolve(CLIENT_OPTIONS.gateway, flag, env);
}

/** How long `sandbox create`/`start` wait for Ready. */
export function provisionTimeoutMs(env: Env): number {
  return resolve(CLIENT_OPTIONS.provisionTimeoutMs, undefined, env);
}
