#!/usr/bin/env bash
# Ensures Garage (S3-compatible storage) answers on 127.0.0.1:3900: one
# node, sqlite metadata, replication factor 1, a bucket and a key for the
# artifact worker. Installs the binary (cold: ~17 min on 2 cores) only when
# `garage` is missing. Credentials are generated once into .stack/ (0600).
source "$(dirname "$0")/lib.sh"

ensure_rust
if ! garage --version >/dev/null 2>&1; then
  ensure_build_deps
  log "installing garage 2.5.0 (bundled-libs, sqlite) — a cold build takes ~17 minutes"
  cargo install --locked garage@2.5.0 --no-default-features --features bundled-libs,sqlite
fi

DIR="$STACK_DIR/garage"
CONFIG="$DIR/garage.toml"
CREDENTIALS="$STACK_DIR/garage-credentials"
PORT="${EXECPLANE_GARAGE_PORT:-3900}"
BUCKET="${EXECPLANE_S3_BUCKET:-execplane-artifacts}"
hex() { head -c "$1" /dev/urandom | od -An -tx1 | tr -d ' \n'; }

mkdir -p "$DIR/meta" "$DIR/data"
umask 077
if [ ! -s "$CONFIG" ]; then
  cat >"$CONFIG" <<TOML
metadata_dir = "$DIR/meta"
data_dir = "$DIR/data"
db_engine = "sqlite"
replication_factor = 1
rpc_bind_addr = "127.0.0.1:3901"
rpc_public_addr = "127.0.0.1:3901"
rpc_secret = "$(hex 32)"

[s3_api]
s3_region = "garage"
api_bind_addr = "127.0.0.1:$PORT"
root_domain = ".s3.garage.localhost"

[admin]
api_bind_addr = "127.0.0.1:3903"
admin_token = "$(hex 24)"
TOML
fi
if [ ! -s "$CREDENTIALS" ]; then
  printf 'EXECPLANE_S3_ACCESS_KEY_ID=GK%s\nEXECPLANE_S3_SECRET_ACCESS_KEY=%s\n' "$(hex 12)" "$(hex 32)" >"$CREDENTIALS"
fi

g() { garage -c "$CONFIG" "$@"; }
if port_open "$PORT"; then
  g status >/dev/null 2>&1 || die "something answers on 127.0.0.1:$PORT, but not the Garage of $CONFIG"
  log "S3 (Garage) already answering on 127.0.0.1:$PORT"
else
  log "starting garage on 127.0.0.1:$PORT"
  nohup garage -c "$CONFIG" server >>"$STACK_DIR/garage.log" 2>&1 &
  echo $! >"$STACK_DIR/garage.pid"
  wait_port "$PORT" 30 "garage"
fi

# Every step below is checked and repeated on each run, so an interrupted
# first run is completed by the next one.
# One-node layout: assign the node a role if it has none, apply if staged.
# (The status is read whole first: `g status | grep -q` under pipefail fails
# when grep exits before garage's last write.)
STATUS="$(g status 2>/dev/null || true)"
if [[ "$STATUS" == *"NO ROLE ASSIGNED"* ]]; then
  NODE=$(g node id -q 2>/dev/null | cut -d@ -f1)
  [ -n "$NODE" ] || die "garage did not report its node id (log: $STACK_DIR/garage.log)"
  g layout assign -z dc1 -c 1G "$NODE" >/dev/null
fi
# Garage names the version to apply when changes are staged.
NEXT=$(g layout show 2>&1 | sed -n 's/.*garage layout apply --version *\([0-9][0-9]*\).*/\1/p')
NEXT="${NEXT%%$'\n'*}"
if [ -n "$NEXT" ]; then
  g layout apply --version "$NEXT" >/dev/null
fi
# The key and bucket.
source "$CREDENTIALS"
if ! g key info "$EXECPLANE_S3_ACCESS_KEY_ID" >/dev/null 2>&1; then
  g key import --yes -n execplane "$EXECPLANE_S3_ACCESS_KEY_ID" "$EXECPLANE_S3_SECRET_ACCESS_KEY" >/dev/null
fi
if ! g bucket info "$BUCKET" >/dev/null 2>&1; then
  g bucket create "$BUCKET" >/dev/null
fi
g bucket allow --read --write --owner "$BUCKET" --key "$EXECPLANE_S3_ACCESS_KEY_ID" >/dev/null
log "garage ready on 127.0.0.1:$PORT, bucket $BUCKET (credentials: $CREDENTIALS; log: $STACK_DIR/garage.log)"
