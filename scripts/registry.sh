#!/usr/bin/env bash
# Ensures a password-protected OCI registry (CNCF distribution) answers on
# 127.0.0.1:5000 for the helm runner's tests: plain HTTP (helm 3.17 speaks
# plain HTTP to a loopback registry whatever it is told), htpasswd (bcrypt)
# basic auth for one user whose password is generated once into .stack/
# (0600). Builds the binary from the Go module proxy only when it is
# missing (cold: ~6 minutes on 2 cores).
source "$(dirname "$0")/lib.sh"

VERSION="${EXECPLANE_REGISTRY_VERSION:-v3.1.2}"
DIR="$STACK_DIR/registry"
BIN="$DIR/bin/registry"
PORT="${EXECPLANE_TEST_REGISTRY_PORT:-5000}"
USER_NAME="execplane-ci"
PASSWORD_FILE="$STACK_DIR/registry-password"

if [ ! -x "$BIN" ]; then
  command -v go >/dev/null 2>&1 || die "go is required to build the OCI registry (distribution $VERSION)"
  log "building the OCI registry (distribution $VERSION) — a cold build takes ~6 minutes"
  mkdir -p "$DIR/bin"
  GOBIN="$DIR/bin" GOFLAGS=-buildvcs=false nice go install -trimpath -ldflags='-s -w' \
    "github.com/distribution/distribution/v3/cmd/registry@$VERSION"
fi
command -v curl >/dev/null 2>&1 || apt_install curl
# htpasswd -B: distribution reads bcrypt entries only.
command -v htpasswd >/dev/null 2>&1 || apt_install apache2-utils

mkdir -p "$DIR/data"
umask 077
[ -s "$PASSWORD_FILE" ] || head -c 18 /dev/urandom | od -An -tx1 | tr -d ' \n' >"$PASSWORD_FILE"
htpasswd -nbB "$USER_NAME" "$(cat "$PASSWORD_FILE")" >"$DIR/htpasswd.new" 2>/dev/null
mv "$DIR/htpasswd.new" "$DIR/htpasswd"
cat >"$DIR/config.yml" <<YAML
version: 0.1
log:
  level: warn
  accesslog:
    disabled: true
storage:
  filesystem:
    rootdirectory: $DIR/data
  delete:
    enabled: true
http:
  addr: 127.0.0.1:$PORT
  secret: $(head -c 16 /dev/urandom | od -An -tx1 | tr -d ' \n')
auth:
  htpasswd:
    realm: execplane-test
    path: $DIR/htpasswd
YAML

answers() {
  [ "$(curl -s -o /dev/null -w '%{http_code}' --max-time 2 -u "$USER_NAME:$(cat "$PASSWORD_FILE")" "http://127.0.0.1:$PORT/v2/")" = 200 ]
}
if port_open "$PORT"; then
  answers || die "something answers on 127.0.0.1:$PORT, but not the registry of $DIR with its password"
  log "OCI registry already answering on 127.0.0.1:$PORT"
  exit 0
fi
log "starting the OCI registry on 127.0.0.1:$PORT"
# distribution reads every REGISTRY_* variable as a setting of its own.
unset_registry=()
for name in $(compgen -e); do
  case "$name" in REGISTRY_*) unset_registry+=(-u "$name") ;; esac
done
env "${unset_registry[@]}" OTEL_TRACES_EXPORTER=none OTEL_SDK_DISABLED=true \
  nohup "$BIN" serve "$DIR/config.yml" </dev/null >>"$STACK_DIR/registry.log" 2>&1 &
echo $! >"$STACK_DIR/registry.pid"
wait_port "$PORT" 30 "the OCI registry"
for _ in $(seq 50); do answers && break; sleep 0.2; done
answers || die "the OCI registry on 127.0.0.1:$PORT refuses its own login"
log "OCI registry ready on 127.0.0.1:$PORT (user $USER_NAME, password in $PASSWORD_FILE)"
