# Malachi: PGXS build.  See README.md for `make run` and `make test`.

MODULE_big = malachi
OBJS = $(patsubst %.c,%.o,$(wildcard src/*.c src/*/*.c))
EXTENSION = malachi
DATA = malachi--1.0.sql
PGFILEDESC = "malachi - partitioned append-only log inside PostgreSQL"

PG_CONFIG ?= /usr/lib/postgresql/15/bin/pg_config
PG_CPPFLAGS = -I$(libpq_srcdir) -Isrc -Isrc/store -Isrc/worker
PG_CFLAGS = -Wall -Wextra -Werror -Wno-unused-parameter
SHLIB_LINK_INTERNAL = $(libpq)
SHLIB_LINK = -lzstd

# Build flavour: `make test` builds with assertions (MALACHI_ASSERT=1) and
# always with -Wall -Wextra -Werror.
ifeq ($(MALACHI_ASSERT),1)
MALACHI_WARNINGS := $(filter-out $(PG_CFLAGS),-Wall -Wextra -Werror)
PG_CFLAGS += $(MALACHI_WARNINGS) -DUSE_ASSERT_CHECKING
endif

EXTRA_CLEAN = .build-mode results/ regression.diffs regression.out log/ \
	tmp_check/ output_iso/ $(UNIT_C_BINS) $(FUZZ_TARGETS:%=test/fuzz/fuzz_%)

#---- developer targets ----
#
#   make deps    install missing Debian packages (test/install-deps.sh)
#   make test    deps, clean assert-enabled build, install, every suite
#                (test/run-all.sh); the last line is "N passed, N failed"
#   make run     deps, build, install, (re)start the local node in .run/
#                and run test/demo.sql (test/run-node.sh); MALACHI_PORT=5497
#   make stop    stop that node
#   make unit    build and run the unit tests and standalone fuzz drivers
#                (keyspace, codec)
#   make fuzz    libFuzzer on each test/fuzz target for FUZZ_SECONDS
#                (default 60) each
#   make bench   release build and install, then test/bench/bench.sh: Malachi
#                against a plain table, PgQ and pgmq plus the machine's limits
#                on a private node; results in bench-results/ (about 11 min).
#                QUICK=1: reduced matrix, under two minutes.  See
#                docs/benchmarks.md
#   make bench-produce  release build and install, then
#                test/bench/produce_vs_insert.sh: produce_batch against a
#                plain INSERT in 5 interleaved rounds, medians and
#                per-round ratios (about 7 min)
#   make bench-smoke  the bench's scripts on tiny inputs, as TAP (the unit
#                suite of `make test` runs it too; needs malachi installed)
#
# On a fresh machine pg_config only appears once postgresql-server-dev-15 is
# installed, so PGXS cannot be included yet.  Then `make test` and `make run`
# install the packages and re-invoke make; other PGXS targets say so.

.DEFAULT_GOAL := all
PG_CONFIG_DEFAULT = /usr/lib/postgresql/15/bin/pg_config
SUDO = $(if $(filter 0,$(shell id -u)),,sudo)
SUBMAKE = $(MAKE) --no-print-directory
# Build in parallel unless the caller chose a -j.
JOBS = $(if $(filter -j%,$(MAKEFLAGS)),,-j$(shell nproc))

# Pure-C tests.  src/keyspace.c needs nothing else; src/store/codec.c needs
# PostgreSQL's c.h, libpgport (CRC32C) and libzstd.
UNIT_CC ?= gcc
UNIT_SANITIZE = $(shell echo 'int main(void){return 0;}' | \
	$(UNIT_CC) -fsanitize=address,undefined -x c - -o /dev/null 2>/dev/null && \
	echo -fsanitize=address,undefined -fno-sanitize-recover=all)
UNIT_CFLAGS = -std=c99 -O1 -g -fno-omit-frame-pointer -Wall -Wextra -Werror \
	-Isrc -Itest/unit -Itest/fuzz $(UNIT_SANITIZE)
UNIT_C_BINS = test/unit/test_keyspace test/fuzz/fuzz_keyspace_driver \
	test/unit/test_codec test/fuzz/fuzz_codec_driver
# The unit suite also runs the bench's smoke test (a TAP script that starts
# its own tiny node with the installed extension).
UNIT_BINS = $(UNIT_C_BINS) $(BENCH_SMOKE)
BENCH_SMOKE = test/bench/smoke.sh
KEYSPACE_SRC = src/keyspace.c src/keyspace.h
CODEC_SRC = src/store/codec.c src/store/codec.h
CODEC_CFLAGS := -Isrc/store \
	-I$(shell $(PG_CONFIG) --includedir-server 2>/dev/null)
CODEC_LIBS := -L$(shell $(PG_CONFIG) --pkglibdir 2>/dev/null) -lpgport -lzstd
# The codec's random inputs are longer and slower than the keyspace's: up
# to 4 kB, so that records encoded from them reach the CRC's three-stream
# path (3 kB and up), 10,000 of them (about 3.5 s with the sanitizers).
CODEC_DRIVER_FLAGS = -DFUZZ_MAX_INPUT=4096 -DFUZZ_DEFAULT_RUNS=10000

FUZZ_CC ?= clang
FUZZ_SECONDS ?= 60
FUZZ_FLAGS = -g -O1 -Isrc -Itest/fuzz -fsanitize=fuzzer,address,undefined \
	-fno-sanitize-recover=all
FUZZ_TARGETS = keyspace codec

.PHONY: deps test run stop unit unit-bins fuzz print-unit-bins bench bench-produce bench-smoke

deps:
	test/install-deps.sh

stop:
	PG_CONFIG=$(PG_CONFIG) test/run-node.sh stop

unit-bins: $(UNIT_C_BINS)

test/unit/test_keyspace: test/unit/test_keyspace.c test/unit/tap.h $(KEYSPACE_SRC)
	$(UNIT_CC) $(UNIT_CFLAGS) -o $@ test/unit/test_keyspace.c src/keyspace.c

test/fuzz/fuzz_keyspace_driver: test/fuzz/driver.c test/fuzz/fuzz.h test/fuzz/fuzz_keyspace.c $(KEYSPACE_SRC)
	$(UNIT_CC) $(UNIT_CFLAGS) -o $@ test/fuzz/driver.c \
		test/fuzz/fuzz_keyspace.c src/keyspace.c

test/unit/test_codec: test/unit/test_codec.c test/unit/tap.h $(CODEC_SRC)
	$(UNIT_CC) $(UNIT_CFLAGS) $(CODEC_CFLAGS) -o $@ test/unit/test_codec.c \
		src/store/codec.c $(CODEC_LIBS)

test/fuzz/fuzz_codec_driver: test/fuzz/driver.c test/fuzz/fuzz.h test/fuzz/fuzz_codec.c $(CODEC_SRC)
	$(UNIT_CC) $(UNIT_CFLAGS) $(CODEC_CFLAGS) $(CODEC_DRIVER_FLAGS) -o $@ \
		test/fuzz/driver.c test/fuzz/fuzz_codec.c src/store/codec.c $(CODEC_LIBS)

# libFuzzer builds of the targets (clang; c.h's gnu_printf is unknown to it).
test/fuzz/fuzz_keyspace: test/fuzz/fuzz_keyspace.c test/fuzz/fuzz.h $(KEYSPACE_SRC)
	$(FUZZ_CC) $(FUZZ_FLAGS) -o $@ test/fuzz/fuzz_keyspace.c src/keyspace.c

test/fuzz/fuzz_codec: test/fuzz/fuzz_codec.c test/fuzz/fuzz.h $(CODEC_SRC)
	$(FUZZ_CC) $(FUZZ_FLAGS) $(CODEC_CFLAGS) -Wno-ignored-attributes -o $@ \
		test/fuzz/fuzz_codec.c src/store/codec.c $(CODEC_LIBS)

# The binaries `make test` runs (test/run-all.sh asks when not told).
print-unit-bins:
	@echo $(UNIT_BINS)

unit: unit-bins
	prove --exec '' $(UNIT_C_BINS)

bench-smoke:
	prove --exec '' $(BENCH_SMOKE)

# libFuzzer when clang has it; otherwise a long run of each standalone
# driver.  Each target keeps its corpus in test/fuzz/corpus/TARGET; crashes
# go to test/fuzz/artifacts/TARGET-* (replay: test/fuzz/fuzz_TARGET_driver
# FILE).
fuzz: $(FUZZ_TARGETS:%=test/fuzz/fuzz_%_driver)
	@mkdir -p test/fuzz/artifacts
	@if echo 'int LLVMFuzzerTestOneInput(const char *d, long n){return 0;}' | \
		$(FUZZ_CC) -fsanitize=fuzzer -x c - -o /dev/null 2>/dev/null; then \
		$(SUBMAKE) $(FUZZ_TARGETS:%=test/fuzz/fuzz_%) || exit 1; \
		for t in $(FUZZ_TARGETS); do \
			mkdir -p test/fuzz/corpus/$$t; \
			echo "fuzz: libFuzzer on $$t for $(FUZZ_SECONDS)s"; \
			test/fuzz/fuzz_$$t -max_total_time=$(FUZZ_SECONDS) \
				-artifact_prefix=test/fuzz/artifacts/$$t- \
				test/fuzz/corpus/$$t || exit 1; \
		done; \
	else \
		echo "fuzz: $(FUZZ_CC) with libFuzzer not found; running the standalone drivers"; \
		for t in $(FUZZ_TARGETS); do \
			FUZZ_RUNS=2000000000 timeout $(FUZZ_SECONDS) \
				test/fuzz/fuzz_$${t}_driver >/dev/null; \
			rc=$$?; test $$rc = 0 -o $$rc = 124 || exit 1; \
			echo "fuzz: $$t: every invariant held for $(FUZZ_SECONDS)s"; \
		done; \
	fi

PGXS := $(shell $(PG_CONFIG) --pgxs 2>/dev/null)
ifneq ($(PGXS),)
# header dependencies (.deps/*.Po): a changed header rebuilds the objects
# that include it (PGXS's autodepend, off in Debian's build of PostgreSQL)
override autodepend = yes
include $(PGXS)

test:
	test/install-deps.sh
	$(SUBMAKE) clean
	$(SUBMAKE) $(JOBS) MALACHI_ASSERT=1 all unit-bins
	@echo assert > .build-mode
	$(SUDO) $(SUBMAKE) PG_CONFIG=$(PG_CONFIG) MALACHI_ASSERT=1 install
	PG_CONFIG=$(PG_CONFIG) MALACHI_UNIT_BINS="$(UNIT_BINS)" test/run-all.sh

# A release build (no assertions), installed: for `make run` and `make bench`.
define install_release
	test/install-deps.sh
	@if [ "$$(cat .build-mode 2>/dev/null)" != release ]; then \
		$(SUBMAKE) clean; fi
	$(SUBMAKE) $(JOBS) all
	@echo release > .build-mode
	$(SUDO) $(SUBMAKE) PG_CONFIG=$(PG_CONFIG) install
endef

run:
	$(install_release)
	PG_CONFIG=$(PG_CONFIG) test/run-node.sh start

bench:
	$(install_release)
	PG_CONFIG=$(PG_CONFIG) BENCH_QUICK=$(if $(filter-out 0,$(QUICK)),1,0) test/bench/bench.sh

bench-produce:
	$(install_release)
	PG_CONFIG=$(PG_CONFIG) test/bench/produce_vs_insert.sh

else
# No pg_config yet: install the packages, then run the goal with a
# pg_config that works (PostgreSQL 15's when $(PG_CONFIG) still does not).
test run bench bench-produce:
	test/install-deps.sh
	@pgc='$(PG_CONFIG)'; \
	if ! "$$pgc" --pgxs >/dev/null 2>&1; then \
		echo "$$pgc does not work; using $(PG_CONFIG_DEFAULT)"; \
		pgc=$(PG_CONFIG_DEFAULT); \
	fi; \
	$(SUBMAKE) PG_CONFIG="$$pgc" $@

all install uninstall clean installcheck:
	@echo "pg_config not found ($(PG_CONFIG)): run 'make deps' (installs postgresql-server-dev-15) or set PG_CONFIG" >&2
	@exit 1
endif
