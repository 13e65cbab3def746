#!/usr/bin/env node
// The `sandgate` command. Node runs the TypeScript sources directly (type stripping).
import { main } from '../src/main.ts';

await main(process.argv.slice(2));
