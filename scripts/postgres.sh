#!/usr/bin/env bash
# Ensures a Postgres server answers on 127.0.0.1:5432 with trust auth for
# local TCP, and that the `execplane` database exists. Idempotent.
source "$(dirname "$0")/lib.sh"

PGPORT_WANTED=5432
if ! command -v pg_ctlcluster >/dev/null 2>&1 && ! ls /usr/lib/postgresql/*/bin/postgres >/dev/null 2>&1; then
  apt_install postgresql postgresql-client
fi
apt_install postgresql-client

# The platform's settings for a write-heavy log (docs/BENCHMARKS.md,
# "Postgres settings"): Debian's defaults size the buffer cache at 128 MB
# and checkpoint every 1 GB of WAL, so a long run writes a full page image
# of nearly every index page it touches, again and again, and its WAL per
# attempt grows with the tables.
version="$(ls /etc/postgresql | sort -V | tail -1)"
tuning="/etc/postgresql/$version/main/conf.d/execplane.conf"
wanted_tuning="# execplane local stack (scripts/postgres.sh)
shared_buffers = 1GB
wal_compression = lz4
max_wal_size = 8GB
checkpoint_timeout = 15min
checkpoint_completion_target = 0.9"
if [ "$(cat "$tuning" 2>/dev/null)" != "$wanted_tuning" ]; then
  log "writing $tuning"
  printf '%s\n' "$wanted_tuning" | as_root tee "$tuning" >/dev/null
  if port_open "$PGPORT_WANTED"; then
    log "restarting Postgres $version for its new settings"
    as_root pg_ctlcluster --skip-systemctl-redirect "$version" main restart
    wait_port "$PGPORT_WANTED" 30 "Postgres"
  fi
fi

if ! port_open "$PGPORT_WANTED"; then
  log "starting Postgres $version"
  as_root pg_ctlcluster --skip-systemctl-redirect "$version" main start
  wait_port "$PGPORT_WANTED" 30 "Postgres"
fi

if ! psql -h 127.0.0.1 -U postgres -d postgres -Atqc 'select 1' >/dev/null 2>&1; then
  # A fresh Debian install asks for a password on TCP; the local stack
  # trusts loopback, as the machines this project runs on do.
  version="$(ls /etc/postgresql | sort -V | tail -1)"
  hba="/etc/postgresql/$version/main/pg_hba.conf"
  if ! grep -q "execplane local stack" "$hba"; then
    log "trusting loopback TCP in $hba"
    as_root sed -i '1i # execplane local stack: trust loopback TCP\nhost all all 127.0.0.1/32 trust\nhost all all ::1/128 trust' "$hba"
    as_root pg_ctlcluster --skip-systemctl-redirect "$version" main reload
    sleep 1
  fi
  psql -h 127.0.0.1 -U postgres -d postgres -Atqc 'select 1' >/dev/null || die "cannot connect to Postgres as postgres@127.0.0.1"
fi

if [ "$(psql -h 127.0.0.1 -U postgres -d postgres -Atqc "select 1 from pg_database where datname = 'execplane'")" != "1" ]; then
  log "creating database execplane"
  psql -h 127.0.0.1 -U postgres -d postgres -qc 'create database execplane' >/dev/null
fi
log "Postgres ready on 127.0.0.1:5432"

# A second server on 5433 stands for a tenant's OpenTofu state backend: a
# server of its own, which tools may reach, while the platform's database
# on 5432 they may not (docs/SECURITY.md, "Network").
STATE_PORT=5433
version="$(ls /etc/postgresql | sort -V | tail -1)"
if [ ! -d "/etc/postgresql/$version/tfstate" ]; then
  log "creating the state-backend Postgres cluster on $STATE_PORT"
  as_root pg_createcluster "$version" tfstate -p "$STATE_PORT" >/dev/null
  hba="/etc/postgresql/$version/tfstate/pg_hba.conf"
  as_root sed -i '1i # execplane local stack: trust loopback TCP\nhost all all 127.0.0.1/32 trust\nhost all all ::1/128 trust' "$hba"
fi
if ! port_open "$STATE_PORT"; then
  log "starting the state-backend Postgres"
  as_root pg_ctlcluster --skip-systemctl-redirect "$version" tfstate start
  wait_port "$STATE_PORT" 30 "Postgres (state backend)"
fi
log "Postgres (state backend) ready on 127.0.0.1:$STATE_PORT"
