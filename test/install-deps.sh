#!/usr/bin/env bash
#
# install-deps.sh: install the Debian packages that building and testing
# Malachi need.  Cheap when everything is present (one dpkg-query); only when
# something is missing does it run apt-get update and apt-get install.
# Uses sudo when not run as root.
#
# Extra packages can be added with MALACHI_EXTRA_DEPS="pkg1 pkg2".
#
set -euo pipefail

packages=(
	postgresql-15					# the server (normally already present)
	postgresql-server-dev-15		# pg_config, PGXS, pg_regress, pg_isolation_regress
	libpq-dev
	libzstd-dev						# segment compression
	gcc
	make
	perl
	libipc-run-perl					# PostgreSQL::Test::Cluster (TAP suite)
	postgresql-15-pgtap				# pgTAP extension
	libtap-parser-sourcehandler-pgtap-perl	# pg_prove
)
# shellcheck disable=SC2206
packages+=(${MALACHI_EXTRA_DEPS:-})

missing=()
for pkg in "${packages[@]}"; do
	status=$(dpkg-query -W -f='${Status}' "$pkg" 2>/dev/null || true)
	[[ $status == "install ok installed" ]] || missing+=("$pkg")
done

if ((${#missing[@]} == 0)); then
	exit 0
fi

sudo=()
if (($(id -u) != 0)); then
	if ! command -v sudo >/dev/null; then
		echo "install-deps: missing packages: ${missing[*]}" >&2
		echo "install-deps: not root and no sudo; install them and rerun" >&2
		exit 1
	fi
	sudo=(sudo)
fi

echo "install-deps: installing ${missing[*]}"
"${sudo[@]}" apt-get update
"${sudo[@]}" env DEBIAN_FRONTEND=noninteractive \
	apt-get install -y --no-install-recommends "${missing[@]}"
