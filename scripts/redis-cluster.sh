#!/usr/bin/env bash
# Starts or stops a local 3-node Redis Cluster (3 masters, no replicas) on
# loopback ports for the store/redisstore tests. The Go tests call it
# themselves unless SLUICE_TEST_REDIS_CLUSTER names a cluster to use.
#
#   scripts/redis-cluster.sh start   # prints the node addresses, comma-separated
#   scripts/redis-cluster.sh stop
#   scripts/redis-cluster.sh status
#
# start is idempotent: a healthy cluster already on the ports is reused; a
# broken one (or stray servers on the ports) is stopped and started afresh.
# Ports: SLUICE_REDIS_CLUSTER_PORTS (default "7101 7102 7103"). State (config,
# logs, pid files) lives in SLUICE_REDIS_CLUSTER_DIR (default
# ${TMPDIR:-/tmp}/sluice-redis-cluster-$UID) and is removed by stop.
set -euo pipefail

HOST=127.0.0.1
read -r -a PORTS <<<"${SLUICE_REDIS_CLUSTER_PORTS:-7101 7102 7103}"
DIR=${SLUICE_REDIS_CLUSTER_DIR:-${TMPDIR:-/tmp}/sluice-redis-cluster-$(id -u)}

die() { echo "redis-cluster: $*" >&2; exit 1; }

for cmd in redis-server redis-cli; do
	command -v "$cmd" >/dev/null || die "$cmd is not installed (apt-get install redis-server)"
done

cli() { redis-cli -h "$HOST" -p "$1" "${@:2}"; }
up() { cli "$1" ping 2>/dev/null | grep -q PONG; }

addrs() {
	local a=() p
	for p in "${PORTS[@]}"; do a+=("$HOST:$p"); done
	(IFS=,; echo "${a[*]}")
}

# healthy: every node answers, reports cluster_state:ok and knows all the
# others as masters.
healthy() {
	local p
	for p in "${PORTS[@]}"; do
		cli "$p" cluster info 2>/dev/null | grep -q '^cluster_state:ok' || return 1
		[ "$(cli "$p" cluster nodes 2>/dev/null | grep -c master)" -eq "${#PORTS[@]}" ] || return 1
	done
}

wait_for() { # tries check...
	local n=$1
	shift
	for _ in $(seq 1 "$n"); do
		if "$@"; then return 0; fi
		sleep 0.1
	done
	return 1
}

stop() {
	local p
	for p in "${PORTS[@]}"; do
		if up "$p"; then
			cli "$p" shutdown nosave >/dev/null 2>&1 || true
		fi
	done
	for p in "${PORTS[@]}"; do
		wait_for 50 eval "! up $p" || die "the server on port $p does not stop"
	done
	rm -rf "$DIR"
}

start() {
	if healthy; then
		addrs
		return
	fi
	stop
	mkdir -p "$DIR"
	local p
	for p in "${PORTS[@]}"; do
		mkdir -p "$DIR/$p"
		redis-server --bind "$HOST" --port "$p" --dir "$DIR/$p" \
			--cluster-enabled yes --cluster-config-file nodes.conf --cluster-node-timeout 1000 \
			--save "" --appendonly no --daemonize yes \
			--pidfile "$DIR/$p/redis.pid" --logfile "$DIR/$p/redis.log" >/dev/null 2>&1 9>&-
	done
	for p in "${PORTS[@]}"; do
		wait_for 50 up "$p" || die "redis-server on port $p did not start (see $DIR/$p/redis.log)"
	done
	local nodes=()
	for p in "${PORTS[@]}"; do nodes+=("$HOST:$p"); done
	redis-cli --cluster create "${nodes[@]}" --cluster-replicas 0 --cluster-yes >"$DIR/create.log" 2>&1 ||
		die "redis-cli --cluster create failed (see $DIR/create.log)"
	wait_for 100 healthy || die "the cluster did not reach cluster_state:ok"
	addrs
}

# One start or stop at a time, so that concurrent test runs do not trip over
# each other while the cluster forms.
mkdir -p "$(dirname "$DIR")"
exec 9>"$DIR.lock"
flock 9

case "${1:-}" in
start) start ;;
stop) stop ;;
status) if healthy; then echo "ok $(addrs)"; else echo "down"; exit 1; fi ;;
*) die "usage: $0 start|stop|status" ;;
esac
