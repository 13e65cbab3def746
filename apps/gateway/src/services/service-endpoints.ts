// Exposed services: ExposeService, GetService, ListServices, DeleteService (openshell-v1-more.md
// §7) with upstream's checks, order and messages, plus sandgate's signed public links. gRPC
// (api/openshell-service.ts), REST (api/rest/services.ts) and the CLI all come here; the proxy
// (service-proxy.ts) resolves hosts here too. URLs are computed per response from the current
// configuration, never stored.
import { randomUUID } from 'node:crypto';
import type {
  DeleteServiceRequest,
  DeleteServiceResponse,
  ExposeServiceRequest,
  GetServiceRequest,
  ListServicesRequest,
  ListServicesResponse,
  ServiceEndpoint,
  ServiceEndpointResponse,
} from '@sandgate/protocols';
import {
  Code,
  GatewayError,
  invalid,
  serviceEndpointKey,
  serviceHostLabel,
  servicePageLimit,
  serviceUrl,
  validateServiceRoutingName,
  validateTargetPort,
  type Principal,
  type ServiceAddress,
  type ServiceUrlBase,
} from '@sandgate/core';
import { byCreationThenName, type SandboxStore, type ServiceEndpointStore, type StoredSandbox, type WorkspaceStore } from '@sandgate/store';
import type { Logger } from '@sandgate/telemetry';
import type { WorkspaceAccess } from '../api/access.ts';
import { DEFAULT_LINK_SECONDS, LINK_EXPIRY_PARAM, LINK_SIGNATURE_PARAM, MAX_LINK_SECONDS, type ServiceLinks } from './service-links.ts';

export interface ServiceEndpointDeps {
  endpoints: ServiceEndpointStore;
  store: SandboxStore;
  workspaceStore: WorkspaceStore;
  workspaces: WorkspaceAccess;
  links: ServiceLinks;
  /** Base domain, public scheme and port of service URLs (configuration, read per response). */
  urlBase: () => ServiceUrlBase;
  /** A line in the sandbox's gateway log stream (`sandgate logs`), as upstream's audit event. */
  note?: (sandboxId: string, message: string) => void;
  log: Logger;
}

/** A signed public link request: sandgate's own (REST and sandgate.v1.Sandgate/CreateServiceLink). */
export interface ServiceLinkRequest {
  sandbox?: string;
  service?: string;
  workspace?: string;
  /** 0: one hour; at most 7 days. */
  expires_in_seconds?: number;
}

export interface ServiceLinkResponse {
  url: string;
  expires_at_ms: number;
}

/** What the proxy needs to serve a host: the endpoint and its sandbox's record. */
export interface ResolvedService {
  endpoint: ServiceEndpoint | null;
  sandbox: StoredSandbox | null;
}

const notFoundEndpoint = () => new GatewayError(Code.NOT_FOUND, 'service endpoint not found');

export class ServiceEndpointService {
  private readonly deps: ServiceEndpointDeps;

  constructor(deps: ServiceEndpointDeps) {
    this.deps = deps;
  }

  async expose(req: ExposeServiceRequest, caller: Principal): Promise<ServiceEndpointResponse> {
    const ws = await this.activeWorkspace(caller, req.workspace, { refuseTerminating: true });
    const sandboxName = req.sandbox ?? '';
    const service = req.service ?? '';
    validateServiceRoutingName('sandbox', sandboxName, true);
    validateServiceRoutingName('service', service, false);
    const targetPort = validateTargetPort(req.target_port);
    const sandbox = await this.deps.store.getByName(ws, sandboxName);
    if (!sandbox) throw new GatewayError(Code.NOT_FOUND, 'sandbox not found');
    const sandboxId = sandbox.sandbox.metadata!.id!;
    const key = serviceEndpointKey(sandboxName, service);
    const current = await this.deps.endpoints.get(sandboxId, key);
    const endpoint: ServiceEndpoint = {
      metadata: {
        id: current?.metadata?.id ?? randomUUID(),
        name: key,
        labels: { sandbox: sandboxName },
        annotations: {},
        workspace: ws,
        created_at_ms: current?.metadata?.created_at_ms ?? Date.now(),
        deletion_timestamp_ms: 0,
      },
      sandbox_id: sandboxId,
      sandbox_name: sandboxName,
      service_name: service,
      target_port: targetPort,
      // Always true, whatever the request says (upstream stores it so).
      domain: true,
    };
    const stored = await this.deps.endpoints.upsert(endpoint, current?.metadata?.resource_version ?? 0);
    this.deps.log.info(current ? 'service endpoint updated' : 'service endpoint created', {
      sandboxId,
      endpoint: key,
      service,
      targetPort,
    });
    const response = this.response(stored);
    this.deps.note?.(sandboxId, `service endpoint ${key} ${current ? 'updated' : 'created'}: 127.0.0.1:${targetPort} at ${response.url}`);
    return response;
  }

  async get(req: GetServiceRequest, caller: Principal): Promise<ServiceEndpointResponse> {
    const { sandboxId, key } = await this.locate(req, caller);
    const endpoint = sandboxId ? await this.deps.endpoints.get(sandboxId, key) : null;
    if (!endpoint) throw notFoundEndpoint();
    return this.response(endpoint);
  }

  async list(req: ListServicesRequest, caller: Principal): Promise<ListServicesResponse> {
    if (req.all_workspaces && req.workspace) throw invalid('all_workspaces and workspace are mutually exclusive');
    const sandboxFilter = req.sandbox ?? '';
    validateServiceRoutingName('sandbox', sandboxFilter, false);
    const limit = servicePageLimit(req.limit);
    const offset = req.offset ?? 0;
    if (req.all_workspaces) {
      if (!caller.admin) throw new GatewayError(Code.PERMISSION_DENIED, 'platform admin role required for cross-workspace operations');
      if (sandboxFilter) throw invalid('sandbox filter is not supported with all_workspaces');
      const all: ServiceEndpoint[] = [];
      for (const w of await this.deps.workspaceStore.list()) {
        const count = await this.deps.endpoints.countWorkspace(w.name);
        if (count > 0) all.push(...(await this.deps.endpoints.listWorkspace(w.name, 0, count, (n) => this.deps.store.idByName(w.name, n))));
      }
      all.sort(
        (a, b) =>
          byCreationThenName(a, b) ||
          (a.metadata?.workspace ?? '').localeCompare(b.metadata?.workspace ?? '') ||
          (a.metadata?.id ?? '').localeCompare(b.metadata?.id ?? ''),
      );
      return { services: all.slice(offset, offset + limit).map((e) => this.response(e)) };
    }
    const ws = await this.activeWorkspace(caller, req.workspace, { refuseTerminating: false });
    if (sandboxFilter) {
      const id = await this.deps.store.idByName(ws, sandboxFilter);
      // An unknown sandbox simply has no endpoints.
      const found = id ? await this.deps.endpoints.listBySandbox(id) : [];
      return { services: found.slice(offset, offset + limit).map((e) => this.response(e)) };
    }
    const page = await this.deps.endpoints.listWorkspace(ws, offset, limit, (n) => this.deps.store.idByName(ws, n));
    return { services: page.map((e) => this.response(e)) };
  }

  async delete(req: DeleteServiceRequest, caller: Principal): Promise<DeleteServiceResponse> {
    const { ws, sandboxId, key } = await this.locate(req, caller);
    // A missing endpoint is deleted=false with OK, as upstream answers it.
    if (!sandboxId || !(await this.deps.endpoints.get(sandboxId, key))) return { deleted: false };
    const deleted = await this.deps.endpoints.delete(sandboxId, ws, key);
    if (deleted) {
      this.deps.log.info('service endpoint deleted', { sandboxId, endpoint: key });
      this.deps.note?.(sandboxId, `service endpoint ${key} deleted`);
    }
    return { deleted };
  }

  /**
   * A signed public link to an endpoint, valid for `expires_in_seconds` (default one hour, at
   * most 7 days): the same checks as GetService, then the signature (service-links.ts).
   */
  async createLink(req: ServiceLinkRequest, caller: Principal): Promise<ServiceLinkResponse> {
    const seconds = req.expires_in_seconds ?? 0;
    if (!Number.isInteger(seconds) || seconds < 0 || seconds > MAX_LINK_SECONDS) {
      throw invalid(`expires_in_seconds must be between 1 and ${MAX_LINK_SECONDS} (7 days), or 0 for one hour`);
    }
    const response = await this.get(req, caller);
    const endpoint = response.endpoint!;
    const expiresAtMs = Date.now() + (seconds || DEFAULT_LINK_SECONDS) * 1000;
    const address = addressOf(endpoint);
    const signature = this.deps.links.sign(this.hostOf(address), endpoint.metadata!.id!, expiresAtMs);
    const url = new URL(response.url!);
    url.searchParams.set(LINK_EXPIRY_PARAM, String(expiresAtMs));
    url.searchParams.set(LINK_SIGNATURE_PARAM, signature);
    return { url: url.toString(), expires_at_ms: expiresAtMs };
  }

  /** The service host (no port) of an address under the configured domain. */
  hostOf(address: ServiceAddress): string {
    return `${serviceHostLabel(address.workspace, address.sandbox, address.service)}.${this.deps.urlBase().domain}`;
  }

  /** The endpoint a parsed service host names and its sandbox's record (either may be null). */
  async resolve(address: ServiceAddress): Promise<ResolvedService> {
    const sandboxId = await this.deps.store.idByName(address.workspace, address.sandbox);
    if (!sandboxId) return { endpoint: null, sandbox: null };
    const endpoint = await this.deps.endpoints.get(sandboxId, serviceEndpointKey(address.sandbox, address.service));
    if (!endpoint) return { endpoint: null, sandbox: null };
    return { endpoint, sandbox: await this.deps.store.get(sandboxId) };
  }

  private response(endpoint: ServiceEndpoint): ServiceEndpointResponse {
    return { endpoint, url: serviceUrl(this.deps.urlBase(), addressOf(endpoint)) };
  }

  /** Get and Delete: workspace, names, then the sandbox id holding the key (null: none). */
  private async locate(req: { sandbox?: string; service?: string; workspace?: string }, caller: Principal) {
    const ws = await this.activeWorkspace(caller, req.workspace, { refuseTerminating: false });
    const sandboxName = req.sandbox ?? '';
    const service = req.service ?? '';
    validateServiceRoutingName('sandbox', sandboxName, true);
    validateServiceRoutingName('service', service, false);
    return { ws, sandboxId: await this.deps.store.idByName(ws, sandboxName), key: serviceEndpointKey(sandboxName, service) };
  }

  /**
   * Upstream's order (§2.4): membership first (PERMISSION_DENIED, so names cannot be probed), then
   * the workspace must exist; ExposeService alone refuses one being deleted.
   */
  private async activeWorkspace(caller: Principal, workspace: string | undefined, opts: { refuseTerminating: boolean }): Promise<string> {
    const ws = await this.deps.workspaces.requireMember(caller, workspace);
    const record = await this.deps.workspaceStore.get(ws);
    if (!record) throw new GatewayError(Code.NOT_FOUND, `workspace '${ws}' not found`);
    if (opts.refuseTerminating && record.phase === 'terminating') throw new GatewayError(Code.FAILED_PRECONDITION, `workspace '${ws}' is being deleted`);
    return ws;
  }
}

function addressOf(endpoint: ServiceEndpoint): ServiceAddress {
  return { workspace: endpoint.metadata?.workspace ?? '', sandbox: endpoint.sandbox_name ?? '', service: endpoint.service_name ?? '' };
}
