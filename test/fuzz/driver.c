/*-------------------------------------------------------------------------
 *
 * driver.c
 *	  Standalone driver for the fuzz targets, for compilers without libFuzzer.
 *
 * Linked with one target, fuzz_X.c, into fuzz_X_driver.  Feeds
 * LLVMFuzzerTestOneInput edge cases (all-0x00, all-0x7f and all-0xff
 * inputs of every length up to 48, a few strings) and then pseudo-random
 * inputs of up to FUZZ_MAX_INPUT bytes from a fixed seed, and prints one
 * TAP line named after the target.  With file arguments it replays those
 * files instead (libFuzzer crash artifacts).
 *
 *   FUZZ_MAX_INPUT     compile time: longest random input (default 64)
 *   FUZZ_DEFAULT_RUNS  compile time: FUZZ_RUNS's default (200000)
 *   FUZZ_RUNS          number of random inputs
 *   FUZZ_SEED          seed of the generator (default 1)
 *
 *-------------------------------------------------------------------------
 */
#include <string.h>

#include "fuzz.h"

#ifndef FUZZ_MAX_INPUT
#define FUZZ_MAX_INPUT	64
#endif
#ifndef FUZZ_DEFAULT_RUNS
#define FUZZ_DEFAULT_RUNS	200000
#endif
#define EDGE_MAX_INPUT	48

/* xorshift64*: a fixed, portable sequence. */
static uint64_t
driver_next(uint64_t *state)
{
	*state ^= *state >> 12;
	*state ^= *state << 25;
	*state ^= *state >> 27;
	return *state * 0x2545F4914F6CDD1DULL;
}

/* Replay one file; returns false when it cannot be read. */
static int
driver_replay(const char *path)
{
	static uint8_t buf[1 << 20];
	FILE	   *f = fopen(path, "rb");
	size_t		n;

	if (f == NULL)
	{
		perror(path);
		return 0;
	}
	n = fread(buf, 1, sizeof(buf), f);
	fclose(f);
	LLVMFuzzerTestOneInput(buf, n);
	return 1;
}

/* Edge cases: constant inputs of every length, and known strings. */
static long
driver_edges(void)
{
	static const char *strings[] = {
		"", "hello", "Hello, world!",
		"The quick brown fox jumps over the lazy dog", "a", "ab", "abc"
	};
	static const uint8_t fills[] = {0x00, 0x7f, 0xff};
	uint8_t		buf[EDGE_MAX_INPUT];
	long		runs = 0;
	size_t		len;
	size_t		i;
	int			fill;

	for (fill = 0; fill < 3; fill++)
		for (len = 0; len <= EDGE_MAX_INPUT; len++, runs++)
		{
			memset(buf, fills[fill], len);
			LLVMFuzzerTestOneInput(buf, len);
		}
	for (i = 0; i < sizeof(strings) / sizeof(strings[0]); i++, runs++)
		LLVMFuzzerTestOneInput((const uint8_t *) strings[i], strlen(strings[i]));
	return runs;
}

/* The target's name: the program's, without directory and "_driver". */
static void
driver_name(const char *argv0, char *name, size_t size)
{
	const char *base = strrchr(argv0, '/');
	char	   *suffix;

	snprintf(name, size, "%s", base ? base + 1 : argv0);
	if ((suffix = strstr(name, "_driver")) != NULL)
		*suffix = '\0';
}

int
main(int argc, char **argv)
{
	static uint8_t buf[FUZZ_MAX_INPUT];
	char		name[256];
	const char *env;
	long		runs = FUZZ_DEFAULT_RUNS;
	uint64_t	state = 1;
	long		done;
	long		r;
	size_t		len;
	size_t		i;
	int			a;

	if (argc > 1)
	{
		for (a = 1; a < argc; a++)
			if (!driver_replay(argv[a]))
				return 2;
		printf("1..1\nok 1 - replayed %d inputs\n", argc - 1);
		return 0;
	}
	if ((env = getenv("FUZZ_RUNS")) != NULL)
		runs = atol(env);
	if ((env = getenv("FUZZ_SEED")) != NULL)
		state = strtoull(env, NULL, 10) | 1;

	done = driver_edges();
	for (r = 0; r < runs; r++, done++)
	{
		uint64_t	x = driver_next(&state);

		len = (size_t) (x % (FUZZ_MAX_INPUT + 1));
		for (i = 0; i < len; i++)
			buf[i] = (uint8_t) (driver_next(&state) >> 56);
		/* bias some inputs to tiny or huge values */
		if ((x >> 8) % 4 == 0)
			for (i = 0; i < len; i++)
				buf[i] = (x >> 12) % 2 ? buf[i] & 0x03 : buf[i] | 0xfc;
		LLVMFuzzerTestOneInput(buf, len);
	}
	driver_name(argv[0], name, sizeof(name));
	printf("1..1\nok 1 - %s: %ld inputs hold every invariant\n", name, done);
	return 0;
}
