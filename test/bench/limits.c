/*-------------------------------------------------------------------------
 *
 * limits.c
 *	  The machine's limits for `make bench`, measured in the same run:
 *
 *   write DIR MIB       sequential write bandwidth with an fdatasync per
 *                       MiB, into a preallocated file (written with zeros
 *                       and synced first, like a recycled WAL segment) and
 *                       into a file that grows with every write.
 *                       Prints: "write preallocated MB/s" and
 *                               "write growing MB/s".
 *   zstd BYTES MIB      zstd level 1 compress and decompress speed on MIB
 *                       MiB of the bench's own records (records.h) of
 *                       BYTES bytes, in 64 KiB chunks.
 *                       Prints: "zstd BYTES compress MB/s decompress MB/s ratio".
 *
 *-------------------------------------------------------------------------
 */
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>
#include <zstd.h>

#include "records.h"

#define MIB		(1024 * 1024)
#define CHUNK	(64 * 1024)

/* Monotonic seconds. */
static double
now_seconds(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return ts.tv_sec + ts.tv_nsec / 1e9;
}

static void
die(const char *what)
{
	perror(what);
	exit(1);
}

/* Write mib MiB to fd from offset 0, fdatasync after each; MB/s. */
static double
timed_writes(int fd, const char *buf, int mib)
{
	double		t0 = now_seconds();
	int			i;

	for (i = 0; i < mib; i++)
	{
		if (pwrite(fd, buf, MIB, (off_t) i * MIB) != MIB)
			die("pwrite");
		if (fdatasync(fd) != 0)
			die("fdatasync");
	}
	return mib / (now_seconds() - t0);
}

static int
write_limit(const char *dir, int mib)
{
	char		path[4096];
	char	   *buf = calloc(1, MIB);
	int			fd;
	int			i;

	memset(buf, 'x', MIB);

	snprintf(path, sizeof(path), "%s/limits-prealloc", dir);
	fd = open(path, O_CREAT | O_TRUNC | O_RDWR, 0600);
	if (fd < 0)
		die(path);
	{
		char	   *zeros = calloc(1, MIB);

		for (i = 0; i < mib; i++)
			if (write(fd, zeros, MIB) != MIB)
				die("write");
		if (fsync(fd) != 0)
			die("fsync");
		free(zeros);
	}
	printf("write preallocated %.1f\n", timed_writes(fd, buf, mib));
	close(fd);
	unlink(path);

	snprintf(path, sizeof(path), "%s/limits-growing", dir);
	fd = open(path, O_CREAT | O_TRUNC | O_RDWR, 0600);
	if (fd < 0)
		die(path);
	printf("write growing %.1f\n", timed_writes(fd, buf, mib));
	close(fd);
	unlink(path);
	free(buf);
	return 0;
}

static int
zstd_limit(int bytes, int mib)
{
	size_t		size = (size_t) mib * MIB;
	char	   *input = malloc(size);
	size_t		bound = ZSTD_compressBound(CHUNK);
	size_t		nchunks = size / CHUNK;
	char	   *packed = malloc(bound * nchunks);
	size_t	   *packed_len = malloc(sizeof(size_t) * nchunks);
	char	   *output = malloc(CHUNK);
	size_t		filled = 0;
	size_t		total = 0;
	double		t0;
	double		compress;
	double		decompress;
	size_t		i;
	int			n = 0;

	/* Concatenated records, as a segment would hold them. */
	while (filled < size)
	{
		char		key[16];
		char	   *v = make_value(0, 0, n, bytes);
		size_t		l;

		make_key(key, sizeof(key), 0, n++);
		l = strlen(key);
		memcpy(input + filled, key, l < size - filled ? l : size - filled);
		filled += l < size - filled ? l : size - filled;
		l = strlen(v);
		memcpy(input + filled, v, l < size - filled ? l : size - filled);
		filled += l < size - filled ? l : size - filled;
		free(v);
	}

	t0 = now_seconds();
	for (i = 0; i < nchunks; i++)
	{
		packed_len[i] = ZSTD_compress(packed + i * bound, bound,
									  input + i * CHUNK, CHUNK, 1);
		if (ZSTD_isError(packed_len[i]))
			return 1;
		total += packed_len[i];
	}
	compress = (double) nchunks * CHUNK / MIB / (now_seconds() - t0);

	t0 = now_seconds();
	for (i = 0; i < nchunks; i++)
		if (ZSTD_decompress(output, CHUNK, packed + i * bound,
							packed_len[i]) != CHUNK)
			return 1;
	decompress = (double) nchunks * CHUNK / MIB / (now_seconds() - t0);

	printf("zstd %d %.1f %.1f %.2f\n", bytes, compress, decompress,
		   (double) nchunks * CHUNK / total);
	return 0;
}

int
main(int argc, char **argv)
{
	if (argc == 4 && strcmp(argv[1], "write") == 0 && atoi(argv[3]) > 0)
		return write_limit(argv[2], atoi(argv[3]));
	if (argc == 4 && strcmp(argv[1], "zstd") == 0 && atoi(argv[2]) >= 40 &&
		atoi(argv[3]) > 0)
		return zstd_limit(atoi(argv[2]), atoi(argv[3]));
	fprintf(stderr, "usage: %s write DIR MIB | zstd RECORD_BYTES MIB\n", argv[0]);
	return 2;
}
