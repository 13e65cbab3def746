#!/bin/sh
# Builds sandgate-launch (the workload wrapper in one execve, sandgate-launch.c) next to this
# script, in build/. Run by the root package's postinstall (`npm install`), with the C compiler
# npm already needs for node-pty. Static, so it runs in any sandbox image (the docker driver shows
# this checkout read-only inside the container, whatever libc the image has).
#
# Without a compiler the build fails loudly here, and with it `npm install` (which could not
# build node-pty either). A checkout installed with --ignore-scripts has no helper: the supervisor
# then starts workloads through the shell chain (same confinement, four execs slower) and its log
# says so (`launcher` in "workload confined").
set -eu
here=$(cd "$(dirname "$0")" && pwd)
cc=${CC:-cc}
mkdir -p "$here/build"
tmp="$here/build/sandgate-launch.tmp.$$"
"$cc" -O2 -Wall -Wextra -Werror -static -o "$tmp" "$here/sandgate-launch.c"
mv -f "$tmp" "$here/build/sandgate-launch"
echo "built $here/build/sandgate-launch"
