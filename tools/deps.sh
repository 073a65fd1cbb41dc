#!/usr/bin/env bash
# Installs the Debian 12 packages keel needs. Idempotent and fast when all are present.
#   tools/deps.sh          install what is missing (needs root)
#   tools/deps.sh --check  exit 0 if everything is installed, 1 otherwise (no root needed)
# The lists are tools/deps/*.txt, one per part of keel (one package per line, # comments),
# each saying what its packages are for.
set -euo pipefail
cd "$(dirname "$0")"

PACKAGES=$(cat deps/*.txt | sed 's/#.*//' | tr -s ' \t' '\n' | grep -v '^$' | sort -u)

missing=""
for p in $PACKAGES; do
	if ! dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed"; then
		missing="$missing $p"
	fi
done

if [ "${1:-}" = "--check" ]; then
	if [ -n "$missing" ]; then
		echo "keel deps: missing:$missing"
		exit 1
	fi
	exit 0
fi

if [ -z "$missing" ]; then
	echo "keel deps: all present"
	exit 0
fi
if [ "$(id -u)" != 0 ]; then
	echo "keel deps: missing:$missing" >&2
	echo "keel deps: installing needs root: run 'sudo tools/deps.sh' (or apt-get install$missing)" >&2
	exit 1
fi
echo "keel deps: installing$missing"
export DEBIAN_FRONTEND=noninteractive
apt-get update -qq
# shellcheck disable=SC2086
apt-get install -y -qq --no-install-recommends $missing
echo "keel deps: done"
