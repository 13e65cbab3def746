#!/usr/bin/env bash
# The end-to-end suite alone, in its two lanes (scripts/test-lanes.sh): `e2e`, and beside it
# `e2e-side`. Arguments go to both vitest runs, e.g. a file filter.
exec bash "$(dirname "$0")/test-lanes.sh" e2e e2e-side -- "$@"
