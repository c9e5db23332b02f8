#!/usr/bin/env bash
# Makes sure PostgreSQL, MariaDB and RabbitMQ listen on localhost for the
# tests, and creates the test databases. It uses servers already running;
# otherwise it starts installed ones, or installs them from Debian's
# packages (as root) and starts them. It says what it did; where it cannot
# act it stops with the commands to run.
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

# PostgreSQL
if listening 5432; then
  say "PostgreSQL already listening on 127.0.0.1:5432"
else
  command -v pg_ctlcluster >/dev/null || install postgresql
  ver=$(ls /etc/postgresql | sort -n | tail -1)
  say "starting PostgreSQL $ver"
  as_root pg_ctlcluster --skip-systemctl-redirect "$ver" main start || true
  wait_port 5432 PostgreSQL
fi
if ! psql -h 127.0.0.1 -U postgres -d postgres -Atc 'SELECT 1' >/dev/null 2>&1; then
  say "letting local TCP connections in without a password (pg_hba.conf trust for 127.0.0.1)"
  hba=$(as_root su postgres -c "psql -Atc 'SHOW hba_file'")
  as_root sed -i '1i host all all 127.0.0.1/32 trust' "$hba"
  as_root su postgres -c "psql -c 'SELECT pg_reload_conf()'" >/dev/null
fi
# The test packages run side by side (go test -p 2): PostgreSQL's default
# of 100 connections ran out once ("sorry, too many clients already"), and
# a test of Watermill's suite then hung until the package's timeout.
max_conn=$(psql -h 127.0.0.1 -U postgres -d postgres -Atc 'SHOW max_connections')
if [ "$max_conn" -lt 300 ]; then
  ver=$(ls /etc/postgresql 2>/dev/null | sort -n | tail -1)
  if [ -n "$ver" ] && command -v pg_ctlcluster >/dev/null; then
    say "PostgreSQL: max_connections $max_conn -> 300 (the test packages run side by side); restarting PostgreSQL $ver"
    psql -h 127.0.0.1 -U postgres -d postgres -qc 'ALTER SYSTEM SET max_connections = 300'
    as_root pg_ctlcluster --skip-systemctl-redirect "$ver" main restart
    wait_port 5432 PostgreSQL
  else
    say "PostgreSQL: max_connections is $max_conn; raise it to 300 (ALTER SYSTEM SET max_connections = 300, then restart), or the tests may run out of connections"
  fi
fi
if [ "$(psql -h 127.0.0.1 -U postgres -d postgres -Atc "SELECT 1 FROM pg_database WHERE datname = 'postroom_test'")" != 1 ]; then
  say "creating PostgreSQL database postroom_test"
  psql -h 127.0.0.1 -U postgres -d postgres -qc 'CREATE DATABASE postroom_test'
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
fi
if ! mariadb -uroot -h127.0.0.1 -e 'SELECT 1' >/dev/null 2>&1; then
  say "allowing root@127.0.0.1 without a password (test machine only)"
  as_root mariadb -e "CREATE USER IF NOT EXISTS 'root'@'127.0.0.1' IDENTIFIED BY ''; GRANT ALL ON *.* TO 'root'@'127.0.0.1' WITH GRANT OPTION;"
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
