#!/usr/bin/env bash
#
# produce_vs_insert.sh: Malachi's produce_batch against a plain-table INSERT
# of the same rows, in one run on one freshly started node (test/bench/lib.sh:
# fsync on, synchronous_commit on, malachi.fsync on, a CHECKPOINT before each
# phase).  The load: test/bench/loadgen.c, one libpq connection per client,
# records sent as binary text[] parameters, one statement (one transaction)
# per batch, for both systems.  `make bench` (test/bench/bench.sh) is the
# full comparison; this is the quick two-system one.
#
# Usage: test/bench/produce_vs_insert.sh [SECONDS] [BATCH] [RECORD_BYTES]
# Writes bench-results/produce_vs_insert.md and prints it.
# Run as root (the server then runs as user malachi) or as a normal user.
set -euo pipefail

# shellcheck source=test/bench/lib.sh
source "$(dirname "${BASH_SOURCE[0]}")/lib.sh"
seconds=${1:-10}
batch=${2:-1000}
bytes=${3:-1024}
out=$bench_repo/bench-results
mkdir -p "$out"

bench_start_node
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
	"${as[@]}" "$loadgen" "$conninfo" "$mode" "$target" "$clients" "$seconds" "$batch" "$bytes"
}

run_mode()
{
	local pmode=$1
	shift
	PGOPTIONS="-c malachi.produce_mode=$pmode" run "$@"
}

{
	echo "# Malachi produce vs plain INSERT"
	echo
	echo "$(date -u +%Y-%m-%dT%H:%MZ), $(nproc) cores, ${seconds}s per phase, fsync on, synchronous_commit on"
	echo
	echo "## Batches of $batch x $bytes B (one statement, one transaction per batch)"
	echo
	echo "| system | clients | statements | records/s | MB/s | p50 ms | p99 ms |"
	echo "|---|---|---|---|---|---|---|"
} >"$out/produce_vs_insert.md"

declare -A rate
row()
{
	local label=$1 key=$2 line=$3
	read -r _ clients _ _ _ stmts _ rps mbs p50 p99 <<<"$line"
	rate[$key]=$rps
	echo "| $label | $clients | $stmts | $rps | $mbs | $p50 | $p99 |" >>"$out/produce_vs_insert.md"
}
for clients in 1 4; do
	row "plain INSERT" "plain-$clients" "$(run insert plain_events "$clients")"
	row "malachi transactional, 1 range" "tx1-$clients" "$(run_mode transactional produce bench1 "$clients")"
	row "malachi immediate, 1 range" "im1-$clients" "$(run_mode immediate produce bench1 "$clients")"
	row "malachi transactional, 4 ranges" "tx4-$clients" "$(run_mode transactional produce bench4 "$clients")"
done
{
	echo
	echo "| clients | transactional 1 range / plain | immediate 1 range / plain | transactional 4 ranges / plain |"
	echo "|---|---|---|---|"
	for clients in 1 4; do
		echo "| $clients | $(awk "BEGIN{printf \"%.2f\", ${rate[tx1-$clients]} / ${rate[plain-$clients]}}") | $(awk "BEGIN{printf \"%.2f\", ${rate[im1-$clients]} / ${rate[plain-$clients]}}") | $(awk "BEGIN{printf \"%.2f\", ${rate[tx4-$clients]} / ${rate[plain-$clients]}}") |"
	done
	echo
	echo "## Single records, $bytes B (one transaction each): commit latency"
	echo
	echo "| system | clients | statements | records/s | p50 ms | p99 ms |"
	echo "|---|---|---|---|---|---|"
} >>"$out/produce_vs_insert.md"
single()
{
	local label=$1 line=$2
	read -r _ clients _ _ _ stmts _ rps _ p50 p99 <<<"$line"
	echo "| $label | $clients | $stmts | $rps | $p50 | $p99 |" >>"$out/produce_vs_insert.md"
}
for clients in 1 4; do
	single "plain INSERT" "$("${as[@]}" "$loadgen" "$conninfo" insert plain_events "$clients" "$seconds" 1 "$bytes")"
	single "malachi transactional produce" "$(PGOPTIONS='-c malachi.produce_mode=transactional' "${as[@]}" "$loadgen" "$conninfo" produce bench1 "$clients" "$seconds" 1 "$bytes")"
done
cat "$out/produce_vs_insert.md"
