#!/usr/bin/env bash
# Renders the ssh, ansible, kubernetes, helm and opentofu examples for this
# machine into OUT:
#   OUT/policy.yaml            examples/demo-policy.yaml, placeholders filled
#   OUT/jobs/<runner>-<file>   examples/{ssh,ansible,kubernetes,helm,opentofu}/*.json,
#                              in their order
#   OUT/node/                  what the examples touch on the node (this host,
#                              through the sshd of scripts/sshd.sh): drop/,
#                              markers/, and svc.sh, a service supervisor of
#                              its own for the restart example
# and stores the demo package and the upload's payload as input artifacts
# with `EXECPLANE execplane artifacts put` (EXECPLANE_ARTIFACT_DIR or S3 as
# configured), with the helm examples' chart (examples/helm/chart/demo,
# packaged by helm: EXECPLANE_HELM_BIN or the stack's) and the opentofu
# examples' module (examples/opentofu/module, a gzipped tar); the kubernetes and
# helm examples' namespace, team-a-demo, is made on the local API server
# (scripts/kubernetes.sh) as its administrator.
# Usage: scripts/examples.sh EXECPLANE_BINARY OUT
source "$(dirname "$0")/lib.sh"
BIN="${1:?the execplane binary}"
OUT="${2:?the output directory}"
HOST_KEY="$(cut -d' ' -f1-2 "$STACK_DIR/ssh/host_ed25519.pub")" || die "run scripts/sshd.sh first"
KUBE_CA="$STACK_DIR/kubernetes/certs/apiserver.crt"
[ -f "$KUBE_CA" ] || die "run scripts/kubernetes.sh first"
# The kubernetes examples' namespace (409: it is there already).
code=$(curl -sS -o /dev/null -w '%{http_code}' --cacert "$KUBE_CA" \
  -H "Authorization: Bearer $(cat "$STACK_DIR/kubernetes/admin-token")" -H 'Content-Type: application/json' \
  -X POST --data '{"apiVersion":"v1","kind":"Namespace","metadata":{"name":"team-a-demo"}}' \
  https://127.0.0.1:6443/api/v1/namespaces) || die "the local Kubernetes API did not answer"
case "$code" in 201|409) ;; *) die "creating namespace team-a-demo: HTTP $code" ;; esac

mkdir -p "$OUT/jobs" "$OUT/node/drop" "$OUT/node/markers" "$OUT/node/svc"
chmod 755 "$OUT" "$OUT/node"
chmod 777 "$OUT/node/drop" "$OUT/node/markers" "$OUT/node/svc"
NODE="$(cd "$OUT/node" && pwd)"
cat >"$NODE/svc.sh" <<'SH'
#!/bin/sh
# restart NAME: (re)starts a detached sleep; status NAME: whether it runs.
dir="$(dirname "$0")/svc"; name="$2"; pidfile="$dir/$name.pid"
case "$1" in
restart)
  [ -f "$pidfile" ] && kill "$(cat "$pidfile")" 2>/dev/null
  setsid /bin/sleep 3600 </dev/null >/dev/null 2>&1 &
  echo $! > "$pidfile" ;;
status)
  if [ -f "$pidfile" ] && kill -0 "$(cat "$pidfile")" 2>/dev/null; then
    echo "$name active (pid $(cat "$pidfile"))"; exit 0
  fi
  echo "$name inactive"; exit 3 ;;
esac
SH
chmod 755 "$NODE/svc.sh"

tar -czf "$OUT/package.tar.gz" -C "$ROOT/examples/ansible/package" --owner=0 --group=0 --numeric-owner .
PACKAGE="$("$BIN" artifacts put "$OUT/package.tar.gz")" || die "storing the demo package failed"
printf 'uploaded by the ssh.file.upload example\n' >"$OUT/payload.txt"
PAYLOAD="$("$BIN" artifacts put --tenant team-a "$OUT/payload.txt")" || die "storing the upload payload failed"
HELM="${EXECPLANE_HELM_BIN:-$STACK_DIR/helm/bin/helm}"
[ -x "$HELM" ] || die "no helm at $HELM: run scripts/helm.sh first"
HOME="$OUT" "$HELM" package "$ROOT/examples/helm/chart/demo" -d "$OUT" >/dev/null || die "packaging the demo chart failed"
CHART="$("$BIN" artifacts put "$OUT/demo-0.1.0.tgz")" || die "storing the demo chart failed"
tar -czf "$OUT/module.tar.gz" -C "$ROOT/examples/opentofu/module" --owner=0 --group=0 --numeric-owner .
TOFU_MODULE="$("$BIN" artifacts put "$OUT/module.tar.gz")" || die "storing the demo module failed"

render() {
  sed -e "s#@HOST_KEY@#$HOST_KEY#g" -e "s#@PACKAGE@#$PACKAGE#g" \
      -e "s#@PAYLOAD@#$PAYLOAD#g" -e "s#@DEMO_DIR@#$NODE#g" -e "s#@KUBE_CA@#$KUBE_CA#g" -e "s#@CHART@#$CHART#g" -e "s#@TOFU_MODULE@#$TOFU_MODULE#g" "$1"
}
render "$ROOT/examples/demo-policy.yaml" >"$OUT/policy.yaml"
for runner in ssh ansible kubernetes helm opentofu; do
  for example in "$ROOT"/examples/$runner/*.json; do
    render "$example" >"$OUT/jobs/$runner-$(basename "$example")"
  done
done
log "examples rendered in $OUT (package $PACKAGE)"
