#!/usr/bin/env bash
#
# run-node.sh start|stop|status: a local Malachi node for trying things out.
# `make run` installs the library and calls "start"; `make stop` calls "stop".
#
# start  initdb on first use, (re)start the node so the newly installed
#        library is loaded, CREATE EXTENSION malachi in database postgres,
#        run test/demo.sql, print the psql line to connect.
# stop   stop the node (fast shutdown).
#
# Data, log and unix socket live in .run/ of the checkout (git-ignored).
# When run as root, the server runs as the unprivileged user "malachi"
# (created when missing), which owns .run/; if it cannot reach the checkout
# (under /root, say), .run is a symlink to /var/lib/malachi-run/<id>.
# Local connections use trust authentication; the role is the server's OS
# user.  Listens on the unix socket only unless MALACHI_LISTEN says otherwise.
#
# Environment: MALACHI_PORT (5497), MALACHI_LISTEN (''), PG_CONFIG,
# MALACHI_NODE_USER (malachi, when root).
#
set -euo pipefail

repo=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
pg_config=${PG_CONFIG:-/usr/lib/postgresql/15/bin/pg_config}
bindir=$("$pg_config" --bindir 2>/dev/null || echo /usr/lib/postgresql/15/bin)
port=${MALACHI_PORT:-5497}
listen=${MALACHI_LISTEN:-}
run_link=$repo/.run
cd /		# the node user may not be able to enter the checkout

if (($(id -u) == 0)); then
	node_user=${MALACHI_NODE_USER:-malachi}
	as_node=(runuser -u "$node_user" --)
else
	node_user=$(id -un)
	as_node=()
fi

die()
{
	echo "run-node: $*" >&2
	exit 1
}

# Make .run usable by the node user; set run_dir to its real path.
prepare_run_dir()
{
	local ext

	if ((${#as_node[@]})); then
		if ! id -u "$node_user" >/dev/null 2>&1; then
			echo "run-node: creating system user $node_user"
			useradd --system --create-home --shell /bin/bash "$node_user"
		fi
		if [[ ! -L $run_link ]] && ! "${as_node[@]}" test -x "$repo"; then
			# The node user cannot reach the checkout: keep the data outside.
			ext=/var/lib/malachi-run/$(echo "$repo" | cksum | cut -d' ' -f1)
			[[ ! -e $run_link ]] || rmdir "$run_link" 2>/dev/null ||
				die "$run_link is not reachable by $node_user and not empty"
			mkdir -p "$ext"
			ln -s "$ext" "$run_link"
			echo "run-node: $node_user cannot read $repo; data in $ext"
		fi
	fi
	mkdir -p "$run_link"
	run_dir=$(cd "$run_link" && pwd -P)
	if ((${#as_node[@]})); then
		chown "$node_user:" "$run_dir"
	fi
	chmod 700 "$run_dir"
	data=$run_dir/data
	# A unix socket path is limited to 107 bytes.
	((${#run_dir} + 20 < 108)) ||
		die "socket directory path too long: $run_dir"
}

# The postmaster's pid from postmaster.pid, if that process is alive.
live_postmaster()
{
	local pid

	[[ -r $data/postmaster.pid ]] || return 1
	pid=$(head -n 1 "$data/postmaster.pid")
	[[ $pid =~ ^[0-9]+$ ]] && kill -0 "$pid" 2>/dev/null && echo "$pid"
}

# Stop the node and wait until its postmaster is really gone.
stop_node()
{
	local pid i

	pid=$(live_postmaster) || return 0
	echo "run-node: stopping the node (pid $pid)"
	"${as_node[@]}" "$bindir/pg_ctl" stop -D "$data" -m fast -w -t 60 >/dev/null ||
		"${as_node[@]}" "$bindir/pg_ctl" stop -D "$data" -m immediate -w >/dev/null ||
		true
	for ((i = 0; i < 300; i++)); do
		kill -0 "$pid" 2>/dev/null || return 0
		sleep 0.2
	done
	die "postmaster $pid did not exit"
}

# Write the settings make run controls; postgresql.conf includes the file.
write_conf()
{
	"${as_node[@]}" tee "$data/malachi-node.conf" >/dev/null <<CONF
# written by test/run-node.sh on every start; edit postgresql.conf instead
port = $port
listen_addresses = '$listen'
unix_socket_directories = '$run_dir'
shared_preload_libraries = 'malachi'
malachi.database = 'postgres'
CONF
}

start_node()
{
	local i

	if [[ ! -f $data/PG_VERSION ]]; then
		echo "run-node: initdb in $data"
		"${as_node[@]}" "$bindir/initdb" -D "$data" -U "$node_user" -A trust \
			-E UTF8 --locale=C.UTF-8 >"$run_dir/initdb.log" 2>&1 ||
			{ cat "$run_dir/initdb.log"; die "initdb failed"; }
		echo "include_if_exists = 'malachi-node.conf'" |
			"${as_node[@]}" tee -a "$data/postgresql.conf" >/dev/null
	fi
	stop_node
	write_conf
	# A crashed node's backends may hold shared memory a little longer.
	for ((i = 1; ; i++)); do
		if "${as_node[@]}" "$bindir/pg_ctl" start -D "$data" \
			-l "$run_dir/postgres.log" -w -t 60 >/dev/null; then
			break
		fi
		((i < 5)) || { tail -n 30 "$run_dir/postgres.log"; die "could not start the node"; }
		sleep 2
	done
	echo "run-node: node running on port $port (log: $run_dir/postgres.log)"
}

psql_node()
{
	"$bindir/psql" -X -v ON_ERROR_STOP=1 -h "$run_dir" -p "$port" \
		-U "$node_user" -d postgres "$@"
}

case ${1:-start} in
	start)
		prepare_run_dir
		start_node
		# Every schema change lands in malachi--1.0.sql (there are no upgrade
		# scripts yet): a node set up by an older checkout gets the extension
		# made again, which drops the demo node's topics.
		script_sum=$(sha256sum "$("$pg_config" --sharedir)/extension/malachi--1.0.sql" | cut -d' ' -f1)
		installed=$(psql_node -Atq -c "SELECT count(*) FROM pg_extension WHERE extname = 'malachi'")
		if [[ $installed == 1 && $(cat "$run_dir/extension.sha256" 2>/dev/null) != "$script_sum" ]]; then
			echo "run-node: malachi's SQL script changed since this node was set up: creating the extension again (its topics are dropped)"
			psql_node -q -c 'DROP EXTENSION IF EXISTS malachi CASCADE'
		fi
		psql_node -q -c 'CREATE EXTENSION IF NOT EXISTS malachi'
		echo "$script_sum" >"$run_dir/extension.sha256"
		psql_node --echo-queries -f "$repo/test/demo.sql"
		echo
		echo "Connect with:"
		echo "  psql -h $run_dir -p $port -U $node_user postgres"
		;;
	stop)
		[[ -d $run_link ]] || { echo "run-node: no node in $run_link"; exit 0; }
		run_dir=$(cd "$run_link" && pwd -P)
		data=$run_dir/data
		if live_postmaster >/dev/null; then
			stop_node
			echo "run-node: stopped"
		else
			echo "run-node: not running"
		fi
		;;
	status)
		run_dir=$(cd "$run_link" 2>/dev/null && pwd -P) || die "no node"
		"${as_node[@]}" "$bindir/pg_ctl" status -D "$run_dir/data"
		;;
	*)
		die "usage: $0 start|stop|status"
		;;
esac
