#!/usr/bin/env bash
# The end-to-end suite in two lanes at once: `e2e` (one file at a time) and, beside it,
# `e2e-waiting` (files that mostly wait on timers: failovers, deadlines, scrapes; vitest.config.ts
# lists them). The second lane's output is printed after the first's, whole, so neither is
# interleaved. Fails if either lane fails. Extra arguments go to both vitest runs.
set -uo pipefail
cd "$(dirname "$0")/.."
# With a file filter one lane may have nothing to run; without one, both must find their files.
filtered=()
[ $# -gt 0 ] && filtered=(--passWithNoTests)
waiting_log=$(mktemp)
trap 'rm -f "$waiting_log"' EXIT
npx vitest run --project e2e-waiting "${filtered[@]}" "$@" >"$waiting_log" 2>&1 &
waiting=$!
npx vitest run --project e2e "${filtered[@]}" "$@"
main_rc=$?
wait "$waiting"
waiting_rc=$?
echo
echo "=== the e2e-waiting lane (ran beside the one above)"
cat "$waiting_log"
echo "e2e: exit $main_rc; e2e-waiting: exit $waiting_rc"
[ "$main_rc" -eq 0 ] && [ "$waiting_rc" -eq 0 ]
