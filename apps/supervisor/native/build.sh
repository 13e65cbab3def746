#!/bin/sh
# Builds the supervisor's native helpers next to this script, in build/: sandgate-launch (the
# workload wrapper in one execve, sandgate-launch.c), sandgate-netns (the netns agent,
# sandgate-netns.c) and sandgate-spawn.node (a Node addon that starts processes without forking
# the supervisor, sandgate-spawn.c). Run by the root package's postinstall (`npm install`), with
# the C compiler and the Node headers (beside the node binary, as node-pty's build needs them too).
# The two programs are static, so they run in any sandbox image (the docker driver shows this
# checkout read-only inside the container, whatever libc the image has); the addon is loaded by
# the supervisor's node, so it needs what that node needs (glibc).
#
# Without a compiler the build fails loudly here, and with it `npm install` (which could not
# build node-pty either). A checkout installed with --ignore-scripts has no helper: the supervisor
# then starts workloads through the shell chain (same confinement, four execs slower) and its log
# says so (`launcher` in "workload confined"), its netns agent is the Node one (`agent` in
# "workload network namespace ready"), and Node's spawn starts its processes (`spare_spawner`).
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
# The addon: against the headers of the node that runs this build (npm's), which is the node that
# runs the supervisors.
include=$(node -p 'require("path").resolve(process.execPath, "../../include/node")')
[ -f "$include/node_api.h" ] || { echo "build.sh: no Node headers at $include (node_api.h): the node binary's own include/node is needed to build sandgate-spawn.node" >&2; exit 1; }
tmp="$here/build/sandgate-spawn.node.tmp.$$"
"$cc" -O2 -Wall -Wextra -Werror -shared -fPIC -I"$include" -o "$tmp" "$here/sandgate-spawn.c"
mv -f "$tmp" "$here/build/sandgate-spawn.node"
echo "built $here/build/sandgate-spawn.node"
