#!/usr/bin/env bash
# Ensures a real Kubernetes API on 127.0.0.1:6443 for the kubernetes and
# helm runners' tests: etcd (127.0.0.1:2379), kube-apiserver (token auth,
# RBAC, service-account keys) and kube-controller-manager (job, replicaset,
# deployment, namespace, garbagecollector, serviceaccount controllers).
# There is no scheduler and no kubelet: pods never run; a test that needs a
# ready rollout patches pod status as a kubelet would.
# Privileged pods are allowed, as in kubeadm and most distributions: the
# chart of execplane itself (deploy/helm) runs its runners privileged.
#
# No registry here ships kube-apiserver, so it is built from Debian
# bookworm's `kubernetes` source package (1.20.2, which carries its vendor
# tree and so builds offline), fetched through a private sources list (the
# system's apt configuration is untouched), about 9 minutes cold on 2
# cores. Its vendored github.com/modern-go/reflect2 1.0.1 faults on the Go
# 1.18+ map iterator (the API server dies with "fatal error: fault" in
# mapiterinit as soon as it encodes a custom resource), and bookworm has
# only Go 1.19, so the build replaces it with Debian's reflect2 1.0.2, which
# has the fix (golang-github-modern-go-reflect2-dev). The binaries are
# installed machine-wide, like a `cargo install` (EXECPLANE_KUBE_BIN_DIR,
# default /usr/local/lib/execplane/kubernetes-v1.20.2-reflect2),
# so a fresh clone of the repository does not build them again. Everything
# else (keys, the token, the kubeconfig, etcd's data) is generated under
# .stack/kubernetes.
# Idempotent: what is built is not rebuilt, what answers is not restarted.
source "$(dirname "$0")/lib.sh"

DIR="$STACK_DIR/kubernetes"
BIN="${EXECPLANE_KUBE_BIN_DIR:-/usr/local/lib/execplane/kubernetes-v1.20.2-reflect2}"
PORT="${EXECPLANE_KUBE_PORT:-6443}"
mkdir -p "$DIR"
chmod 700 "$DIR"
as_root mkdir -p "$BIN"

command -v etcd >/dev/null 2>&1 || apt_install etcd-server
command -v openssl >/dev/null 2>&1 || apt_install openssl
command -v curl >/dev/null 2>&1 || apt_install curl

if [ ! -x "$BIN/kube-apiserver" ] || [ ! -x "$BIN/kube-controller-manager" ]; then
  command -v go >/dev/null 2>&1 || apt_install golang-go
  command -v rsync >/dev/null 2>&1 || apt_install rsync
  command -v dpkg-source >/dev/null 2>&1 || apt_install dpkg-dev
  APT="$DIR/apt"
  mkdir -p "$APT/lists/partial" "$DIR/src"
  echo "deb-src http://deb.debian.org/debian bookworm main" >"$APT/sources.list"
  apt_private=(-o "Dir::Etc::SourceList=$APT/sources.list" -o Dir::Etc::SourceParts=/dev/null -o "Dir::State::Lists=$APT/lists")
  log "fetching Debian's kubernetes source package (1.20.2)"
  as_root apt-get "${apt_private[@]}" update -qq
  (cd "$DIR/src" && as_root apt-get "${apt_private[@]}" source --download-only kubernetes -qq)
  TREE="$(find "$DIR/src" -maxdepth 1 -type d -name 'kubernetes-*' | head -1)"
  if [ -z "$TREE" ]; then
    (cd "$DIR/src" && dpkg-source -x --no-check kubernetes_*.dsc >/dev/null)
    TREE="$(find "$DIR/src" -maxdepth 1 -type d -name 'kubernetes-*' | head -1)"
  fi
  [ -n "$TREE" ] || die "the kubernetes source did not unpack in $DIR/src"
  apt_install golang-github-modern-go-reflect2-dev
  REFLECT2=/usr/share/gocode/src/github.com/modern-go/reflect2
  [ -f "$REFLECT2/go_above_118.go" ] || die "Debian's reflect2 in $REFLECT2 lacks the Go 1.18 fix"
  rsync -a --delete --exclude '*_test.go' "$REFLECT2/" "$TREE/vendor/github.com/modern-go/reflect2/"
  log "building kube-apiserver and kube-controller-manager from $TREE (about 9 minutes)"
  mkdir -p "$TREE/.go/src/k8s.io"
  ln -sfn ../../.. "$TREE/.go/src/k8s.io/kubernetes"
  (cd "$TREE" && GOPATH="$TREE/.go" CGO_ENABLED=0 GOPROXY=off GOTOOLCHAIN=local \
    KUBE_GIT_VERSION=v1.20.2 KUBE_GIT_TREE_STATE=clean \
    make WHAT="cmd/kube-apiserver cmd/kube-controller-manager" >"$DIR/build.log" 2>&1) ||
    die "the build failed; see $DIR/build.log"
  as_root install -m 755 "$(find "$TREE/_output" -type f -name kube-apiserver | head -1)" "$BIN/kube-apiserver"
  as_root install -m 755 "$(find "$TREE/_output" -type f -name kube-controller-manager | head -1)" "$BIN/kube-controller-manager"
  rm -rf "$DIR/src"
fi

# Credentials: a service-account key pair and one static admin token.
[ -f "$DIR/sa.key" ] || openssl genrsa -out "$DIR/sa.key" 2048 2>/dev/null
[ -f "$DIR/sa.pub" ] || openssl rsa -in "$DIR/sa.key" -pubout -out "$DIR/sa.pub" 2>/dev/null
if [ ! -f "$DIR/admin-token" ]; then
  head -c 24 /dev/urandom | od -An -tx1 | tr -d ' \n' >"$DIR/admin-token"
  chmod 600 "$DIR/admin-token"
fi
TOKEN="$(cat "$DIR/admin-token")"
printf '%s,execplane-admin,execplane-admin,system:masters\n' "$TOKEN" >"$DIR/tokens.csv"
chmod 600 "$DIR/tokens.csv"
cat >"$DIR/kubeconfig" <<EOF2
apiVersion: v1
kind: Config
clusters:
- name: local
  cluster:
    server: https://127.0.0.1:$PORT
    insecure-skip-tls-verify: true
users:
- name: admin
  user:
    token: $TOKEN
contexts:
- name: local
  context: {cluster: local, user: admin}
current-context: local
EOF2
chmod 600 "$DIR/kubeconfig"

if ! port_open 2379; then
  log "starting etcd on 127.0.0.1:2379"
  etcd --data-dir "$DIR/etcd" --listen-client-urls http://127.0.0.1:2379 \
    --advertise-client-urls http://127.0.0.1:2379 --listen-peer-urls http://127.0.0.1:2380 \
    >"$DIR/etcd.log" 2>&1 &
  wait_port 2379 30 "etcd"
fi
if ! port_open "$PORT"; then
  log "starting kube-apiserver on 127.0.0.1:$PORT"
  "$BIN/kube-apiserver" --etcd-servers=http://127.0.0.1:2379 --bind-address=127.0.0.1 \
    --advertise-address=127.0.0.1 --secure-port="$PORT" --cert-dir="$DIR/certs" \
    --token-auth-file="$DIR/tokens.csv" --authorization-mode=RBAC \
    --service-account-issuer=https://kubernetes.default.svc --service-account-key-file="$DIR/sa.pub" \
    --service-account-signing-key-file="$DIR/sa.key" --service-cluster-ip-range=10.96.0.0/24 \
    --endpoint-reconciler-type=none --enable-priority-and-fairness=false \
    --allow-privileged=true \
    >"$DIR/apiserver.log" 2>&1 &
  wait_port "$PORT" 60 "kube-apiserver"
fi
for _ in $(seq 1 60); do
  curl -fsSk -H "Authorization: Bearer $TOKEN" "https://127.0.0.1:$PORT/readyz" >/dev/null 2>&1 && break
  sleep 1
done
curl -fsSk -H "Authorization: Bearer $TOKEN" "https://127.0.0.1:$PORT/readyz" >/dev/null ||
  die "kube-apiserver is not ready; see $DIR/apiserver.log"
if ! pgrep -f "$BIN/kube-controller-manager" >/dev/null 2>&1; then
  log "starting kube-controller-manager"
  "$BIN/kube-controller-manager" --kubeconfig="$DIR/kubeconfig" --leader-elect=false \
    --bind-address=127.0.0.1 --port=0 \
    --controllers=job,replicaset,deployment,namespace,garbagecollector,serviceaccount,serviceaccount-token \
    --service-account-private-key-file="$DIR/sa.key" --use-service-account-credentials=false \
    >"$DIR/controller-manager.log" 2>&1 &
fi
log "kubernetes API ready on https://127.0.0.1:$PORT (kubeconfig: $DIR/kubeconfig)"
