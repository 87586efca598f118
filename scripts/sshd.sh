#!/usr/bin/env bash
# Ensures a real OpenSSH server answers on 127.0.0.1:2222 for the ssh runner
# and its tests: its own config, an ed25519 host key and an ed25519 key for
# the unprivileged test user `exectest` (who may run /usr/bin/id and /bin/sleep as root
# through sudo, and nothing else), all under .stack/ssh/. Installs
# openssh-server and sudo when missing. The user's private key stays in
# .stack/ssh/ (0600); the tests store it in OpenBao and reference it from
# there, as a JobSpec must.
source "$(dirname "$0")/lib.sh"

PORT="${EXECPLANE_SSHD_PORT:-2222}"
DIR="$STACK_DIR/ssh"
USER_NAME=exectest

[ -x /usr/sbin/sshd ] || apt_install openssh-server
command -v ssh >/dev/null 2>&1 || apt_install openssh-client
# The ssh runner's file transfers: the sftp client and the node's server.
command -v sftp >/dev/null 2>&1 || apt_install openssh-client
[ -x /usr/lib/openssh/sftp-server ] || apt_install openssh-sftp-server
command -v sudo >/dev/null 2>&1 || apt_install sudo

# The Debian package may start its own sshd on :22; that one is not ours
# and is left as it is.
mkdir -p "$DIR" /run/sshd
chmod 700 "$DIR"
[ -f "$DIR/host_ed25519" ] || ssh-keygen -q -t ed25519 -N '' -C "execplane-test-host" -f "$DIR/host_ed25519"
[ -f "$DIR/user_ed25519" ] || ssh-keygen -q -t ed25519 -N '' -C "execplane-test-user" -f "$DIR/user_ed25519"

if ! id "$USER_NAME" >/dev/null 2>&1; then
  log "creating the test user $USER_NAME"
  as_root useradd --create-home --shell /bin/sh "$USER_NAME"
fi
# Not locked (sshd refuses locked accounts), and no password that works.
as_root usermod -p '*' "$USER_NAME"
HOME_DIR="$(getent passwd "$USER_NAME" | cut -d: -f6)"
as_root install -d -m 700 -o "$USER_NAME" -g "$USER_NAME" "$HOME_DIR/.ssh"
as_root install -m 600 -o "$USER_NAME" -g "$USER_NAME" "$DIR/user_ed25519.pub" "$HOME_DIR/.ssh/authorized_keys"
# Sudo is explicit per template: the test user may run exactly this as root.
echo "$USER_NAME ALL=(root) NOPASSWD: /usr/bin/id, /bin/sleep" | as_root tee /etc/sudoers.d/execplane-test >/dev/null
as_root chmod 440 /etc/sudoers.d/execplane-test

cat >"$DIR/sshd_config" <<EOF
Port $PORT
ListenAddress 127.0.0.1
HostKey $DIR/host_ed25519
PidFile $DIR/sshd.pid
AuthorizedKeysFile .ssh/authorized_keys
PubkeyAuthentication yes
PasswordAuthentication no
KbdInteractiveAuthentication no
PermitRootLogin no
AllowUsers $USER_NAME
UsePAM no
X11Forwarding no
AllowTcpForwarding no
AllowAgentForwarding no
PermitTunnel no
# The ssh runner's tests open a few sessions at once.
MaxStartups 50:30:100
MaxSessions 20
LogLevel VERBOSE
EOF
# The host key as a known_hosts entry, for JobSpecs' node bindings.
printf '[127.0.0.1]:%s %s\n' "$PORT" "$(cut -d' ' -f1-2 "$DIR/host_ed25519.pub")" >"$DIR/known_hosts"

if port_open "$PORT"; then
  [ -f "$DIR/sshd.pid" ] || die "something already listens on 127.0.0.1:$PORT, but not an sshd these scripts started"
  log "sshd already answering on 127.0.0.1:$PORT"
  exit 0
fi
/usr/sbin/sshd -t -f "$DIR/sshd_config" || die "sshd refused its config $DIR/sshd_config"
log "starting sshd on 127.0.0.1:$PORT"
/usr/sbin/sshd -f "$DIR/sshd_config" -E "$STACK_DIR/sshd.log"
wait_port "$PORT" 15 "sshd"
log "sshd ready on 127.0.0.1:$PORT (user $USER_NAME; keys and known_hosts in $DIR; log: $STACK_DIR/sshd.log)"
