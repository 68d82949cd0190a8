/*
 * cmd_export.c - memattach export --listen ADDR (--pid PID... | --match
 * REGEX): a Prometheus exporter.  Each GET /metrics scrapes every target
 * once (one short thread borrow each, runs on one target take turns with
 * any other memattach) and answers in the OpenMetrics text format (or text
 * 0.0.4 to a client whose Accept header does not name OpenMetrics).
 *
 * Its clients may be hostile (memattach runs as root, anyone may connect):
 * one poll() loop serves many connections at once over non-blocking
 * sockets, each with a deadline for its whole request and one for its
 * whole answer, at most a bounded number of them open (under
 * RLIMIT_NOFILE), the oldest idle one pushed out for a new one.  Reading
 * the targets stays synchronous (a few ms per target); requests that
 * arrive together share one scrape.
 */
#include <arpa/inet.h>
#include <ctype.h>
#include <errno.h>
#include <netdb.h>
#include <poll.h>
#include <regex.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <sys/uio.h>
#include <unistd.h>

#include "capture.h"
#include "cmdutil.h"
#include "emit.h"
#include "options.h"
#include "commands.h"
#include "format.h"
#include "ma_error.h"
#include "runlock.h"
#include "openmetrics.h"
#include "remote.h"

#define MAX_TARGETS 256

/*
 * What one client may hold, and why these numbers:
 * - a request head is a few hundred bytes (Prometheus: ~250); 4 KiB leaves
 *   room for a proxy's headers;
 * - the whole head must arrive within 5 s of the accept, however it is cut
 *   (a byte every 4 s is closed at 5 s, as a silent connection is);
 *   Prometheus sends its request at once;
 * - the whole answer must be taken within 10 s of its first byte;
 * - a connection has 0.5 s to send its request before a newer one may push
 *   it out (a scraper on a loaded machine needs tens of ms);
 * - at most 256 connections at once (fewer if RLIMIT_NOFILE is low), the
 *   descriptors FD_RESERVE apart for stdio, the listener and a scrape
 *   (which has about 5 open at once: /proc files, the run lock...);
 * - answers waiting for slow readers hold at most 64 MiB together.
 */
#define REQUEST_MAX 4096
#define REQUEST_DEADLINE_NS (5 * 1000000000ULL)
#define ANSWER_DEADLINE_NS (10 * 1000000000ULL)
#define CONN_CAP_MAX 256
#define FD_RESERVE 64
#define ANSWER_BYTES_MAX (64u << 20)
/* A connection is not pushed out for a newer one before it had this long to send its request. */
#define READ_GRACE_NS (500 * 1000000ULL)
/* Out of descriptors or memory for accept(), or every slot answering: leave the backlog alone this long. */
#define LISTENER_PAUSE_NS (100 * 1000000ULL)

static const char about[] =
	"Serve the jemalloc readings of live processes to Prometheus: every GET\n"
	"/metrics on ADDR scrapes each target once (one short borrow of one of its\n"
	"threads) and answers in the OpenMetrics text format: the headline gauges\n"
	"(jemalloc_allocated_bytes, _active_, _resident_, _mapped_, _retained_,\n"
	"_metadata_, _slab_waste_, _dirty_, _muzzy_, _metadata_resident_,\n"
	"_outside_, _tcache_bytes), jemalloc_bin_waste_bytes{size=...} per small\n"
	"size class, process_resident_memory_bytes (VmRSS) and\n"
	"process_resident_memory_max_bytes (VmHWM), all labelled pid and comm; and\n"
	"for the exporter itself memattach_scrape_success, _borrow_seconds and\n"
	"memattach_scrape_failures_total.  A target that cannot be read is a metric\n"
	"and a line on stderr, never the end of the exporter.  A client whose\n"
	"Accept header does not name OpenMetrics (curl, a browser) gets the\n"
	"Prometheus text format 0.0.4 instead, which promtool check metrics reads.\n"
	"Runs on one target take turns with any other memattach.\n"
	"\n"
	"Clients are served side by side: requests that arrive together share one\n"
	"scrape.  A request must arrive whole within 5 s of connecting and its\n"
	"answer be read within 10 s, else the connection is closed; at most 256\n"
	"connections are open at once (fewer under a low RLIMIT_NOFILE), a new one\n"
	"past that closing the oldest that has not sent its whole request once it\n"
	"has had 0.5 s to send it.\n";

static const char *const content_types[] = {
	[MA_OM_OPENMETRICS] = "application/openmetrics-text; version=1.0.0; charset=utf-8",
	[MA_OM_PROMETHEUS_TEXT] = "text/plain; version=0.0.4; charset=utf-8",
};

struct exporter {
	const char *listen;
	pid_t pids[MAX_TARGETS];
	size_t npids;
	const char *match;
	regex_t re;
	int deadline_ms;
	int budget_ms; /* a whole scrape: targets past it are not read this time */
	bool strict;
	bool once, json;
	enum ma_om_format once_format;
	/* what past scrapes saw, by pid (a counter must not reset between scrapes) */
	struct target_record {
		pid_t pid;
		uint64_t failures;
		bool failed_last; /* the last scrape of that pid failed */
	} records[MAX_TARGETS];
	size_t nrecords;
};

/* PID's record, made on first sight; NULL once the table is full. */
static struct target_record *record_of(struct exporter *e, pid_t pid)
{
	for (size_t i = 0; i < e->nrecords; i++)
		if (e->records[i].pid == pid)
			return &e->records[i];
	if (e->nrecords == MAX_TARGETS)
		return NULL;
	e->records[e->nrecords] = (struct target_record){ .pid = pid };
	return &e->records[e->nrecords++];
}

/* The targets of this scrape: --pid as given, or --match resolved now. */
static size_t resolve(struct exporter *e, pid_t *out)
{
	static struct ma_je_process found[MAX_TARGETS];
	size_t n;

	if (!e->match) {
		memcpy(out, e->pids, e->npids * sizeof(pid_t));
		return e->npids;
	}
	n = ma_jemalloc_processes(ma_comm_matches, &e->re, found, MAX_TARGETS);
	for (size_t i = 0; i < n; i++)
		out[i] = found[i].pid;
	return n;
}

/*
 * Targets that answered last time first: any user can start processes a
 * --match selects, and one that never lets a thread be borrowed costs a
 * whole --timeout; behind the budget, such ones can no longer keep the
 * others from being read.
 */
static void order_targets(struct exporter *e, pid_t *pids, size_t n)
{
	size_t k = 0;
	pid_t tmp[MAX_TARGETS];

	for (int pass = 0; pass < 2; pass++)
		for (size_t i = 0; i < n; i++) {
			const struct target_record *r = record_of(e, pids[i]);

			if ((r && r->failed_last) == (pass == 1))
				tmp[k++] = pids[i];
		}
	memcpy(pids, tmp, n * sizeof(pid_t));
}

/*
 * Targets whose run lock is held right now (another memattach run, or a
 * process of their user that took it) go last: the wait for one never
 * keeps the others from being read (runs on different processes never
 * wait for each other).
 */
static void busy_last(pid_t *pids, size_t n)
{
	size_t k = 0;
	pid_t tmp[MAX_TARGETS];
	bool busy[MAX_TARGETS];

	for (size_t i = 0; i < n; i++)
		busy[i] = ma_runlock_busy(pids[i]);
	for (int pass = 0; pass < 2; pass++)
		for (size_t i = 0; i < n; i++)
			if (busy[i] == (pass == 1))
				tmp[k++] = pids[i];
	memcpy(pids, tmp, n * sizeof(pid_t));
}

/* Read every target once into T; returns how many, *FAILED how many could not be read. */
static size_t scrape_targets(struct exporter *e, struct ma_om_target *t, size_t *failed)
{
	pid_t pids[MAX_TARGETS];
	size_t n = resolve(e, pids);
	uint64_t t0 = ma_now_ns();

	*failed = 0;
	order_targets(e, pids, n);
	busy_last(pids, n);
	for (size_t i = 0; i < n; i++) {
		int64_t left_ms = e->budget_ms - (int64_t)((ma_now_ns() - t0) / 1000000);
		struct ma_session_opts o = { .deadline_ms = left_ms < e->deadline_ms ? (int)left_ms
										 : e->deadline_ms,
					     .strict = e->strict, .no_tid_option = true };
		struct target_record *r = record_of(e, pids[i]);
		struct ma_proc_status ps;
		int rc;

		memset(&t[i], 0, sizeof(t[i]));
		if (left_ms > 0) {
			rc = ma_scrape_target(pids[i], &o, &t[i]);
		} else {
			t[i].pid = pids[i];
			/* Not read, still named. */
			if (ma_process_status(pids[i], &ps) == 0)
				snprintf(t[i].comm, sizeof(t[i].comm), "%s", ps.name);
			rc = ma_fail(MA_E_TIMEOUT, "not read: this scrape's budget of %d ms "
				     "(--scrape-timeout) was spent on the targets before it",
				     e->budget_ms);
		}
		if (rc != 0) {
			ma_cmd_note("export", "scrape of process %d (%s): %s", pids[i],
				    t[i].comm[0] ? t[i].comm : "?", ma_errmsg());
			ma_err_clear();
			(*failed)++;
		}
		if (r) {
			r->failures += rc != 0;
			r->failed_last = rc != 0;
		}
		t[i].failures = r ? r->failures : 0;
	}
	return n;
}

static void release_targets(struct ma_om_target *t, size_t n)
{
	for (size_t i = 0; i < n; i++)
		ma_bin_table_release(&t[i].bins);
}

/* The allocator's readings of T (read), under the keys stats --json and bins --json use. */
static void target_readings_json(struct ma_json *j, const struct ma_om_target *t)
{
	ma_json_u64(j, "allocated", t->st.allocated);
	ma_json_u64(j, "active", t->st.active);
	ma_json_u64(j, "resident", t->st.resident);
	ma_json_u64(j, "mapped", t->st.mapped);
	ma_json_u64(j, "retained", t->st.retained);
	ma_json_u64(j, "metadata", t->st.metadata);
	ma_json_u64(j, "slab_waste", t->h.slab_waste);
	if (t->h.have_pages) {
		ma_json_u64(j, "dirty", t->h.dirty);
		ma_json_u64(j, "muzzy", t->h.muzzy);
		ma_json_u64(j, "metadata_resident", t->h.metadata_resident);
	}
	if (t->h.have_rss)
		ma_json_i64(j, "outside_jemalloc", t->h.outside_jemalloc);
	if (!t->bins.nbins)
		return;
	ma_json_u64(j, "tcache_bytes", t->bins.tcache_bytes);
	ma_json_arr_open(j, "bins");
	for (size_t b = 0; b < t->bins.nbins; b++) {
		struct ma_bin_row r;

		if (!t->bins.bins[b].curslabs)
			continue;
		ma_bins_row(&t->bins, b, &r);
		ma_json_obj_open(j, NULL);
		ma_json_u64(j, "size", t->bins.bins[b].size);
		ma_json_u64(j, "waste", r.waste);
		ma_json_obj_close(j);
	}
	ma_json_arr_close(j);
}

/* --once --json: the scrape as one object, a member of "targets" per process. */
static void write_scrape_json(const struct ma_om_target *t, size_t n)
{
	struct ma_json j;

	ma_json_init(&j, stdout);
	ma_json_obj_open(&j, NULL);
	ma_json_arr_open(&j, "targets");
	for (size_t i = 0; i < n; i++) {
		ma_json_obj_open(&j, NULL);
		ma_json_i64(&j, "pid", t[i].pid);
		ma_json_str(&j, "comm", t[i].comm);
		ma_json_bool(&j, "ok", t[i].ok);
		if (t[i].ok)
			target_readings_json(&j, &t[i]);
		ma_json_u64(&j, "vm_rss", t[i].vm_rss);
		ma_json_u64(&j, "vm_hwm", t[i].vm_hwm);
		ma_json_u64(&j, "borrow_ns", t[i].borrow_ns);
		ma_json_u64(&j, "failures", t[i].failures);
		ma_json_obj_close(&j);
	}
	ma_json_arr_close(&j);
	ma_json_obj_close(&j);
	ma_json_end(&j);
}

/* --once: one scrape on stdout; exit 1 if a target could not be read. */
static int scrape_once(struct exporter *e)
{
	static struct ma_om_target t[MAX_TARGETS];
	size_t failed, n = scrape_targets(e, t, &failed);

	if (e->json)
		write_scrape_json(t, n);
	else
		ma_om_write_format(stdout, t, n, true, e->once_format);
	release_targets(t, n);
	if (fflush(stdout) != 0)
		return ma_cmd_error("export", MA_EXIT_FAIL, "cannot write the scrape: %s",
				    strerror(errno));
	if (failed)
		return ma_cmd_error("export", MA_EXIT_FAIL, "%zu of %zu targets could not be read",
				    failed, n);
	return MA_EXIT_OK;
}

/* ADDR (HOST:PORT, [V6]:PORT or :PORT) resolved into *RES; 0 or MA_E_USAGE. */
static int resolve_listen(const char *addr, struct addrinfo **res)
{
	struct addrinfo hints = { .ai_family = AF_UNSPEC, .ai_socktype = SOCK_STREAM,
				  .ai_flags = AI_PASSIVE };
	char host[256], *colon;
	int rc;

	snprintf(host, sizeof(host), "%s", addr);
	if (!(colon = strrchr(host, ':')))
		return ma_fail(MA_E_USAGE, "--listen '%s': expected HOST:PORT", addr);
	*colon = '\0';
	if (host[0] == '[' && colon[-1] == ']') { /* [::1]:9464 */
		memmove(host, host + 1, strlen(host));
		host[strlen(host) - 1] = '\0';
	}
	if ((rc = getaddrinfo(host[0] ? host : NULL, colon + 1, &hints, res)) != 0)
		return ma_fail(MA_E_USAGE, "--listen '%s': %s", addr, gai_strerror(rc));
	return 0;
}

/* A non-blocking listener; the backlog as deep as the kernel allows (net.core.somaxconn). */
static int open_listener(const char *addr)
{
	struct addrinfo *res, *a;
	int fd = -1, one = 1, rc;

	if ((rc = resolve_listen(addr, &res)))
		return rc;
	for (a = res; a; a = a->ai_next) {
		fd = socket(a->ai_family, a->ai_socktype | SOCK_CLOEXEC | SOCK_NONBLOCK,
			    a->ai_protocol);
		if (fd < 0)
			continue;
		setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one));
		if (bind(fd, a->ai_addr, a->ai_addrlen) == 0 && listen(fd, SOMAXCONN) == 0)
			break;
		close(fd);
		fd = -1;
	}
	freeaddrinfo(res);
	if (fd < 0)
		return ma_fail(MA_E_IO, "cannot listen on %s: %s", addr, strerror(errno));
	return fd;
}

/* --- the server: one poll() loop over non-blocking connections --- */

/* One scrape's text, shared by the answers of every request it serves. */
struct scrape_body {
	size_t refs, len;
	char *text;
};

enum conn_state {
	CONN_FREE,
	CONN_READING, /* the request head is still arriving */
	CONN_WANTS_METRICS, /* a GET /metrics read whole, waiting for this pass's scrape */
	CONN_ANSWERING, /* the answer is being written */
};

struct conn {
	int fd;
	enum conn_state state;
	uint64_t opened_ns; /* the oldest reader is pushed out first */
	uint64_t deadline_ns; /* for the whole request, then for the whole answer */
	enum ma_om_format format; /* what a /metrics request asked for */
	size_t got;
	char req[REQUEST_MAX];
	/* the answer: HEAD, then BODY (static text, or a shared scrape) */
	char head[192];
	size_t head_len, sent;
	const char *body;
	size_t body_len;
	struct scrape_body *scrape;
};

struct server {
	int lfd;
	struct conn *conns; /* CAP slots */
	size_t cap;
	uint64_t listener_paused_until;
	size_t scrape_bytes; /* text of the scrapes still being sent */
	struct pollfd *pfd; /* [0] the listener, [1 + i] conns[i] */
};

/*
 * How many connections may be open at once: CONN_CAP_MAX, or fewer so that
 * they and FD_RESERVE stay under RLIMIT_NOFILE (accept() must not be what
 * runs out: the scrapes need descriptors too).
 */
static size_t connection_cap(void)
{
	struct rlimit rl;

	if (getrlimit(RLIMIT_NOFILE, &rl) != 0 || rl.rlim_cur == RLIM_INFINITY)
		return CONN_CAP_MAX;
	if (rl.rlim_cur <= FD_RESERVE + 1)
		return 1;
	return rl.rlim_cur - FD_RESERVE < CONN_CAP_MAX ? (size_t)(rl.rlim_cur - FD_RESERVE)
						       : CONN_CAP_MAX;
}

static void scrape_body_put(struct server *s, struct scrape_body *b)
{
	if (!b || --b->refs)
		return;
	s->scrape_bytes -= b->len;
	free(b->text);
	free(b);
}

static void close_conn(struct server *s, struct conn *c)
{
	close(c->fd);
	scrape_body_put(s, c->scrape);
	c->scrape = NULL;
	c->fd = -1;
	c->state = CONN_FREE;
}

/* Write what the socket takes now: 1 all sent, 0 more to send later, -1 failed. */
static int send_more(struct conn *c)
{
	size_t total = c->head_len + c->body_len;

	while (c->sent < total) {
		struct iovec iov[2];
		struct msghdr m = { .msg_iov = iov };
		size_t body_sent = c->sent > c->head_len ? c->sent - c->head_len : 0;
		ssize_t w;

		if (c->sent < c->head_len)
			iov[m.msg_iovlen++] =
				(struct iovec){ c->head + c->sent, c->head_len - c->sent };
		iov[m.msg_iovlen++] =
			(struct iovec){ (char *)c->body + body_sent, c->body_len - body_sent };
		w = sendmsg(c->fd, &m, MSG_NOSIGNAL | MSG_DONTWAIT);
		if (w < 0 && errno == EINTR)
			continue;
		if (w < 0)
			return errno == EAGAIN || errno == EWOULDBLOCK ? 0 : -1;
		c->sent += (size_t)w;
	}
	return 1;
}

/*
 * Start answering C with STATUS and BODY (LEN bytes, static or owned by
 * SCRAPE, of which C takes a reference); the rest is written as the
 * client reads, within ANSWER_DEADLINE_NS.
 */
static void answer(struct server *s, struct conn *c, const char *status, const char *type,
		   const char *body, size_t len, struct scrape_body *scrape)
{
	int n = snprintf(c->head, sizeof(c->head),
			 "HTTP/1.1 %s\r\nContent-Type: %s\r\nContent-Length: %zu\r\n"
			 "Connection: close\r\n\r\n",
			 status, type, len);

	c->head_len = (size_t)n < sizeof(c->head) ? (size_t)n : sizeof(c->head) - 1;
	c->body = body;
	c->body_len = len;
	c->sent = 0;
	c->scrape = scrape;
	if (scrape)
		scrape->refs++;
	c->state = CONN_ANSWERING;
	c->deadline_ns = ma_now_ns() + ANSWER_DEADLINE_NS;
	if (send_more(c) != 0)
		close_conn(s, c);
}

static void answer_text(struct server *s, struct conn *c, const char *status, const char *text)
{
	answer(s, c, status, "text/plain", text, strlen(text), NULL);
}

/* The end of the request head in the GOT bytes of REQ, or NULL. */
static const char *head_end(const char *req, size_t got)
{
	const char *crlf = memmem(req, got, "\r\n\r\n", 4), *lf = memmem(req, got, "\n\n", 2);

	return crlf && (!lf || crlf < lf) ? crlf : lf;
}

/*
 * The format a request asks for: OpenMetrics to a client that names it in
 * its Accept header (Prometheus does, first) or sends no Accept header
 * (what this exporter always answered); the text format 0.0.4 to any
 * other, as Prometheus's own client libraries do: curl (Accept: any type) and
 * browsers get text/plain, which promtool check metrics reads.
 */
static enum ma_om_format format_asked(const char *head)
{
	for (const char *line = strchr(head, '\n'); line; line = strchr(line, '\n')) {
		char value[REQUEST_MAX];

		line++;
		if (strncasecmp(line, "Accept:", 7) != 0)
			continue;
		snprintf(value, sizeof(value), "%.*s", (int)strcspn(line, "\r\n"), line);
		return strcasestr(value, "application/openmetrics-text") ? MA_OM_OPENMETRICS
									 : MA_OM_PROMETHEUS_TEXT;
	}
	return MA_OM_OPENMETRICS;
}

/* C's request head is all there (or too large): answer it, or queue it for the scrape. */
static void take_request(struct server *s, struct conn *c)
{
	static const char not_found[] = "memattach exporter: metrics at /metrics\n";
	char method[8] = "", path[256] = "";

	if (!head_end(c->req, c->got)) {
		answer_text(s, c, "431 Request Header Fields Too Large", "request too large\n");
	} else if (memchr(c->req, '\0', c->got) || sscanf(c->req, "%7s %255s", method, path) != 2) {
		answer_text(s, c, "400 Bad Request", "bad request\n");
	} else if (strcmp(method, "GET") != 0) {
		answer_text(s, c, "405 Method Not Allowed", "GET only\n");
	} else if (strcmp(path, "/metrics") != 0 && strncmp(path, "/metrics?", 9) != 0) {
		answer_text(s, c, "404 Not Found", not_found);
	} else {
		c->format = format_asked(c->req);
		c->state = CONN_WANTS_METRICS;
	}
}

/* Read what has arrived: 1 the head is whole (or the buffer full), 0 more to come, -1 closed. */
static int read_more(struct conn *c)
{
	for (;;) {
		ssize_t r = recv(c->fd, c->req + c->got, REQUEST_MAX - 1 - c->got, MSG_DONTWAIT);

		if (r == 0)
			return -1;
		if (r < 0 && errno == EINTR)
			continue;
		if (r < 0)
			return errno == EAGAIN || errno == EWOULDBLOCK ? 0 : -1;
		c->got += (size_t)r;
		c->req[c->got] = '\0';
		if (head_end(c->req, c->got) || c->got == REQUEST_MAX - 1)
			return 1;
	}
}

static void on_readable(struct server *s, struct conn *c)
{
	int rc = read_more(c);

	if (rc < 0)
		close_conn(s, c);
	else if (rc > 0)
		take_request(s, c);
}

static void on_writable(struct server *s, struct conn *c)
{
	if (send_more(c) != 0)
		close_conn(s, c);
}

/* The I/O poll() reported, connection by connection. */
static void serve_ready(struct server *s)
{
	for (size_t i = 0; i < s->cap; i++) {
		struct conn *c = &s->conns[i];
		short ev = s->pfd[1 + i].revents;

		if (c->state == CONN_FREE || !ev)
			continue;
		if (c->state == CONN_READING && (ev & (POLLIN | POLLHUP | POLLERR)))
			on_readable(s, c);
		else if (c->state == CONN_ANSWERING && (ev & (POLLOUT | POLLHUP | POLLERR)))
			on_writable(s, c);
	}
}

/* One scrape's text in FORMAT, or NULL (out of memory). */
static struct scrape_body *render(struct server *s, const struct ma_om_target *t, size_t n,
				  enum ma_om_format format)
{
	struct scrape_body *b = calloc(1, sizeof(*b));
	FILE *f;

	if (!b || !(f = open_memstream(&b->text, &b->len))) {
		free(b);
		return NULL;
	}
	ma_om_write_format(f, t, n, true, format);
	if (fclose(f) != 0) {
		free(b->text);
		free(b);
		return NULL;
	}
	b->refs = 1;
	s->scrape_bytes += b->len;
	return b;
}

/*
 * Answer every /metrics request read whole in this pass from one scrape:
 * clients asking together cost the targets one borrow each, not one per
 * client.
 */
static void answer_metrics(struct exporter *e, struct server *s)
{
	static struct ma_om_target t[MAX_TARGETS];
	struct scrape_body *body[2] = { NULL, NULL };
	bool wanted[2] = { false, false }, any = false;
	size_t n, failed;

	for (size_t i = 0; i < s->cap; i++)
		if (s->conns[i].state == CONN_WANTS_METRICS)
			any = wanted[s->conns[i].format] = true;
	if (!any)
		return;
	n = scrape_targets(e, t, &failed);
	for (int f = 0; f < 2; f++)
		if (wanted[f])
			body[f] = render(s, t, n, (enum ma_om_format)f);
	release_targets(t, n);
	for (size_t i = 0; i < s->cap; i++) {
		struct conn *c = &s->conns[i];
		struct scrape_body *b = body[c->format];

		if (c->state != CONN_WANTS_METRICS)
			continue;
		if (b)
			answer(s, c, "200 OK", content_types[c->format], b->text, b->len, b);
		else
			answer_text(s, c, "500 Internal Server Error", "out of memory\n");
	}
	scrape_body_put(s, body[0]);
	scrape_body_put(s, body[1]);
}

/*
 * Answers to clients that do not read hold their scrape's text: past
 * ANSWER_BYTES_MAX together, the oldest such answers are dropped.
 */
static void bound_answer_memory(struct server *s)
{
	while (s->scrape_bytes > ANSWER_BYTES_MAX) {
		struct conn *oldest = NULL;

		for (size_t i = 0; i < s->cap; i++) {
			struct conn *c = &s->conns[i];

			if (c->state == CONN_ANSWERING && c->scrape &&
			    (!oldest || c->deadline_ns < oldest->deadline_ns))
				oldest = c;
		}
		if (!oldest)
			return;
		close_conn(s, oldest);
	}
}

/*
 * Connections whose deadline (request or answer) had passed when poll()
 * returned are closed.  Not the time now: what a client sent while the
 * loop was busy scraping is read in the next pass before it is judged.
 */
static void close_expired(struct server *s, uint64_t polled_ns)
{
	for (size_t i = 0; i < s->cap; i++)
		if (s->conns[i].state != CONN_FREE && polled_ns >= s->conns[i].deadline_ns)
			close_conn(s, &s->conns[i]);
}

/*
 * The slot a new connection would take: a free one, else the oldest
 * connection still sending its request once it has had READ_GRACE_NS to
 * send it.  A scraper sends its request as soon as it connects, so the
 * ones that linger are idle or dripping; refusing new connections instead
 * would let whoever holds the slots keep Prometheus out for as long as
 * they reconnect.  The grace is what keeps a flood of reconnections from
 * pushing out a scraper whose request is still on its way (on a loaded
 * machine it can take tens of ms): no connection leaves for a newer one
 * before it was given the time to ask.  NULL if none can be taken now;
 * then *WAKE_NS is when one can (0: when an answer ends).
 */
static struct conn *slot_for_new(struct server *s, uint64_t now, uint64_t *wake_ns)
{
	struct conn *oldest = NULL;

	for (size_t i = 0; i < s->cap; i++) {
		struct conn *c = &s->conns[i];

		if (c->state == CONN_FREE)
			return c;
		if (c->state == CONN_READING && (!oldest || c->opened_ns < oldest->opened_ns))
			oldest = c;
	}
	*wake_ns = oldest ? oldest->opened_ns + READ_GRACE_NS : 0;
	return oldest && now >= *wake_ns ? oldest : NULL;
}

/*
 * Accept what waits, up to half the cap per pass, while a slot can take
 * it; otherwise the backlog waits (the kernel keeps it in order, so a
 * scraper queued behind a flood is reached, its request there by then).
 */
static void accept_new(struct server *s)
{
	size_t per_pass = s->cap > 1 ? s->cap / 2 : 1;

	for (size_t i = 0; i < per_pass; i++) {
		uint64_t now = ma_now_ns(), wake_ns;
		struct conn *c = slot_for_new(s, now, &wake_ns);
		int fd;

		if (!c) {
			s->listener_paused_until = wake_ns ? wake_ns : now + LISTENER_PAUSE_NS;
			return;
		}
		fd = accept4(s->lfd, NULL, NULL, SOCK_NONBLOCK | SOCK_CLOEXEC);
		if (fd < 0) {
			bool out_of_room = errno == EMFILE || errno == ENFILE || errno == ENOBUFS ||
					   errno == ENOMEM;

			/* Rather than spin on a backlog we cannot take now. */
			if (out_of_room)
				s->listener_paused_until = now + LISTENER_PAUSE_NS;
			return;
		}
		if (c->state != CONN_FREE)
			close_conn(s, c);
		c->fd = fd;
		c->state = CONN_READING;
		c->opened_ns = now;
		c->deadline_ns = c->opened_ns + REQUEST_DEADLINE_NS;
		c->got = 0;
		c->scrape = NULL;
	}
}

/* Fill the poll set; returns the poll timeout in ns until the nearest deadline, -1 none. */
static int64_t prepare_poll(struct server *s)
{
	uint64_t now = ma_now_ns(), next = UINT64_MAX;
	bool paused = now < s->listener_paused_until;

	s->pfd[0] = (struct pollfd){ .fd = paused ? -1 : s->lfd, .events = POLLIN };
	if (paused)
		next = s->listener_paused_until;
	for (size_t i = 0; i < s->cap; i++) {
		struct conn *c = &s->conns[i];

		s->pfd[1 + i] = (struct pollfd){ .fd = -1 };
		if (c->state == CONN_FREE)
			continue;
		s->pfd[1 + i].fd = c->fd;
		s->pfd[1 + i].events = c->state == CONN_ANSWERING ? POLLOUT : POLLIN;
		if (c->deadline_ns < next)
			next = c->deadline_ns;
	}
	if (next == UINT64_MAX)
		return -1;
	return next > now ? (int64_t)(next - now) : 0;
}

/*
 * poll() until something happens, the nearest deadline, or a stop signal.
 * The stop signals are blocked between the look at ma_interrupted and
 * ppoll(), which unblocks them while it waits: one arriving in between
 * is not lost (it ends the ppoll instead).
 */
static void wait_for_events(struct server *s, int64_t timeout_ns)
{
	struct timespec ts = { (time_t)(timeout_ns / 1000000000), (long)(timeout_ns % 1000000000) };
	sigset_t stops, old;

	sigemptyset(&stops);
	sigaddset(&stops, SIGINT);
	sigaddset(&stops, SIGTERM);
	sigaddset(&stops, SIGHUP);
	sigaddset(&stops, SIGQUIT);
	sigprocmask(SIG_BLOCK, &stops, &old);
	if (!ma_interrupted && ppoll(s->pfd, 1 + s->cap, timeout_ns < 0 ? NULL : &ts, &old) < 0)
		for (size_t i = 0; i <= s->cap; i++)
			s->pfd[i].revents = 0;
	sigprocmask(SIG_SETMASK, &old, NULL);
}

static void serve(struct exporter *e, struct server *s)
{
	while (!ma_interrupted) {
		uint64_t polled_ns;

		wait_for_events(s, prepare_poll(s));
		if (ma_interrupted)
			break;
		polled_ns = ma_now_ns();
		serve_ready(s);
		answer_metrics(e, s);
		bound_answer_memory(s);
		/* After the scrape: a request read whole in this pass is answered, not expired. */
		close_expired(s, polled_ns);
		/* Last: the slots of this pass's poll set are all handled before one is reused. */
		if (s->pfd[0].revents & POLLIN)
			accept_new(s);
	}
	for (size_t i = 0; i < s->cap; i++)
		if (s->conns[i].state != CONN_FREE)
			close_conn(s, &s->conns[i]);
}

static int run_server(struct exporter *e)
{
	struct server s = { .cap = connection_cap() };

	if ((s.lfd = open_listener(e->listen)) < 0)
		return ma_cmd_error("export", s.lfd == MA_E_USAGE ? MA_EXIT_USAGE : MA_EXIT_FAIL,
				    "%s", ma_errmsg());
	s.conns = calloc(s.cap, sizeof(*s.conns));
	s.pfd = calloc(1 + s.cap, sizeof(*s.pfd));
	if (!s.conns || !s.pfd) {
		close(s.lfd);
		free(s.conns);
		free(s.pfd);
		return ma_cmd_error("export", MA_EXIT_FAIL, "out of memory");
	}
	for (size_t i = 0; i < s.cap; i++)
		s.conns[i].fd = -1;
	ma_cmd_note("export", "serving /metrics on %s (at most %zu connections)", e->listen, s.cap);
	serve(e, &s);
	close(s.lfd);
	free(s.conns);
	free(s.pfd);
	return MA_EXIT_OK;
}

/* The milliseconds after option ARGV[I] into *OUT; 0, or a usage error. */
/* --allow-eintr-wait: the default now, the old spelling accepted (ctx: the exporter). */
static int allow_eintr_wait(const struct ma_opt *o, const char *value)
{
	(void)value;
	((struct exporter *)o->ctx)->strict = false;
	return 0;
}

/* --pid PID, repeatable (ctx: the exporter). */
static int add_pid(const struct ma_opt *o, const char *value)
{
	struct exporter *e = o->ctx;

	if (!ma_parse_pid(value, &e->pids[e->npids]))
		return -1;
	if (++e->npids == MAX_TARGETS)
		return ma_usage_error("export", "more than %d --pid", MAX_TARGETS - 1);
	return 0;
}
static int parse_args(int argc, char **argv, struct exporter *e)
{
	const char *format = NULL;
	long deadline = e->deadline_ms, budget = e->budget_ms;
	const struct ma_opt opts[] = {
		{ .kind = MA_OPT_STR, .name = "--listen", .metavar = "ADDR", .dst = &e->listen,
		  .in_args = true, .help = "HOST:PORT to listen on (e.g. 127.0.0.1:9464)" },
		{ .kind = MA_OPT_CALL, .name = "--pid", .metavar = "PID", .takes_value = true,
		  .call = add_pid, .ctx = e, .in_args = true, .help = "a process to export; repeatable" },
		{ .kind = MA_OPT_STR, .name = "--match", .metavar = "REGEX", .dst = &e->match,
		  .in_args = true,
		  .help = "export every jemalloc process whose name (comm) matches the extended REGEX, "
			  "looked up again at each scrape" },
		{ .kind = MA_OPT_DURATION, .name = "--timeout", .metavar = "TIME", .dst = &deadline,
		  .unit_ms = 1, .min = 1, .max = 600000,
		  .help = "per target, give up finding a safe thread after TIME (milliseconds, or with "
			  "a unit: 500ms, 2s; default 1000ms)" },
		{ .kind = MA_OPT_DURATION, .name = "--scrape-timeout", .metavar = "TIME", .dst = &budget,
		  .unit_ms = 1, .min = 1, .max = 600000,
		  .help = "a whole scrape reads targets for at most TIME (5s, below Prometheus's 10 s), "
			  "those that answered last time first; the rest count as failed this time" },
		MA_FLAG("--once", &e->once, "print one scrape on stdout and exit (no server)"),
		MA_STR("--format", "FMT", &format,
		       "what --once prints: openmetrics (the default) or prometheus (text format 0.0.4)"),
		MA_FLAG("--json", &e->json,
			"what --once prints: the same readings as one JSON object, a member of "
			"\"targets\" per process (the keys of stats --json and bins --json)"),
		MA_FLAG("--strict", &e->strict,
			"never stop a thread blocked in epoll_wait and the like (by default, an event "
			"loop's thread such as redis's is borrowed when no better one exists: its wait is "
			"issued again at once; only a memattach killed within microseconds of that stop "
			"leaves it an EINTR)"),
		{ .kind = MA_OPT_CALL, .name = "--allow-eintr-wait", .call = allow_eintr_wait, .ctx = e,
		  .hidden = true },
		MA_OPTS_END,
	};
	int rc = ma_opts_parse(argc, argv, &(struct ma_cmd_spec){
		.cmd = argv[0], .args = "--listen ADDR (--pid PID ... | --match REGEX)", .about = about,
		.opts = opts,
		.footer = "exit status: 0 stopped by SIGINT/SIGTERM or --once done, 1 cannot listen\n"
			  "             or (--once) a target could not be read, 2 usage error" });

	if (rc)
		return rc;
	e->deadline_ms = (int)deadline;
	e->budget_ms = (int)budget;
	if (!!e->npids == !!e->match)
		return ma_usage_error(argv[0], "give --pid PID (one or more) or --match REGEX");
	if (!e->listen && !e->once)
		return ma_usage_error(argv[0], "--listen HOST:PORT is required (or --once)");
	if (e->json && !e->once)
		return ma_usage_error(argv[0], "--json is for --once (over HTTP, Prometheus reads "
					       "OpenMetrics)");
	if (e->json && format)
		return ma_usage_error(argv[0], "--json and --format %s: choose one output", format);
	if (format && !e->once)
		return ma_usage_error(argv[0], "--format is for --once (over HTTP, the client's "
					       "Accept header chooses)");
	if (format && strcmp(format, "prometheus") == 0)
		e->once_format = MA_OM_PROMETHEUS_TEXT;
	else if (format && strcmp(format, "openmetrics") != 0)
		return ma_usage_error(argv[0], "--format '%s': expected openmetrics or prometheus",
				      format);
	if (e->match && regcomp(&e->re, e->match, REG_EXTENDED | REG_NOSUB) != 0)
		return ma_usage_error(argv[0], "--match '%s': not a valid extended regex", e->match);
	return 0;
}

int cmd_export(int argc, char **argv)
{
	static struct exporter e = { .deadline_ms = 1000, .budget_ms = 5000 };
	int rc;

	if ((rc = parse_args(argc, argv, &e)))
		return rc < 0 ? MA_EXIT_OK : rc;
	ma_install_signal_guards();
	if (e.once) {
		struct addrinfo *res;

		/* No server, but a bad --listen is still an error. */
		if (e.listen && resolve_listen(e.listen, &res))
			return ma_cmd_error(argv[0], MA_EXIT_USAGE, "%s", ma_errmsg());
		if (e.listen)
			freeaddrinfo(res);
		rc = scrape_once(&e);
	} else {
		/* The signal guards set ma_interrupted (no SA_RESTART): ppoll() sees it. */
		rc = run_server(&e);
	}
	if (e.match)
		regfree(&e.re);
	return rc;
}
