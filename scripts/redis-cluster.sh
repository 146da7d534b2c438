#!/usr/bin/env bash
# Starts or stops a local 3-node Redis Cluster (3 masters, no replicas) on
# loopback ports for the store/redisstore tests. The Go tests call it
# themselves, each run with a state directory of its own, unless
# SLUICE_TEST_REDIS_CLUSTER names a cluster to use.
#
#   scripts/redis-cluster.sh start   # prints the node addresses, comma-separated
#   scripts/redis-cluster.sh stop
#   scripts/redis-cluster.sh status
#
# A cluster is its state directory, SLUICE_REDIS_CLUSTER_DIR (default
# ${TMPDIR:-/tmp}/sluice-redis-cluster-$UID): config, logs, pid files and the
# ports it runs on. Clusters in different directories never touch each
# other, so test runs at once on one machine, and a developer's own Redis,
# do not interfere.
#
# Ports: SLUICE_REDIS_CLUSTER_PORTS (e.g. "7101 7102 7103") if set, else
# free ones picked at start (a node that cannot bind its port, or its
# cluster bus port + 10000, is started again on another).
#
# start is idempotent: a healthy cluster of this directory is reused; a
# broken one is stopped and started afresh. stop stops only this
# directory's servers (by their pid files) and removes the directory.
# With SLUICE_REDIS_CLUSTER_OWNER=PID, start also leaves a watchdog that
# stops the cluster once that process has exited (a test binary that was
# killed cannot stop it itself).
set -euo pipefail

HOST=127.0.0.1
DIR=${SLUICE_REDIS_CLUSTER_DIR:-${TMPDIR:-/tmp}/sluice-redis-cluster-$(id -u)}
NODES=3

die() { echo "redis-cluster: $*" >&2; exit 1; }

for cmd in redis-server redis-cli; do
	command -v "$cmd" >/dev/null || die "$cmd is not installed (apt-get install redis-server)"
done

PORTS=()
load_ports() {
	if [ -n "${SLUICE_REDIS_CLUSTER_PORTS:-}" ]; then
		read -r -a PORTS <<<"$SLUICE_REDIS_CLUSTER_PORTS"
	elif [ -f "$DIR/ports" ]; then
		read -r -a PORTS <"$DIR/ports"
	else
		PORTS=()
	fi
}

cli() { redis-cli -h "$HOST" -p "$1" "${@:2}"; }
up() { cli "$1" ping 2>/dev/null | grep -q PONG; }
# ours: the server on port $1 is this directory's (not another run's).
ours() {
	local want
	want=$(cd "$DIR/$1" 2>/dev/null && pwd -P) || return 1
	[ "$(cli "$1" config get dir 2>/dev/null | sed -n 2p)" = "$want" ]
}

addrs() {
	local a=() p
	for p in "${PORTS[@]}"; do a+=("$HOST:$p"); done
	(IFS=,; echo "${a[*]}")
}

# healthy: there are ports, and every node is ours, reports
# cluster_state:ok and knows all the others as masters.
healthy() {
	local p
	[ "${#PORTS[@]}" -gt 0 ] || return 1
	for p in "${PORTS[@]}"; do
		ours "$p" || return 1
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

# alive: the process of pid file $1 is a running redis-server.
alive() { [ -f "$1" ] && [ "$(ps -p "$(cat "$1" 2>/dev/null)" -o comm= 2>/dev/null)" = redis-server ]; }

stop() {
	[ -d "$DIR" ] || return 0
	local f p pids=()
	for f in "$DIR"/*/redis.pid; do
		alive "$f" || continue
		kill "$(cat "$f" 2>/dev/null)" 2>/dev/null || true
		pids+=("$f")
	done
	for f in "${pids[@]}"; do
		wait_for 100 eval "! alive $f" || die "the server of $f does not stop"
	done
	rm -rf "$DIR"
}

# start_node PORT: starts a node on PORT; fails if it does not come up as
# ours (the port or its bus port is taken).
start_node() {
	local p=$1
	mkdir -p "$DIR/$p"
	redis-server --bind "$HOST" --port "$p" --dir "$DIR/$p" \
		--cluster-enabled yes --cluster-config-file nodes.conf --cluster-node-timeout 1000 \
		--save "" --appendonly no --daemonize yes \
		--pidfile "$DIR/$p/redis.pid" --logfile "$DIR/$p/redis.log" >/dev/null 2>&1 9>&- || true
	if wait_for 50 ours "$p"; then return 0; fi
	# Not ours: stop whatever of ours may have half started.
	if alive "$DIR/$p/redis.pid"; then kill "$(cat "$DIR/$p/redis.pid")" 2>/dev/null || true; fi
	return 1
}

# free_port: a port nothing listens on now, whose bus port is free too.
free_port() {
	local p
	for _ in $(seq 1 200); do
		p=$((20000 + RANDOM % 10000)) # bus ports 30000-39999
		if ! (exec 3<>"/dev/tcp/$HOST/$p") 2>/dev/null && ! (exec 3<>"/dev/tcp/$HOST/$((p + 10000))") 2>/dev/null; then
			echo "$p"
			return 0
		fi
	done
	return 1
}

start() {
	if healthy; then
		addrs
		return
	fi
	stop
	mkdir -p "$DIR"
	local p i tries
	if [ -n "${SLUICE_REDIS_CLUSTER_PORTS:-}" ]; then
		for p in "${PORTS[@]}"; do
			start_node "$p" || die "redis-server on port $p did not start as this cluster's (see $DIR/$p/redis.log)"
		done
	else
		PORTS=()
		for i in $(seq 1 "$NODES"); do
			for tries in $(seq 1 20); do
				p=$(free_port) || die "no free port found"
				if start_node "$p"; then
					PORTS+=("$p")
					break
				fi
				rm -rf "${DIR:?}/$p"
				[ "$tries" -lt 20 ] || die "node $i did not start on any of 20 free ports"
			done
		done
	fi
	echo "${PORTS[*]}" >"$DIR/ports"
	local nodes=()
	for p in "${PORTS[@]}"; do nodes+=("$HOST:$p"); done
	redis-cli --cluster create "${nodes[@]}" --cluster-replicas 0 --cluster-yes >"$DIR/create.log" 2>&1 ||
		die "redis-cli --cluster create failed (see $DIR/create.log)"
	wait_for 100 healthy || die "the cluster did not reach cluster_state:ok"
	if [ -n "${SLUICE_REDIS_CLUSTER_OWNER:-}" ]; then
		# The watchdog holds none of the caller's descriptors, so that a
		# caller reading start's output sees it end.
		local owner=$SLUICE_REDIS_CLUSTER_OWNER self
		self=$(cd "$(dirname "$0")" && pwd)/$(basename "$0")
		SLUICE_REDIS_CLUSTER_DIR=$DIR nohup setsid bash -c \
			'while kill -0 "$1" 2>/dev/null && [ -d "$2" ]; do sleep 1; done; [ -d "$2" ] && "$3" stop' \
			watchdog "$owner" "$DIR" "$self" </dev/null >/dev/null 2>&1 9>&- &
	fi
	addrs
}

case "${1:-}" in
start | stop | status) ;;
*) die "usage: $0 start|stop|status" ;;
esac

# One start or stop of this directory's cluster at a time.
mkdir -p "$(dirname "$DIR")"
exec 9>"$DIR.lock"
flock 9
load_ports

case "$1" in
start) start ;;
stop) stop; rm -f "$DIR.lock" ;;
status) if healthy; then echo "ok $(addrs)"; else echo "down"; exit 1; fi ;;
esac
