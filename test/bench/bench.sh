#!/usr/bin/env bash
#
# bench.sh: `make bench`.  Malachi against a plain table, PgQ and pgmq, plus
# the machine's own limits, in ONE run on one private node (lib.sh: fsync
# on, synchronous_commit on, a CHECKPOINT before every timed phase).
#
# Every system gets the same generated records (records.h: JSON-like text
# values, 1,000 distinct keys), sent by test/bench/loadgen.c, one statement
# and one transaction per batch:
#
#   matrix    record sizes x batch sizes x clients, for Malachi
#             (produce_batch; transactional and immediate; compression none
#             and zstd level 1), the plain table (multi-row INSERT), PgQ
#             (insert_event, ticker running) and pgmq (send_batch) when its
#             extension is installed
#   latency   single-record produce / INSERT / insert_event / send, 1 client
#   consume   1 KiB records, 1,000 per statement, until drained, with 1 and
#             4 clients (BENCH_CONSUME_CLIENTS) for Malachi and the plain
#             table: Malachi: BEGIN; malachi.consume(topic, group, 1000);
#             COMMIT, one fresh consumer group per client count on a topic
#             of 4 ranges; plain: pages by id, each client over its own
#             slice of the ids.  With 1 client only: PgQ: next_batch /
#             get_batch_events / finish_batch; pgmq: read + delete
#   growth    Malachi's produce rate once a topic holds BENCH_GROW_BYTES,
#             against its rate on the empty topic; malachi.read latency at a
#             deep offset against offset 0
#   limits    sequential write with an fdatasync per MiB (preallocated and
#             growing file, on the node's file system); zstd level 1
#             compress / decompress speed on the same records; the same
#             parameters as a produce_batch of 1,000 x 1 KiB sent to a
#             statement that does nothing with them (loadgen noop), per
#             client count: the most any write mode can do over libpq here;
#             and the same followed by the client's own write of those
#             bytes and an fdatasync, one file per client (loadgen
#             noop-sync): a reference for a path that makes the records
#             durable before it answers
#
# Output in bench-results/: bench.md (tables of absolute figures and
# ratios), bench.tsv (raw lines), bench.png (gnuplot, when installed).
#
# Environment (defaults for the full run / for BENCH_QUICK=1):
#   BENCH_QUICK=1           reduced matrix, under two minutes
#   BENCH_SECONDS           seconds per timed phase (5 / 1)
#   BENCH_SIZES             record sizes in bytes (100 1024 16384 / same)
#   BENCH_BATCHES           batch sizes (1 100 1000 / 100)
#   BENCH_CLIENTS           client counts (1 4 / same)
#   BENCH_RANGES            ranges of the matrix topics (4)
#   BENCH_GROW_BYTES        growth target, e.g. 2GB, 512MB (2GB / 64MB)
#   BENCH_CONSUME_RECORDS   records loaded for the consume phase (200000 / 20000)
#   BENCH_CONSUME_CLIENTS   consume client counts, Malachi and plain (1 4)
#   BENCH_LIMIT_MIB         MiB written per limit measurement (1024 / 64)
#   BENCH_OUT               output folder (bench-results)
#   BENCH_NO_INSTALL=1      do not apt-get missing packages (PgQ, gnuplot)
#   BENCH_SYSTEMS           subset of: malachi plain pgq pgmq (all)
#   BENCH_PHASES            subset of: matrix latency consume growth limits (all)
#
set -euo pipefail

# shellcheck source=test/bench/lib.sh
source "$(dirname "${BASH_SOURCE[0]}")/lib.sh"

quick=${BENCH_QUICK:-0}
[[ $quick == 1 ]] && q=1 || q=0
pick() { if ((q)); then echo "$2"; else echo "$1"; fi; }
seconds=${BENCH_SECONDS:-$(pick 5 1)}
read -ra sizes <<<"${BENCH_SIZES:-100 1024 16384}"
read -ra batches <<<"${BENCH_BATCHES:-$(pick "1 100 1000" 100)}"
read -ra client_counts <<<"${BENCH_CLIENTS:-1 4}"
ranges=${BENCH_RANGES:-4}
grow_spec=${BENCH_GROW_BYTES:-$(pick 2GB 64MB)}
consume_records=${BENCH_CONSUME_RECORDS:-$(pick 200000 20000)}
read -ra consume_clients <<<"${BENCH_CONSUME_CLIENTS:-1 4}"
limit_mib=${BENCH_LIMIT_MIB:-$(pick 1024 64)}
out=${BENCH_OUT:-$bench_repo/bench-results}
systems=" ${BENCH_SYSTEMS:-malachi plain pgq pgmq} "
phases=" ${BENCH_PHASES:-matrix latency consume growth limits} "
extdir=$("$pg_config" --sharedir)/extension
mkdir -p "$out"
md=$out/bench.md
tsv=$out/bench.tsv

say() { echo "bench: $*" >&2; }
has() { [[ $1 == *" $2 "* ]]; }

# to_bytes 2GB -> 2147483648
to_bytes()
{
	local n=${1%%[!0-9]*} unit=${1##*[0-9]}
	case ${unit^^} in
		'' | B) echo "$n" ;;
		K | KB) echo $((n << 10)) ;;
		M | MB) echo $((n << 20)) ;;
		G | GB) echo $((n << 30)) ;;
		*) say "bad size: $1"; exit 2 ;;
	esac
}
grow_bytes=$(to_bytes "$grow_spec")

#---- packages: PgQ and gnuplot from Debian when missing ----
extra=()
[[ -e $extdir/pgq.control ]] || extra+=(postgresql-15-pgq3)
command -v gnuplot >/dev/null || extra+=(gnuplot-nox)
if ((${#extra[@]})); then
	if [[ ${BENCH_NO_INSTALL:-0} == 1 ]]; then
		say "not installing ${extra[*]} (BENCH_NO_INSTALL=1)"
	else
		MALACHI_EXTRA_DEPS="${extra[*]}" "$bench_repo/test/install-deps.sh" ||
			say "could not install ${extra[*]}; going on without"
	fi
fi
has "$systems" pgq && [[ ! -e $extdir/pgq.control ]] && {
	say "PgQ not installed: skipped"
	systems=${systems/ pgq / }
}
has "$systems" pgmq && [[ ! -e $extdir/pgmq.control ]] && {
	say "pgmq not installed (not packaged by Debian; the bench does not fetch it): skipped"
	systems=${systems/ pgmq / }
}

#---- disk: the growth phase and the matrix need room ----
bench_start_node
avail=$(($(df -P -k "$work" | awk 'NR == 2 {print $4}') * 1024))
# the matrix at its largest writes roughly 1 GB per phase per system, twice
# over with the WAL; keep a quarter of the free space untouched
need_matrix=$((q ? 1 << 30 : 24 << 30))
if ((grow_bytes * 2 + need_matrix > avail * 3 / 4)); then
	new=$(((avail * 3 / 4 - need_matrix) / 2))
	((new > 64 << 20)) || new=$((64 << 20))
	say "only $((avail >> 20)) MB free on $(df -P "$work" | awk 'NR == 2 {print $6}'): growth target $grow_bytes -> $new bytes"
	grow_bytes=$new
fi

#---- setup ----
sql() { "${psql[@]}" -c "$1"; }
sql 'CREATE EXTENSION malachi' >/dev/null
sql "SELECT malachi.create_topic('m_none', $ranges)" >/dev/null
sql "SELECT malachi.create_topic('m_zstd', $ranges)" >/dev/null
sql "SELECT malachi.alter_topic('m_zstd', '{\"compression\": \"zstd\", \"zstd_level\": 1}')" >/dev/null
sql 'CREATE TABLE plain_events (id bigserial PRIMARY KEY, key text, value text, ts timestamptz DEFAULT now())'
if has "$systems" pgq; then
	sql 'CREATE EXTENSION pgq' >/dev/null
	sql "SELECT pgq.create_queue('bench_q')" >/dev/null
fi
if has "$systems" pgmq; then
	sql 'CREATE EXTENSION pgmq' >/dev/null
	sql "SELECT pgmq.create('bench_q')" >/dev/null
fi
# let the writer worker prepare its spare segment files before timing
sql 'SELECT pg_sleep(2)' >/dev/null

# the systems of the matrix: name, loadgen mode, target, produce_mode
matrix_systems=()
if has "$systems" malachi; then
	matrix_systems+=("malachi-tx produce m_none transactional"
		"malachi-tx-zstd produce m_zstd transactional"
		"malachi-imm produce m_none immediate"
		"malachi-imm-zstd produce m_zstd immediate")
fi
has "$systems" plain && matrix_systems+=("plain insert plain_events -")
has "$systems" pgq && matrix_systems+=("pgq pgq bench_q -")
has "$systems" pgmq && matrix_systems+=("pgmq pgmq bench_q -")

: >"$tsv"
# measure PHASE SYSTEM PMODE LOADGEN-ARGS...: CHECKPOINT, run loadgen,
# append "PHASE SYSTEM <loadgen line>" to bench.tsv and print it.
measure()
{
	local phase=$1 system=$2 pmode=$3 line
	shift 3
	sql CHECKPOINT
	if [[ $pmode == - ]]; then
		line=$("${as[@]}" "$loadgen" "$conninfo" "$@")
	else
		line=$(PGOPTIONS="-c malachi.produce_mode=$pmode" "${as[@]}" "$loadgen" "$conninfo" "$@")
	fi
	echo "$phase $system $line" | tee -a "$tsv" >&2
}

start_time=$(date +%s)
say "node in $work; ${seconds}s per phase; systems:${systems% }; phases:${phases% }"

#---- matrix ----
if has "$phases" matrix; then
	for size in "${sizes[@]}"; do
		for batch in "${batches[@]}"; do
			for clients in "${client_counts[@]}"; do
				for s in "${matrix_systems[@]}"; do
					read -r name mode target pmode <<<"$s"
					measure matrix "$name" "$pmode" "$mode" "$target" "$clients" "$seconds" "$batch" "$size"
				done
			done
		done
	done
fi

#---- single-record latency ----
if has "$phases" latency; then
	for s in "${matrix_systems[@]}"; do
		read -r name mode target pmode <<<"$s"
		[[ $name == *-zstd ]] && continue
		measure latency "$name" "$pmode" "$mode" "$target" 1 "$seconds" 1 1024
	done
fi

#---- consume ----
# Every system gets the same consume_records 1 KiB records, loaded by 4
# clients in batches of up to 1,000 (the loader's line goes into bench.tsv
# as "consume-load SYSTEM <loadgen line>": its records field is the exact
# count), then is read until drained, 1,000 records per statement.
# Malachi's topic has 4 ranges, so that each of 4 consumers of a group can
# hold a range of its own; every client count reads with a fresh group
# (bench1, bench4), which starts at the earliest record, and stops once the
# group has every loaded record.  Afterwards "consume-lag malachi CLIENTS
# RANGES LAG": how many ranges the group has a position on and its total
# lag (0 when drained).  The plain table is read again for each client
# count, each client over its own slice of the ids (loadgen.c).
consume_seconds=$(awk -v s="$seconds" 'BEGIN {print s * 12}')
if has "$phases" consume; then
	consume_batch=$(((consume_records + 3) / 4))
	((consume_batch <= 1000)) || consume_batch=1000
	# consume_load SYSTEM LOADGEN-ARGS...: load, log, print the records loaded
	consume_load()
	{
		local system=$1 line
		shift
		line=$("${as[@]}" "$loadgen" "$conninfo" "$@" 4 600 "$consume_batch" 1024 "$consume_records")
		echo "consume-load $system $line" | tee -a "$tsv" >&2
		awk '{print $7}' <<<"$line"
	}
	if has "$systems" plain; then
		sql 'CREATE TABLE consume_events (id bigserial PRIMARY KEY, key text, value text, ts timestamptz DEFAULT now())'
		consume_load plain insert consume_events >/dev/null
	fi
	if has "$systems" malachi; then
		sql "SELECT malachi.create_topic('consume_t', 4)" >/dev/null
		malachi_loaded=$(consume_load malachi produce consume_t)
	fi
	for clients in "${consume_clients[@]}"; do
		if has "$systems" plain; then
			measure consume plain - consume-plain consume_events "$clients" "$consume_seconds" 1000 1024
		fi
		if has "$systems" malachi; then
			measure consume malachi - consume-malachi "consume_t@bench$clients" "$clients" \
				"$consume_seconds" 1000 1024 "$malachi_loaded"
			sql "SELECT 'consume-lag malachi $clients ' || count(*) || ' ' || coalesce(sum(lag), -1)
				FROM malachi.consumer_lag WHERE \"group\" = 'bench$clients' AND topic = 'consume_t'" |
				tee -a "$tsv" >&2
		fi
	done
	if has "$systems" pgq; then
		sql "SELECT pgq.create_queue('consume_q')" >/dev/null
		sql "SELECT pgq.register_consumer('consume_q', 'bench')" >/dev/null
		consume_load pgq pgq consume_q >/dev/null
		measure consume pgq - consume-pgq consume_q 1 "$consume_seconds" 1000 1024
	fi
	if has "$systems" pgmq; then
		sql "SELECT pgmq.create('consume_q')" >/dev/null
		consume_load pgmq pgmq consume_q >/dev/null
		measure consume pgmq - consume-pgmq consume_q 1 "$consume_seconds" 1000 1024
	fi
fi

#---- growth ----
if has "$phases" growth && has "$systems" malachi; then
	grow_size=16384
	sql "SELECT malachi.create_topic('grow', 1)" >/dev/null
	range=$(sql "SELECT malachi.active_range_ids('grow')")
	measure growth empty transactional produce grow 1 "$seconds" 1000 "$grow_size"
	say "growth: filling topic grow to $grow_bytes bytes"
	measure growth fill transactional produce grow 4 3600 1000 "$grow_size" \
		$((grow_bytes / grow_size))
	measure growth grown transactional produce grow 1 "$seconds" 1000 "$grow_size"
	# offsets only grow (transactional ones may skip), so the records
	# produced are a lower bound of the range's end
	records=$(awk '$1 == "growth" {n += $9} END {print n}' "$tsv")
	deep=$((records * 9 / 10))
	echo "growth-info range $range records $records deep $deep grow_bytes $grow_bytes" >>"$tsv"
	measure growth read-0 - read-at "$range@0" 1 "$seconds" 100 "$grow_size"
	measure growth read-deep - read-at "$range@$deep" 1 "$seconds" 100 "$grow_size"
fi

#---- limits ----
if has "$phases" limits; then
	"${as[@]}" "$limits" write "$work" "$limit_mib" | sed 's/^/limits /' | tee -a "$tsv" >&2
	for size in "${sizes[@]}"; do
		"$limits" zstd "$size" $((limit_mib < 64 ? limit_mib : 64)) | sed 's/^/limits /' | tee -a "$tsv" >&2
	done
	for c in "${client_counts[@]}"; do
		measure limits-noop noop - noop - "$c" "$seconds" 1000 1024
		measure limits-noop noop-sync - noop-sync "$work" "$c" "$seconds" 1000 1024
	done
fi
elapsed=$(($(date +%s) - start_time))

#---- report ----
"$bench_repo/test/bench/report.sh" "$tsv" "$md" \
	"$(nproc) cores, $(free -g | awk '/^Mem:/ {print $2}') GB RAM, $(df -P -T "$work" | awk 'NR == 2 {print $2}') on $(df -P "$work" | awk 'NR == 2 {print $1}'), $("$bindir/postgres" --version)" \
	"$(if ((q)); then echo "QUICK "; fi)run, ${seconds}s per timed phase, ${elapsed}s in all, topics of $ranges ranges, growth to $grow_bytes bytes"
cat "$md"
