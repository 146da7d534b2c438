#!/usr/bin/env bash
# Runs `make test` on a saturated machine: with busy processes hogging the
# CPUs, three runs in a row, then two runs at once (which must not collide:
# each uses its own Redis Cluster, key prefixes and schemas). Fails if any
# run fails; the busy processes are killed however it ends. Run it before
# landing a timing-sensitive test (see CONTRIBUTING.md).
#
#   scripts/test-under-load.sh            # make test, 3 in a row + 2 at once
#   scripts/test-under-load.sh unit       # another make target, same pattern
#
# SLUICE_LOAD_PROCS: busy processes (default 4). SLUICE_LOAD_SERIAL and
# SLUICE_LOAD_PARALLEL: runs in a row and at once (default 3 and 2). The
# busy processes are stress-ng --cpu if it is installed, else shell loops.
# Each run's output goes to a log file, named in the summary.
set -uo pipefail
cd "$(dirname "$0")/.."

TARGET=${1:-test}
PROCS=${SLUICE_LOAD_PROCS:-4}
SERIAL=${SLUICE_LOAD_SERIAL:-3}
PARALLEL=${SLUICE_LOAD_PARALLEL:-2}
MAKE=${MAKE:-make}
LOGS=$(mktemp -d "${TMPDIR:-/tmp}/sluice-under-load.XXXXXX")

busy=()
pids=() # the runs under way, each the leader of its own process group
stop_load() {
	local p
	for p in "${busy[@]}"; do
		kill "$p" 2>/dev/null
	done
	for p in "${busy[@]}"; do
		wait "$p" 2>/dev/null
	done
	busy=()
}
# Interrupted: stop the runs under way too, with everything they started
# (they run in the background, which ignores SIGINT).
stop_runs() {
	local p
	for p in "${pids[@]}"; do
		kill -TERM -- "-$p" 2>/dev/null
	done
}
trap stop_load EXIT
trap 'stop_runs; stop_load; exit 130' INT
trap 'stop_runs; stop_load; exit 143' TERM

if command -v stress-ng >/dev/null; then
	stress-ng --cpu "$PROCS" --quiet &
	busy+=($!)
else
	for _ in $(seq 1 "$PROCS"); do
		(while :; do :; done) &
		busy+=($!)
	done
fi
echo "under-load: $PROCS busy processes on $(nproc) CPUs; logs in $LOGS"

failed=0
report() { # name status seconds log
	if [ "$2" -eq 0 ]; then
		echo "under-load: $1 ok (${3}s)"
	else
		echo "under-load: $1 FAILED (${3}s), see $4:"
		grep -E '^(--- FAIL|FAIL|FAILED|ok |=== summary)' "$4" | tail -n 30 | grep . || tail -n 20 "$4"
		failed=1
	fi
}

for i in $(seq 1 "$SERIAL"); do
	log=$LOGS/serial-$i.log
	t0=$SECONDS
	# In the background, so that a signal's trap runs at once.
	setsid $MAKE --no-print-directory "$TARGET" >"$log" 2>&1 &
	pids=($!)
	wait "${pids[0]}"
	status=$?
	pids=()
	report "make $TARGET, run $i of $SERIAL in a row" "$status" $((SECONDS - t0)) "$log"
done

t0=$SECONDS
for i in $(seq 1 "$PARALLEL"); do
	setsid $MAKE --no-print-directory "$TARGET" >"$LOGS/parallel-$i.log" 2>&1 &
	pids+=($!)
done
for i in $(seq 1 "$PARALLEL"); do
	wait "${pids[$((i - 1))]}"
	report "make $TARGET, run $i of $PARALLEL at once" $? $((SECONDS - t0)) "$LOGS/parallel-$i.log"
done
pids=()

stop_load
if [ "$failed" -ne 0 ]; then
	echo "under-load: FAILED (logs in $LOGS)"
	exit 1
fi
echo "under-load: every run passed (logs in $LOGS)"
