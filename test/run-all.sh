#!/usr/bin/env bash
#
# run-all.sh: run every Malachi test suite and print, as the very last line,
# "N passed, N failed" summed over all suites.  `make test` calls it after a
# clean assert-enabled build and `make install`; run it by hand the same way.
#
# The server refuses to run as root, and the checkout may live where an
# unprivileged user cannot read it (under /root, say).  So the suites never
# run from the checkout: this script copies what they read (sql/, expected/,
# test/ and the unit-test binaries) into a fresh mktemp directory and runs
# test/run-suites.sh there, as the user "malachi" (created when missing) when
# we are root, or as ourselves otherwise.
#
# Environment:
#   PG_CONFIG              pg_config to take paths from (default: PostgreSQL 15's)
#   MALACHI_TEST_USER      unprivileged user when run as root (default: malachi)
#   MALACHI_KEEP_WORK=1    keep the work directory even when everything passed
#   MALACHI_SUITES         space-separated subset of: regress isolation pgtap tap unit
#   MALACHI_SUITE_TIMEOUT  seconds before a suite is killed (default: 600)
#   MALACHI_UNIT_BINS      the unit-test binaries (default: the Makefile's
#                          UNIT_BINS, which `make test` passes)
#
set -uo pipefail

repo=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
pg_config=${PG_CONFIG:-/usr/lib/postgresql/15/bin/pg_config}
test_user=${MALACHI_TEST_USER:-malachi}

# fail_early MESSAGE: nothing could run; still end with the summary line.
fail_early()
{
	echo "run-all: $*" >&2
	echo "0 passed, 1 failed"
	exit 1
}

"$pg_config" --version >/dev/null 2>&1 ||
	fail_early "pg_config not usable: $pg_config (run 'make deps')"

unit_bins=${MALACHI_UNIT_BINS:-$(make -s --no-print-directory -C "$repo" \
	print-unit-bins 2>/dev/null)}
[[ -n $unit_bins ]] || fail_early "cannot list the unit-test binaries (make print-unit-bins)"
for bin in $unit_bins; do
	[[ -x $repo/$bin ]] ||
		fail_early "$bin is not built (run 'make test', or 'make unit-bins')"
done

runas=()
if (($(id -u) == 0)); then
	if ! id -u "$test_user" >/dev/null 2>&1; then
		echo "run-all: creating system user $test_user"
		useradd --system --create-home --shell /bin/bash "$test_user" ||
			fail_early "cannot create user $test_user"
	fi
	runas=(runuser -u "$test_user" --)
fi

work=$(mktemp -d "${TMPDIR:-/tmp}/malachi-test.XXXXXX") ||
	fail_early "mktemp failed"
echo "run-all: work directory $work"

# Copy what the suites read; generated fuzz corpora and build leftovers stay.
(cd "$repo" && tar -cf - --exclude=test/fuzz/corpus \
	--exclude=test/fuzz/artifacts --exclude='*.o' sql expected test 2>/dev/null) |
	(cd "$work" && tar -xf -) || fail_early "copying the tests to $work failed"
mkdir -p "$work/sql" "$work/expected"
if ((${#runas[@]})); then
	chown -R "$test_user:" "$work" || fail_early "chown $work failed"
fi

# The suites run with a clean, predictable environment.
bindir=$("$pg_config" --bindir)
cd "$work" || fail_early "cannot enter $work"
"${runas[@]}" env -i \
	PATH="$bindir:/usr/local/bin:/usr/bin:/bin" \
	HOME="$work" \
	LANG=C.UTF-8 LC_ALL=C.UTF-8 TZ=UTC \
	PG_CONFIG="$pg_config" \
	MALACHI_SUITES="${MALACHI_SUITES:-regress isolation pgtap tap unit}" \
	MALACHI_SUITE_TIMEOUT="${MALACHI_SUITE_TIMEOUT:-600}" \
	MALACHI_UNIT_BINS="$unit_bins" \
	bash "$work/test/run-suites.sh" "$work"
rc=$?

# Sum the per-suite counts ("suite passed failed" lines).
passed=0
failed=0
if [[ -r $work/counts ]]; then
	while read -r suite p f; do
		printf '  %-10s %4d passed, %4d failed\n' "$suite" "$p" "$f"
		passed=$((passed + p))
		failed=$((failed + f))
	done <"$work/counts"
fi
# A suite asked for that left no count (its runner died, or the work
# directory went away under it) failed.
for suite in ${MALACHI_SUITES:-regress isolation pgtap tap unit}; do
	if ! grep -q "^$suite " "$work/counts" 2>/dev/null; then
		echo "run-all: suite $suite reported no count"
		failed=$((failed + 1))
	fi
done
# A runner that died without counting a failure still failed.
if ((rc != 0 && failed == 0)); then
	echo "run-all: run-suites.sh exited with status $rc"
	failed=1
fi

if ((failed == 0)) && [[ ${MALACHI_KEEP_WORK:-0} != 1 ]]; then
	cd / && rm -rf "$work"
else
	echo "run-all: work directory kept: $work"
fi
echo "$passed passed, $failed failed"
((failed == 0))
