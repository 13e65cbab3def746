// The one setting the entry point needs before anything else is loaded: where the compile cache
// is. The rest of the configuration is parsed by config.ts, which main.ts can only load once the
// cache is on (config.ts brings in the protocols and protobufjs).
import { compileCacheDirOf } from '@sandgate/protocols/contract';

export const bootCompileCacheDir = (): string | undefined => compileCacheDirOf(process.env);
