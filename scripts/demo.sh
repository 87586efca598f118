#!/usr/bin/env bash
# Brings up the local stack and runs execplane's main job end to end.
source "$(dirname "$0")/lib.sh"
cd "$ROOT"

ensure_build_deps
ensure_rust
"$ROOT/scripts/postgres.sh"
export EXECPLANE_DATABASE_URL="${EXECPLANE_DATABASE_URL:-postgres://postgres@127.0.0.1:5432/execplane}"

cargo build --locked --release
BIN="$ROOT/target/release/execplane"
"$BIN" migrate
"$BIN" validate examples/verify-tcp.json
"$BIN" bench store --attempts 1000
"$BIN" audit verify
"$BIN" projection rebuild --verify
