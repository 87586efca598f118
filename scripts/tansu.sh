#!/usr/bin/env bash
# Ensures the Tansu broker (Kafka API) answers on 127.0.0.1:9092 with memory
# storage. Installs it (cold: ~20-25 min on 2 cores) only when missing.
source "$(dirname "$0")/lib.sh"

ensure_rust
if ! tansu --version >/dev/null 2>&1; then
  ensure_build_deps
  log "installing tansu 0.6.0 (dynostore, libsql) — a cold build takes ~20 minutes"
  cargo install --locked tansu@0.6.0 --features dynostore,libsql
fi

PORT="${EXECPLANE_TANSU_PORT:-9092}"
if port_open "$PORT"; then
  log "Kafka API already answering on 127.0.0.1:$PORT"
  exit 0
fi
log "starting tansu on 127.0.0.1:$PORT (memory storage)"
cd "$STACK_DIR"
nohup tansu broker \
  --listener-url "tcp://127.0.0.1:$PORT" \
  --advertised-listener-url "tcp://127.0.0.1:$PORT" \
  --storage-engine memory://tansu/ \
  >"$STACK_DIR/tansu.log" 2>&1 &
echo $! >"$STACK_DIR/tansu.pid"
wait_port "$PORT" 30 "tansu"
log "tansu ready on 127.0.0.1:$PORT (log: $STACK_DIR/tansu.log)"
