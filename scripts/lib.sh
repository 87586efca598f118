# Shared helpers for the stack scripts. Sourced, not run.
set -euo pipefail

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
STACK_DIR="${EXECPLANE_STACK_DIR:-$ROOT/.stack}"
mkdir -p "$STACK_DIR"

log() { printf '\033[1m[stack]\033[0m %s\n' "$*" >&2; }
die() { printf '\033[31m[stack] error:\033[0m %s\n' "$*" >&2; exit 1; }

as_root() {
  if [ "$(id -u)" -eq 0 ]; then "$@"; elif command -v sudo >/dev/null; then sudo "$@"; else die "need root for: $*"; fi
}

APT_UPDATED=0
apt_install() {
  # apt_install PACKAGE... : installs only what is missing.
  local missing=()
  for package in "$@"; do
    dpkg-query -W -f='${Status}' "$package" 2>/dev/null | grep -q "install ok installed" || missing+=("$package")
  done
  [ ${#missing[@]} -eq 0 ] && return 0
  if [ "$APT_UPDATED" -eq 0 ]; then
    log "apt-get update"
    as_root apt-get update -qq
    APT_UPDATED=1
  fi
  log "installing ${missing[*]}"
  as_root env DEBIAN_FRONTEND=noninteractive apt-get install -y -qq "${missing[@]}" >/dev/null
}

port_open() { (exec 3<>"/dev/tcp/127.0.0.1/$1") 2>/dev/null; }

wait_port() {
  # wait_port PORT SECONDS NAME
  local deadline=$((SECONDS + $2))
  until port_open "$1"; do
    [ $SECONDS -ge $deadline ] && die "$3 did not open 127.0.0.1:$1 within $2 s"
    sleep 0.2
  done
}

ensure_rust() {
  if command -v cargo >/dev/null 2>&1 || [ -x "$HOME/.cargo/bin/cargo" ]; then
    export PATH="$HOME/.cargo/bin:$PATH"
    # The crate needs Rust >= 1.94.1 (aws-sdk-s3); update a rustup toolchain that is older.
    local version
    version=$(rustc --version 2>/dev/null | awk '{print $2}')
    if [ -n "$version" ] && [ "$(printf '%s\n1.94.1\n' "$version" | sort -V | head -1)" != "1.94.1" ]; then
      if command -v rustup >/dev/null 2>&1; then
        log "rustc $version is older than 1.94.1: updating the stable toolchain"
        rustup update stable >/dev/null && rustup default stable >/dev/null
      else
        die "rustc $version is older than 1.94.1 and rustup is absent; install Rust >= 1.94.1 (https://rustup.rs)"
      fi
    fi
    # The lint gate needs both; a toolchain without them would fail it for
    # the wrong reason.
    if command -v rustup >/dev/null 2>&1 && ! { cargo fmt --version && cargo clippy --version; } >/dev/null 2>&1; then
      log "adding the rustfmt and clippy components"
      rustup component add rustfmt clippy >/dev/null
    fi
    return 0
  fi
  log "cargo not found: installing Rust with rustup"
  apt_install curl ca-certificates
  curl -sSf https://sh.rustup.rs | sh -s -- -y --profile minimal --component clippy,rustfmt \
    || die "could not install Rust; install Rust >= 1.94.1 (https://rustup.rs) and rerun"
  export PATH="$HOME/.cargo/bin:$PATH"
}

ensure_build_deps() {
  apt_install build-essential pkg-config
}
