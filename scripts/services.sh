#!/usr/bin/env bash
# Makes sure PostgreSQL, MariaDB and RabbitMQ listen on localhost for the
# tests, and creates the test databases. It uses servers already running;
# otherwise it starts installed ones, or installs them from Debian's
# packages (as root) and starts them. A server it did not start is never
# reconfigured nor restarted: where the shared PostgreSQL does not fit the
# tests, it starts a PostgreSQL cluster of its own (below). It says what it
# did; where it cannot act it stops with the commands to run.
set -euo pipefail

say() { echo "services: $*"; }
listening() { (exec 3<>"/dev/tcp/127.0.0.1/$1") 2>/dev/null; }
wait_port() {
  local port=$1 name=$2
  for _ in $(seq 1 90); do listening "$port" && return 0; sleep 1; done
  say "$name did not start listening on 127.0.0.1:$port within 90s"; exit 1
}
as_root() {
  if [ "$(id -u)" -eq 0 ]; then "$@"; elif command -v sudo >/dev/null; then sudo "$@"; else
    say "need root to run: $*"; exit 1; fi
}
apt_updated=""
install() {
  if ! command -v apt-get >/dev/null; then
    say "cannot install $* here (no apt-get): install and start them, then run again"; exit 1
  fi
  [ -n "$apt_updated" ] || { say "apt-get update"; as_root apt-get update -qq; apt_updated=1; }
  say "installing $* from Debian's packages"
  as_root env DEBIAN_FRONTEND=noninteractive apt-get install -y -qq "$@" >/dev/null
}

# PostgreSQL. The test packages run side by side (go test -p 2), each
# with its pools, and need max_connections of 300 (at 100 a run ran out:
# "sorry, too many clients already", and a test then hung until its
# package's timeout). A server is never reconfigured nor restarted here:
# the one at POSTROOM_POSTGRES_DSN (or, unset, 127.0.0.1:5432 as postgres
# without a password) is used when it allows 300 connections; otherwise
# this script starts a cluster of its own, in $pg_dir, on a free port, and
# hands its DSN on (POSTROOM_SERVICES_ENV, below).
pg_want=300
pg_dir=${POSTROOM_PG_DIR:-${TMPDIR:-/tmp}/postroom-postgres-$(id -u)}
pg_default="postgres://postgres@127.0.0.1:5432/postroom_test?sslmode=disable"
# pg_bindir is the directory of initdb, pg_ctl and psql: from PATH, else
# Debian's newest /usr/lib/postgresql/N/bin; empty when none is installed.
pg_bindir() {
  local d
  for d in $(command -v initdb >/dev/null && dirname "$(readlink -f "$(command -v initdb)")") \
    $(ls -d /usr/lib/postgresql/*/bin 2>/dev/null | sort -rV); do
    if [ -x "$d/initdb" ] && [ -x "$d/pg_ctl" ] && [ -x "$d/psql" ]; then echo "$d"; return; fi
  done
}
pg=$(pg_bindir)
if [ -z "$pg" ]; then install postgresql; pg=$(pg_bindir); fi
[ -n "$pg" ] || { say "PostgreSQL's initdb is not found after installing postgresql: install PostgreSQL, then run again"; exit 1; }
# pg_max_connections prints the max_connections of the server at a DSN,
# nothing when it does not let us in.
pg_max_connections() { PGCONNECT_TIMEOUT=5 "$pg/psql" "$1" -XAtqc 'SHOW max_connections' 2>/dev/null || true; }
redact() { echo "$1" | sed -E 's#(://[^:/@]+):[^@/]*@#\1:xxxxx@#'; }
pg_dsn=""
if [ -n "${POSTROOM_POSTGRES_DSN:-}" ]; then
  max_conn=$(pg_max_connections "$POSTROOM_POSTGRES_DSN")
  if [ -z "$max_conn" ]; then
    say "PostgreSQL at POSTROOM_POSTGRES_DSN ($(redact "$POSTROOM_POSTGRES_DSN")) does not let us in: fix it, or unset it to use a server on 127.0.0.1:5432 or one this script starts"; exit 1
  elif [ "$max_conn" -ge "$pg_want" ]; then
    say "PostgreSQL at POSTROOM_POSTGRES_DSN ($(redact "$POSTROOM_POSTGRES_DSN")): max_connections $max_conn"
    pg_dsn=$POSTROOM_POSTGRES_DSN
  else
    say "PostgreSQL at POSTROOM_POSTGRES_DSN ($(redact "$POSTROOM_POSTGRES_DSN")) allows $max_conn connections, fewer than the $pg_want the tests need side by side; it is left as it is"
  fi
else
  max_conn=$(pg_max_connections "postgres://postgres@127.0.0.1:5432/postgres?sslmode=disable")
  if [ -z "$max_conn" ]; then
    if listening 5432; then
      say "the PostgreSQL on 127.0.0.1:5432 does not let postgres in without a password; it is left as it is"
    else
      say "no PostgreSQL listens on 127.0.0.1:5432"
    fi
  elif [ "$max_conn" -ge "$pg_want" ]; then
    say "PostgreSQL on 127.0.0.1:5432: max_connections $max_conn"
    if [ "$(PGCONNECT_TIMEOUT=5 "$pg/psql" "postgres://postgres@127.0.0.1:5432/postgres?sslmode=disable" -XAtqc "SELECT 1 FROM pg_database WHERE datname = 'postroom_test'")" != 1 ]; then
      say "creating database postroom_test on the PostgreSQL on 127.0.0.1:5432"
      "$pg/psql" "postgres://postgres@127.0.0.1:5432/postgres?sslmode=disable" -Xqc 'CREATE DATABASE postroom_test'
    fi
    pg_dsn=$pg_default
  else
    say "the PostgreSQL on 127.0.0.1:5432 allows $max_conn connections, fewer than the $pg_want the tests need side by side; it is left as it is (not reconfigured, not restarted)"
  fi
fi

if [ -z "$pg_dsn" ]; then
  # A cluster of the tests' own, kept between runs. Run as the postgres
  # user when root (initdb and postgres refuse root).
  if [ "$(id -u)" -eq 0 ]; then
    id postgres >/dev/null 2>&1 || { say "no postgres user to run a PostgreSQL cluster as (root may not): install postgresql, or run as another user"; exit 1; }
    as_pg() { runuser -u postgres -- "$@"; }
    pg_stop="runuser -u postgres -- $pg/pg_ctl -D $pg_dir/data stop"
  else
    as_pg() { "$@"; }
    pg_stop="$pg/pg_ctl -D $pg_dir/data stop"
  fi
  pg_version=$("$pg/pg_ctl" --version | sed -E 's/.* ([0-9]+)[.0-9]*.*/\1/')
  if [ -f "$pg_dir/data/PG_VERSION" ] && [ "$(cat "$pg_dir/data/PG_VERSION")" != "$pg_version" ]; then
    say "the private cluster in $pg_dir/data is of PostgreSQL $(cat "$pg_dir/data/PG_VERSION"), the binaries of $pg_version: deleting it (it holds only the tests' data)"
    as_pg "$pg/pg_ctl" -D "$pg_dir/data" -m immediate stop >/dev/null 2>&1 || true
    rm -rf "$pg_dir"
  fi
  if [ ! -f "$pg_dir/data/PG_VERSION" ]; then
    say "creating a private PostgreSQL $pg_version cluster in $pg_dir/data (initdb; trust for local connections; max_connections $pg_want)"
    rm -rf "$pg_dir"
    mkdir -p "$pg_dir"
    chmod 700 "$pg_dir"
    [ "$(id -u)" -ne 0 ] || chown postgres: "$pg_dir"
    (cd "$pg_dir" && as_pg "$pg/initdb" -D "$pg_dir/data" -U postgres -A trust -E UTF8 --no-locale >"$pg_dir/initdb.log" 2>&1) \
      || { say "initdb failed; its output:"; cat "$pg_dir/initdb.log"; exit 1; }
    { echo "# the tests' private cluster (scripts/services.sh)"
      echo "max_connections = $pg_want"
      echo "listen_addresses = '127.0.0.1'"
      echo "unix_socket_directories = '$pg_dir'"
    } | as_pg tee -a "$pg_dir/data/postgresql.conf" >/dev/null
  fi
  if (cd "$pg_dir" && as_pg "$pg/pg_ctl" -D "$pg_dir/data" status >/dev/null 2>&1); then
    pg_port=$(sed -n 4p "$pg_dir/data/postmaster.pid")
    say "the private PostgreSQL cluster in $pg_dir/data already runs, on 127.0.0.1:$pg_port"
  else
    # A free port below the ephemeral range; the last one used first, so
    # that a DSN exported by hand stays right.
    pg_port=""
    for p in $(cat "$pg_dir/port" 2>/dev/null) $(seq 25432 25531); do
      listening "$p" || { pg_port=$p; break; }
    done
    [ -n "$pg_port" ] || { say "no free port between 25432 and 25531 for the private PostgreSQL cluster"; exit 1; }
    say "starting the private PostgreSQL cluster in $pg_dir/data on 127.0.0.1:$pg_port (its log: $pg_dir/server.log)"
    (cd "$pg_dir" && as_pg "$pg/pg_ctl" -D "$pg_dir/data" -l "$pg_dir/server.log" -o "-p $pg_port" -w -t 90 start >/dev/null) \
      || { say "the private PostgreSQL cluster did not start; its log ends:"; tail -20 "$pg_dir/server.log"; exit 1; }
    echo "$pg_port" | as_pg tee "$pg_dir/port" >/dev/null
  fi
  admin="postgres://postgres@127.0.0.1:$pg_port/postgres?sslmode=disable"
  if [ "$("$pg/psql" "$admin" -XAtqc "SELECT 1 FROM pg_database WHERE datname = 'postroom_test'")" != 1 ]; then
    "$pg/psql" "$admin" -Xqc 'CREATE DATABASE postroom_test'
  fi
  pg_dsn="postgres://postgres@127.0.0.1:$pg_port/postroom_test?sslmode=disable"
  say "PostgreSQL for the tests: the private cluster, POSTROOM_POSTGRES_DSN=$pg_dsn (it keeps running; stop it with: $pg_stop)"
fi
# POSTROOM_SERVICES_ENV names a file to which the DSN is written as a
# shell export (scripts/test.sh reads it); by hand, export it yourself.
if [ -n "${POSTROOM_SERVICES_ENV:-}" ]; then
  printf 'export POSTROOM_POSTGRES_DSN=%q\n' "$pg_dsn" >"$POSTROOM_SERVICES_ENV"
elif [ "$pg_dsn" != "${POSTROOM_POSTGRES_DSN:-$pg_default}" ]; then
  say "before running go test by hand: export POSTROOM_POSTGRES_DSN='$pg_dsn'"
fi

# MariaDB
if listening 3306; then
  say "MariaDB already listening on 127.0.0.1:3306"
else
  command -v mariadbd >/dev/null || [ -x /usr/sbin/mariadbd ] || install mariadb-server
  say "starting MariaDB"
  as_root mkdir -p /run/mysqld && as_root chown mysql:mysql /run/mysqld 2>/dev/null || true
  as_root start-stop-daemon --start --oknodo --background --exec /usr/sbin/mariadbd -- --user=mysql
  wait_port 3306 MariaDB
  mariadb_started=1
fi
mariadb_grant="CREATE USER IF NOT EXISTS 'root'@'127.0.0.1' IDENTIFIED BY ''; GRANT ALL ON *.* TO 'root'@'127.0.0.1' WITH GRANT OPTION;"
if ! mariadb -uroot -h127.0.0.1 -e 'SELECT 1' >/dev/null 2>&1; then
  if [ -n "${mariadb_started:-}" ]; then
    say "allowing root@127.0.0.1 without a password on the MariaDB this script started (test machine only)"
    as_root mariadb -e "$mariadb_grant"
  else
    # A server this script did not start keeps its accounts.
    say "the MariaDB on 127.0.0.1:3306 does not let root@127.0.0.1 in without a password; the tests need it. On a test machine: sudo mariadb -e \"$mariadb_grant\""
    exit 1
  fi
fi
mariadb -uroot -h127.0.0.1 -e 'CREATE DATABASE IF NOT EXISTS postroom_test'
say "MariaDB database postroom_test ready"

# RabbitMQ
if listening 5672; then
  say "RabbitMQ already listening on 127.0.0.1:5672"
else
  command -v rabbitmq-server >/dev/null || [ -x /usr/sbin/rabbitmq-server ] || install rabbitmq-server
  say "starting RabbitMQ"
  as_root rabbitmq-server -detached
  wait_port 5672 RabbitMQ
fi
say "all services ready"
