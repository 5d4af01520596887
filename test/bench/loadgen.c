/*-------------------------------------------------------------------------
 *
 * loadgen.c
 *	  A libpq load generator for `make bench`: Malachi against a plain
 *	  table, PgQ and pgmq, producing and consuming.
 *
 * Every client thread has its own connection.  Write modes send the same
 * generated records (records.h: JSON-like text values of a given size, keys
 * from 1,000 distinct ones) as BINARY text[] parameters of one prepared
 * statement per batch, one transaction per statement (autocommit):
 *
 *   produce  SELECT malachi.produce_batch(topic, $1::text[], $2::text[])
 *   insert   INSERT INTO table(key, value) SELECT * FROM unnest($1, $2)
 *   pgq      SELECT pgq.insert_event(queue, 'bench', v, k, ...) over unnest;
 *            a ticker thread calls pgq.ticker(queue) every 50 ms meanwhile
 *   pgmq     SELECT pgmq.send_batch(queue, jsonb[] of {key, value})
 *   noop     SELECT array_length($1::text[], 1) + array_length($2::text[], 1):
 *            the same parameters sent, received and parsed, nothing done
 *            with them (TARGET is ignored): the ceiling of any write mode
 *   noop-sync  noop, then the client itself writes the statement's
 *            parameters (the records' bytes) to a file of its own in the
 *            directory TARGET and fdatasyncs it, before the next statement:
 *            a reference for a path that receives the records over libpq
 *            and makes them durable before it answers, one file per client
 *            (Malachi's immediate produce into one range writes one file
 *            for all clients; writes spread over several files, synced side
 *            by side, can get more out of the disk).  Each client's file
 *            (SYNC_FILE_BYTES, or two batches if more) is written with
 *            zeros and synced before the clock starts, then overwritten
 *            round and round (as a head over a spare: no file growth is
 *            timed); at the end each client reads its last batch back and
 *            fails if the file does not hold it
 *
 * A batch of 1 uses the single-record forms (produce, INSERT ... VALUES,
 * insert_event, pgmq.send).
 *
 * Read modes (BATCH records per statement; RECORD_BYTES is ignored; MB/s
 * counts the value bytes actually received):
 *
 *   consume-plain    SELECT id, key, value, ts FROM table WHERE id > $last
 *                    AND id <= $hi ORDER BY id LIMIT n, each client over its
 *                    own slice of the ids (see run_consume_plain)
 *   consume-malachi  TARGET is TOPIC[@GROUP] (group "bench" by default):
 *                    BEGIN; SELECT range_id, "offset", key, value,
 *                    produced_at FROM malachi.consume(topic, group, n);
 *                    COMMIT.  The clients are consumers of one group: each
 *                    call claims free ranges (row locks, SKIP LOCKED), so
 *                    with as many ranges as clients each reads its own
 *                    range.  Done when the clients together have MAX_RECORDS
 *                    records; without MAX_RECORDS, after DRAIN_EMPTY empty
 *                    calls in a row.
 *   consume-pgq      next_batch / get_batch_events / finish_batch as consumer
 *                    "bench"; when no batch comes, force a tick (force_tick +
 *                    ticker); no batch again (with no events since): drained
 *   consume-pgmq     pgmq.read(queue, 30, n) then pgmq.delete(queue, ids)
 *   read-at          TARGET is RANGE_ID@OFFSET: malachi.read(range, offset, n)
 *                    again and again (read latency at that offset)
 *
 * consume-plain and consume-malachi use one prepared statement each and
 * binary results (a bytea value arrives as its raw bytes, not hex), so both
 * move the same bytes; a latency sample of consume-malachi is one whole
 * BEGIN / SELECT / COMMIT.  Consumers stop at the deadline or when their
 * source is drained.  consume-plain and consume-malachi read every record
 * once whatever the client count; PgQ and pgmq consumers would compete, so
 * the bench runs those with one client.
 *
 * Output, one line:
 *
 *   mode clients batch bytes seconds statements records rec/s MB/s p50_ms p99_ms
 *
 * Usage: loadgen CONNINFO MODE TARGET CLIENTS SECONDS BATCH RECORD_BYTES [MAX_RECORDS]
 *   MAX_RECORDS (write modes) stops after about that many records in all;
 *   (consume-malachi) stops once exactly that many were consumed in all.
 *
 *-------------------------------------------------------------------------
 */
#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "libpq-fe.h"
#include "records.h"

#define TEXTOID		25
#define MAX_SAMPLES	200000
#define SYNC_FILE_BYTES	(64L * 1024 * 1024)	/* noop-sync's file */

typedef enum Mode
{
	M_PRODUCE, M_INSERT, M_PGQ, M_PGMQ, M_NOOP, M_NOOP_SYNC,	/* write modes */
	M_CONSUME_PLAIN, M_CONSUME_MALACHI, M_CONSUME_PGQ, M_CONSUME_PGMQ,
	M_READ_AT					/* read modes */
} Mode;

static const char *const mode_names[] = {
	"produce", "insert", "pgq", "pgmq", "noop", "noop-sync",
	"consume-plain", "consume-malachi", "consume-pgq", "consume-pgmq", "read-at"
};

/*
 * consume-malachi without MAX_RECORDS: empty calls in a row that mean
 * "drained".  One would do for a lone consumer; with several, a call also
 * comes back empty when every range that still has records is held by
 * another consumer of the group (which then goes on reading it), so a
 * client tries a few times.  With MAX_RECORDS an empty call is retried:
 * the run ends when the clients together have that many records (or at
 * the deadline, should records be missing).
 */
#define DRAIN_EMPTY	3

typedef struct Options
{
	const char *conninfo;
	Mode		mode;
	const char *target;
	int			clients;
	double		seconds;
	int			batch;
	int			record_bytes;
	long		max_records;	/* per client; 0: no limit */
	long		max_total;		/* MAX_RECORDS as given; 0: none */
} Options;

typedef struct Client
{
	const Options *opt;
	int			id;
	PGconn	   *conn;
	long		statements;
	long		records;
	double		bytes;
	double	   *latencies;		/* milliseconds, one per statement */
	long		nlatencies;
	int			failed;
	int			sync_fd;		/* noop-sync: its file, or -1 */
	long		sync_size;		/* noop-sync: the file's size */
} Client;

static volatile int writers_done;	/* tells the pgq ticker to stop */
static long consumed;			/* consume-malachi: records, all clients */
static volatile int client_failed;	/* consume-malachi: stop the others */

/* Monotonic seconds. */
static double
now_seconds(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return ts.tv_sec + ts.tv_nsec / 1e9;
}

/* Append a big-endian 32-bit integer. */
static char *
put32(char *p, uint32_t v)
{
	v = htonl(v);
	memcpy(p, &v, 4);
	return p + 4;
}

/*
 * Build a one-dimensional text[] in PostgreSQL's binary array format from n
 * strings.
 */
static char *
binary_text_array(char **elems, int n, int *len)
{
	size_t		size = 20;
	char	   *buf;
	char	   *p;
	int			i;

	for (i = 0; i < n; i++)
		size += 4 + strlen(elems[i]);
	buf = malloc(size);
	p = buf;
	p = put32(p, 1);			/* dimensions */
	p = put32(p, 0);			/* no NULLs */
	p = put32(p, TEXTOID);		/* element type */
	p = put32(p, (uint32_t) n);	/* length */
	p = put32(p, 1);			/* lower bound */
	for (i = 0; i < n; i++)
	{
		size_t		l = strlen(elems[i]);

		p = put32(p, (uint32_t) l);
		memcpy(p, elems[i], l);
		p += l;
	}
	*len = (int) (p - buf);
	return buf;
}

/* Compare doubles for qsort. */
static int
cmp_double(const void *a, const void *b)
{
	double		x = *(const double *) a;
	double		y = *(const double *) b;

	return (x > y) - (x < y);
}

/*
 * Run one statement; on success return its result (the caller clears it),
 * on failure report it, mark the client failed and return NULL.
 */
static PGresult *
exec(Client *c, const char *sql, int nparams, const char *const *params,
	 const int *lengths, const int *formats)
{
	PGresult   *res = PQexecParams(c->conn, sql, nparams, NULL, params,
								   lengths, formats, 0);

	if (PQresultStatus(res) == PGRES_TUPLES_OK ||
		PQresultStatus(res) == PGRES_COMMAND_OK)
		return res;
	fprintf(stderr, "loadgen client %d: %s", c->id, PQerrorMessage(c->conn));
	PQclear(res);
	c->failed = 1;
	return NULL;
}

/* Count one timed statement that moved records records of bytes bytes. */
static void
account(Client *c, double t0, long records, double bytes)
{
	if (c->nlatencies < MAX_SAMPLES)
		c->latencies[c->nlatencies++] = (now_seconds() - t0) * 1000.0;
	c->statements++;
	c->records += records;
	c->bytes += bytes;
}

/* The statement of a write mode, for a batch (text[] params) or one record. */
static void
write_sql(const Options *o, char *sql, size_t size)
{
	int			single = o->batch == 1;
	const char *fmt = NULL;

	switch (o->mode)
	{
		case M_PRODUCE:
			fmt = single ? "SELECT malachi.produce('%s', $1::text, $2::text)" :
				"SELECT malachi.produce_batch('%s', $1::text[], $2::text[])";
			break;
		case M_INSERT:
			fmt = single ? "INSERT INTO %s(key, value) VALUES ($1::text, $2::text)" :
				"INSERT INTO %s(key, value) SELECT * FROM unnest($1::text[], $2::text[])";
			break;
		case M_PGQ:
			fmt = single ?
				"SELECT pgq.insert_event('%s', 'bench', $2::text, $1::text, NULL, NULL, NULL)" :
				"SELECT count(pgq.insert_event('%s', 'bench', v, k, NULL, NULL, NULL)) "
				"FROM unnest($1::text[], $2::text[]) AS u(k, v)";
			break;
		case M_PGMQ:
			fmt = single ?
				"SELECT pgmq.send('%s', jsonb_build_object('key', $1::text, 'value', $2::text))" :
				"SELECT count(*) FROM pgmq.send_batch('%s', ARRAY(SELECT "
				"jsonb_build_object('key', k, 'value', v) "
				"FROM unnest($1::text[], $2::text[]) AS u(k, v)))";
			break;
		case M_NOOP:
		case M_NOOP_SYNC:
			/* the same parameters to a statement that does nothing */
			fmt = single ? "SELECT length($1::text) + length($2::text)" :
				"SELECT array_length($1::text[], 1) + array_length($2::text[], 1)";
			break;
		default:
			break;
	}
	snprintf(sql, size, fmt, o->target);
}

/*
 * noop-sync: create client c's file in directory dir, c->sync_size bytes
 * of zeros written and synced, so that the timed writes neither grow it nor
 * allocate its blocks.  Run before the clock starts.  0, or -1 (reported).
 */
static int
sync_file_open(Client *c, const char *dir)
{
	char		path[1024];
	const long	chunk = 1024 * 1024;
	char	   *zeros = calloc(1, chunk);
	int			fd;
	long		off;

	snprintf(path, sizeof(path), "%s/noop-sync-%d", dir, c->id);
	fd = zeros ? open(path, O_RDWR | O_CREAT | O_TRUNC, 0600) : -1;
	for (off = 0; fd >= 0 && off < c->sync_size; off += chunk)
	{
		ssize_t		n = pwrite(fd, zeros, chunk, off);

		if (n != chunk)
		{
			if (n >= 0)
				errno = ENOSPC;
			break;
		}
	}
	if (fd >= 0 && (off < c->sync_size || fsync(fd) != 0))
	{
		int			save = errno;

		close(fd);
		fd = -1;
		errno = save;
	}
	if (fd < 0)
		fprintf(stderr, "loadgen client %d: could not prepare \"%s\": %m\n",
				c->id, path);
	free(zeros);
	c->sync_fd = fd;
	return fd < 0 ? -1 : 0;
}

/*
 * noop-sync: write n buffers at *pos of the client's file (from its start
 * again when they would pass its end), then fdatasync.  0, or -1 (reported).
 */
static int
sync_file_write(Client *c, long *pos, const char *const *bufs,
				const int *lens, int n)
{
	long		total = 0;
	int			i;

	for (i = 0; i < n; i++)
		total += lens[i];
	if (*pos + total > c->sync_size)
		*pos = 0;
	for (i = 0; i < n; i++)
	{
		ssize_t		w = pwrite(c->sync_fd, bufs[i], lens[i], *pos);

		if (w != lens[i])
		{
			if (w >= 0)
				errno = ENOSPC;
			break;
		}
		*pos += lens[i];
	}
	if (i == n && fdatasync(c->sync_fd) == 0)
		return 0;
	fprintf(stderr, "loadgen client %d: could not write and sync: %m\n", c->id);
	return -1;
}

/*
 * noop-sync, after the run: the n buffers last written end at pos; does
 * the file hold them?  0, or -1 (reported).
 */
static int
sync_file_check(Client *c, long pos, const char *const *bufs,
				const int *lens, int n)
{
	int			i;

	for (i = n - 1; i >= 0; i--)
	{
		char	   *back = malloc(lens[i]);
		int			same;

		pos -= lens[i];
		same = back && pread(c->sync_fd, back, lens[i], pos) == lens[i] &&
			memcmp(back, bufs[i], lens[i]) == 0;
		free(back);
		if (!same)
		{
			fprintf(stderr, "loadgen client %d: its file does not hold what it wrote\n",
					c->id);
			return -1;
		}
	}
	return 0;
}

/*
 * A write client: send batches until the deadline or MAX_RECORDS.  Every
 * statement sends the same records, so the parameters are built once,
 * before the clock starts: the timed loop is the statement's round trip
 * and nothing of the client's own (like pgbench, which also prepares its
 * values outside the timing).
 */
static void
run_writer(Client *c, double deadline)
{
	const Options *o = c->opt;
	int			single = o->batch == 1;
	char		sql[512];
	char	  **keys = malloc(sizeof(char *) * o->batch);
	char	  **values = malloc(sizeof(char *) * o->batch);
	const char *params[2];
	int			lengths[2] = {0, 0};
	int			formats[2] = {0, 0};
	char	   *k = NULL;
	char	   *v = NULL;
	int			lens[2] = {0, 0};
	long		sync_pos = 0;
	int			i;

	write_sql(o, sql, sizeof(sql));
	PQclear(PQprepare(c->conn, "w", sql, 2, NULL));
	for (i = 0; i < o->batch; i++)
	{
		keys[i] = malloc(16);
		make_key(keys[i], 16, c->id, i);
		values[i] = make_value(c->id, 0, i, o->record_bytes);
	}
	if (!single)
	{
		k = binary_text_array(keys, o->batch, &lengths[0]);
		v = binary_text_array(values, o->batch, &lengths[1]);
		params[0] = k;
		params[1] = v;
		formats[0] = formats[1] = 1;
	}

	while (now_seconds() < deadline &&
		   (o->max_records == 0 || c->records < o->max_records))
	{
		double		t0 = now_seconds();
		PGresult   *res;

		if (single)
		{
			params[0] = keys[c->statements % o->batch];
			params[1] = values[0];
		}
		res = PQexecPrepared(c->conn, "w", 2, params, lengths, formats, 0);
		if (PQresultStatus(res) != PGRES_TUPLES_OK &&
			PQresultStatus(res) != PGRES_COMMAND_OK)
		{
			fprintf(stderr, "loadgen client %d: %s", c->id, PQerrorMessage(c->conn));
			c->failed = 1;
			PQclear(res);
			break;
		}
		PQclear(res);
		if (c->sync_fd >= 0)
		{
			lens[0] = single ? (int) strlen(params[0]) : lengths[0];
			lens[1] = single ? (int) strlen(params[1]) : lengths[1];
			if (sync_file_write(c, &sync_pos, params, lens, 2) != 0)
			{
				c->failed = 1;
				break;
			}
		}
		account(c, t0, o->batch, (double) o->batch * o->record_bytes);
	}
	if (c->sync_fd >= 0 && c->statements > 0 && !c->failed &&
		sync_file_check(c, sync_pos, params, lens, 2) != 0)
		c->failed = 1;
	free(k);
	free(v);
}

/* Sum of the lengths of column col over a result's rows. */
static double
column_bytes(PGresult *res, int col)
{
	double		sum = 0;
	int			r;

	for (r = 0; r < PQntuples(res); r++)
		sum += PQgetlength(res, r, col);
	return sum;
}

/* Prepare a statement as "r"; report and mark the client failed on error. */
static int
prepare(Client *c, const char *sql, int nparams)
{
	PGresult   *res = PQprepare(c->conn, "r", sql, nparams, NULL);
	int			ok = PQresultStatus(res) == PGRES_COMMAND_OK;

	if (!ok)
	{
		fprintf(stderr, "loadgen client %d: %s", c->id, PQerrorMessage(c->conn));
		c->failed = 1;
	}
	PQclear(res);
	return ok;
}

/* A binary int8 result value. */
static int64_t
binary_int8(PGresult *res, int row, int col)
{
	const unsigned char *p = (const unsigned char *) PQgetvalue(res, row, col);
	uint64_t	v = 0;
	int			i;

	for (i = 0; i < 8; i++)
		v = (v << 8) | p[i];
	return (int64_t) v;
}

/*
 * consume-plain: page through the table by id.  With several clients, each
 * reads its own contiguous slice of the ids: the span min(id)..max(id) cut
 * into CLIENTS equal parts, client i taking (lo_i, hi_i].  The slices are
 * disjoint and cover the span, so every record is read exactly once over
 * all clients, and each client scans its own part of the index and heap,
 * like a consumer reading its own partition (id % CLIENTS = i would make
 * every client walk the whole index and touch every heap page).
 */
static void
run_consume_plain(Client *c, double deadline)
{
	char		sql[256];
	char		last[32];
	char		hi[32];
	char		limit[16];
	PGresult   *res;
	int64_t		min_id;
	int64_t		max_id;
	int64_t		span;

	snprintf(sql, sizeof(sql), "SELECT min(id), max(id) FROM %s", c->opt->target);
	res = exec(c, sql, 0, NULL, NULL, NULL);
	if (res == NULL)
		return;
	if (PQgetisnull(res, 0, 0))
	{
		PQclear(res);
		return;					/* empty table: drained */
	}
	min_id = atoll(PQgetvalue(res, 0, 0));
	max_id = atoll(PQgetvalue(res, 0, 1));
	PQclear(res);
	span = max_id - min_id + 1;
	snprintf(last, sizeof(last), "%lld",
			 (long long) (min_id - 1 + span * c->id / c->opt->clients));
	snprintf(hi, sizeof(hi), "%lld",
			 (long long) (min_id - 1 + span * (c->id + 1) / c->opt->clients));

	snprintf(sql, sizeof(sql),
			 "SELECT id, key, value, ts FROM %s WHERE id > $1::bigint AND id <= $2::bigint "
			 "ORDER BY id LIMIT $3::int",
			 c->opt->target);
	if (!prepare(c, sql, 3))
		return;
	snprintf(limit, sizeof(limit), "%d", c->opt->batch);
	while (now_seconds() < deadline)
	{
		const char *params[3] = {last, hi, limit};
		double		t0 = now_seconds();
		int			n;

		res = PQexecPrepared(c->conn, "r", 3, params, NULL, NULL, 1);
		if (PQresultStatus(res) != PGRES_TUPLES_OK)
		{
			fprintf(stderr, "loadgen client %d: %s", c->id, PQerrorMessage(c->conn));
			c->failed = 1;
			PQclear(res);
			return;
		}
		n = PQntuples(res);
		if (n > 0)
		{
			snprintf(last, sizeof(last), "%lld", (long long) binary_int8(res, n - 1, 0));
			account(c, t0, n, column_bytes(res, 2));
		}
		PQclear(res);
		if (n == 0)
			return;				/* drained */
	}
}

/* Run a statement without parameters that returns no rows (BEGIN, COMMIT). */
static int
exec_command(Client *c, const char *sql)
{
	PGresult   *res = PQexec(c->conn, sql);
	int			ok = PQresultStatus(res) == PGRES_COMMAND_OK;

	if (!ok)
	{
		fprintf(stderr, "loadgen client %d: %s: %s", c->id, sql, PQerrorMessage(c->conn));
		c->failed = 1;
	}
	PQclear(res);
	return ok;
}

/*
 * consume-malachi: one consumer of the group per client, one transaction
 * per call; COMMIT acknowledges the records.  A client stops at the
 * deadline, when another failed, when the clients together have
 * MAX_RECORDS records, or (without MAX_RECORDS) when drained.
 */
static void
run_consume_malachi(Client *c, double deadline)
{
	char		topic[256];
	const char *group = "bench";
	const char *at = strchr(c->opt->target, '@');
	char		limit[16];
	int			empty = 0;

	snprintf(topic, sizeof(topic), "%.*s",
			 at ? (int) (at - c->opt->target) : (int) strlen(c->opt->target),
			 c->opt->target);
	if (at != NULL)
		group = at + 1;
	if (!prepare(c, "SELECT range_id, \"offset\", key, value, produced_at "
				 "FROM malachi.consume($1::text, $2::text, $3::int)", 3))
		return;
	snprintf(limit, sizeof(limit), "%d", c->opt->batch);
	while (now_seconds() < deadline && !client_failed &&
		   (c->opt->max_total == 0 ||
			__atomic_load_n(&consumed, __ATOMIC_RELAXED) < c->opt->max_total))
	{
		const char *params[3] = {topic, group, limit};
		double		t0 = now_seconds();
		PGresult   *res;
		int			n;

		if (!exec_command(c, "BEGIN"))
			return;
		res = PQexecPrepared(c->conn, "r", 3, params, NULL, NULL, 1);
		if (PQresultStatus(res) != PGRES_TUPLES_OK)
		{
			fprintf(stderr, "loadgen client %d: %s", c->id, PQerrorMessage(c->conn));
			c->failed = 1;
			PQclear(res);
			return;
		}
		if (!exec_command(c, "COMMIT"))
		{
			PQclear(res);
			return;
		}
		n = PQntuples(res);
		if (n > 0)
		{
			account(c, t0, n, column_bytes(res, 3));
			__atomic_add_fetch(&consumed, n, __ATOMIC_RELAXED);
		}
		PQclear(res);
		if (n > 0)
			empty = 0;
		else if (++empty >= DRAIN_EMPTY && c->opt->max_total == 0)
			return;				/* drained */
	}
}

/* Run a one-value statement with one text parameter; NULL result -> "". */
static int
exec_value(Client *c, const char *sql, const char *param, char *out, size_t size)
{
	const char *params[1] = {param};
	PGresult   *res = exec(c, sql, param ? 1 : 0, params, NULL, NULL);

	if (res == NULL)
		return 0;
	snprintf(out, size, "%s",
			 PQntuples(res) > 0 ? PQgetvalue(res, 0, 0) : "");
	PQclear(res);
	return 1;
}

/*
 * consume-pgq: batches of consumer "bench" (registered by the bench before
 * the events were inserted).  Statement = next_batch + get_batch_events +
 * finish_batch.  When no batch is ready, force a tick once; a second miss
 * means the queue is drained.
 */
static void
run_consume_pgq(Client *c, double deadline)
{
	const char *q = c->opt->target;
	int			misses = 0;

	while (now_seconds() < deadline)
	{
		char		batch_id[32];
		char		ignored[32];
		const char *params[1];
		double		t0 = now_seconds();
		PGresult   *res;
		int			n;

		if (!exec_value(c, "SELECT pgq.next_batch($1, 'bench')", q,
						batch_id, sizeof(batch_id)))
			return;
		n = 0;
		res = NULL;
		if (batch_id[0] != '\0')
		{
			params[0] = batch_id;
			res = exec(c, "SELECT ev_id, ev_extra1, ev_data FROM pgq.get_batch_events($1::bigint)",
					   1, params, NULL, NULL);
			if (res == NULL)
				return;
			n = PQntuples(res);
			if (!exec_value(c, "SELECT pgq.finish_batch($1::bigint)", batch_id,
							ignored, sizeof(ignored)))
			{
				PQclear(res);
				return;
			}
		}
		if (n > 0)
		{
			misses = 0;
			account(c, t0, n, column_bytes(res, 2));
		}
		PQclear(res);
		if (batch_id[0] != '\0')
			continue;			/* empty batches happen between ticks */
		/* no batch: force a tick once; no batch again: drained */
		if (++misses > 1)
			return;				/* drained */
		if (!exec_value(c, "SELECT pgq.force_tick($1)", q, ignored, sizeof(ignored)) ||
			!exec_value(c, "SELECT pgq.ticker($1)", q, ignored, sizeof(ignored)))
			return;
	}
}

/* consume-pgmq: read a batch (visibility timeout 30 s), delete it by id. */
static void
run_consume_pgmq(Client *c, double deadline)
{
	char		read_sql[256];
	char		delete_sql[256];
	char		limit[16];

	snprintf(read_sql, sizeof(read_sql),
			 "SELECT msg_id, message FROM pgmq.read('%s', 30, $1::int)", c->opt->target);
	snprintf(delete_sql, sizeof(delete_sql),
			 "SELECT count(*) FROM pgmq.delete('%s', $1::bigint[])", c->opt->target);
	snprintf(limit, sizeof(limit), "%d", c->opt->batch);
	while (now_seconds() < deadline)
	{
		const char *params[1] = {limit};
		double		t0 = now_seconds();
		PGresult   *res = exec(c, read_sql, 1, params, NULL, NULL);
		PGresult   *del;
		char	   *ids;
		size_t		len = 2;
		int			n;
		int			r;

		if (res == NULL)
			return;
		n = PQntuples(res);
		if (n == 0)
		{
			PQclear(res);
			return;				/* drained */
		}
		ids = malloc(n * 24 + 3);
		strcpy(ids, "{");
		for (r = 0; r < n; r++)
			len += sprintf(ids + len - 1, "%s%s", r ? "," : "", PQgetvalue(res, r, 0));
		strcat(ids, "}");
		params[0] = ids;
		del = exec(c, delete_sql, 1, params, NULL, NULL);
		free(ids);
		if (del == NULL)
		{
			PQclear(res);
			return;
		}
		PQclear(del);
		account(c, t0, n, column_bytes(res, 1));
		PQclear(res);
	}
}

/* read-at: malachi.read(range, offset, n) repeatedly, for its latency. */
static void
run_read_at(Client *c, double deadline)
{
	char		range[32];
	char		limit[16];
	const char *at = strchr(c->opt->target, '@');
	const char *params[3];

	if (at == NULL || at - c->opt->target >= (long) sizeof(range))
	{
		fprintf(stderr, "loadgen: read-at wants RANGE_ID@OFFSET\n");
		c->failed = 1;
		return;
	}
	memcpy(range, c->opt->target, at - c->opt->target);
	range[at - c->opt->target] = '\0';
	snprintf(limit, sizeof(limit), "%d", c->opt->batch);
	params[0] = range;
	params[1] = at + 1;
	params[2] = limit;
	while (now_seconds() < deadline)
	{
		double		t0 = now_seconds();
		PGresult   *res = exec(c, "SELECT value FROM malachi.read($1::bigint, $2::bigint, $3::int)",
							   3, params, NULL, NULL);

		if (res == NULL)
			return;
		account(c, t0, PQntuples(res), column_bytes(res, 0));
		PQclear(res);
	}
}

/* What a client runs, by Mode. */
static void (*const runners[]) (Client *c, double deadline) = {
	run_writer, run_writer, run_writer, run_writer, run_writer, run_writer,
	run_consume_plain, run_consume_malachi, run_consume_pgq, run_consume_pgmq,
	run_read_at
};

/* One client: connect, then run its mode until the deadline. */
static void *
client_main(void *arg)
{
	Client	   *c = arg;
	double		deadline = now_seconds() + c->opt->seconds;

	c->conn = PQconnectdb(c->opt->conninfo);
	if (PQstatus(c->conn) != CONNECTION_OK)
	{
		fprintf(stderr, "loadgen client %d: %s", c->id, PQerrorMessage(c->conn));
		c->failed = client_failed = 1;
		return NULL;
	}
	runners[c->opt->mode] (c, deadline);
	if (c->failed)
		client_failed = 1;
	PQfinish(c->conn);
	return NULL;
}

/* PgQ's ticker while pgq writers run: pgq.ticker(queue) every 50 ms. */
static void *
ticker_main(void *arg)
{
	const Options *o = arg;
	PGconn	   *conn = PQconnectdb(o->conninfo);
	char		sql[256];

	snprintf(sql, sizeof(sql), "SELECT pgq.ticker('%s')", o->target);
	while (PQstatus(conn) == CONNECTION_OK && !writers_done)
	{
		PQclear(PQexec(conn, sql));
		usleep(50000);
	}
	PQfinish(conn);
	return NULL;
}

int
main(int argc, char **argv)
{
	Options		o;
	Client	   *clients;
	pthread_t  *threads;
	pthread_t	ticker;
	double	   *all;
	long		nall = 0;
	long		statements = 0;
	double		records = 0;
	double		bytes = 0;
	double		start;
	double		elapsed;
	int			i;

	if (argc != 8 && argc != 9)
	{
		fprintf(stderr, "usage: %s CONNINFO MODE TARGET CLIENTS SECONDS BATCH RECORD_BYTES [MAX_RECORDS]\n"
				"  MODE: produce insert pgq pgmq noop noop-sync consume-plain consume-malachi\n"
				"        consume-pgq consume-pgmq read-at\n",
				argv[0]);
		return 2;
	}
	o.conninfo = argv[1];
	for (i = 0; i < (int) (sizeof(mode_names) / sizeof(mode_names[0])); i++)
		if (strcmp(argv[2], mode_names[i]) == 0)
			break;
	if (i == (int) (sizeof(mode_names) / sizeof(mode_names[0])))
	{
		fprintf(stderr, "loadgen: unknown mode %s\n", argv[2]);
		return 2;
	}
	o.mode = (Mode) i;
	o.target = argv[3];
	o.clients = atoi(argv[4]);
	o.seconds = atof(argv[5]);
	o.batch = atoi(argv[6]);
	o.record_bytes = atoi(argv[7]);
	o.max_records = argc == 9 ? atol(argv[8]) : 0;
	o.max_total = o.max_records;
	if (o.clients < 1 || o.batch < 1 || o.record_bytes < 40 || o.seconds <= 0)
	{
		fprintf(stderr, "loadgen: clients and batch must be >= 1, record bytes >= 40\n");
		return 2;
	}
	if (o.max_records > 0)
		o.max_records = (o.max_records + o.clients - 1) / o.clients;

	clients = calloc(o.clients, sizeof(Client));
	threads = calloc(o.clients, sizeof(pthread_t));
	for (i = 0; i < o.clients; i++)
	{
		clients[i].opt = &o;
		clients[i].id = i;
		clients[i].sync_fd = -1;
		/* room for two batches at least: a key is under 16 bytes */
		clients[i].sync_size = SYNC_FILE_BYTES;
		while (clients[i].sync_size < 2L * o.batch * (o.record_bytes + 24) + 40)
			clients[i].sync_size += SYNC_FILE_BYTES;
		if (o.mode == M_NOOP_SYNC && sync_file_open(&clients[i], o.target) != 0)
			return 1;
	}
	if (o.mode == M_PGQ)
		pthread_create(&ticker, NULL, ticker_main, &o);
	start = now_seconds();
	for (i = 0; i < o.clients; i++)
	{
		clients[i].latencies = malloc(sizeof(double) * MAX_SAMPLES);
		pthread_create(&threads[i], NULL, client_main, &clients[i]);
	}
	for (i = 0; i < o.clients; i++)
		pthread_join(threads[i], NULL);
	elapsed = now_seconds() - start;
	writers_done = 1;
	if (o.mode == M_PGQ)
		pthread_join(ticker, NULL);

	all = malloc(sizeof(double) * MAX_SAMPLES * o.clients);
	for (i = 0; i < o.clients; i++)
	{
		if (clients[i].sync_fd >= 0)
			close(clients[i].sync_fd);
		if (clients[i].failed)
			return 1;
		statements += clients[i].statements;
		records += clients[i].records;
		bytes += clients[i].bytes;
		memcpy(all + nall, clients[i].latencies,
			   sizeof(double) * clients[i].nlatencies);
		nall += clients[i].nlatencies;
	}
	qsort(all, nall, sizeof(double), cmp_double);
	printf("%s %d %d %d %.1f %ld %.0f %.0f %.2f %.3f %.3f\n",
		   mode_names[o.mode], o.clients, o.batch, o.record_bytes, elapsed,
		   statements, records, records / elapsed,
		   bytes / elapsed / (1024.0 * 1024.0),
		   nall ? all[nall / 2] : 0.0,
		   nall ? all[(long) (nall * 0.99)] : 0.0);
	return 0;
}
