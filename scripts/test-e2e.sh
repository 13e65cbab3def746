#!/usr/bin/env bash
# The end-to-end suite alone, in its two lanes (scripts/test-lanes.sh): `e2e`, and beside it
# `e2e-side` then `e2e-shared` (the shared-state files, in the Redis mode SANDGATE_TEST_REDIS
# names). Arguments go to every vitest run, e.g. a file filter.
exec bash "$(dirname "$0")/test-lanes.sh" e2e 'e2e-side e2e-shared' -- "$@"
