#!/usr/bin/env bash
# Ensures ansible-core in the project's virtualenv (.stack/ansible), for the
# ansible runner and its tests: EXECPLANE_ANSIBLE_BIN_DIR=.stack/ansible/bin.
# The venv is made from Debian's /usr/bin/python3, never another Python on
# PATH (pyenv's lives under /root, which the runner's tool sandbox cannot
# see: docs/SECURITY.md). Installs python3 and its venv module from Debian
# when missing; ansible-core itself comes from PyPI, pinned. Idempotent: an
# existing, answering install of the pinned version on /usr/bin/python3 is
# left as it is.
source "$(dirname "$0")/lib.sh"

VERSION="${EXECPLANE_ANSIBLE_CORE_VERSION:-2.17.14}"
VENV="$STACK_DIR/ansible"

if [ -x "$VENV/bin/ansible-playbook" ] && grep -qx 'home = /usr/bin' "$VENV/pyvenv.cfg" 2>/dev/null \
  && "$VENV/bin/ansible-playbook" --version 2>/dev/null | sed -n 1p | grep -q "core $VERSION\]"; then
  log "ansible-core $VERSION already in $VENV"
  exit 0
fi
[ -x /usr/bin/python3 ] || apt_install python3
# Debian's /usr/bin/python3 needs python3-venv for ensurepip.
/usr/bin/python3 -c 'import ensurepip, venv' 2>/dev/null || apt_install python3-venv
mkdir -p "$STACK_DIR"
log "installing ansible-core $VERSION into $VENV"
rm -rf "$VENV"
/usr/bin/python3 -m venv "$VENV"
"$VENV/bin/pip" install --quiet --disable-pip-version-check "ansible-core==$VERSION"
"$VENV/bin/ansible-playbook" --version | sed -n 1p >&2
log "ansible-core ready: $VENV/bin"
