#!/usr/bin/env bash
# Builds, without any registry, the three local images docker-compose.yml uses:
#   sandgate-sandbox:latest     the default sandbox image (scripts/build-sandbox-image.sh)
#   sandgate-runtime:latest     the same Debian userland plus redis-server and haproxy: runs Redis,
#                               haproxy, and the gateway replicas (Node and the repository are
#                               bind-mounted from the host at their own paths, never copied in)
#   sandgate-prometheus:latest  the same userland plus Debian's prometheus: scrapes the replicas
# Installs a Docker engine (scripts/ensure-docker.sh) and the host packages it copies from
# (redis-server, haproxy, prometheus) when missing. Idempotent; quick when the images are up to date.
#   bash deploy/build-images.sh [--force]
set -euo pipefail
cd "$(dirname "$0")/.."

bash scripts/ensure-docker.sh

missing=()
for p in redis-server haproxy prometheus; do
  dpkg-query -W -f='${db:Status-Status}' "$p" 2>/dev/null | grep -qx installed || missing+=("$p")
done
if [ "${#missing[@]}" -gt 0 ]; then
  echo "build-images: installing ${missing[*]} (their files go into sandgate-runtime)" >&2
  export DEBIAN_FRONTEND=noninteractive
  apt-get install -y -q --no-install-recommends "${missing[@]}" >/dev/null 2>&1 \
    || { apt-get update -q >/dev/null && apt-get install -y -q --no-install-recommends "${missing[@]}" >/dev/null; }
  # Debian starts the packaged services (with systemd, or through init.d where there is none);
  # the compose stack runs its own.
  for s in redis-server haproxy prometheus; do
    if command -v systemctl >/dev/null 2>&1 && [ -d /run/systemd/system ]; then systemctl disable --now "$s" >/dev/null 2>&1 || true
    elif [ -x "/etc/init.d/$s" ]; then "/etc/init.d/$s" stop >/dev/null 2>&1 || true; fi
  done
fi

bash scripts/build-sandbox-image.sh "$@"
SANDGATE_SANDBOX_IMAGE=sandgate-runtime:latest SANDGATE_IMAGE_PACKAGES="redis-server haproxy" \
  bash scripts/build-sandbox-image.sh "$@"
SANDGATE_SANDBOX_IMAGE=sandgate-prometheus:latest SANDGATE_IMAGE_PACKAGES="prometheus" \
  bash scripts/build-sandbox-image.sh "$@"
