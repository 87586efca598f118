#!/usr/bin/env bash
# The whole test suite on the real local stack. `.ci/run` calls exactly this.
source "$(dirname "$0")/lib.sh"
cd "$ROOT"

ensure_build_deps
# rdkafka builds a current librdkafka, with OpenSSL for TLS and SCRAM
# (Debian's librdkafka 2.0.2 is too old).
apt_install cmake libcurl4-openssl-dev zlib1g-dev libssl-dev
# Every tool runs in a sandbox built by bubblewrap, with rlimits set by
# util-linux's prlimit (docs/SECURITY.md).
# nftables keeps the sandbox's uids off the platform's endpoints.
apt_install bubblewrap util-linux nftables
# The console's tests drive a real headless Chromium through WebDriver
# (tests/common/browser.rs).
apt_install chromium chromium-driver
# The ingress tests drive executors written in Python (standard library only).
command -v python3 >/dev/null 2>&1 || apt_install python3
ensure_rust
"$ROOT/scripts/postgres.sh"
"$ROOT/scripts/kafka.sh"
"$ROOT/scripts/openbao.sh"
"$ROOT/scripts/garage.sh"
"$ROOT/scripts/sshd.sh"
"$ROOT/scripts/ansible.sh"
"$ROOT/scripts/kubernetes.sh"
"$ROOT/scripts/helm.sh"
"$ROOT/scripts/registry.sh"
"$ROOT/scripts/opentofu.sh"
# The example consumers of the published log, in Python and Java (docs/EVENTS.md).
"$ROOT/scripts/consumers.sh"

# sqlx::test creates a fresh database per test from this server; every
# Kafka test uses its own topic prefix.
export DATABASE_URL="${DATABASE_URL:-postgres://postgres@127.0.0.1:5432/postgres}"
export EXECPLANE_DATABASE_URL="${EXECPLANE_DATABASE_URL:-postgres://postgres@127.0.0.1:5432/execplane}"
export EXECPLANE_KAFKA_BROKERS="${EXECPLANE_KAFKA_BROKERS:-127.0.0.1:9092}"
# The stack has one broker: topics get one replica, not the topology's 3.
export EXECPLANE_TOPIC_REPLICATION_FACTOR="${EXECPLANE_TOPIC_REPLICATION_FACTOR:-1}"
# No tool reaches the local cluster's etcd (its datastore, beneath the API
# server's authorisation), nor a cloud's metadata service.
export EXECPLANE_SANDBOX_DENY="${EXECPLANE_SANDBOX_DENY:-169.254.0.0/16,fd00:ec2::254,127.0.0.1:2379,127.0.0.1:2380}"
# The opentofu tests keep state in a Postgres of its own (scripts/postgres.sh):
# a state backend is the tenant's, never the platform's database.
export EXECPLANE_TEST_STATE_DATABASE_URL="${EXECPLANE_TEST_STATE_DATABASE_URL:-postgres://postgres@127.0.0.1:5433/postgres}"
# The secrets tests administer OpenBao with the root token scripts/openbao.sh made.
export EXECPLANE_TEST_VAULT_ADDR="${EXECPLANE_TEST_VAULT_ADDR:-http://127.0.0.1:8200}"
export EXECPLANE_TEST_VAULT_TOKEN_FILE="${EXECPLANE_TEST_VAULT_TOKEN_FILE:-$STACK_DIR/openbao-root-token}"
# The ansible runner's tests run the stack's ansible-core.
export EXECPLANE_ANSIBLE_BIN_DIR="${EXECPLANE_ANSIBLE_BIN_DIR:-$STACK_DIR/ansible/bin}"
# The helm runner's tests run the stack's helm.
export EXECPLANE_HELM_BIN="${EXECPLANE_HELM_BIN:-$STACK_DIR/helm/bin/helm}"
# ... and pull charts from the stack's password-protected OCI registry.
export EXECPLANE_TEST_REGISTRY="${EXECPLANE_TEST_REGISTRY:-127.0.0.1:5000}"
export EXECPLANE_TEST_REGISTRY_PASSWORD_FILE="${EXECPLANE_TEST_REGISTRY_PASSWORD_FILE:-$STACK_DIR/registry-password}"
# The opentofu runner's tests run the stack's OpenTofu with
# its offline provider mirror.
export EXECPLANE_TOFU_BIN="${EXECPLANE_TOFU_BIN:-$STACK_DIR/opentofu/bin/tofu}"
export EXECPLANE_TOFU_PROVIDER_MIRROR="${EXECPLANE_TOFU_PROVIDER_MIRROR:-$STACK_DIR/opentofu/mirror}"

# Every build of the suite has the runner type the tests define
# (docs/RUNNERS.md): one feature set, so nothing is built twice.
FEATURES=(--features testkit)

log "checking formatting and lints"
cargo fmt --all --check || die "cargo fmt --check: formatting differs (run cargo fmt)"
# The release's build (no test type) as well as the suite's.
cargo clippy --locked -- -D warnings || die "cargo clippy: warnings (they fail the build)"
cargo clippy --locked --all-targets "${FEATURES[@]}" -- -D warnings || die "cargo clippy: warnings (they fail the build)"

log "building"
# A clean build of the suite writes about 7 GB under target/ (measured
# 6.5 GB); a full disk shows up as the linker dying with SIGBUS.
free_gb=$(df -P -BG "$ROOT" | awk 'NR == 2 { sub("G", "", $4); print $4 }')
log "${free_gb} GB free for target/"
[ "${free_gb:-0}" -ge 8 ] || [ -d "$ROOT/target/debug/deps" ] ||
  log "warning: a clean build needs about 7 GB under target/; only ${free_gb} GB are free"
cargo build --locked --all-targets "${FEATURES[@]}"
log "running the test suite"
RESULTS="$STACK_DIR/test-results.log"
cargo test --locked --no-fail-fast --all-targets "${FEATURES[@]}" -- --test-threads="${EXECPLANE_TEST_THREADS:-2}" 2>&1 | tee "$RESULTS"
[ "${PIPESTATUS[0]}" -eq 0 ] || die "tests failed"

log "benchmarks, small N (figures only, never asserted)"
cargo run --locked --quiet "${FEATURES[@]}" -- migrate
cargo run --locked --quiet "${FEATURES[@]}" -- bench store --attempts 2000 --batch 250
EXECPLANE_LOG=warn cargo run --locked --quiet "${FEATURES[@]}" -- bench pipeline --jobs 500 --rate 250

# One closing line for the whole suite.
awk '/^test result:/ { for (i = 1; i <= NF; i++) { if ($(i+1) ~ /^passed/) p += $i; if ($(i+1) ~ /^failed/) f += $i } }
     END { printf "suite: %d passed, %d failed\n", p, f }' "$RESULTS"
