#!/usr/bin/env bash
# Proves the README's first command on this machine: with neither redis-server nor bubblewrap
# installed, `npx sandgate up` (as root, on Debian) installs both itself, comes up, and runs a
# sandbox. DESTRUCTIVE: it first removes the redis-server and bubblewrap packages (sandgate up
# puts them back). Meant for CI on a throwaway machine; never run it on a shared one.
#   bash scripts/check-fresh-up.sh
# Needs Node >= 22.18 on PATH and root. Exits non-zero, saying why, on any failure.
set -euo pipefail
cd "$(dirname "$0")/.."

log() { echo "check-fresh-up: $*" >&2; }
die() { log "FAILED: $*"; exit 1; }

[ "$(id -u)" = 0 ] || die "must run as root (sandgate up installs packages only as root)"
[ -e /etc/debian_version ] || command -v apt-get >/dev/null 2>&1 || die "not a Debian-like system"
command -v node >/dev/null 2>&1 || die "node is not on PATH"
node -e 'const [a,b]=process.versions.node.split(".").map(Number); process.exit(a>22||(a===22&&b>=18)?0:1)' \
  || die "node $(node -v) is too old: sandgate needs >= 22.18"

# 1. A machine without the two packages.
log "removing redis-server and bubblewrap"
export DEBIAN_FRONTEND=noninteractive
apt-get remove -y -q redis-server bubblewrap >/dev/null || die "apt-get remove redis-server bubblewrap failed"
hash -r
for bin in redis-server bwrap; do
  if command -v "$bin" >/dev/null 2>&1; then die "$bin is still on PATH after the removal ($(command -v "$bin")): not from the Debian package?"; fi
done

# 2. The README's command: npm install && npx sandgate up (private Redis, local driver).
[ -d node_modules ] || npm install --no-audit --no-fund
npx --no-install sandgate --version >/dev/null || die "npx sandgate does not run the repository's CLI"
# The sandgate process itself (not an npx wrapper) in the background, so SIGTERM reaches it.
sandgate() { node apps/cli/bin/sandgate.js "$@"; }
tmp=$(mktemp -d /var/tmp/sandgate-fresh-up.XXXXXX)
free_port() { node -e 'const s=require("net").createServer().listen(0,"127.0.0.1",()=>{console.log(s.address().port);s.close()})'; }
grpc_port=$(free_port); http_port=$(free_port); peer_port=$(free_port)
# No gateway, token or CA in the environment: the client commands must find all three in the
# client config file `up` writes (kept in $tmp, not in root's home, so nothing outlives the check).
unset SANDGATE_GATEWAY SANDGATE_TOKEN SANDGATE_CA SANDGATE_CONFIG SANDGATE_DRIVER SANDGATE_REDIS_URL
export XDG_CONFIG_HOME="$tmp/config"

up_pid=
cleanup() {
  local status=$?
  if [ -n "$up_pid" ] && kill -0 "$up_pid" 2>/dev/null; then
    kill -TERM "$up_pid" 2>/dev/null || true
    for _ in $(seq 1 100); do kill -0 "$up_pid" 2>/dev/null || break; sleep 0.2; done
    kill -KILL "$up_pid" 2>/dev/null || true
  fi
  if [ "$status" != 0 ]; then
    log "sandgate up stdout:"; sed 's/^/  /' "$tmp/up.out" >&2 2>/dev/null || true
    log "sandgate up stderr:"; sed 's/^/  /' "$tmp/up.err" >&2 2>/dev/null || true
  fi
  rm -rf "$tmp"
  exit "$status"
}
trap cleanup EXIT

log "starting sandgate up (gRPC $grpc_port, HTTP $http_port, peer $peer_port, state $tmp/state)"
SANDGATE_PEER_PORT=$peer_port node apps/cli/bin/sandgate.js up \
  --grpc-port "$grpc_port" --http-port "$http_port" --state-dir "$tmp/state" \
  >"$tmp/up.out" 2>"$tmp/up.err" </dev/null &
up_pid=$!

# Installing two packages (and maybe apt-get update) comes first: allow for a slow mirror.
ready=
for _ in $(seq 1 900); do
  kill -0 "$up_pid" 2>/dev/null || die "sandgate up exited before it was ready"
  # TLS is on: /readyz is https, checked against the CA `up` made (it exists once up listens).
  if [ -s "$tmp/state/tls/ca.pem" ] && node -e "
    const https = require('https'); const ca = require('fs').readFileSync('$tmp/state/tls/ca.pem');
    https.get({ host: '127.0.0.1', port: $http_port, path: '/readyz', ca, servername: 'localhost' }, (r) => process.exit(r.statusCode === 200 ? 0 : 1)).on('error', () => process.exit(1));
  "; then
    ready=1; break
  fi
  sleep 1
done
[ -n "$ready" ] || die "sandgate up did not answer 200 on /readyz within 15 minutes"
log "/readyz answers 200 over TLS"
[ -s "$tmp/config/sandgate/config.json" ] || die "sandgate up wrote no client config file ($tmp/config/sandgate/config.json)"
# Auth is on: a client without the token is refused.
if XDG_CONFIG_HOME="$tmp/no-config" node apps/cli/bin/sandgate.js --gateway "https://127.0.0.1:$grpc_port" --ca "$tmp/state/tls/ca.pem" --tls-server-name localhost sandbox list >/dev/null 2>"$tmp/anon.err"; then
  die "sandbox list without a token succeeded: auth is off"
fi
grep -q 'missing authorization header' "$tmp/anon.err" || die "sandbox list without a token failed, but not for want of a token (UNAUTHENTICATED): $(cat "$tmp/anon.err")"
log "a client without the token is refused (UNAUTHENTICATED)"

grep -q 'installing redis-server' "$tmp/up.err" || die "sandgate up did not say it installed redis-server"
grep -q 'bubblewrap' "$tmp/up.err" || die "sandgate up did not say it installed bubblewrap"
hash -r
command -v redis-server >/dev/null 2>&1 || die "redis-server is not on PATH after sandgate up"
command -v bwrap >/dev/null 2>&1 || die "bwrap is not on PATH after sandgate up"

# 3. A sandbox against it.
name="fresh-up-$$"
sandgate sandbox create --name "$name" --detach -- sleep 30 >/dev/null \
  || die "sandgate sandbox create --detach -- sleep 30 failed"
out=$(sandgate sandbox exec "$name" -- echo ok) || die "sandgate sandbox exec $name -- echo ok failed"
[ "$out" = ok ] || die "sandbox exec printed '$out', expected 'ok'"
sandgate sandbox delete "$name" >/dev/null || die "sandgate sandbox delete $name failed"
log "sandbox create + exec work"

# 4. It stops cleanly.
kill -TERM "$up_pid"
for _ in $(seq 1 150); do kill -0 "$up_pid" 2>/dev/null || break; sleep 0.2; done
if kill -0 "$up_pid" 2>/dev/null; then die "sandgate up did not stop within 30 s of SIGTERM"; fi
wait "$up_pid" || die "sandgate up exited non-zero after SIGTERM"
up_pid=
log "OK: sandgate up installed redis-server and bubblewrap, served a sandbox over TLS with auth, and stopped"
