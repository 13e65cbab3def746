// What a test client presents to a gateway it did not start itself: the bearer token and the TLS
// trust of every gateway address a harness started (a Cluster's replicas, a balancer in front of
// them). openShellClient and runCli look an address up here, so a test written before
// authentication and TLS existed keeps working against a gateway that has both.
export interface GatewayCredentials {
  /** Sent as `authorization: Bearer <token>`. */
  token?: string;
  /** TLS: the CA that signed the gateway's certificate; absent: plaintext. */
  ca?: Buffer;
  /** mTLS client certificate and key. */
  cert?: Buffer;
  key?: Buffer;
  /** The name the gateway's certificate is checked for (default: the address's host). */
  servername?: string;
  /** Files of the above, for the CLI (`SANDGATE_CA`, `SANDGATE_CLIENT_CERT`, `SANDGATE_CLIENT_KEY`). */
  caFile?: string;
  certFile?: string;
  keyFile?: string;
}

const registered = new Map<string, GatewayCredentials>();

/** Remembers the credentials for `address` (host:port) until forgotten. */
export function registerGateway(address: string, credentials: GatewayCredentials): void {
  registered.set(stripScheme(address), credentials);
}

export function forgetGateway(address: string): void {
  registered.delete(stripScheme(address));
}

/** The credentials registered for `address`, or none. */
export function credentialsFor(address: string): GatewayCredentials {
  return registered.get(stripScheme(address)) ?? {};
}

/** The CLI's environment for these credentials (only the variables that apply). */
export function cliEnv(credentials: GatewayCredentials): Record<string, string> {
  const env: Record<string, string> = {};
  if (credentials.token) env.SANDGATE_TOKEN = credentials.token;
  if (credentials.caFile) env.SANDGATE_CA = credentials.caFile;
  if (credentials.certFile) env.SANDGATE_CLIENT_CERT = credentials.certFile;
  if (credentials.keyFile) env.SANDGATE_CLIENT_KEY = credentials.keyFile;
  if (credentials.servername) env.SANDGATE_TLS_SERVER_NAME = credentials.servername;
  return env;
}

function stripScheme(address: string): string {
  return address.replace(/^(https?|grpcs?):\/\//, '').replace(/\/$/, '');
}
