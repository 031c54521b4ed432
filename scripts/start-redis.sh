#!/usr/bin/env bash
# A throwaway redis-server on 127.0.0.1 for bench/bench_net.py (pubmesh beside Redis pub/sub).
#
#   scripts/start-redis.sh [start] [PORT] [TLS_DIR]
#                                           install redis-server (Debian package) if missing,
#                                           start it on 127.0.0.1:PORT (default 6390), wait for PONG;
#                                           with TLS_DIR (redis.crt, redis.key, ca.crt in it) the
#                                           port speaks TLS only (Debian's build has TLS)
#   scripts/start-redis.sh stop [PORT]      stop it again
#
# No persistence (no RDB, no AOF), bound to loopback only, and a pub/sub output buffer large
# enough that a benchmark's subscribers are not disconnected for falling behind.
set -euo pipefail

action="${1:-start}"
port="${2:-6390}"
tls_dir="${3:-}"
dir="${TMPDIR:-/tmp}/pubmesh-redis-${port}"
pidfile="${dir}/redis.pid"

case "$action" in
  start)
    if ! command -v redis-server >/dev/null 2>&1; then
      if [ "$(id -u)" = 0 ] && command -v apt-get >/dev/null 2>&1; then
        echo "start-redis: installing redis-server (Debian package)" >&2
        apt-get update -qq
        DEBIAN_FRONTEND=noninteractive apt-get install -y -qq redis-server >/dev/null
      else
        echo "start-redis: redis-server is not installed; install the redis-server package" >&2
        exit 2
      fi
    fi
    mkdir -p "$dir"
    if [ -f "$pidfile" ] && kill -0 "$(cat "$pidfile")" 2>/dev/null; then
      echo "start-redis: already running on 127.0.0.1:${port} (pid $(cat "$pidfile"))" >&2
      exit 0
    fi
    listen=(--port "$port")
    cli=()
    if [ -n "$tls_dir" ]; then
      listen=(--port 0 --tls-port "$port" --tls-cert-file "${tls_dir}/redis.crt"
              --tls-key-file "${tls_dir}/redis.key" --tls-ca-cert-file "${tls_dir}/ca.crt"
              --tls-auth-clients no)
      cli=(--tls --cacert "${tls_dir}/ca.crt")
    fi
    redis-server "${listen[@]}" --bind 127.0.0.1 --save '' --appendonly no \
      --daemonize yes --pidfile "$pidfile" --dir "$dir" --logfile "${dir}/redis.log" \
      --client-output-buffer-limit "pubsub 512mb 256mb 60"
    for _ in $(seq 1 100); do
      if redis-cli "${cli[@]}" -h 127.0.0.1 -p "$port" ping 2>/dev/null | grep -q PONG; then
        echo "start-redis: redis-server $(redis-server --version | sed 's/.*v=\([^ ]*\).*/\1/') on 127.0.0.1:${port}" >&2
        exit 0
      fi
      sleep 0.1
    done
    echo "start-redis: redis-server did not answer on 127.0.0.1:${port}; see ${dir}/redis.log" >&2
    exit 1
    ;;
  stop)
    if [ -f "$pidfile" ]; then
      pid="$(cat "$pidfile")"
      kill "$pid" 2>/dev/null || true
      for _ in $(seq 1 50); do
        kill -0 "$pid" 2>/dev/null || break
        sleep 0.1
      done
      rm -f "$pidfile"
    fi
    ;;
  *)
    echo "usage: scripts/start-redis.sh [start|stop] [PORT] [TLS_DIR]" >&2
    exit 2
    ;;
esac
