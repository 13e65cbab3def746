// Library surface of the supervisor package (the executable entry point is main.ts).
export { RingBuffer, MAIN_OUTPUT_CAPACITY } from './ring-buffer.ts';
export { killExecTree, findTaggedProcesses, type KillTreeOptions } from './kill-tree.ts';
export { loadConfig, stripSupervisorEnv, EXEC_ID_ENV, type SupervisorConfig } from './config.ts';
export { backoffDelay } from './backoff.ts';
export { preflight } from './preflight.ts';
export { createGatewayClient, callMetadata, type CallError, type GatewayCall, type GatewayClient } from './gateway-client.ts';
export { ConfinedLauncher, NATIVE_LAUNCHER, type LaunchCommand } from './workload/launcher.ts';
export { NATIVE_NETNS_AGENT } from './workload/netns.ts';
export { NATIVE_SPAWN_ADDON } from './workload/native-spawn.ts';
