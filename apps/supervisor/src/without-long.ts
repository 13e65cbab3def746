// The supervisor runs protobufjs without long.js. protobufjs loads long.js (a 64-bit integer class
// that compiles a WebAssembly module of its own) whenever it can be required; without it, 64-bit
// fields decode to JS numbers, exact below 2^53, which is what every sandgate codec turns them
// into anyway (codec.ts, `longs: Number`; our int64s are revisions, sizes and millisecond times).
// So the supervisor resolves protobufjs' `long` to a module that exports nothing: about 0.3 MiB
// and 2–4 ms less for every sandbox (BENCHMARKS.md, "Static codecs in the supervisor").
// Imported before anything that loads protobufjs (main.ts).
import module from 'node:module';

const NO_LONG = new URL('./no-long.cjs', import.meta.url).href;

module.registerHooks({
  resolve(specifier, context, nextResolve) {
    if (specifier === 'long' && context.parentURL?.includes('/node_modules/protobufjs/')) return { url: NO_LONG, format: 'commonjs', shortCircuit: true };
    return nextResolve(specifier, context);
  },
});
