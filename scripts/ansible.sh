#!/usr/bin/env bash
# Ensures ansible-core in the project's virtualenv (.stack/ansible), for the
# ansible runner and its tests: EXECPLANE_ANSIBLE_BIN_DIR=.stack/ansible/bin.
# Installs python3 and its venv module from Debian when missing; ansible-core
# itself comes from PyPI, pinned. Idempotent: an existing, answering install
# of the pinned version is left as it is.
source "$(dirname "$0")/lib.sh"

VERSION="${EXECPLANE_ANSIBLE_CORE_VERSION:-2.17.14}"
VENV="$STACK_DIR/ansible"

if [ -x "$VENV/bin/ansible-playbook" ] && "$VENV/bin/ansible-playbook" --version 2>/dev/null | sed -n 1p | grep -q "core $VERSION\]"; then
  log "ansible-core $VERSION already in $VENV"
  exit 0
fi
command -v python3 >/dev/null 2>&1 || apt_install python3
# Debian's /usr/bin/python3 needs python3-venv for ensurepip.
/usr/bin/env python3 -c 'import ensurepip, venv' 2>/dev/null || apt_install python3-venv
mkdir -p "$STACK_DIR"
log "installing ansible-core $VERSION into $VENV"
rm -rf "$VENV"
python3 -m venv "$VENV"
"$VENV/bin/pip" install --quiet --disable-pip-version-check "ansible-core==$VERSION"
"$VENV/bin/ansible-playbook" --version | sed -n 1p >&2
log "ansible-core ready: $VENV/bin"
