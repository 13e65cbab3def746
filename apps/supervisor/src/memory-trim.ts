// An idle supervisor gives back the memory it no longer uses.
//
// A sandbox is idle most of its life, and what its supervisor holds then is most of a sandbox's
// footprint (issue 16). Two things keep memory resident after it was used:
// - V8 keeps its heap's pages, fragmented, after an ordinary collection. A last-resort collection
//   (the one V8 runs under memory pressure: compacting, until nothing more is freed) gives them
//   back. It takes ~20 ms of the event loop, so it runs only while the supervisor is idle.
// - glibc returns free memory to the kernel only from the top of its heap; what was freed below
//   it (the compile cache's buffers read at the start, a burst's protocol and stream buffers)
//   stays resident. malloc_trim(0), from the sandgate-spawn addon, gives those pages back.
// - Node keeps every compiled-code entry it read from the compile cache (about 0.5 MiB for the
//   supervisor's modules) in C++ memory for its whole life, in case it has to write them back.
//   module.flushCompileCache() writes back what changed (nothing: the driver filled the cache)
//   and, since Node 24, drops the entries read ("Clear deserialized cache"). A module loaded later
//   still reads its entry from the cache directory.
// Together about 3.8 MiB of an idle supervisor's ~24 MiB of anonymous memory (BENCHMARKS.md,
// "An idle supervisor's memory"; the compile cache's entries: "The compile cache's entries and
// the bundled root certificates"). The supervisor looks every few seconds: when its event loop was
// idle since the last look, it collects and trims once after its start, and again only when its
// resident set has grown since, at most every TRIM_AGAIN_AFTER_MS. A busy supervisor is left
// alone (what it frees it allocates again). The price is paid by the next command after the
// idle time: V8 grows its heap again and recompiles what it dropped, about 3 ms on the first exec.
// A warm-pool member's first exec comes right after its claim, and the claim's latency is what a
// pool is for, so an unclaimed member only trims its C heap (collectNow), and collects at its
// first idle look after the claim.
import module from 'node:module';
import { performance, type EventLoopUtilization } from 'node:perf_hooks';
import type { Logger } from '@sandgate/telemetry/log';
import { loadAddon } from './workload/native-spawn.ts';

/** How often the supervisor looks. */
const CHECK_EVERY_MS = 5_000;
/** Idle: the event loop was busy for less than this share of the time since the last look. */
const IDLE_UTILIZATION = 0.02;
/** A later trim needs the resident set to have grown this much since the last one… */
const GROWTH_BYTES = 1024 * 1024;
/** …and this much time to have passed. */
const TRIM_AGAIN_AFTER_MS = 30_000;

export interface IdleTrimOptions {
  log: Logger;
  /** V8's last-resort collection; from `gc` (the supervisor runs with --expose-gc) by default. */
  collect?: (() => void) | null;
  /** Whether the V8 collection may run now (false: trim the C heap only); always by default. */
  collectNow?: () => boolean;
  /** glibc's malloc_trim(0); the addon's by default. */
  trim?: (() => boolean) | null;
  /** Drops the compile cache's entries read at the start; module.flushCompileCache when the cache is on, by default. */
  dropCompileCache?: (() => void) | null;
  checkEveryMs?: number;
  trimAgainAfterMs?: number;
}

type GcOptions = { type: 'major'; execution: 'sync'; flavor: 'last-resort' };

/** V8's last-resort collection, or null when `gc` is not exposed (a supervisor started without --expose-gc). */
function lastResortCollection(): (() => void) | null {
  const gc = (globalThis as { gc?: (options?: GcOptions) => void }).gc;
  return gc ? () => gc({ type: 'major', execution: 'sync', flavor: 'last-resort' }) : null;
}

/** The addon's malloc_trim(0), or null without the addon. */
function addonTrim(): (() => boolean) | null {
  return loadAddon<{ trimMemory?: () => boolean }>()?.trimMemory ?? null;
}

/** Node's flush of the compile cache, or null when it is off (nothing was read from it). */
function compileCacheFlush(): (() => void) | null {
  return module.getCompileCacheDir() ? () => module.flushCompileCache() : null;
}

const mib = (bytes: number) => Math.round((bytes / 1024 / 1024) * 10) / 10;

/**
 * Starts the looks (an unreferenced timer: it never keeps the process alive); null when there is
 * nothing to do it with. stop() ends them.
 */
export function startIdleTrim(opts: IdleTrimOptions): { stop(): void } | null {
  const collect = opts.collect === undefined ? lastResortCollection() : opts.collect;
  const trim = opts.trim === undefined ? addonTrim() : opts.trim;
  const dropCompileCache = opts.dropCompileCache === undefined ? compileCacheFlush() : opts.dropCompileCache;
  if (!collect && !trim) {
    opts.log.info('idle memory trim off: neither gc nor the sandgate-spawn addon is available');
    return null;
  }
  const againAfterMs = opts.trimAgainAfterMs ?? TRIM_AGAIN_AFTER_MS;
  let trims = 0;
  let lastTrimAt = 0;
  let rssAfterTrim = 0;
  /** The V8 collection has run once: a member claimed after its C-heap-only trims still owes one. */
  let collectedOnce = false;
  let last: EventLoopUtilization = performance.eventLoopUtilization();
  const timer = setInterval(() => {
    const now = performance.eventLoopUtilization();
    const busy = performance.eventLoopUtilization(now, last).utilization;
    last = now;
    if (busy >= IDLE_UTILIZATION) return;
    const before = process.memoryUsage.rss();
    const collected = collect !== null && (opts.collectNow?.() ?? true);
    const owed = collected && !collectedOnce;
    if (trims > 0 && !owed && (before < rssAfterTrim + GROWTH_BYTES || Date.now() - lastTrimAt < againAfterMs)) return;
    const startedAt = performance.now();
    if (collected) {
      collect();
      collectedOnce = true;
    }
    // Before the C heap's trim, which then gives the entries' pages back.
    dropCompileCache?.();
    const released = trim?.() ?? false;
    const tookMs = Math.round((performance.now() - startedAt) * 10) / 10;
    rssAfterTrim = process.memoryUsage.rss();
    lastTrimAt = Date.now();
    trims++;
    // The first one (after the start) is logged at info: it says what an idle sandbox saves.
    const fields = { rss_before_mib: mib(before), rss_after_mib: mib(rssAfterTrim), v8_collected: collected, c_heap_released: released, compile_cache_dropped: dropCompileCache !== null, took_ms: tookMs, trims };
    if (trims === 1) opts.log.info('idle: unused memory returned to the kernel', fields);
    else opts.log.debug('idle: unused memory returned to the kernel', fields);
    // The work of the look itself is not activity.
    last = performance.eventLoopUtilization();
  }, opts.checkEveryMs ?? CHECK_EVERY_MS);
  timer.unref();
  return { stop: () => clearInterval(timer) };
}
