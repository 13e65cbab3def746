#!/usr/bin/env bash
# The end-to-end suite in two lanes at once: `e2e` (one file at a time) and, beside it,
# `e2e-side` (files whose time goes to waiting: on timers, failovers, deadlines, scrapes;
# E2E_SIDE_LANE in vitest.config.ts lists them). The second lane's output is
# printed after the first's, whole, so neither is interleaved. Fails if either lane fails. Extra
# arguments go to both vitest runs.
set -uo pipefail
cd "$(dirname "$0")/.."
# With a file filter one lane may have nothing to run; without one, both must find their files.
filtered=()
[ $# -gt 0 ] && filtered=(--passWithNoTests)
side_log=$(mktemp)
trap 'rm -f "$side_log"' EXIT
npx vitest run --project e2e-side "${filtered[@]}" "$@" >"$side_log" 2>&1 &
side=$!
npx vitest run --project e2e "${filtered[@]}" "$@"
main_rc=$?
wait "$side"
side_rc=$?
echo
echo "=== the e2e-side lane (ran beside the one above)"
cat "$side_log"
echo "e2e: exit $main_rc; e2e-side: exit $side_rc"
[ "$main_rc" -eq 0 ] && [ "$side_rc" -eq 0 ]
