// Exposed services (openshell-v1-more.md §7.2, openshell-v1-behaviour.md §3): the name rules with
// upstream's messages, the record key, the host label `<ws>--<sandbox>[--<service>]` and its
// parsing back, and the URL a response carries. Pure: the store keeps records, the gateway serves
// the hosts.
import { invalid } from './status.ts';
import { MAX_NAME_LEN } from './limits.ts';

/** Upstream's default (and sandgate's) base domain of service hosts. */
export const DEFAULT_SERVICE_DOMAIN = 'openshell.localhost';

const DNS_LABEL = /^[a-z0-9]([-a-z0-9]*[a-z0-9])?$/;

/**
 * A `sandbox` or `service` name of the four service RPCs, checked in upstream's order and words.
 * `required`: empty is refused ("<f> is required"); otherwise empty passes (the unnamed endpoint,
 * or no filter).
 */
export function validateServiceRoutingName(field: 'sandbox' | 'service', value: string, required: boolean): void {
  if (value.length === 0) {
    if (required) throw invalid(`${field} is required`);
    return;
  }
  if (Buffer.byteLength(value) > MAX_NAME_LEN) throw invalid(`${field} must be at most ${MAX_NAME_LEN} characters for sandbox service routing`);
  if (value.includes('--')) throw invalid(`${field} must not contain '--'`);
  if (!DNS_LABEL.test(value)) throw invalid(`${field} must be a lowercase DNS label`);
}

/** `target_port` of ExposeService: 1–65535. */
export function validateTargetPort(port: number | undefined): number {
  const p = port ?? 0;
  if (!Number.isInteger(p) || p < 1 || p > 65535) throw invalid('target_port must be in 1..=65535');
  return p;
}

/** The record's name within its workspace: the sandbox name, or `<sandbox>--<service>`. */
export function serviceEndpointKey(sandbox: string, service: string): string {
  return service ? `${sandbox}--${service}` : sandbox;
}

/** The host's first label: `<workspace>--<sandbox>[--<service>]` (the workspace always present). */
export function serviceHostLabel(workspace: string, sandbox: string, service: string): string {
  return service ? `${workspace}--${sandbox}--${service}` : `${workspace}--${sandbox}`;
}

export interface ServiceAddress {
  workspace: string;
  sandbox: string;
  /** '' for the sandbox's unnamed endpoint. */
  service: string;
}

/**
 * The endpoint a request's Host names, or null when the host is not a service host of `domain`
 * (upstream's parse: strip the port, strip `.<domain>`, split on `--`; an empty part or a fourth
 * part is not a service host). Case-insensitive, as hosts are.
 */
export function parseServiceHost(hostHeader: string | undefined, domain: string): ServiceAddress | null {
  if (!hostHeader) return null;
  let host = hostHeader.trim().toLowerCase();
  if (host.startsWith('[')) return null; // an IPv6 literal is never a service host
  const colon = host.lastIndexOf(':');
  if (colon >= 0) host = host.slice(0, colon);
  if (host.endsWith('.')) host = host.slice(0, -1);
  const suffix = `.${domain}`;
  if (!host.endsWith(suffix)) return null;
  const label = host.slice(0, -suffix.length);
  if (label.includes('.')) return null;
  const parts = label.split('--');
  if (parts.length < 2 || parts.length > 3 || parts.some((p) => p.length === 0)) return null;
  return { workspace: parts[0]!, sandbox: parts[1]!, service: parts[2] ?? '' };
}

/** Is `host` (no port) one of the service hosts of `domain`, whatever it names? */
export function isServiceHost(hostHeader: string | undefined, domain: string): boolean {
  if (!hostHeader) return false;
  let host = hostHeader.trim().toLowerCase();
  const colon = host.lastIndexOf(':');
  if (colon >= 0 && !host.startsWith('[')) host = host.slice(0, colon);
  if (host.endsWith('.')) host = host.slice(0, -1);
  return host.endsWith(`.${domain}`);
}

/** Where service URLs point: the public scheme and port of the HTTP port (load balancer or replica). */
export interface ServiceUrlBase {
  domain: string;
  scheme: 'http' | 'https';
  port: number;
}

/** `<scheme>://<label>.<domain>[:<port>]/`, the port left out for http:80 and https:443. */
export function serviceUrl(base: ServiceUrlBase, address: ServiceAddress): string {
  const defaultPort = base.scheme === 'https' ? 443 : 80;
  const port = base.port === defaultPort ? '' : `:${base.port}`;
  return `${base.scheme}://${serviceHostLabel(address.workspace, address.sandbox, address.service)}.${base.domain}${port}/`;
}

/**
 * A base domain as configured: lowercased, outer dots trimmed, every label a DNS label (≤63) and
 * the whole name ≤253 (upstream's rule for its domain list). Null when it is not one.
 */
export function normaliseServiceDomain(raw: string): string | null {
  const domain = raw.trim().toLowerCase().replace(/^\.+|\.+$/g, '');
  if (domain.length === 0 || domain.length > 253) return null;
  const labels = domain.split('.');
  if (labels.length < 2) return null;
  return labels.every((l) => l.length <= 63 && DNS_LABEL.test(l)) ? domain : null;
}

/** ListServices' page size: 0 means 100, capped at 1000. */
export function servicePageLimit(limit: number | undefined): number {
  if (!limit) return 100;
  return Math.min(limit, 1000);
}
