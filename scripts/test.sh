#!/usr/bin/env bash
# Runs the suites of `make test` (or the ones named), each even when an
# earlier one failed, so that every suite reports; prints a summary and
# fails at the end if any suite failed.
#
#   scripts/test.sh                 # every suite, in this order:
#   scripts/test.sh gofmt vet       # services gofmt vet staticcheck race bench
#
# services: start Redis and PostgreSQL if stopped (scripts/services.sh), and
#   install Chromium for the dashboard's browser tests if missing and
#   allowed (scripts/ensure-chromium.sh)
# gofmt, vet, staticcheck: both modules (the main one and bench/)
# race: go test -race of the main module, integration tests included
# bench: the bench module's tests
set -uo pipefail
cd "$(dirname "$0")/.."

GO=${GO:-go}
STATICCHECK=${STATICCHECK:-honnef.co/go/tools/cmd/staticcheck@v0.8.2}
export SLUICE_TEST_REDIS_URL=${SLUICE_TEST_REDIS_URL:-redis://127.0.0.1:6379}
export SLUICE_TEST_POSTGRES_URL=${SLUICE_TEST_POSTGRES_URL:-postgres://postgres@127.0.0.1:5432/test?sslmode=disable}

gofmt_check() {
	local files out
	files=$(git ls-files '*.go' 2>/dev/null || find . -name '*.go')
	[ -n "$files" ] || return 0
	# shellcheck disable=SC2086 # one word per file
	out=$(gofmt -l $files)
	[ -z "$out" ] || { echo "gofmt needed:"; echo "$out"; return 1; }
}

run_suite() {
	case "$1" in
	services) ./scripts/services.sh && ./scripts/ensure-chromium.sh ;;
	gofmt) gofmt_check ;;
	vet) "$GO" vet ./... && (cd bench && "$GO" vet ./...) ;;
	staticcheck) "$GO" run "$STATICCHECK" ./... && (cd bench && "$GO" run "$STATICCHECK" ./...) ;;
	# Under SLUICE_INTEGRATION=1 an unreachable Redis or PostgreSQL fails
	# the integration tests instead of skipping them.
	race) SLUICE_INTEGRATION=1 "$GO" test -race -count=1 -timeout 9m ./... ;;
	bench) (cd bench && "$GO" test -count=1 -run . ./...) ;;
	*)
		echo "test.sh: unknown suite $1 (want services, gofmt, vet, staticcheck, race or bench)" >&2
		return 2
		;;
	esac
}

suites=("$@")
[ ${#suites[@]} -gt 0 ] || suites=(services gofmt vet staticcheck race bench)

failed=()
summary=()
start=$SECONDS
for s in "${suites[@]}"; do
	echo "=== $s"
	t0=$SECONDS
	if run_suite "$s"; then
		summary+=("ok      $s ($((SECONDS - t0))s)")
	else
		summary+=("FAILED  $s ($((SECONDS - t0))s)")
		failed+=("$s")
	fi
done
echo "=== summary ($((SECONDS - start))s)"
printf '%s\n' "${summary[@]}"
if [ ${#failed[@]} -gt 0 ]; then
	echo "FAILED: ${failed[*]}"
	exit 1
fi
