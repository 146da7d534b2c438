#!/usr/bin/env bash
# Makes sure the Redis and PostgreSQL that the integration tests use are
# running: starts them when they are installed but stopped, and fails loudly
# when they are still unreachable. Used by `make test`; see DEVELOPERS.md.
set -euo pipefail

REDIS_HOST=${SLUICE_REDIS_HOST:-127.0.0.1}
REDIS_PORT=${SLUICE_REDIS_PORT:-6379}
PG_HOST=${SLUICE_PG_HOST:-127.0.0.1}
PG_PORT=${SLUICE_PG_PORT:-5432}

redis_up() { redis-cli -h "$REDIS_HOST" -p "$REDIS_PORT" ping 2>/dev/null | grep -q PONG; }
pg_up() { pg_isready -q -h "$PG_HOST" -p "$PG_PORT" 2>/dev/null; }

wait_for() { # name check-function
	for _ in $(seq 1 50); do
		if "$2"; then return 0; fi
		sleep 0.2
	done
	return 1
}

fail=0
if ! command -v redis-cli >/dev/null || ! command -v redis-server >/dev/null; then
	echo "services: redis-server/redis-cli are not installed (apt-get install redis-server)" >&2
	fail=1
elif ! redis_up; then
	echo "services: starting redis-server on $REDIS_HOST:$REDIS_PORT"
	redis-server --daemonize yes --bind "$REDIS_HOST" --port "$REDIS_PORT" --save "" --appendonly no >/dev/null
	wait_for redis redis_up || { echo "services: Redis at $REDIS_HOST:$REDIS_PORT is unreachable" >&2; fail=1; }
fi

if ! command -v pg_isready >/dev/null; then
	echo "services: PostgreSQL client tools are not installed (apt-get install postgresql)" >&2
	fail=1
elif ! pg_up; then
	if command -v pg_ctlcluster >/dev/null && [ -d /etc/postgresql ]; then
		ver=$(ls /etc/postgresql | sort -V | tail -n 1)
		echo "services: starting PostgreSQL $ver on $PG_HOST:$PG_PORT"
		pg_ctlcluster --skip-systemctl-redirect "$ver" main start || true
	fi
	wait_for postgres pg_up || { echo "services: PostgreSQL at $PG_HOST:$PG_PORT is unreachable" >&2; fail=1; }
fi

if [ "$fail" -ne 0 ]; then
	echo "services: integration tests need Redis and PostgreSQL; see DEVELOPERS.md" >&2
	exit 1
fi
echo "services: Redis $REDIS_HOST:$REDIS_PORT and PostgreSQL $PG_HOST:$PG_PORT are up"
