# shellcheck shell=bash disable=SC2034  # sets variables for the scripts that source it
# lib.sh: sourced by the bench scripts in test/bench/.
#
# bench_start_node: build test/bench's C helpers and start a private node
# for one bench run, stopped and deleted on exit.  The node: fsync on,
# synchronous_commit on, malachi.fsync on, checkpoints kept out of the timed
# phases (checkpoint_timeout 1h, max_wal_size 16GB; the scripts CHECKPOINT
# before each phase), shared_preload_libraries = 'malachi', and
# malachi.max_spare_segments = 192, or as many 64 MiB files as a quarter
# of the free space where the node lives holds, if fewer (at least the
# default 16; bench.sh's own check of the free space counts what its
# measurements write, not these spares): as max_wal_size lets PostgreSQL
# recycle its WAL files instead of making new ones, the files of the
# segments a dropped topic deleted (up to 12 GB) are kept as spares for the
# next measurement's heads, instead of 1 GB by default.  A head without a
# spare grows its file: a 1 MiB statement into a growing file took 6-17 ms
# instead of 2.5 on one machine; on another, 4 clients produce up to
# 1.3 GB/s, 8 GB in a 6 s measurement, and with 64 spares (4 GB) they ran
# out of them halfway through (the bench's 4 clients on one range: 1.14
# million records/s with 64 spares, 1.33 million with 192).  A topic whose
# retention deletes segments as fast as it writes them finds a spare for
# every head the same way.
# When root, the server runs as user malachi (created when missing).
#
# Environment: BENCH_PORT (55433), BENCH_SHARED_BUFFERS (1GB).
# Sets: bench_repo, bindir, work (mktemp dir), as (command prefix), spares,
#       conninfo, psql (array), loadgen and limits (helper paths).

bench_repo=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
pg_config=${PG_CONFIG:-/usr/lib/postgresql/15/bin/pg_config}
bindir=$("$pg_config" --bindir)

# bench_build_helpers DIR: compile loadgen and limits into DIR.
bench_build_helpers()
{
	local dir=$1 src=$bench_repo/test/bench
	gcc -O2 -Wall -Wextra -Werror -I"$("$pg_config" --includedir)" \
		-o "$dir/loadgen" "$src/loadgen.c" -L"$("$pg_config" --libdir)" -lpq -lpthread &&
		gcc -O2 -Wall -Wextra -Werror -o "$dir/limits" "$src/limits.c" -lzstd &&
		chmod 755 "$dir/loadgen" "$dir/limits"
}

# bench_settle: wait (up to 2 minutes) until the writer worker has handled
# the files of the segments a drop_topic deleted (made spares of them or
# removed them: no recycle- file is left).  It does that in the background,
# a step at a time; a measurement started meanwhile would time that work
# too, whatever system it measures.
bench_settle()
{
	local i
	for ((i = 0; i < 1200; i++)); do
		compgen -G "$work/data/malachi/recycle-*" >/dev/null || return 0
		sleep 0.1
	done
	echo "bench: dropped segments' files still not handled after 2 minutes" >&2
}

bench_stop_node()
{
	"${as[@]}" "$bindir/pg_ctl" -D "$work/data" -m immediate stop >/dev/null 2>&1 || true
	rm -rf "$work"
}

bench_start_node()
{
	local port=${BENCH_PORT:-55433}

	if (($(id -u) == 0)); then
		id -u malachi >/dev/null 2>&1 ||
			useradd --system --create-home --shell /bin/bash malachi
		as=(runuser -u malachi --)
	else
		as=()
	fi
	work=$(mktemp -d "${BENCH_TMPDIR:-/tmp}/malachi-bench.XXXXXX")
	chmod 755 "$work"
	[[ ${#as[@]} -eq 0 ]] || chown malachi "$work"
	trap bench_stop_node EXIT

	# the spares kept: 192, or as many 64 MiB files as a quarter of the free
	# space holds, but not fewer than the default 16
	local avail_kb
	avail_kb=$(df -P -k "$work" | awk 'NR == 2 {print $4}')
	spares=$((${avail_kb:-0} / 4 / 65536))
	((spares < 192)) || spares=192
	((spares > 16)) || spares=16

	bench_build_helpers "$work"
	loadgen=$work/loadgen
	limits=$work/limits

	"${as[@]}" "$bindir/initdb" -D "$work/data" -A trust >/dev/null
	cat >>"$work/data/postgresql.conf" <<CONF
port = $port
listen_addresses = ''
unix_socket_directories = '$work'
shared_preload_libraries = 'malachi'
fsync = on
synchronous_commit = on
shared_buffers = ${BENCH_SHARED_BUFFERS:-1GB}
checkpoint_timeout = 1h
max_wal_size = 16GB
malachi.fsync = on
malachi.max_spare_segments = $spares
CONF
	"${as[@]}" "$bindir/pg_ctl" -D "$work/data" -l "$work/log" -w start >/dev/null
	conninfo="host=$work port=$port dbname=postgres"
	psql=("${as[@]}" "$bindir/psql" -X -q -A -t -h "$work" -p "$port" -d postgres -v ON_ERROR_STOP=1)
}
