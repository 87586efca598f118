#!/usr/bin/env bash
# Ensures a Postgres server answers on 127.0.0.1:5432 with trust auth for
# local TCP, and that the `execplane` database exists. Idempotent.
source "$(dirname "$0")/lib.sh"

PGPORT_WANTED=5432
if ! command -v pg_ctlcluster >/dev/null 2>&1 && ! ls /usr/lib/postgresql/*/bin/postgres >/dev/null 2>&1; then
  apt_install postgresql postgresql-client
fi
apt_install postgresql-client

if ! port_open "$PGPORT_WANTED"; then
  version="$(ls /etc/postgresql | sort -V | tail -1)"
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
