#!/usr/bin/env bash
#
# smoke.sh: the bench's scripts parse and run on tiny inputs, as TAP.
# `make bench-smoke` runs it; so does the unit suite of `make test` (it is
# in the Makefile's UNIT_BINS).  It starts its own tiny node (bench.sh and
# produce_vs_insert.sh do) with the INSTALLED extension, and fails when
# there is none; PgQ phases are skipped when PgQ is not installed, the plot
# when gnuplot is not.
#
# shellcheck disable=SC2016  # the checks are strings that ok() evaluates
set -uo pipefail

here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
pg_config=${PG_CONFIG:-/usr/lib/postgresql/15/bin/pg_config}
extdir=$("$pg_config" --sharedir)/extension

if [[ ! -e $extdir/malachi.control ]]; then
	echo "1..1"
	echo "not ok 1 - malachi is installed (run make install first)"
	exit 0
fi

echo "1..21"
n=0
ok() { n=$((n + 1)); if (eval "$2"); then echo "ok $n - $1"; else echo "not ok $n - $1"; fi; }
skip() { n=$((n + 1)); echo "ok $n - $1 # SKIP $2"; }

tmp=$(mktemp -d "${TMPDIR:-/tmp}/malachi-bench-smoke.XXXXXX")
chmod 755 "$tmp"
trap 'rm -rf "$tmp"' EXIT

ok "the bench's shell scripts parse" \
	'for f in bench.sh lib.sh report.sh produce_vs_insert.sh smoke.sh; do bash -n "$here/$f" || exit 1; done'
ok "loadgen and limits build" \
	'(source "$here/lib.sh" && bench_build_helpers "$tmp") >&2'
ok "limits: fdatasync write bandwidth" \
	'"$tmp/limits" write "$tmp" 2 | grep -Eq "^write growing [0-9.]+$"'
ok "limits: zstd speed on the bench records" \
	'"$tmp/limits" zstd 100 1 | grep -Eq "^zstd 100 [0-9.]+ [0-9.]+ [0-9.]+$"'

# bench.sh on tiny inputs: every phase, 2 sizes x 2 batches x 2 clients
out=$tmp/out
BENCH_QUICK=1 BENCH_SECONDS=0.2 BENCH_SIZES="100 1024" BENCH_BATCHES="1 10" \
	BENCH_CLIENTS="1 2" BENCH_GROW_BYTES=1MB BENCH_CONSUME_RECORDS=300 \
	BENCH_LIMIT_MIB=2 BENCH_OUT=$out BENCH_NO_INSTALL=1 \
	BENCH_SHARED_BUFFERS=32MB BENCH_PORT=55434 \
	"$here/bench.sh" >"$tmp/bench.log" 2>&1
rc=$?
[[ $rc == 0 ]] || sed 's/^/# /' "$tmp/bench.log"
tsv=$out/bench.tsv
has_pgq=0
[[ -e $extdir/pgq.control ]] && has_pgq=1
lines() { grep -c "^$1 " "$tsv" 2>/dev/null; }

ok "bench.sh runs to the end" '[[ $rc == 0 ]]'
# 4 Malachi variants + plain (+ pgq) per cell, 8 cells
ok "matrix: every system in every cell" '(( $(lines matrix) == 8 * (5 + has_pgq) ))'
ok "latency: single-record phase per system" '(( $(lines latency) == 3 + has_pgq ))'
# the consume phase loads 300 records per system (4 loaders x 75) and reads
# them with 1 and 4 clients: each run must get exactly what was loaded
loaded() { awk -v s="$1" '$1 == "consume-load" && $2 == s {print $9}' "$tsv"; }
consumed() { awk -v s="$1" -v c="$2" '$1 == "consume" && $2 == s && $4 == c {print $9}' "$tsv"; }
ok "consume: 300 records loaded into the plain table and the Malachi topic" \
	'[[ $(loaded plain) == 300 && $(loaded malachi) == 300 ]]'
ok "consume: plain pages by id drain the table, 1 and 4 clients" \
	'[[ $(consumed plain 1) == 300 && $(consumed plain 4) == 300 ]]'
for c in 1 4; do
	ok "consume: Malachi's group bench$c drains the topic with $c client(s), lag 0 on its 4 ranges" \
		'[[ $(consumed malachi '"$c"') == 300 ]] && grep -qx "consume-lag malachi '"$c"' 4 0" "$tsv"'
done
ok "consume: bench.md has Malachi's rows and the ratios Malachi ÷ plain for 1 and 4 clients" \
	'grep -Eq "^\| malachi \| 1 \| 300 \|" "$out/bench.md" && grep -Eq "^\| malachi \| 4 \| 300 \|" "$out/bench.md" &&
	 grep -q "records/s ÷ plain" "$out/bench.md" &&
	 grep -Eq "^\| 1 \| [0-9]+\.[0-9]+ \| [0-9]+\.[0-9]+ \|" "$out/bench.md" &&
	 grep -Eq "^\| 4 \| [0-9]+\.[0-9]+ \| [0-9]+\.[0-9]+ \|" "$out/bench.md" &&
	 ! grep -q "not available" "$tmp/bench.log" "$out/bench.md"'
if ((has_pgq)); then
	ok "consume: PgQ batches drain the queue" \
		'[[ $(loaded pgq) == 300 && $(consumed pgq 1) == 300 ]]'
else
	skip "consume: PgQ batches drain the queue" "PgQ is not installed"
fi
ok "growth: produce empty/grown and read at 0/deep" \
	'for s in empty fill grown read-0 read-deep; do grep -q "^growth $s " "$tsv" || exit 1; done'
ok "limits: the parameters of produce_batch to a statement doing nothing, 1 and 2 clients" \
	'(( $(lines limits-noop) == 4 )) && grep -q "doing nothing, 2 client(s)" "$out/bench.md"'
ok "limits: the same with the client's write and fdatasync, 1 and 2 clients" \
	'[[ $(awk '"'"'$1 == "limits-noop" && $2 == "noop-sync" && $9 > 0'"'"' "$tsv" | wc -l) == 2 ]] &&
	 grep -q "writes those bytes and fdatasyncs before the next, 2 client(s)" "$out/bench.md"'
ok "bench.md has the tables of figures and ratios" \
	'for h in "Produce throughput" "Ratios" "Single-record" "Consume" "Growth" "Limits"; do grep -q "^## $h" "$out/bench.md" || exit 1; done'
if command -v gnuplot >/dev/null; then
	ok "the plot is drawn" '[[ -s $out/bench.png ]]'
else
	skip "the plot is drawn" "gnuplot is not installed"
fi

# produce_vs_insert.sh writes into the checkout's bench-results/: run a copy
mkdir -p "$tmp/pvi/test/bench"
cp "$here/produce_vs_insert.sh" "$here/lib.sh" "$here/loadgen.c" "$here/records.h" \
	"$here/limits.c" "$tmp/pvi/test/bench/"
chmod -R a+rX "$tmp/pvi"
BENCH_SHARED_BUFFERS=32MB BENCH_PORT=55434 BENCH_ROUNDS=2 \
	"$tmp/pvi/test/bench/produce_vs_insert.sh" 0.2 10 100 >"$tmp/pvi.log" 2>&1
rc=$?
[[ $rc == 0 ]] || sed 's/^/# /' "$tmp/pvi.log"
ok "produce_vs_insert.sh runs on tiny inputs" \
	'[[ $rc == 0 ]] && grep -q "^## Single records" "$tmp/pvi/bench-results/produce_vs_insert.md"'
ok "produce_vs_insert.sh: a ratio over both rounds for each of the 5 Malachi systems, 1 and 4 clients" \
	'[[ $(grep -Ec "^\| Malachi [^|]+ \| [14] \| [0-9.]+ \([0-9.]+ - [0-9.]+\) \| 2 \| - \|$" "$tmp/pvi/bench-results/produce_vs_insert.md") == 10 ]]'
ok "produce_vs_insert.sh: the no-op with the client's write and fdatasync, a ratio over both rounds, 1 and 4 clients" \
	'[[ $(grep -E "^\| no-op, then the same bytes written and fdatasynced by the client \| [14] \| [0-9.]+ \([0-9.]+ - [0-9.]+\) \| 2 \| - \|$" "$tmp/pvi/bench-results/produce_vs_insert.md" |
		awk -F"|" '"'"'$4 + 0 > 0'"'"' | wc -l) == 2 ]]'
