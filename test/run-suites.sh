#!/usr/bin/env bash
#
# run-suites.sh WORKDIR: run the Malachi test suites inside WORKDIR, a copy
# of sql/, expected/ and test/ made by test/run-all.sh, as an unprivileged
# user.  Each suite gets its own temporary instance with malachi preloaded and
# appends one line "suite passed failed" to WORKDIR/counts:
#
#   regress    sql/*.sql vs expected/*.out, pg_regress --temp-instance;
#              counted per test file.
#   isolation  test/specs/*.spec vs test/expected/*.out, pg_isolation_regress
#              --temp-instance --load-extension=malachi; counted per spec.
#   pgtap      test/pgtap/*.sql with pg_prove against an instance started
#              here; counted per assertion.  The runner creates the pgtap and
#              malachi extensions in database "postgres" once, before
#              pg_prove, so test files just use them (wrap changes in
#              BEGIN ... ROLLBACK to keep files independent).
#   tap        test/t/*.pl with prove and PostgreSQL::Test::Cluster;
#              counted per assertion.
#   unit       the unit tests and standalone fuzz drivers in
#              $MALACHI_UNIT_BINS (the Makefile's UNIT_BINS, built into
#              test/unit and test/fuzz), with prove; counted per assertion.
#
# A suite with no test files counts 0/0.  A suite that crashes, times out or
# stops early counts every test file it did not report as failed (at least
# one).  Failures print their diffs and log tails so CI logs show why.
#
set -uo pipefail

work=$1
cd "$work" || exit 1
counts=$work/counts
: >"$counts"

pg_config=${PG_CONFIG:-/usr/lib/postgresql/15/bin/pg_config}
bindir=$("$pg_config" --bindir)
pgxs=$(dirname "$("$pg_config" --pgxs)")/../..
pgxs=$(cd "$pgxs" && pwd)
pg_regress=$pgxs/src/test/regress/pg_regress
pg_isolation_regress=$pgxs/src/test/isolation/pg_isolation_regress
suite_timeout=${MALACHI_SUITE_TIMEOUT:-600}
user=$(id -un)

unset PGHOST PGPORT PGUSER PGDATABASE PGSERVICE PGOPTIONS

#---- helpers ----

# record SUITE PASSED FAILED
record()
{
	echo "$1 $2 $3" >>"$counts"
	echo "== $1: $2 passed, $3 failed"
}

# banner TEXT
banner()
{
	echo
	echo "======================================================================"
	echo "== $*"
	echo "======================================================================"
}

# begin_suite SUITE DIR EXT: print the suite's banner and set the global
# array files to DIR/*.EXT in C-locale order; with none (a checkout that
# lost them), count one failure and return 1.
begin_suite()
{
	local f

	banner "$1: $2/*.$3"
	mapfile -t files < <(for f in "$2"/*."$3"; do
		[[ -e $f ]] && echo "$f"
	done | LC_ALL=C sort)
	if ((${#files[@]} == 0)); then
		echo "$1: no $2/*.$3 found"
		record "$1" 0 1
		return 1
	fi
	mkdir -p "$work/$1"
}

# write_conf FILE DBNAME: the settings every instance gets.  The sweeper
# worker is kept out of the way (a pass a day): these suites run passes
# themselves with run_maintenance(), so that their output is exact.  For
# the same reason deleted segments' files are removed at once, not
# recycled: a recreated extension starts its segment ids above the ids in
# every file's name, and the writer worker recycles (or removes) files when
# it gets to them.  The TAP suite recycles (test/t/013_recycle.pl).
write_conf()
{
	cat >"$1" <<EOF
shared_preload_libraries = 'malachi'
malachi.database = '$2'
malachi.sweep_interval = '1d'
malachi.max_spare_segments = 0
fsync = off
EOF
}

# stop_leftovers DIR: stop any postmaster whose data directory is under DIR
# (a suite killed by its timeout leaves its temporary instance running).
stop_leftovers()
{
	local pidfile

	while IFS= read -r pidfile; do
		echo "stopping leftover server in $(dirname "$pidfile")"
		"$bindir/pg_ctl" stop -D "$(dirname "$pidfile")" -m immediate -w \
			>/dev/null 2>&1
	done < <(find "$1" -name postmaster.pid 2>/dev/null)
}

# show_file FILE [MAXLINES]: print FILE (its tail when long) under a header.
show_file()
{
	local max=${2:-400}

	[[ -s $1 ]] || return 0
	echo "---- $1 (last $max lines) ----"
	tail -n "$max" "$1"
	echo "---- end of $1 ----"
}

# show_server_log FILE: a server log's crash reports (assertion failures,
# PANICs, backends killed by a signal) with context, then its tail.
show_server_log()
{
	local pattern='TRAP:|PANIC:|terminated by signal|exited with exit code|was terminated'

	[[ -s $1 ]] || return 0
	if grep -qE "$pattern" "$1"; then
		echo "---- crash reports in $1 ----"
		grep -E -B 8 -A 4 "$pattern" "$1" | head -n 200
	fi
	show_file "$1" 20
}

# run_limited LOG CMD...: run CMD under the suite timeout, output to the
# terminal and LOG; returns CMD's status (124 on timeout).
run_limited()
{
	local log=$1

	shift
	timeout --kill-after=30 "$suite_timeout" "$@" 2>&1 | tee "$log"
	return "${PIPESTATUS[0]}"
}

# count_regress SUITE LOG NFILES RC OUTDIR: count a pg_regress run's
# "... ok" and "... FAILED" lines; on failure show the diffs and the log.
count_regress()
{
	local suite=$1 log=$2 nfiles=$3 rc=$4 outdir=$5
	local ok bad

	ok=$(grep -cE ' \.\.\. ok( |$)' "$log")
	bad=$(grep -cE ' \.\.\. (FAILED|failed)' "$log")
	# Files that never reported (crash, timeout, no server) failed.
	if ((ok + bad < nfiles)); then
		bad=$((nfiles - ok))
	fi
	if ((rc != 0 && bad == 0)); then
		echo "$suite: exited with status $rc"
		bad=1
	fi
	if ((bad > 0)); then
		show_file "$outdir/regression.diffs" 2000
		show_server_log "$outdir/log/postmaster.log"
		echo "$suite: outputs in $outdir"
	fi
	record "$suite" "$ok" "$bad"
}

# count_prove SUITE LOG RC: count assertions from prove/pg_prove's summary;
# the files that failed go to LOG.failed.  A file listed in the summary
# report with a non-zero wait status or parse errors failed even when no
# assertion did (a script that died).
count_prove()
{
	local suite=$1 log=$2 rc=$3
	local p f

	: >"$log.failed"
	read -r p f < <(awk -v failed_list="$log.failed" '
		function flush() {
			if (infile && bad) {
				failed += (f > 0 ? f : 1)
				print name > failed_list
			}
			infile = 0
		}
		/^Files=[0-9]+, Tests=[0-9]+/ {
			flush()
			s = $0; sub(/^Files=[0-9]+, Tests=/, "", s)
			tests = s + 0; seen = 1
			next
		}
		/ \(Wstat: [0-9]+.* Tests: [0-9]+ Failed: [0-9]+\)$/ {
			flush()
			name = $1
			w = $0; sub(/.*\(Wstat: /, "", w); w = w + 0
			f = $0; sub(/.* Failed: /, "", f); f = f + 0
			infile = 1; bad = (w != 0 || f > 0); fsum += f
			next
		}
		/^  Parse errors:/ { if (infile) bad = 1 }
		/^Bailout called|^FAILED--/ { bailed = 1 }
		END {
			flush()
			if (!seen || bailed) failed = (failed > 0 ? failed : 1)
			print tests - fsum, failed + 0
		}' "$log")
	if ((rc != 0 && f == 0)); then
		echo "$suite: exited with status $rc"
		f=1
	fi
	record "$suite" "$p" "$f"
	((f == 0))
}

#---- suites ----

# regress_suite SUITE PROGRAM DIR EXT INPUTDIR DBNAME [OPTION...]: run
# pg_regress or pg_isolation_regress over DIR/*.EXT on a temporary instance
# (expected output in INPUTDIR/expected).
regress_suite()
{
	local suite=$1 program=$2 inputdir=$5 db=$6
	local out=$work/$1
	local -a tests
	local rc

	begin_suite "$1" "$3" "$4" || return 0
	shift 6
	tests=("${files[@]##*/}")
	tests=("${tests[@]%.*}")
	write_conf "$out/temp.conf" "$db"
	run_limited "$out/output.txt" "$program" \
		--temp-instance="$out/instance" --temp-config="$out/temp.conf" \
		--bindir="$bindir" --inputdir="$inputdir" --outputdir="$out" \
		--dbname="$db" "$@" "${tests[@]}"
	rc=$?
	stop_leftovers "$out"
	count_regress "$suite" "$out/output.txt" "${#tests[@]}" "$rc" "$out"
}

# pg_regress over sql/*.sql, alphabetical.
suite_regress()
{
	regress_suite regress "$pg_regress" sql sql "$work" contrib_regression
}

# pg_isolation_regress over test/specs/*.spec (expected in test/expected).
suite_isolation()
{
	regress_suite isolation "$pg_isolation_regress" test/specs spec \
		"$work/test" isolation_regression --load-extension=malachi
}

# pgTAP: one instance for all files, stopped and removed on any exit.
suite_pgtap()
{
	local dir=$work/pgtap
	local port=${MALACHI_PGTAP_PORT:-55497}
	local rc

	begin_suite pgtap test/pgtap sql || return 0
	(
		trap '"$bindir/pg_ctl" stop -D "$dir/data" -m immediate -w >/dev/null 2>&1; rm -rf "$dir/data"' EXIT
		"$bindir/initdb" -D "$dir/data" -U "$user" -A trust -E UTF8 \
			--locale=C.UTF-8 >"$dir/initdb.log" 2>&1 ||
			{ show_file "$dir/initdb.log"; exit 90; }
		write_conf "$dir/data/malachi-test.conf" postgres
		cat >>"$dir/data/postgresql.conf" <<EOF
include 'malachi-test.conf'
port = $port
listen_addresses = ''
unix_socket_directories = '$dir'
EOF
		"$bindir/pg_ctl" start -D "$dir/data" -l "$dir/server.log" -w -t 60 \
			>/dev/null || { show_server_log "$dir/server.log"; exit 91; }
		"$bindir/psql" -X -q -v ON_ERROR_STOP=1 -h "$dir" -p "$port" \
			-U "$user" -d postgres \
			-c 'CREATE EXTENSION pgtap' -c 'CREATE EXTENSION malachi' ||
			{ show_server_log "$dir/server.log"; exit 92; }
		run_limited "$dir/output.txt" pg_prove --nocolor --timer --failures \
			--psql-bin "$bindir/psql" -h "$dir" -p "$port" -U "$user" \
			-d postgres "${files[@]}"
		rc=$?
		[[ $rc == 0 ]] || show_server_log "$dir/server.log"
		exit "$rc"
	)
	rc=$?
	if ((rc >= 90 && rc <= 92)); then
		echo "pgtap: could not set up the instance"
		record pgtap 0 "${#files[@]}"
		return
	fi
	count_prove pgtap "$dir/output.txt" "$rc"
}

# TAP tests with PostgreSQL::Test::Cluster; TEMP_CONFIG preloads malachi on
# every node (malachi.database stays at its default, postgres).
suite_tap()
{
	local dir=$work/tap
	local rc log name

	begin_suite tap test/t pl || return 0
	printf "shared_preload_libraries = 'malachi'\nfsync = off\n" >"$dir/temp.conf"
	TESTDIR=$dir PG_REGRESS=$pg_regress TEMP_CONFIG=$dir/temp.conf \
		PG_TEST_PORT_DIR=$dir/portlock PGDATABASE=postgres \
		run_limited "$dir/output.txt" prove --nocolor --timer \
		-I "$pgxs/src/test/perl" -I "$work/test/t" "${files[@]}"
	rc=$?
	stop_leftovers "$dir"
	if ! count_prove tap "$dir/output.txt" "$rc"; then
		while read -r name; do
			name=$(basename "$name" .pl)
			show_file "$dir/tmp_check/log/regress_log_$name" 150
			for log in "$dir/tmp_check/log/${name}"_*.log; do
				show_server_log "$log"
			done
		done <"$dir/output.txt.failed"
		echo "tap: logs in $dir/tmp_check/log"
	fi
}

# Pure-C unit tests and the standalone fuzz drivers, as TAP.
suite_unit()
{
	local dir=$work/unit
	local -a bins
	local rc

	banner "unit: unit tests and fuzz drivers"
	read -ra bins <<<"${MALACHI_UNIT_BINS:-}"
	if ((${#bins[@]} == 0)); then
		echo "unit: MALACHI_UNIT_BINS is empty"
		record unit 0 1
		return
	fi
	mkdir -p "$dir"
	run_limited "$dir/output.txt" prove --nocolor --timer --exec '' \
		"${bins[@]}"
	rc=$?
	count_prove unit "$dir/output.txt" "$rc"
}

files=()
for suite in ${MALACHI_SUITES:-regress isolation pgtap tap unit}; do
	case $suite in
		regress | isolation | pgtap | tap | unit) "suite_$suite" ;;
		*) echo "unknown suite: $suite"; record "$suite" 0 1 ;;
	esac
done
exit 0
