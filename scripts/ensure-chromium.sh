#!/usr/bin/env bash
# Makes sure Chromium is installed for the dashboard's browser tests
# (server/dashboard): Debian's chromium package at /usr/bin/chromium.
# Installs it with apt-get when missing and this user may (root, or
# passwordless sudo); otherwise says how, and exits 0 so that the tests
# skip with the same advice (they fail instead under CI=true).
set -uo pipefail
bin=${SLUICE_CHROMIUM:-/usr/bin/chromium}
if [ -x "$bin" ]; then
	exit 0
fi
install() { apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq chromium; }
if [ "$(id -u)" = 0 ] && command -v apt-get >/dev/null; then
	echo "ensure-chromium: installing Debian's chromium for the dashboard's browser tests"
	install >/dev/null || echo "ensure-chromium: apt-get install chromium failed" >&2
elif command -v sudo >/dev/null && sudo -n true 2>/dev/null && command -v apt-get >/dev/null; then
	echo "ensure-chromium: installing Debian's chromium (sudo) for the dashboard's browser tests"
	sudo -n bash -c "$(declare -f install); install" >/dev/null || echo "ensure-chromium: apt-get install chromium failed" >&2
else
	echo "ensure-chromium: $bin is missing and this user cannot install it;" \
		"the dashboard's browser tests will skip. Install it with: sudo apt-get install -y chromium" \
		"(or set SLUICE_CHROMIUM to a Chromium or Chrome binary)" >&2
fi
exit 0
