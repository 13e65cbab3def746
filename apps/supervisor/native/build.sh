#!/bin/sh
# Builds the supervisor's two native helpers next to this script, in build/: sandgate-launch (the
# workload wrapper in one execve, sandgate-launch.c) and sandgate-netns (the netns agent,
# sandgate-netns.c). Run by the root package's postinstall (`npm install`), with the C compiler
# npm already needs for node-pty. Static, so it runs in any sandbox image (the docker driver shows
# this checkout read-only inside the container, whatever libc the image has).
#
# Without a compiler the build fails loudly here, and with it `npm install` (which could not
# build node-pty either). A checkout installed with --ignore-scripts has no helper: the supervisor
# then starts workloads through the shell chain (same confinement, four execs slower) and its log
# says so (`launcher` in "workload confined"), and its netns agent is the Node one (`agent` in
# "workload network namespace ready").
set -eu
here=$(cd "$(dirname "$0")" && pwd)
cc=${CC:-cc}
mkdir -p "$here/build"
for helper in sandgate-launch sandgate-netns; do
  tmp="$here/build/$helper.tmp.$$"
  "$cc" -O2 -Wall -Wextra -Werror -static -o "$tmp" "$here/$helper.c"
  mv -f "$tmp" "$here/build/$helper"
  echo "built $here/build/$helper"
done
