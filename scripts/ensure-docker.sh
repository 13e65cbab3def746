#!/usr/bin/env bash
# Makes sure a Docker engine answers `docker info`, installing and starting one when missing.
# Idempotent: does nothing (quickly) when an engine already runs.
#
#   bash scripts/ensure-docker.sh            # install docker.io if needed, start dockerd, wait
#
# Environment:
#   SANDGATE_DOCKERD_LOG   where a dockerd started here logs   (default /var/log/sandgate-dockerd.log)
#   SANDGATE_DOCKER_WAIT   seconds to wait for the engine       (default 60)
#
# Needs root for the install and for dockerd. Only Debian's packages are used (docker.io brings
# dockerd, containerd, runc and tini, which dockerd uses as `docker-init` for HostConfig.Init).
set -euo pipefail

log() { printf 'ensure-docker: %s\n' "$*" >&2; }

LOG_FILE="${SANDGATE_DOCKERD_LOG:-/var/log/sandgate-dockerd.log}"
WAIT_SECS="${SANDGATE_DOCKER_WAIT:-60}"

engine_up() { docker info >/dev/null 2>&1; }

if command -v docker >/dev/null 2>&1 && engine_up; then
  exit 0
fi

as_root() {
  if [ "$(id -u)" -eq 0 ]; then "$@"; else sudo "$@"; fi
}

# 1. The engine and the client.
if ! command -v dockerd >/dev/null 2>&1; then
  log "dockerd not found: installing docker.io (Debian)"
  export DEBIAN_FRONTEND=noninteractive
  # `apt-get install` alone first: the package lists may already be there. Update only if needed.
  if ! as_root apt-get install -y -q --no-install-recommends docker.io tini >/dev/null 2>&1; then
    as_root apt-get update -q >/dev/null
    as_root apt-get install -y -q --no-install-recommends docker.io tini >/dev/null
  fi
fi
command -v dockerd >/dev/null 2>&1 || { log "dockerd still missing after install"; exit 1; }
command -v docker >/dev/null 2>&1 || { log "docker client missing"; exit 1; }

# HostConfig.Init needs dockerd's init binary (`docker-init`). Debian ships tini; link it if the
# package did not (dockerd looks for docker-init on PATH).
if ! command -v docker-init >/dev/null 2>&1; then
  for t in /usr/bin/tini-static /usr/bin/tini; do
    if [ -x "$t" ]; then as_root ln -sf "$t" /usr/local/bin/docker-init; log "linked $t as docker-init"; break; fi
  done
fi

# 2. Start dockerd unless one is already starting (another invocation of this script, or a
# service manager). The pid file is dockerd's own.
if ! engine_up; then
  running=""
  if [ -f /var/run/docker.pid ] && kill -0 "$(cat /var/run/docker.pid 2>/dev/null)" 2>/dev/null; then
    running=1
  fi
  if [ -z "$running" ] && command -v systemctl >/dev/null 2>&1 && [ -d /run/systemd/system ]; then
    as_root systemctl start docker >/dev/null 2>&1 && running=1 || true
  fi
  if [ -z "$running" ]; then
    log "starting dockerd (log: $LOG_FILE)"
    as_root mkdir -p "$(dirname "$LOG_FILE")"
    # setsid + nohup: dockerd outlives this script and the shell that ran it; stdin closed.
    as_root setsid nohup dockerd >>"$LOG_FILE" 2>&1 </dev/null &
    disown || true
  fi
fi

# 3. Wait for the engine.
deadline=$(( $(date +%s) + WAIT_SECS ))
until engine_up; do
  if [ "$(date +%s)" -ge "$deadline" ]; then
    log "docker engine did not answer within ${WAIT_SECS}s; last lines of $LOG_FILE:"
    tail -n 30 "$LOG_FILE" >&2 2>/dev/null || true
    exit 1
  fi
  sleep 0.5
done
log "docker engine ready ($(docker version --format '{{.Server.Version}}' 2>/dev/null || echo '?'))"
