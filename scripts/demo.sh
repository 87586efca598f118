#!/usr/bin/env bash
# Brings up the local stack (Postgres, Apache Kafka; OpenBao, sshd, ansible-core and
# a Kubernetes API, helm and OpenTofu for the ssh,
# ansible, kubernetes, helm and opentofu examples), starts
# `execplane serve`, runs the example job end to end with `execplane
# submit`, then every example (the ssh and ansible ones on this host
# through the local sshd, the kubernetes ones on the local API), and stops
# serve.
source "$(dirname "$0")/lib.sh"
cd "$ROOT"

ensure_build_deps
apt_install cmake libcurl4-openssl-dev zlib1g-dev libssl-dev
# Every tool runs in a sandbox built by bubblewrap (docs/SECURITY.md).
# nftables keeps the sandbox's uids off the platform's endpoints.
apt_install bubblewrap util-linux nftables
ensure_rust
"$ROOT/scripts/postgres.sh"
"$ROOT/scripts/kafka.sh"
"$ROOT/scripts/openbao.sh"
"$ROOT/scripts/sshd.sh"
"$ROOT/scripts/ansible.sh"
"$ROOT/scripts/kubernetes.sh"
"$ROOT/scripts/helm.sh"
"$ROOT/scripts/opentofu.sh"
export EXECPLANE_HELM_BIN="${EXECPLANE_HELM_BIN:-$STACK_DIR/helm/bin/helm}"
export EXECPLANE_TOFU_BIN="${EXECPLANE_TOFU_BIN:-$STACK_DIR/opentofu/bin/tofu}"
export EXECPLANE_TOFU_PROVIDER_MIRROR="${EXECPLANE_TOFU_PROVIDER_MIRROR:-$STACK_DIR/opentofu/mirror}"
export EXECPLANE_TOFU_STATE_DIR="${EXECPLANE_TOFU_STATE_DIR:-$STACK_DIR/opentofu/state}"
export EXECPLANE_DATABASE_URL="${EXECPLANE_DATABASE_URL:-postgres://postgres@127.0.0.1:5432/execplane}"
export EXECPLANE_KAFKA_BROKERS="${EXECPLANE_KAFKA_BROKERS:-127.0.0.1:9092}"
# The stack has one broker: topics get one replica, not the topology's 3.
export EXECPLANE_TOPIC_REPLICATION_FACTOR="${EXECPLANE_TOPIC_REPLICATION_FACTOR:-1}"
# No tool reaches the local cluster's etcd (its datastore, beneath the API
# server's authorisation), nor a cloud's metadata service.
export EXECPLANE_SANDBOX_DENY="${EXECPLANE_SANDBOX_DENY:-169.254.0.0/16,fd00:ec2::254,127.0.0.1:2379,127.0.0.1:2380}"
export EXECPLANE_TOPIC_PREFIX="${EXECPLANE_TOPIC_PREFIX:-demo.}"
export EXECPLANE_ARTIFACT_DIR="${EXECPLANE_ARTIFACT_DIR:-$STACK_DIR/artifacts}"

log "building (release)"
cargo build --locked --release
BIN="$ROOT/target/release/execplane"

# The ssh and ansible examples: rendered for this host, under their own
# operator policy; the test user's key in OpenBao, where they reference it.
EXAMPLES="$STACK_DIR/demo-examples"
rm -rf "$EXAMPLES"
"$ROOT/scripts/examples.sh" "$BIN" "$EXAMPLES"
export EXECPLANE_POLICY_FILE="$EXAMPLES/policy.yaml"
export EXECPLANE_VAULT_ADDR="${EXECPLANE_VAULT_ADDR:-http://127.0.0.1:8200}"
EXECPLANE_VAULT_TOKEN="$(cat "$STACK_DIR/openbao-root-token")"
export EXECPLANE_VAULT_TOKEN
export EXECPLANE_ANSIBLE_BIN_DIR="${EXECPLANE_ANSIBLE_BIN_DIR:-$STACK_DIR/ansible/bin}"
# examples/verify-custom.json runs the built-in `sleep` probe, which no
# allowlist holds by default.
export EXECPLANE_VERIFY_PROBES="${EXECPLANE_VERIFY_PROBES:-sleep}"
python3 - "$STACK_DIR/ssh/user_ed25519" <<'PY' |
import json, sys
print(json.dumps({"data": {"private_key": open(sys.argv[1]).read()}}))
PY
  curl -fsS -o /dev/null -H "X-Vault-Token: $EXECPLANE_VAULT_TOKEN" -X POST --data @- \
    "$EXECPLANE_VAULT_ADDR/v1/secret/data/team-a/ssh" || die "storing the demo key in OpenBao failed"
# The local API server's admin token, the kubernetes examples' credentials.
python3 - "$STACK_DIR/kubernetes/admin-token" <<'PY' |
import json, sys
print(json.dumps({"data": {"token": open(sys.argv[1]).read().strip()}}))
PY
  curl -fsS -o /dev/null -H "X-Vault-Token: $EXECPLANE_VAULT_TOKEN" -X POST --data @- \
    "$EXECPLANE_VAULT_ADDR/v1/secret/data/team-a/kube" || die "storing the demo cluster token in OpenBao failed"

# Keys for the ingress, fresh each run and never printed.
random_key() { head -c 24 /dev/urandom | od -An -tx1 | tr -d ' \n'; }
export EXECPLANE_INGRESS_KEY="${EXECPLANE_INGRESS_KEY:-$(random_key)}"
export EXECPLANE_API_KEY="${EXECPLANE_API_KEY:-$(random_key)}"
INGRESS="http://127.0.0.1:${EXECPLANE_INGRESS_HTTP_PORT:-3000}"

log "starting execplane serve (log: $STACK_DIR/serve.log)"
"$BIN" serve >"$STACK_DIR/serve.log" 2>&1 &
SERVE=$!
trap 'kill -TERM $SERVE 2>/dev/null; wait $SERVE 2>/dev/null || true' EXIT
# serve applies migrations and the topology, then announces its runner.
for _ in $(seq 1 100); do
  grep -q "reading work partition" "$STACK_DIR/serve.log" 2>/dev/null && break
  kill -0 $SERVE 2>/dev/null || { cat "$STACK_DIR/serve.log"; die "serve exited"; }
  sleep 0.2
done
sleep 1.5   # the first presence heartbeat reaches the dispatcher

# A fresh command id each run, so the example runs again rather than deduplicating.
JOB="$STACK_DIR/example-job.json"
sed -e "s/6f0c5d1e-2b7a-4c39-9e58-1d2f3a4b5c6d/$(cat /proc/sys/kernel/random/uuid)/" \
    -e "s#example/verify-tcp#example/verify-tcp-$(date +%s)#" examples/verify-tcp.json >"$JOB"
log "submitting $JOB"
"$BIN" submit "$JOB" --timeout 60s
JOB_ID=$(python3 -c 'import json,sys; print(json.load(open(sys.argv[1]))["job_id"])' "$JOB")
log "the same job through the execute API ($INGRESS/v1/jobs/$JOB_ID):"
curl -fsS -H "Authorization: Bearer $EXECPLANE_API_KEY" "$INGRESS/v1/jobs/$JOB_ID" |
  python3 -c 'import json,sys; d=json.load(sys.stdin); a=d["attempts"][-1]; print("job %s: attempt %s is %s" % (d["job"]["job_id"], a["attempt_id"], a["status"]))'
# The console answers (a browser signs in there with the same key).
curl -fsS -o /dev/null -w "the operator console: $INGRESS/console (HTTP %{http_code} to sign in; the key is EXECPLANE_API_KEY)\n" "$INGRESS/console/sign-in" ||
  die "the console did not answer"
# Every example, each to the end the README's table gives it (all succeed).
for example in examples/*.json; do
  name=$(basename "$example" .json)
  copy="$STACK_DIR/example-$name.json"
  python3 - "$example" "$copy" <<'PY'
import json, sys, time, uuid
spec = json.load(open(sys.argv[1]))
spec["command_id"] = str(uuid.uuid4())
spec["job_id"] = "%s-%d" % (spec["job_id"], time.time() * 1000)
json.dump(spec, open(sys.argv[2], "w"))
PY
  log "example $name"
  "$BIN" submit "$copy" --timeout 60s || die "example $name did not succeed (the README says it does)"
done
for job in "$EXAMPLES"/jobs/ssh-*.json "$EXAMPLES"/jobs/ansible-*.json "$EXAMPLES"/jobs/kubernetes-*.json "$EXAMPLES"/jobs/helm-*.json "$EXAMPLES"/jobs/opentofu-*.json; do
  name=$(basename "$job" .json)
  python3 - "$job" <<'PY'
import json, sys, time, uuid
spec = json.load(open(sys.argv[1]))
spec["command_id"] = str(uuid.uuid4())
spec["job_id"] = "%s-%d" % (spec["job_id"], time.time() * 1000)
json.dump(spec, open(sys.argv[1], "w"))
PY
  log "example $name"
  "$BIN" submit "$job" --timeout 120s || die "example $name did not succeed (the README says it does)"
done
if [ -f "$EXAMPLES/node/svc/demo.pid" ]; then kill "$(cat "$EXAMPLES/node/svc/demo.pid")" 2>/dev/null || true; fi
log "the hash chain and the projection check out:"
"$BIN" audit verify
"$BIN" projection rebuild --verify
