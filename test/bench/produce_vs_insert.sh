#!/usr/bin/env bash
#
# produce_vs_insert.sh: Malachi's produce_batch against a plain-table INSERT
# of the same rows, in one run on one freshly started node (test/bench/lib.sh:
# fsync on, synchronous_commit on, malachi.fsync on, a CHECKPOINT before each
# measurement).  The load: test/bench/loadgen.c, one libpq connection per
# client, records sent as binary text[] parameters, one statement (one
# transaction) per batch, for every system.
#
# This machine's speed swings by up to 2x within minutes, so one run of each
# system says little about their ratio.  The script measures in ROUNDS: each
# round runs every system once per client count, back to back, starting with
# a different system each round; a system's figure is its median over the
# rounds, and a ratio is the median over the rounds of that round's Malachi
# rate divided by the same round's plain-table rate (neighbours in time, so
# the swings mostly cancel).  Before each measurement the target is fresh:
# the topic dropped and created again, the table truncated, and the dropped
# topic's files handled by the writer worker (bench_settle).
#
# The systems: the plain table (INSERT ... SELECT FROM unnest), Malachi
# transactional and immediate on a topic of 4 ranges, transactional with
# malachi.direct_io on, transactional and immediate on a topic of 1 range,
# the no-op: the same parameters sent to a statement that does nothing
# with them (loadgen noop), the most any write path can do over libpq here;
# and the no-op followed by the client's own write of the same bytes and an
# fdatasync, to a 64 MiB file of its own on the node's file system (loadgen
# noop-sync): a reference for a path that makes the records durable before
# it answers, whatever its code, one file per client (Malachi's immediate
# produce into one range writes one file for all clients; several files
# synced side by side can get more out of the disk).
#
# Usage: test/bench/produce_vs_insert.sh [SECONDS] [BATCH] [RECORD_BYTES]
#   defaults 6 1000 1024
# Environment: BENCH_ROUNDS (5), BENCH_CLIENTS ("1 4"), and lib.sh's.
# Writes bench-results/produce_vs_insert.md (and .tsv, the raw lines) and
# prints the report.  Run as root (the server then runs as user malachi) or
# as a normal user.
set -euo pipefail

# shellcheck source=test/bench/lib.sh
source "$(dirname "${BASH_SOURCE[0]}")/lib.sh"
seconds=${1:-6}
batch=${2:-1000}
bytes=${3:-1024}
rounds=${BENCH_ROUNDS:-5}
read -ra client_counts <<<"${BENCH_CLIENTS:-1 4}"
out=$bench_repo/bench-results
md=$out/produce_vs_insert.md
tsv=$out/produce_vs_insert.tsv
mkdir -p "$out"

bench_start_node
sql() { "${psql[@]}" -c "$1" >/dev/null; }
sql 'CREATE EXTENSION malachi'
sql 'CREATE TABLE plain_events (id bigserial PRIMARY KEY, key text, value text, ts timestamptz DEFAULT now())'
# let the writer worker prepare its spare segment files before timing
sql 'SELECT pg_sleep(2)'

# key, label, loadgen mode, target (topic: its number of ranges), settings
systems=("plain|plain INSERT|insert|plain_events|"
	"tx4|Malachi transactional, 4 ranges|produce|4|-c malachi.produce_mode=transactional"
	"imm4|Malachi immediate, 4 ranges|produce|4|-c malachi.produce_mode=immediate"
	"tx4d|Malachi transactional, 4 ranges, direct I/O|produce|4|-c malachi.produce_mode=transactional -c malachi.direct_io=on"
	"tx1|Malachi transactional, 1 range|produce|1|-c malachi.produce_mode=transactional"
	"imm1|Malachi immediate, 1 range|produce|1|-c malachi.produce_mode=immediate"
	"noop|no-op: the same parameters to a statement that does nothing|noop|-|"
	"noopsync|no-op, then the same bytes written and fdatasynced by the client|noop-sync|$work|")

# measure SYSTEM CLIENTS BATCH: a fresh target, CHECKPOINT, one loadgen line
measure()
{
	local key label mode target opts clients=$2 n=$3
	IFS='|' read -r key label mode target opts <<<"$1"
	case $mode in
		produce)
			sql "SELECT malachi.drop_topic('pvi') FROM malachi.stat_topics WHERE topic = 'pvi'"
			sql "SELECT malachi.create_topic('pvi', $target)"
			target=pvi
			;;
		insert) sql "TRUNCATE $target" ;;
	esac
	bench_settle
	sql CHECKPOINT
	PGOPTIONS="$opts" "${as[@]}" "$loadgen" "$conninfo" "$mode" "$target" "$clients" \
		"$seconds" "$n" "$bytes"
}

# untimed, with the most clients: the plain table's WAL files and Malachi's
# spare segment files made once (a new one costs the first measurement that
# needs it)
most=$(printf '%s\n' "${client_counts[@]}" | sort -n | tail -1)
for s in "${systems[@]}"; do
	case ${s%%|*} in plain | imm1) measure "$s" "$most" "$batch" >/dev/null ;; esac
done

: >"$tsv"
for ((r = 0; r < rounds; r++)); do
	for clients in "${client_counts[@]}"; do
		for ((i = 0; i < ${#systems[@]}; i++)); do
			s=${systems[$(((i + r) % ${#systems[@]}))]}
			line=$(measure "$s" "$clients" "$batch")
			echo "$r ${s%%|*} $line" | tee -a "$tsv" >&2
		done
	done
done

# summarize FORMAT: "median min max count" of the numbers on stdin, the
# median printed with FORMAT ("- - - 0" for none)
summarize()
{
	sort -g | awk -v fmt="$1" '{v[NR] = $1} END {
		if (NR == 0) { print "- - - 0"; exit }
		m = NR % 2 ? v[(NR + 1) / 2] : (v[NR / 2] + v[NR / 2 + 1]) / 2
		printf fmt " %s %s %d\n", m, v[1], v[NR], NR }'
}

# stats KEY CLIENTS FIELD: summarize a loadgen field over the rounds (the
# loadgen line's fields follow "ROUND KEY": 4 clients, 10 records/s, 11 MB/s,
# 12 p50 ms, 13 p99 ms)
stats()
{
	awk -v k="$1" -v c="$2" -v f="$3" '$2 == k && $4 == c {print $f}' "$tsv" | summarize %s
}

# ratios KEY CLIENTS: summarize the per-round ratio to the plain table
ratios()
{
	awk -v k="$1" -v c="$2" '$4 == c && $2 == k {m[$1] = $10} $4 == c && $2 == "plain" {p[$1] = $10}
		END {for (r in m) if (r in p && p[r] > 0) printf "%.2f\n", m[r] / p[r]}' "$tsv" |
		summarize %.2f
}

# the issue's target for a client count: 5x the plain table with 1 client, 4x with 4
target_for() { case $1 in 1) echo 5 ;; 4) echo 4 ;; *) echo - ;; esac; }

{
	echo "# Malachi produce vs plain INSERT"
	echo
	echo "$(date -u +%Y-%m-%dT%H:%MZ), $(nproc) cores, $rounds rounds of ${seconds}s per system and client count, fsync on, synchronous_commit on"
	echo
	echo "## Batches of $batch x $bytes B (one statement, one transaction per batch)"
	echo
	echo "Median over the rounds (min - max in brackets)."
	echo
	echo "| system | clients | records/s | MB/s | p99 ms |"
	echo "|---|---|---|---|---|"
	for clients in "${client_counts[@]}"; do
		for s in "${systems[@]}"; do
			IFS='|' read -r key label _ <<<"$s"
			read -r rm rlo rhi _ <<<"$(stats "$key" "$clients" 10)"
			read -r mm _ <<<"$(stats "$key" "$clients" 11)"
			read -r pm _ <<<"$(stats "$key" "$clients" 13)"
			echo "| $label | $clients | $rm ($rlo - $rhi) | $mm | $pm |"
		done
	done
	echo
	echo "## Malachi / plain INSERT, round by round"
	echo
	echo "Median of the per-round ratios (min - max); target: the segment store's"
	echo "(issue 3) for 1,000 x 1 KiB, 5x with 1 client and 4x with 4.  The"
	echo "no-op's ratio is the ceiling: what a write path that wrote nothing would reach;"
	echo "the no-op with the client's write and fdatasync (one file per client) is a"
	echo "reference for a path that makes the records durable before it answers, as the"
	echo "immediate produce does."
	echo
	echo "| system | clients | ratio | rounds | target |"
	echo "|---|---|---|---|---|"
	for clients in "${client_counts[@]}"; do
		for s in "${systems[@]:1}"; do
			IFS='|' read -r key label _ <<<"$s"
			read -r qm qlo qhi qn <<<"$(ratios "$key" "$clients")"
			t=$(target_for "$clients")
			# the target is for 1,000 x 1 KiB, and not the no-op's
			[[ $key != noop* && $batch == 1000 && $bytes == 1024 ]] || t=-
			echo "| $label | $clients | $qm ($qlo - $qhi) | $qn | $t |"
		done
	done
	echo
	echo "## Single records, $bytes B (one transaction each): commit latency"
	echo
	echo "| system | clients | statements | records/s | p50 ms | p99 ms |"
	echo "|---|---|---|---|---|---|"
} >"$md"
single()
{
	local label=$1 line=$2
	read -r _ clients _ _ _ stmts _ rps _ p50 p99 <<<"$line"
	echo "| $label | $clients | $stmts | $rps | $p50 | $p99 |" >>"$md"
}
for clients in "${client_counts[@]}"; do
	single "plain INSERT" "$(measure "${systems[0]}" "$clients" 1)"
	single "Malachi transactional produce" "$(measure "${systems[1]}" "$clients" 1)"
done
cat "$md"
