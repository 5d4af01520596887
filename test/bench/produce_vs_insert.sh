#!/usr/bin/env bash
#
# produce_vs_insert.sh: Malachi's produce_batch against a plain-table INSERT
# of the same rows, in one run on one freshly started node.
#
# The node: fsync on, synchronous_commit on, malachi.fsync on, checkpoints
# pushed out of the timed phases (checkpoint_timeout 1h, max_wal_size 16GB,
# a CHECKPOINT before each phase).  The load: test/bench/loadgen.c, one
# libpq connection per client, records sent as binary text[] parameters,
# one statement (one transaction) per batch, for both systems.
#
# Usage: test/bench/produce_vs_insert.sh [SECONDS] [BATCH] [RECORD_BYTES]
# Writes bench-results/produce_vs_insert.md and prints it.
# Run as root (the server then runs as user malachi) or as a normal user.
set -euo pipefail

repo=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
seconds=${1:-10}
batch=${2:-1000}
bytes=${3:-1024}
bindir=$(/usr/lib/postgresql/15/bin/pg_config --bindir)
port=${BENCH_PORT:-55433}
out=$repo/bench-results
mkdir -p "$out"

if (($(id -u) == 0)); then
	id -u malachi >/dev/null 2>&1 || useradd --system --create-home --shell /bin/bash malachi
	as=(runuser -u malachi --)
else
	as=()
fi

work=$(mktemp -d /tmp/malachi-bench.XXXXXX)
chmod 755 "$work"
[[ ${#as[@]} -eq 0 ]] || chown malachi "$work"
trap '"${as[@]}" "$bindir/pg_ctl" -D "$work/data" -m immediate stop >/dev/null 2>&1 || true; rm -rf "$work"' EXIT

gcc -O2 -Wall -Wextra -Werror -I"$(/usr/lib/postgresql/15/bin/pg_config --includedir)" \
	-o "$work/loadgen" "$repo/test/bench/loadgen.c" -lpq -lpthread
chmod 755 "$work/loadgen"

"${as[@]}" "$bindir/initdb" -D "$work/data" -A trust >/dev/null
cat >>"$work/data/postgresql.conf" <<CONF
port = $port
listen_addresses = ''
unix_socket_directories = '$work'
shared_preload_libraries = 'malachi'
fsync = on
synchronous_commit = on
shared_buffers = 1GB
checkpoint_timeout = 1h
max_wal_size = 16GB
malachi.fsync = on
CONF
"${as[@]}" "$bindir/pg_ctl" -D "$work/data" -l "$work/log" -w start >/dev/null

psql=("${as[@]}" "$bindir/psql" -X -q -h "$work" -p "$port" -d postgres -v ON_ERROR_STOP=1)
"${psql[@]}" -c 'CREATE EXTENSION malachi' \
	-c "SELECT malachi.create_topic('bench1', 1)" \
	-c "SELECT malachi.create_topic('bench4', 4)" \
	-c 'CREATE TABLE plain_events (id bigserial PRIMARY KEY, key text, value text, ts timestamptz DEFAULT now())' >/dev/null
# let the writer worker prepare its spare segment files before timing
"${psql[@]}" -c 'SELECT pg_sleep(2)' >/dev/null

run()
{
	local mode=$1 target=$2 clients=$3
	"${psql[@]}" -c 'CHECKPOINT' >/dev/null
	"${as[@]}" "$work/loadgen" "host=$work port=$port dbname=postgres" \
		"$mode" "$target" "$clients" "$seconds" "$batch" "$bytes"
}

{
	echo "# produce_batch vs plain INSERT"
	echo
	echo "$(date -u +%Y-%m-%dT%H:%MZ), $(nproc) cores, batch $batch x $bytes B, ${seconds}s per phase, fsync on"
	echo
	echo "| system | clients | statements | records/s | MB/s | p50 ms | p99 ms |"
	echo "|---|---|---|---|---|---|---|"
} >"$out/produce_vs_insert.md"

declare -A rate
for clients in 1 4; do
	for sys in "insert plain_events" "produce bench1" "produce bench4"; do
		set -- $sys
		line=$(run "$1" "$2" "$clients")
		read -r _ _ _ _ _ stmts _ rps mbs p50 p99 <<<"$line"
		rate[$2-$clients]=$rps
		label=$([[ $1 == insert ]] && echo "plain INSERT" || echo "malachi $2 (${2#bench} range$([[ ${2#bench} == 1 ]] || echo s))")
		echo "| $label | $clients | $stmts | $rps | $mbs | $p50 | $p99 |" >>"$out/produce_vs_insert.md"
	done
done
{
	echo
	echo "| clients | malachi (1 range) / plain | malachi (4 ranges) / plain |"
	echo "|---|---|---|"
	for clients in 1 4; do
		echo "| $clients | $(awk "BEGIN{printf \"%.2f\", ${rate[bench1-$clients]} / ${rate[plain_events-$clients]}}") | $(awk "BEGIN{printf \"%.2f\", ${rate[bench4-$clients]} / ${rate[plain_events-$clients]}}") |"
	done
} >>"$out/produce_vs_insert.md"
cat "$out/produce_vs_insert.md"
