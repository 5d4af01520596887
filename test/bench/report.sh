#!/usr/bin/env bash
#
# report.sh: turn bench.sh's raw lines (bench.tsv) into bench.md (tables of
# absolute figures and ratios) and bench.png (gnuplot, when installed):
# throughput by record size, one panel per client count.
#
# Usage: test/bench/report.sh BENCH.TSV BENCH.MD MACHINE RUN
#
# bench.tsv lines: "PHASE SYSTEM <loadgen line>" where the loadgen line is
#   mode clients batch bytes seconds statements records rec/s MB/s p50 p99
# plus "limits write KIND MB/s", "limits zstd BYTES COMPRESS DECOMPRESS
# RATIO", "limits-noop noop <loadgen line>" (loadgen noop: the parameters
# of a produce_batch to a statement doing nothing), "limits-noop noop-sync
# <loadgen line>" (the same, then the client writes those bytes and
# fdatasyncs), "consume-load SYSTEM <loadgen line>" (the records loaded for the
# consume phase), "consume-lag malachi CLIENTS RANGES LAG" (the consumer
# group after its run), "growth-info ...".
set -euo pipefail

tsv=$1
md=$2
machine=$3
run=$4
png=${md%.md}.png

# the matrix's systems, batches, clients and sizes, in order of appearance
col() { awk -v c="$1" '$1 == "matrix" && !seen[$c]++ {print $c}' "$tsv"; }
mapfile -t systems < <(col 2)
mapfile -t batches < <(col 5)
mapfile -t clients < <(col 4)
mapfile -t sizes < <(col 6)
peers=()
for s in "${systems[@]}"; do
	[[ $s == malachi-* ]] || peers+=("$s")
done

# value PHASE SYSTEM CLIENTS BATCH BYTES FIELD: one figure of bench.tsv
value()
{
	awk -v p="$1" -v s="$2" -v c="$3" -v b="$4" -v z="$5" -v f="$6" \
		'$1 == p && $2 == s && $4 == c && $5 == b && $6 == z {print $f; exit}' "$tsv"
}
limit_zstd() { awk -v z="$1" -v f="$2" '$1 == "limits" && $2 == "zstd" && $3 == z {print $f; exit}' "$tsv"; }
# ratio A B: A / B with two decimals, "-" when either is missing or B is 0
ratio() { awk -v a="$1" -v b="$2" 'BEGIN {if (a == "" || b == "" || b + 0 == 0) print "-"; else printf (a / b < 0.1 ? "%.3f\n" : "%.2f\n"), a / b}'; }
header() { local IFS='|'; echo "|$*|"; echo "|$(printf -- '---|%.0s' "$@")"; }

growing=$(awk '$1 == "limits" && $2 == "write" && $3 == "growing" {print $4}' "$tsv")
prealloc=$(awk '$1 == "limits" && $2 == "write" && $3 == "preallocated" {print $4}' "$tsv")

{
	echo "# Malachi benchmark"
	echo
	echo "- machine: $machine"
	echo "- run: $run; $(date -u +%Y-%m-%dT%H:%MZ)"
	echo "- node: fsync on, synchronous_commit on, malachi.fsync on, checkpoint_timeout 1h,"
	echo "  max_wal_size 16GB, CHECKPOINT before every timed phase; one statement and"
	echo "  one transaction per batch; records: JSON-like text values, 1,000 distinct keys"
	echo

	if ((${#systems[@]})); then
		echo "## Produce throughput: records/s (MB/s of values)"
		echo
		header "record B" batch clients "${systems[@]}"
		for z in "${sizes[@]}"; do
			for b in "${batches[@]}"; do
				for c in "${clients[@]}"; do
					row="| $z | $b | $c |"
					for s in "${systems[@]}"; do
						r=$(value matrix "$s" "$c" "$b" "$z" 10)
						m=$(value matrix "$s" "$c" "$b" "$z" 11)
						row+=" ${r:--} (${m:--}) |"
					done
					echo "$row"
				done
			done
		done
		echo

		echo "## Ratios: Malachi ÷ each peer (records/s), Malachi ÷ limit (MB/s)"
		echo
		echo "tx = transactional, imm = immediate, both without compression;"
		echo "write = sequential write with an fdatasync per MiB into a preallocated file;"
		echo "zstd = zstd level 1 compression speed on the same records."
		echo
		cols=()
		for m in tx imm; do
			for p in "${peers[@]}"; do cols+=("$m ÷ $p"); done
		done
		cols+=("tx ÷ write" "imm ÷ write" "tx-zstd ÷ zstd")
		header "record B" batch clients "${cols[@]}"
		for z in "${sizes[@]}"; do
			for b in "${batches[@]}"; do
				for c in "${clients[@]}"; do
					row="| $z | $b | $c |"
					for m in tx imm; do
						for p in "${peers[@]}"; do
							row+=" $(ratio "$(value matrix "malachi-$m" "$c" "$b" "$z" 10)" \
								"$(value matrix "$p" "$c" "$b" "$z" 10)") |"
						done
					done
					row+=" $(ratio "$(value matrix malachi-tx "$c" "$b" "$z" 11)" "$prealloc") |"
					row+=" $(ratio "$(value matrix malachi-imm "$c" "$b" "$z" 11)" "$prealloc") |"
					row+=" $(ratio "$(value matrix malachi-tx-zstd "$c" "$b" "$z" 11)" "$(limit_zstd "$z" 4)") |"
					echo "$row"
				done
			done
		done
		echo
	fi

	if grep -q '^latency ' "$tsv"; then
		echo "## Single-record produce latency (1 KiB, 1 client, one transaction each)"
		echo
		header system records/s "p50 ms" "p99 ms"
		awk '$1 == "latency" {printf "| %s | %s | %s | %s |\n", $2, $10, $12, $13}' "$tsv"
		echo
	fi

	if grep -q '^consume ' "$tsv"; then
		echo "## Consume (1 KiB records, 1,000 per statement, until drained)"
		echo
		echo "malachi: BEGIN; malachi.consume(topic, group, 1000); COMMIT, the clients"
		echo "consumers of one fresh group, topic of 4 ranges; plain: pages by id, each"
		echo "client over its own slice of the ids; p50/p99: per statement (Malachi: per"
		echo "transaction)."
		loaded=$(awk '$1 == "consume-load" {printf "%s%s %s", sep, $2, $9; sep = ", "}' "$tsv")
		[[ -z $loaded ]] || echo "Records loaded: $loaded."
		lags=$(awk '$1 == "consume-lag" {printf "%sbench%s (%s client%s): lag %s on %s ranges", sep, $3, $3, $3 == 1 ? "" : "s", $5, $4; sep = "; "}' "$tsv")
		[[ -z $lags ]] || echo "Malachi's groups afterwards: $lags."
		echo
		header system clients records records/s "MB/s" "p50 ms" "p99 ms"
		awk '$1 == "consume" {printf "| %s | %s | %s | %s | %s | %s | %s |\n", $2, $4, $9, $10, $11, $12, $13}' "$tsv"
		echo
		mapfile -t consume_counts < <(awk '$1 == "consume" && $2 == "malachi" && !seen[$4]++ {print $4}' "$tsv")
		mapfile -t consume_peers < <(awk '$1 == "consume" && $2 != "malachi" && !seen[$2]++ {print $2}' "$tsv")
		if ((${#consume_counts[@]})) && ((${#consume_peers[@]})); then
			echo "### Consume ratios: Malachi ÷ each peer, same client count"
			echo
			cols=()
			for p in "${consume_peers[@]}"; do cols+=("records/s ÷ $p" "MB/s ÷ $p"); done
			header clients "${cols[@]}"
			for c in "${consume_counts[@]}"; do
				row="| $c |"
				for p in "${consume_peers[@]}"; do
					for f in 10 11; do
						row+=" $(ratio "$(value consume malachi "$c" 1000 1024 "$f")" \
							"$(value consume "$p" "$c" 1000 1024 "$f")") |"
					done
				done
				echo "$row"
			done
			echo
		fi
	fi

	if grep -q '^growth ' "$tsv"; then
		read -r _ _ _ _ records _ deep _ grow_bytes < <(grep '^growth-info ' "$tsv")
		empty=$(awk '$1 == "growth" && $2 == "empty" {print $10}' "$tsv")
		grown=$(awk '$1 == "growth" && $2 == "grown" {print $10}' "$tsv")
		r0=$(awk '$1 == "growth" && $2 == "read-0" {print $12}' "$tsv")
		rd=$(awk '$1 == "growth" && $2 == "read-deep" {print $12}' "$tsv")
		echo "## Growth (Malachi, one range, 16 KiB records, batches of 1,000, 1 client)"
		echo
		echo "The topic grew to $grow_bytes bytes of values ($records records) between the two produce runs."
		echo
		header measure "empty / offset 0" "grown / offset $deep" "grown ÷ empty"
		echo "| produce records/s | $empty | $grown | $(ratio "$grown" "$empty") |"
		echo "| read 100 records, p50 ms | $r0 | $rd | $(ratio "$rd" "$r0") |"
		echo "| read 100 records, p99 ms | $(awk '$1 == "growth" && $2 == "read-0" {print $13}' "$tsv") | $(awk '$1 == "growth" && $2 == "read-deep" {print $13}' "$tsv") | |"
		echo
	fi

	if grep -q '^limits ' "$tsv"; then
		echo "## Limits of this machine (same run)"
		echo
		header limit "MB/s"
		echo "| sequential write, fdatasync per MiB, preallocated file | ${prealloc:--} |"
		echo "| sequential write, fdatasync per MiB, growing file | ${growing:--} |"
		awk '$1 == "limits" && $2 == "zstd" {
			printf "| zstd -1 compress, %s B records (ratio %s) | %s |\n", $3, $6, $4
			printf "| zstd -1 decompress, %s B records | %s |\n", $3, $5 }' "$tsv"
		awk '$1 == "limits-noop" && $2 == "noop" {
			printf "| a statement receiving the parameters of produce_batch (%s x %s B) and doing nothing, %s client(s): %s records/s | %s |\n", $5, $6, $4, $10, $11 }' "$tsv"
		awk '$1 == "limits-noop" && $2 == "noop-sync" {
			printf "| the same, then the client writes those bytes and fdatasyncs before the next, %s client(s): %s records/s | %s |\n", $4, $10, $11 }' "$tsv"
		echo
	fi
} >"$md"

# the plot: MB/s by record size, one panel per client count, at the largest
# batch of the matrix
if ((${#systems[@]})) && command -v gnuplot >/dev/null; then
	dir=$(mktemp -d)
	b=${batches[-1]}
	for c in "${clients[@]}"; do
		{
			echo "size ${systems[*]}"
			for z in "${sizes[@]}"; do
				row=$z
				for s in "${systems[@]}"; do
					m=$(value matrix "$s" "$c" "$b" "$z" 11)
					row+=" ${m:-NaN}"
				done
				echo "$row"
			done
		} >"$dir/c$c.dat"
	done
	{
		echo "set terminal pngcairo size 1200,500 noenhanced"
		echo "set output '$png'"
		echo "set multiplot layout 1,${#clients[@]} title 'produce throughput, batches of $b (MB/s of values)'"
		echo "set logscale xy; set xrange [50:32768]; set xlabel 'record bytes'; set ylabel 'MB/s'; set key top left autotitle columnhead; set grid"
		for c in "${clients[@]}"; do
			echo "set title '$c client(s)'"
			echo "plot for [i=2:$((${#systems[@]} + 1))] '$dir/c$c.dat' using 1:i with linespoints"
		done
		echo "unset multiplot"
	} >"$dir/plot.gp"
	if ! gnuplot "$dir/plot.gp" 2>"$dir/err"; then
		sed -i '1s/.*/set terminal png size 1200,500/' "$dir/plot.gp"
		gnuplot "$dir/plot.gp" || echo "report: gnuplot failed: $(cat "$dir/err")" >&2
	fi
	rm -rf "$dir"
	[[ -s $png ]] && echo "![throughput by record size and clients]($(basename "$png"))" >>"$md"
fi
