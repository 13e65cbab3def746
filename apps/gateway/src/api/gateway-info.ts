// GetGatewayInfo (openshell-v1-more.md §4): always HEALTHY once the call is served, the gateway's
// version, and the one compute driver this replica runs. Gateway admins only, as upstream's
// platform_admin annotation (PERMISSION_DENIED for anyone else).
import { ServiceStatus, type GetGatewayInfoResponse } from '@sandgate/protocols';
import { Code, GatewayError, type Principal } from '@sandgate/core';

export function gatewayInfo(caller: Principal, version: string, driverName: string): GetGatewayInfoResponse {
  if (!caller.admin) throw new GatewayError(Code.PERMISSION_DENIED, 'GetGatewayInfo requires a gateway admin (an admin token or the OIDC admin role)');
  return {
    status: ServiceStatus.HEALTHY,
    gateway_version: version,
    // The drivers are built into sandgate: their version is the gateway's.
    compute_drivers: [{ name: driverName, capabilities: { driver_name: driverName, driver_version: version } }],
  };
}
