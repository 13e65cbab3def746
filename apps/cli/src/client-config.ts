// The client commands' configuration, documented like the replica's: each option with its flag,
// its variable, its default and a line saying what it does (README.md's client table is checked
// against CLIENT_OPTIONS). The provisioning deadline is the replica's own option: one idea, one name.
//
// How a client reaches the gateway (resolveConnection): each of gateway, token, CA, client
// certificate and key comes from its flag, else its SANDGATE_* variable, else the client config
// file (`sandgate up` writes one: ~/.config/sandgate/config.json), else its default; field by
// field. The file is read at most once per command.
import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { ConfigError, PROVISION_TIMEOUT_OPTION, readOption, type OptionSpec } from '@sandgate/gateway/config';
import { DEFAULT_GATEWAY, UsageError, endpointWantsTls, normaliseEndpoint, type Env } from './args.ts';

const anyString = (raw: string) => raw.trim();

export const CLIENT_OPTIONS = {
  gateway: {
    flag: 'gateway',
    env: 'SANDGATE_GATEWAY',
    default: { text: `the config file's, else \`${DEFAULT_GATEWAY}\``, compute: () => DEFAULT_GATEWAY },
    description: 'the gateway client commands talk to: host:port, http://host:port, https://host:port or grpcs://host:port (TLS), or unix:/path',
    parse: (raw: string) => normaliseEndpoint(raw),
  },
  token: {
    flag: 'token',
    env: 'SANDGATE_TOKEN',
    default: { text: "the config file's, else none", compute: () => '' },
    description: 'API token sent as `authorization: Bearer` on every call (never printed)',
    parse: anyString,
  },
  ca: {
    flag: 'ca',
    env: 'SANDGATE_CA',
    default: { text: "the config file's, else the system's CAs", compute: () => '' },
    description: "PEM CA the gateway's certificate must chain to; with it, the gateway is dialled over TLS whatever the URL's scheme",
    parse: anyString,
  },
  clientCert: {
    flag: 'client-cert',
    env: 'SANDGATE_CLIENT_CERT',
    default: { text: "the config file's, else none", compute: () => '' },
    description: 'PEM client certificate presented to the gateway (mTLS); needs --client-key',
    parse: anyString,
  },
  clientKey: {
    flag: 'client-key',
    env: 'SANDGATE_CLIENT_KEY',
    default: { text: "the config file's, else none", compute: () => '' },
    description: 'PEM private key of --client-cert',
    parse: anyString,
  },
  tlsServerName: {
    flag: 'tls-server-name',
    env: 'SANDGATE_TLS_SERVER_NAME',
    default: { text: "the config file's, else the gateway URL's host", compute: () => '' },
    description: "the name the gateway's certificate is checked for (when the URL names an address the certificate does not)",
    parse: anyString,
  },
  config: {
    env: 'SANDGATE_CONFIG',
    default: { text: '$XDG_CONFIG_HOME/sandgate/config.json (~/.config/sandgate/config.json)', compute: () => '' },
    description: 'the client config file: JSON `{gateway, ca, token, clientCert, clientKey, tlsServerName}`, each used when no flag or variable gives it; its credentials only for its own gateway',
    parse: anyString,
  },
  provisionTimeoutMs: PROVISION_TIMEOUT_OPTION,
} satisfies Record<string, OptionSpec<unknown>>;

function resolve<T>(spec: OptionSpec<T>, flag: string | undefined, env: Env): T {
  try {
    const given = readOption(spec, flag, env);
    if (given === undefined && typeof spec.default !== 'string') throw new Error('resolve: option without a raw default');
    return spec.parse(given?.value ?? (spec.default as string), given?.what ?? 'default');
  } catch (err) {
    if (err instanceof ConfigError) throw new UsageError(err.message);
    throw err;
  }
}

/** The connection flags a client command takes (parseArgs names). */
export interface ConnectionFlags {
  gateway?: string;
  token?: string;
  ca?: string;
  'client-cert'?: string;
  'client-key'?: string;
  'tls-server-name'?: string;
}

/** `--gateway` and the TLS and token flags, as every client command takes them (parseArgs options). */
export const CONNECTION_OPTIONS = {
  gateway: { type: 'string' },
  token: { type: 'string' },
  ca: { type: 'string' },
  'client-cert': { type: 'string' },
  'client-key': { type: 'string' },
  'tls-server-name': { type: 'string' },
} as const;

/** The client config file's fields (all optional). */
export interface ClientConfigFile {
  gateway?: string;
  ca?: string;
  token?: string;
  clientCert?: string;
  clientKey?: string;
  /** The name the gateway's certificate is checked for (`up` writes localhost: its URL names 127.0.0.1). */
  tlsServerName?: string;
}
const CONFIG_FIELDS = ['gateway', 'ca', 'token', 'clientCert', 'clientKey', 'tlsServerName'] as const;

/** Where the client config file is: SANDGATE_CONFIG, else $XDG_CONFIG_HOME (or ~/.config)/sandgate/config.json. */
export function clientConfigPath(env: Env): string {
  if (env.SANDGATE_CONFIG) return path.resolve(env.SANDGATE_CONFIG);
  const base = env.XDG_CONFIG_HOME && path.isAbsolute(env.XDG_CONFIG_HOME) ? env.XDG_CONFIG_HOME : path.join(env.HOME || os.homedir(), '.config');
  return path.join(base, 'sandgate', 'config.json');
}

/**
 * The client config file, or {} when there is none. A file that is not a JSON object of strings,
 * or has a field sandgate does not know, is a usage error naming the file (never half-read).
 * Relative paths in it are relative to the file.
 */
export function readClientConfig(env: Env): ClientConfigFile {
  const file = clientConfigPath(env);
  let text: string;
  try {
    text = fs.readFileSync(file, 'utf8');
  } catch (err) {
    // Only a variable pointing at a file that is not there is a mistake; the default may be absent.
    if ((err as NodeJS.ErrnoException).code === 'ENOENT' && !env.SANDGATE_CONFIG) return {};
    throw new UsageError(`client config ${file}: cannot read it (${(err as NodeJS.ErrnoException).code ?? (err as Error).message})`);
  }
  let parsed: unknown;
  try {
    parsed = JSON.parse(text);
  } catch (err) {
    throw new UsageError(`client config ${file} is not JSON: ${(err as Error).message}`);
  }
  if (typeof parsed !== 'object' || parsed === null || Array.isArray(parsed)) throw new UsageError(`client config ${file} must be a JSON object`);
  const out: ClientConfigFile = {};
  for (const [k, v] of Object.entries(parsed)) {
    if (!(CONFIG_FIELDS as readonly string[]).includes(k)) {
      throw new UsageError(`client config ${file}: unknown field '${k}' (known: ${CONFIG_FIELDS.join(', ')})`);
    }
    if (typeof v !== 'string') throw new UsageError(`client config ${file}: '${k}' must be a string`);
    const key = k as (typeof CONFIG_FIELDS)[number];
    out[key] = key === 'ca' || key === 'clientCert' || key === 'clientKey' ? path.resolve(path.dirname(file), v) : v;
  }
  return out;
}

/** How a client reaches the gateway, resolved once. */
export interface Connection {
  /** host:port (or unix:path) as grpc-js dials it. */
  endpoint: string;
  /** The gateway as a URL a person (or an ssh ProxyCommand) can give back: https://… when TLS. */
  url: string;
  /** Bearer token; never printed. */
  token?: string;
  /** Null: plaintext. */
  tls: ConnectionTls | null;
}

export interface ConnectionTls {
  /** Absent: the system's CAs. */
  ca?: Buffer;
  cert?: Buffer;
  key?: Buffer;
  servername?: string;
  /** The files the above came from (absolute), to hand on (ssh-config's ProxyCommand). */
  caFile?: string;
  certFile?: string;
  keyFile?: string;
}

function readPemFile(file: string, what: string): Buffer {
  try {
    return fs.readFileSync(file);
  } catch (err) {
    throw new UsageError(`${what} ${file}: cannot read it (${(err as NodeJS.ErrnoException).code ?? (err as Error).message})`);
  }
}

/**
 * The connection: flags, else variables, else the client config file (read at most once), else
 * defaults; field by field. TLS when the URL is https:// or grpcs://, or a CA or client
 * certificate is given; an https gateway without a CA trusts the system's CAs.
 */
export function resolveConnection(flags: ConnectionFlags, env: Env): Connection {
  let file: ClientConfigFile | undefined;
  const fromFile = () => (file ??= readClientConfig(env));
  // Each field: what the flag or variable gives, else the file's (and where it came from).
  // The file's credentials belong to the file's gateway: they are used only when the gateway
  // comes from the file too, or names the same endpoint. A token or CA meant for one gateway is
  // never sent to another (a test cluster, a colleague's gateway) just because a file exists.
  let fileApplies = true;
  const pick = (spec: OptionSpec<unknown>, flag: string | undefined, field: keyof ClientConfigFile): { value: string; what: string } | undefined => {
    const given = readOption(spec, flag, env);
    if (given) return { value: given.value.trim(), what: given.what };
    const v = fileApplies ? fromFile()[field] : undefined;
    return v ? { value: v, what: `${field} in ${clientConfigPath(env)}` } : undefined;
  };
  const gateway = pick(CLIENT_OPTIONS.gateway, flags.gateway, 'gateway');
  if (gateway && !gateway.what.endsWith(clientConfigPath(env))) fileApplies = sameEndpoint(gateway.value, fromFile().gateway);
  const rawGateway = gateway?.value ?? DEFAULT_GATEWAY;
  let endpoint: string;
  try {
    endpoint = normaliseEndpoint(rawGateway);
  } catch (err) {
    if (err instanceof UsageError && gateway) throw new UsageError(`${gateway.what}: ${err.message}`);
    throw err;
  }
  const token = pick(CLIENT_OPTIONS.token, flags.token, 'token')?.value || undefined;
  const ca = pick(CLIENT_OPTIONS.ca, flags.ca, 'ca');
  const cert = pick(CLIENT_OPTIONS.clientCert, flags['client-cert'], 'clientCert');
  const key = pick(CLIENT_OPTIONS.clientKey, flags['client-key'], 'clientKey');
  const servername = pick(CLIENT_OPTIONS.tlsServerName, flags['tls-server-name'], 'tlsServerName')?.value || undefined;
  if (cert && !key) throw new UsageError(`${cert.what} needs a client key (--client-key or SANDGATE_CLIENT_KEY)`);
  if (key && !cert) throw new UsageError(`${key.what} needs a client certificate (--client-cert or SANDGATE_CLIENT_CERT)`);
  const wantsTls = endpointWantsTls(rawGateway) || ca !== undefined || cert !== undefined;
  if (!wantsTls) {
    return { endpoint, url: endpoint, token, tls: null };
  }
  if (endpoint.startsWith('unix:')) throw new UsageError(`gateway ${rawGateway}: TLS over a unix socket is not supported`);
  const caFile = ca ? path.resolve(ca.value) : undefined;
  const certFile = cert ? path.resolve(cert.value) : undefined;
  const keyFile = key ? path.resolve(key.value) : undefined;
  const tls: ConnectionTls = {
    ca: caFile ? readPemFile(caFile, ca!.what) : undefined,
    cert: certFile ? readPemFile(certFile, cert!.what) : undefined,
    key: keyFile ? readPemFile(keyFile, key!.what) : undefined,
    servername,
    caFile,
    certFile,
    keyFile,
  };
  return { endpoint, url: `https://${endpoint}`, token, tls };
}

/** Do two gateway URLs name the same endpoint (host:port after normalising)? */
function sameEndpoint(a: string, b: string | undefined): boolean {
  if (b === undefined) return false;
  try {
    return normaliseEndpoint(a) === normaliseEndpoint(b);
  } catch {
    return false;
  }
}

/** The endpoint (host:port) from `--gateway`, else SANDGATE_GATEWAY, else the config file, else 127.0.0.1:8080. */
export function resolveEndpoint(flag: string | undefined, env: Env): string {
  const given = readOption(CLIENT_OPTIONS.gateway, flag, env);
  if (given) return resolve(CLIENT_OPTIONS.gateway, flag, env);
  return normaliseEndpoint(readClientConfig(env).gateway ?? DEFAULT_GATEWAY);
}

/** How long `sandbox create`/`start` wait for Ready. */
export function provisionTimeoutMs(env: Env): number {
  return resolve(CLIENT_OPTIONS.provisionTimeoutMs, undefined, env);
}
