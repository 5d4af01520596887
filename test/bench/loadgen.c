/*-------------------------------------------------------------------------
 *
 * loadgen.c
 *	  A libpq load generator: Malachi's produce_batch against a plain table.
 *
 * Every client thread has its own connection and sends the same generated
 * records (JSON-like text values of a given size, keys from 1,000 distinct
 * ones) as BINARY array parameters of one prepared statement per batch, so
 * that both systems are fed exactly the same way:
 *
 *   produce   SELECT malachi.produce_batch($topic, $1::text[], $2::text[])
 *   insert    INSERT INTO <table>(key, value) SELECT * FROM unnest($1, $2)
 *
 * A batch of 1 uses the single-record forms (produce / INSERT ... VALUES).
 * Each statement runs in its own transaction (autocommit), as a client of
 * either system would.  Output, one line:
 *
 *   mode clients batch bytes seconds statements records rec/s MB/s p50_ms p99_ms
 *
 * Usage: loadgen CONNINFO MODE TARGET CLIENTS SECONDS BATCH RECORD_BYTES
 *   MODE is produce or insert; TARGET a topic or a table name.
 *
 *-------------------------------------------------------------------------
 */
#include <arpa/inet.h>
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "libpq-fe.h"

#define TEXTOID		25
#define MAX_SAMPLES	200000

typedef struct Options
{
	const char *conninfo;
	const char *mode;
	const char *target;
	int			clients;
	double		seconds;
	int			batch;
	int			record_bytes;
} Options;

typedef struct Client
{
	const Options *opt;
	int			id;
	long		statements;
	double	   *latencies;		/* milliseconds, one per statement */
	long		nlatencies;
	int			failed;
} Client;

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
 * strings of the given lengths.
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

/* A JSON-like text value of exactly bytes bytes. */
static char *
make_value(int client, long seq, int i, int bytes)
{
	char	   *v = malloc(bytes + 1);
	int			n = snprintf(v, bytes + 1,
							 "{\"client\": %d, \"seq\": %ld, \"i\": %d, \"pad\": \"",
							 client, seq, i);

	while (n < bytes - 2)
	{
		v[n] = 'a' + (n % 26);
		n++;
	}
	if (n < bytes)
		v[n++] = '"';
	if (n < bytes)
		v[n++] = '}';
	v[bytes] = '\0';
	return v;
}

/* Compare doubles for qsort. */
static int
cmp_double(const void *a, const void *b)
{
	double		x = *(const double *) a;
	double		y = *(const double *) b;

	return (x > y) - (x < y);
}

/* One client: prepare, then send batches until the time is up. */
static void *
client_main(void *arg)
{
	Client	   *c = arg;
	const Options *o = c->opt;
	PGconn	   *conn = PQconnectdb(o->conninfo);
	int			single = o->batch == 1;
	int			produce = strcmp(o->mode, "produce") == 0;
	char		sql[512];
	char	  **keys = malloc(sizeof(char *) * o->batch);
	char	  **values = malloc(sizeof(char *) * o->batch);
	double		start;
	double		deadline;
	int			i;

	if (PQstatus(conn) != CONNECTION_OK)
	{
		fprintf(stderr, "client %d: %s", c->id, PQerrorMessage(conn));
		c->failed = 1;
		return NULL;
	}
	if (produce)
		snprintf(sql, sizeof(sql), single ?
				 "SELECT malachi.produce('%s', $1::text, $2::text)" :
				 "SELECT malachi.produce_batch('%s', $1::text[], $2::text[])",
				 o->target);
	else
		snprintf(sql, sizeof(sql), single ?
				 "INSERT INTO %s(key, value) VALUES ($1::text, $2::text)" :
				 "INSERT INTO %s(key, value) SELECT * FROM unnest($1::text[], $2::text[])",
				 o->target);
	PQclear(PQprepare(conn, "s", sql, 2, NULL));

	for (i = 0; i < o->batch; i++)
	{
		keys[i] = malloc(16);
		snprintf(keys[i], 16, "key-%d", (c->id * 7919 + i) % 1000);
		values[i] = make_value(c->id, 0, i, o->record_bytes);
	}

	start = now_seconds();
	deadline = start + o->seconds;
	while (now_seconds() < deadline)
	{
		const char *params[2];
		int			lengths[2];
		int			formats[2];
		char	   *k = NULL;
		char	   *v = NULL;
		double		t0 = now_seconds();
		PGresult   *res;

		if (single)
		{
			params[0] = keys[c->statements % o->batch];
			params[1] = values[0];
			lengths[0] = lengths[1] = 0;
			formats[0] = formats[1] = 0;
		}
		else
		{
			k = binary_text_array(keys, o->batch, &lengths[0]);
			v = binary_text_array(values, o->batch, &lengths[1]);
			params[0] = k;
			params[1] = v;
			formats[0] = formats[1] = 1;
		}
		res = PQexecPrepared(conn, "s", 2, params, lengths, formats, 0);
		if (PQresultStatus(res) != PGRES_TUPLES_OK &&
			PQresultStatus(res) != PGRES_COMMAND_OK)
		{
			fprintf(stderr, "client %d: %s", c->id, PQerrorMessage(conn));
			c->failed = 1;
			PQclear(res);
			break;
		}
		PQclear(res);
		free(k);
		free(v);
		if (c->nlatencies < MAX_SAMPLES)
			c->latencies[c->nlatencies++] = (now_seconds() - t0) * 1000.0;
		c->statements++;
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
	double	   *all;
	long		nall = 0;
	long		statements = 0;
	double		start;
	double		elapsed;
	double		records;
	int			i;

	if (argc != 8)
	{
		fprintf(stderr, "usage: %s CONNINFO produce|insert TARGET CLIENTS SECONDS BATCH RECORD_BYTES\n",
				argv[0]);
		return 2;
	}
	o.conninfo = argv[1];
	o.mode = argv[2];
	o.target = argv[3];
	o.clients = atoi(argv[4]);
	o.seconds = atof(argv[5]);
	o.batch = atoi(argv[6]);
	o.record_bytes = atoi(argv[7]);
	if (o.clients < 1 || o.batch < 1 || o.record_bytes < 40 || o.seconds <= 0)
	{
		fprintf(stderr, "loadgen: clients and batch must be >= 1, record bytes >= 40\n");
		return 2;
	}

	clients = calloc(o.clients, sizeof(Client));
	threads = calloc(o.clients, sizeof(pthread_t));
	start = now_seconds();
	for (i = 0; i < o.clients; i++)
	{
		clients[i].opt = &o;
		clients[i].id = i;
		clients[i].latencies = malloc(sizeof(double) * MAX_SAMPLES);
		pthread_create(&threads[i], NULL, client_main, &clients[i]);
	}
	for (i = 0; i < o.clients; i++)
		pthread_join(threads[i], NULL);
	elapsed = now_seconds() - start;

	all = malloc(sizeof(double) * MAX_SAMPLES * o.clients);
	for (i = 0; i < o.clients; i++)
	{
		if (clients[i].failed)
			return 1;
		statements += clients[i].statements;
		memcpy(all + nall, clients[i].latencies,
			   sizeof(double) * clients[i].nlatencies);
		nall += clients[i].nlatencies;
	}
	qsort(all, nall, sizeof(double), cmp_double);
	records = (double) statements * o.batch;
	printf("%s %d %d %d %.1f %ld %.0f %.0f %.1f %.3f %.3f\n",
		   o.mode, o.clients, o.batch, o.record_bytes, elapsed, statements,
		   records, records / elapsed,
		   records * o.record_bytes / elapsed / (1024.0 * 1024.0),
		   nall ? all[nall / 2] : 0.0,
		   nall ? all[(long) (nall * 0.99)] : 0.0);
	return 0;
}
