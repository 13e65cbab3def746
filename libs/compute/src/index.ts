// @sandgate/compute: the driver interface and the drivers this build ships.
export type { ComputeDriver, ComputeHandle, ComputeState, ComputeUsage, GatewayTls, LaunchSpec, ObservedCompute } from './driver.ts';
export { SUPERVISOR_NODE_FLAGS } from './driver.ts';
export { LocalDriver, type LocalDriverOptions } from './local-driver.ts';
export type { LocalHandle } from './validate.ts';
export { DockerDriver, DEFAULT_IMAGE as DEFAULT_DOCKER_IMAGE, DEFAULT_NETWORK as DEFAULT_DOCKER_NETWORK, type DockerDriverOptions, type DockerHandle } from './docker-driver.ts';
export { ensureSandboxNetwork, type SandboxNetwork } from './docker/network.ts';
export { findHierarchies, parseMountinfo } from './cgroups.ts';
