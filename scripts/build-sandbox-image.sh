#!/usr/bin/env bash
# Builds sandgate's default sandbox image, `sandgate-sandbox:latest`, without any registry: a
# small Debian root filesystem assembled from this (Debian) machine's installed packages and
# loaded with `docker import`.
#
#   bash scripts/build-sandbox-image.sh            # build unless an up-to-date image exists
#   bash scripts/build-sandbox-image.sh --force    # rebuild anyway
#   SANDGATE_SANDBOX_IMAGE=name:tag bash scripts/build-sandbox-image.sh
#   SANDGATE_IMAGE_PACKAGES="redis-server haproxy" SANDGATE_SANDBOX_IMAGE=x:y bash scripts/build-sandbox-image.sh
#                                                   # the same, plus more installed host packages
#
# What goes in: the files (`dpkg -L`) of a few packages and of everything they depend on — a
# shell (bash, dash as /bin/sh), coreutils, procps (ps, kill, top), grep, sed, findutils, tar,
# gzip, and glibc + libstdc++ + libgcc (what the Node binary that runs the supervisor needs,
# see deploy/README.md), util-linux (unshare, nsenter, setpriv) and iproute2 (ip), which the
# supervisor uses to confine the workload (its own network namespace, a non-root uid, no
# capabilities) — minus documentation, plus /etc/passwd, /etc/group and the usual
# empty directories. No package manager, no init: the supervisor is bind-mounted in by the
# docker driver and Docker's own init (HostConfig.Init) reaps zombies.
#
# Idempotent and quick: the image carries a label with the hash of this script and of the
# package list; when an image with the same label exists, nothing is done.
set -euo pipefail

IMAGE="${SANDGATE_SANDBOX_IMAGE:-sandgate-sandbox:latest}"
FORCE=0
for a in "$@"; do
  case "$a" in
    --force) FORCE=1 ;;
    -h|--help) sed -n '2,21p' "$0"; exit 0 ;;
    *) echo "build-sandbox-image: unknown argument $a" >&2; exit 2 ;;
  esac
done

log() { printf 'build-sandbox-image: %s\n' "$*" >&2; }

ROOT_PACKAGES=(
  base-files bash dash coreutils procps grep sed findutils tar gzip debianutils ncurses-base ncurses-bin hostname
  libc6 libc-bin libstdc++6 libgcc-s1
  # The supervisor's workload confinement: `unshare --net` for the netns agent, `nsenter --net`
  # and `setpriv` in the fixed wrapper every workload process starts through, `ip` for lo.
  util-linux iproute2
)
# shellcheck disable=SC2206
EXTRA_PACKAGES=(${SANDGATE_IMAGE_PACKAGES:-})
ROOT_PACKAGES+=("${EXTRA_PACKAGES[@]}")
# Never followed as dependencies: maintainer-script machinery that drags in perl or dpkg.
SKIP_PACKAGES=" dpkg install-info init-system-helpers perl-base debconf adduser passwd lsb-base sysvinit-utils "

command -v docker >/dev/null || { log "docker is not installed (run scripts/ensure-docker.sh)"; exit 1; }
docker info >/dev/null 2>&1 || { log "no docker engine answers (run scripts/ensure-docker.sh)"; exit 1; }
command -v dpkg-query >/dev/null || { log "needs a Debian-based host (dpkg-query)"; exit 1; }

ARCH="$(dpkg --print-architecture)"
RECIPE="$( { cat "$0"; printf '%s\n' "${ROOT_PACKAGES[@]}" "$ARCH"; } | sha256sum | cut -c1-16)"

if [ "$FORCE" = 0 ]; then
  have="$(docker image inspect --format '{{ index .Config.Labels "sandgate.recipe" }}' "$IMAGE" 2>/dev/null || true)"
  if [ "$have" = "$RECIPE" ]; then
    log "$IMAGE is up to date (recipe $RECIPE)"
    exit 0
  fi
fi

# 1. The dependency closure of ROOT_PACKAGES among installed packages.
installed() { dpkg-query -W -f='${db:Status-Status}' "$1" 2>/dev/null | grep -qx installed; }
declare -A SEEN=()
QUEUE=("${ROOT_PACKAGES[@]}")
while [ "${#QUEUE[@]}" -gt 0 ]; do
  p="${QUEUE[0]}"; QUEUE=("${QUEUE[@]:1}")
  p="${p%%:*}"                                   # drop :any / :amd64 qualifiers
  [ -n "$p" ] && [ -z "${SEEN[$p]:-}" ] || continue
  case "$SKIP_PACKAGES" in *" $p "*) continue ;; esac
  if ! installed "$p"; then log "package $p is not installed on this host"; exit 1; fi
  SEEN[$p]=1
  deps="$(dpkg-query -W -f='${Pre-Depends}, ${Depends}' "$p")"
  IFS=',' read -ra groups <<<"$deps"
  for g in "${groups[@]}"; do
    # "a (>= 1) | b" : take the first installed alternative.
    IFS='|' read -ra alts <<<"$g"
    for alt in "${alts[@]}"; do
      name="$(echo "$alt" | sed -E 's/\(.*\)//; s/\[.*\]//; s/[[:space:]]//g')"
      name="${name%%:*}"
      [ -n "$name" ] || continue
      case "$SKIP_PACKAGES" in *" $name "*) break ;; esac
      if installed "$name"; then QUEUE+=("$name"); break; fi
    done
  done
done
PKGS=("${!SEEN[@]}")
log "packages (${#PKGS[@]}): $(printf '%s ' "${PKGS[@]}" | tr ' ' '\n' | sort | tr '\n' ' ')"

# 2. Their files, with directory symlinks (merged /usr: /bin -> usr/bin) resolved so that every
# path is stored once, under its real location.
STAGE="$(mktemp -d /tmp/sandgate-rootfs.XXXXXX)"
LIST="$STAGE.list"
cleanup() { rm -rf "$STAGE" "$LIST"; }
trap cleanup EXIT

# Top-level directory symlinks of this host (bin -> usr/bin …) as sed rewrites.
MAP=()
for l in /*; do
  if [ -L "$l" ] && [ -d "$l" ]; then
    t="$(readlink "$l")"
    case "$t" in /*) ;; *) t="/$t" ;; esac
    MAP+=(-e "s|^$l/|$t/|")
  fi
done
dpkg -L "${PKGS[@]}" 2>/dev/null \
  | grep -E '^/' \
  | grep -Ev '^/usr/share/(doc|man|info|locale|lintian|bug|bash-completion|zsh)(/|$)' \
  | sed "${MAP[@]}" -e 's|/$||' \
  | sort -u \
  | while IFS= read -r f; do
      if [ -e "$f" ] || [ -L "$f" ]; then printf '%s\n' "${f#/}"; fi
    done >"$LIST"

tar -C / -c --no-recursion -T "$LIST" 2>/dev/null | tar -C "$STAGE" -x

# 3. What package maintainer scripts would have made, and the mount points.
cd "$STAGE"
for l in bin sbin lib lib64; do
  if [ -L "/$l" ]; then ln -sfn "$(readlink "/$l")" "$l"; fi
done
mkdir -p etc root home tmp run proc sys dev sandbox var/tmp var/log usr/local/bin opt
chmod 1777 tmp var/tmp
chmod 0700 root
# The workload's user (SANDBOX_UID/SANDBOX_GID in @sandgate/protocols/contract) owns its work
# directory. Docker copies that owner onto each sandbox's new /sandbox volume, and the label
# sandgate.sandbox-owner (below) tells the docker driver so: it skips its own owner change, which
# costs an archive upload (a mount of the container's filesystem) per create. Images without the
# label get that change.
chown 10001:10001 sandbox
[ -e bin/sh ] || ln -s dash usr/bin/sh
cat >etc/passwd <<'EOF'
root:x:0:0:root:/root:/bin/bash
nobody:x:65534:65534:nobody:/nonexistent:/usr/sbin/nologin
sandbox:x:10001:10001:sandbox:/sandbox:/bin/bash
EOF
cat >etc/group <<'EOF'
root:x:0:
tty:x:5:
nogroup:x:65534:
sandbox:x:10001:
EOF
printf 'passwd: files\ngroup: files\nshadow: files\nhosts: files dns\n' >etc/nsswitch.conf
printf 'root:*::0:99999:7:::\n' >etc/shadow && chmod 0640 etc/shadow
# The dynamic linker's cache, so that libraries are found without LD_LIBRARY_PATH.
if [ -x /sbin/ldconfig ]; then /sbin/ldconfig -r "$STAGE" 2>/dev/null || true; fi
for need in usr/bin/sh usr/bin/bash usr/bin/ps usr/bin/sleep usr/bin/unshare usr/bin/nsenter usr/bin/setpriv usr/sbin/ip usr/lib64/ld-linux-x86-64.so.2; do
  if [ ! -e "$need" ] && [ ! -L "$need" ]; then
    case "$need" in usr/lib64/*) [ "$ARCH" = amd64 ] || continue ;; esac
    log "assembled root filesystem lacks /$need"; exit 1
  fi
done
log "root filesystem: $(du -sh "$STAGE" | cut -f1), $(wc -l <"$LIST") paths from the host"

# 4. Import (and drop the image it replaces, unless a container still uses it).
old_id="$(docker image inspect --format '{{.Id}}' "$IMAGE" 2>/dev/null || true)"
tar -C "$STAGE" -c --numeric-owner . | docker import \
  -c 'ENV PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin' \
  -c 'ENV LANG=C.UTF-8' \
  -c 'WORKDIR /sandbox' \
  -c 'CMD ["/bin/bash"]' \
  -c "LABEL sandgate.recipe=$RECIPE" \
  -c 'LABEL sandgate.image=sandbox' \
  -c 'LABEL sandgate.sandbox-owner=10001:10001' \
  -m "sandgate sandbox image (recipe $RECIPE)" \
  - "$IMAGE" >/dev/null
log "built $IMAGE ($(docker image inspect --format '{{.Size}}' "$IMAGE" | awk '{printf "%.1f MB", $1/1e6}'))"
new_id="$(docker image inspect --format '{{.Id}}' "$IMAGE")"
if [ -n "$old_id" ] && [ "$old_id" != "$new_id" ]; then docker rmi "$old_id" >/dev/null 2>&1 || true; fi
