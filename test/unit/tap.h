/*-------------------------------------------------------------------------
 *
 * tap.h
 *	  The TAP output every unit test binary shares.
 *
 * Included by exactly one file per test program (the definitions are
 * static).  ok() prints "ok N - name" or "not ok N - name" per check and
 * returns the condition, so a caller can add a "# ..." diagnostic;
 * tap_done() prints the plan last ("1..N") and returns the exit status:
 * non-zero when any check failed.  `make unit` and `make test` run the
 * binaries under prove.
 *
 *-------------------------------------------------------------------------
 */
#ifndef MALACHI_TAP_H
#define MALACHI_TAP_H

#include <stdarg.h>
#include <stdbool.h>
#include <stdio.h>

static int	tests_run = 0;
static int	tests_failed = 0;

/* Report one check; returns cond so callers can add a diagnostic. */
static bool
ok(bool cond, const char *fmt,...)
{
	va_list		ap;

	tests_run++;
	if (!cond)
		tests_failed++;
	printf("%sok %d - ", cond ? "" : "not ", tests_run);
	va_start(ap, fmt);
	vprintf(fmt, ap);
	va_end(ap);
	printf("\n");
	return cond;
}

/* Print the plan and a summary; the program's exit status. */
static int
tap_done(void)
{
	printf("1..%d\n", tests_run);
	if (tests_failed > 0)
		printf("# %d of %d checks failed\n", tests_failed, tests_run);
	return tests_failed > 0 ? 1 : 0;
}

#endif							/* MALACHI_TAP_H */
