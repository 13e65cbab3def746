#!/usr/bin/env bash
# Runs vitest projects in lanes, all lanes at once; within a lane, its projects one after the
# other. A lane is one argument: its project names, space separated. Arguments after `--` go
# to every vitest run. Each lane's output is printed whole, the first lane's live and the others'
# after it, so none is interleaved. Fails if any run fails (a lane goes on after a failed run).
#
#   bash scripts/test-lanes.sh 'e2e e2e-cluster' 'unit e2e-side e2e-sentinel fuzz'   (npm test, after the typecheck)
#   bash scripts/test-lanes.sh e2e 'e2e-side e2e-shared' -- test/e2e/ssh.test.ts
#
# Why lanes: the e2e project runs one file at a time and its time goes to waiting as much as to
# the two cores, so the unit suite, the e2e-side files (E2E_WAITING in vitest.config.ts), the
# shared-state files on a Sentinel-managed Redis (E2E_SHARED_STATE) and the short fuzz run run
# beside it; the same files on a Redis Cluster (e2e-cluster) follow the e2e project in its lane.
# The two lanes are about equally long; that keeps CI inside its time.
set -uo pipefail
cd "$(dirname "$0")/.."
lanes=()
while [ $# -gt 0 ] && [ "$1" != "--" ]; do lanes+=("$1"); shift; done
[ $# -gt 0 ] && shift
extra=("$@")
[ ${#lanes[@]} -gt 0 ] || { echo "usage: test-lanes.sh LANE... [-- VITEST-ARGS]" >&2; exit 2; }
# With a file filter a project may have nothing to run; without one, each must find its files.
[ ${#extra[@]} -gt 0 ] && extra=(--passWithNoTests "${extra[@]}")

# run_lane "PROJECTS": each project in turn; the lane's exit status is its worst run's.
run_lane() {
  local rc=0 project
  for project in $1; do
    npx vitest run --project "$project" "${extra[@]}" || rc=1
  done
  return "$rc"
}

logs=() pids=()
trap 'rm -f "${logs[@]}"' EXIT
for lane in "${lanes[@]:1}"; do
  log=$(mktemp)
  logs+=("$log")
  run_lane "$lane" >"$log" 2>&1 &
  pids+=($!)
done
first_log=$(mktemp)
logs+=("$first_log")
run_lane "${lanes[0]}" 2>&1 | tee "$first_log"
rcs=("${PIPESTATUS[0]}")
for i in "${!pids[@]}"; do
  wait "${pids[$i]}"
  rcs+=("$?")
  echo
  echo "=== lane '${lanes[$((i + 1))]}' (ran beside the one above)"
  cat "${logs[$i]}"
done
# A failed lane's failures again, last: whoever reads only the end of the output (a CI summary
# keeps the tail) still learns which tests failed and why.
lane_logs=("$first_log" "${logs[@]:0:${#logs[@]}-1}")
failed=0
for i in "${!lanes[@]}"; do
  [ "${rcs[$i]}" -eq 0 ] && continue
  echo
  echo "=== failures in lane '${lanes[$i]}'"
  sed 's/\x1b\[[0-9;]*m//g' "${lane_logs[$i]}" | grep -E '^ *(FAIL|×|✗) |(Error|error): ' | awk '!seen[$0]++' | head -60
done
for i in "${!lanes[@]}"; do
  echo "lane '${lanes[$i]}': exit ${rcs[$i]}"
  [ "${rcs[$i]}" -eq 0 ] || failed=1
done
exit "$failed"
