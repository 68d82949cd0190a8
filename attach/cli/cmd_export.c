/*
 * cmd_export.c - memattach export --listen ADDR (--pid PID... | --match
 * REGEX): a Prometheus exporter.  Each GET /metrics scrapes every target
 * once (one short thread borrow each, runs on one target take turns with
 * any other memattach) and answers in the OpenMetrics text format.  One
 * connection at a time: concurrent scrapes are served one after another.
 */
#include <arpa/inet.h>
#include <errno.h>
#include <netdb.h>
#include <regex.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/time.h>
#include <unistd.h>

#include "capture.h"
#include "cmdutil.h"
#include "commands.h"
#include "format.h"
#include "ma_error.h"
#include "openmetrics.h"
#include "remote.h"

#define MAX_TARGETS 256

static const char usage_text[] =
	"usage: memattach export --listen ADDR (--pid PID ... | --match REGEX)\n"
	"                        [--timeout MS] [--once] [--allow-eintr-wait]\n\n"
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
	"and a line on stderr, never the end of the exporter.  Scrapes are served\n"
	"one at a time, and runs on one target take turns with any other memattach.\n\n"
	"  --listen ADDR  HOST:PORT to listen on (e.g. 127.0.0.1:9464)\n"
	"  --pid PID      a process to export; repeatable\n"
	"  --match REGEX  export every jemalloc process whose name (comm) matches\n"
	"                 the extended REGEX, looked up again at each scrape\n"
	"  --timeout MS   per target, give up finding a safe thread after MS (1000)\n"
	"  --once         print one scrape on stdout and exit (no server)\n"
	"  --allow-eintr-wait\n"
	"                 if no other thread of a target can be borrowed, stop one\n"
	"                 blocked in epoll_wait and the like (an event loop such as\n"
	"                 redis's; a memattach killed right after that stop would\n"
	"                 leave the wait an EINTR)\n"
	"exit status: 0 stopped by SIGINT/SIGTERM or --once done, 1 cannot listen,\n"
	"             2 usage error\n";

struct exporter {
	const char *listen;
	pid_t pids[MAX_TARGETS];
	size_t npids;
	const char *match;
	regex_t re;
	int deadline_ms;
	bool allow_eintr_wait;
	bool once;
	/* failures so far, by pid (a counter must not reset between scrapes) */
	pid_t fail_pid[MAX_TARGETS];
	uint64_t fail_n[MAX_TARGETS];
	size_t nfail;
};

static uint64_t *failures_of(struct exporter *e, pid_t pid)
{
	for (size_t i = 0; i < e->nfail; i++)
		if (e->fail_pid[i] == pid)
			return &e->fail_n[i];
	if (e->nfail == MAX_TARGETS)
		return NULL;
	e->fail_pid[e->nfail] = pid;
	e->fail_n[e->nfail] = 0;
	return &e->fail_n[e->nfail++];
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

/* One scrape of every target into F. */
static void scrape(struct exporter *e, FILE *f)
{
	static struct ma_om_target t[MAX_TARGETS];
	pid_t pids[MAX_TARGETS];
	size_t n = resolve(e, pids);

	for (size_t i = 0; i < n; i++) {
		uint64_t *fails = failures_of(e, pids[i]);

		memset(&t[i], 0, sizeof(t[i]));
		struct ma_session_opts o = { .deadline_ms = e->deadline_ms,
					     .stop_eintr_wait = e->allow_eintr_wait };

		if (ma_scrape_target(pids[i], &o, &t[i]) != 0) {
			fprintf(stderr, "memattach export: scrape of process %d (%s): %s\n", pids[i],
				t[i].comm[0] ? ma_printable(t[i].comm) : "?", ma_errmsg());
			ma_err_clear();
			if (fails)
				(*fails)++;
		}
		t[i].failures = fails ? *fails : 0;
	}
	ma_om_write(f, t, n, true);
	for (size_t i = 0; i < n; i++)
		ma_bin_table_release(&t[i].bins);
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

static int open_listener(const char *addr)
{
	struct addrinfo *res, *a;
	int fd = -1, one = 1, rc;

	if ((rc = resolve_listen(addr, &res)))
		return rc;
	for (a = res; a; a = a->ai_next) {
		fd = socket(a->ai_family, a->ai_socktype | SOCK_CLOEXEC, a->ai_protocol);
		if (fd < 0)
			continue;
		setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one));
		if (bind(fd, a->ai_addr, a->ai_addrlen) == 0 && listen(fd, 16) == 0)
			break;
		close(fd);
		fd = -1;
	}
	freeaddrinfo(res);
	if (fd < 0)
		return ma_fail(MA_E_IO, "cannot listen on %s: %s", addr, strerror(errno));
	return fd;
}

static void reply(int fd, const char *status, const char *type, const char *body, size_t len)
{
	char head[256];
	int n = snprintf(head, sizeof(head),
			 "HTTP/1.1 %s\r\nContent-Type: %s\r\nContent-Length: %zu\r\n"
			 "Connection: close\r\n\r\n",
			 status, type, len);

	if (ma_write_all(fd, head, (size_t)n) == 0 && len)
		ma_write_all(fd, body, len);
	ma_err_clear();
}

/* Read the request head (bounded, with a timeout) and answer it. */
static void serve_one(struct exporter *e, int fd)
{
	struct timeval tv = { 5, 0 };
	char req[4096], method[8] = "", path[256] = "";
	size_t got = 0;

	setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof(tv));
	setsockopt(fd, SOL_SOCKET, SO_SNDTIMEO, &tv, sizeof(tv));
	while (got < sizeof(req) - 1) {
		ssize_t r = read(fd, req + got, sizeof(req) - 1 - got);

		if (r <= 0)
			break;
		got += (size_t)r;
		req[got] = '\0';
		if (strstr(req, "\r\n\r\n") || strstr(req, "\n\n"))
			break;
	}
	req[got] = '\0';
	if (sscanf(req, "%7s %255s", method, path) != 2) {
		reply(fd, "400 Bad Request", "text/plain", "bad request\n", 12);
		return;
	}
	if (strcmp(method, "GET") != 0) {
		reply(fd, "405 Method Not Allowed", "text/plain", "GET only\n", 9);
	} else if (strcmp(path, "/metrics") == 0 || strncmp(path, "/metrics?", 9) == 0) {
		char *body = NULL;
		size_t len = 0;
		FILE *f = open_memstream(&body, &len);

		if (!f) {
			reply(fd, "500 Internal Server Error", "text/plain", "out of memory\n", 14);
			return;
		}
		scrape(e, f);
		fclose(f);
		reply(fd, "200 OK", "application/openmetrics-text; version=1.0.0; charset=utf-8",
		      body, len);
		free(body);
	} else {
		static const char page[] = "memattach exporter: metrics at /metrics\n";

		reply(fd, "404 Not Found", "text/plain", page, sizeof(page) - 1);
	}
}

static int parse_args(int argc, char **argv, struct exporter *e)
{
	for (int i = 1; i < argc; i++) {
		long v;

		if (ma_is_help(argv[i])) {
			fputs(usage_text, stdout);
			return -1;
		} else if (strcmp(argv[i], "--listen") == 0 && i + 1 < argc) {
			e->listen = argv[++i];
		} else if (strcmp(argv[i], "--pid") == 0 && i + 1 < argc) {
			if (!ma_parse_pid(argv[i + 1], &e->pids[e->npids]))
				return ma_usage_error(argv[0], "--pid '%s': not a process id", argv[i + 1]);
			if (++e->npids == MAX_TARGETS)
				return ma_usage_error(argv[0], "more than %d --pid", MAX_TARGETS - 1);
			i++;
		} else if (strcmp(argv[i], "--match") == 0 && i + 1 < argc) {
			e->match = argv[++i];
		} else if (strcmp(argv[i], "--timeout") == 0 && i + 1 < argc) {
			if (!ma_parse_long(argv[i + 1], &v) || v <= 0 || v > 600000)
				return ma_usage_error(argv[0], "--timeout '%s': expected milliseconds, "
							       "1 to 600000", argv[i + 1]);
			e->deadline_ms = (int)v;
			i++;
		} else if (strcmp(argv[i], "--once") == 0) {
			e->once = true;
		} else if (strcmp(argv[i], "--allow-eintr-wait") == 0) {
			e->allow_eintr_wait = true;
		} else if (argv[i][0] == '-') {
			return ma_usage_error(argv[0], "unknown option '%s'", argv[i]);
		} else {
			return ma_arg_error(argv[0], usage_text, argc, argv, i);
		}
	}
	if (!!e->npids == !!e->match)
		return ma_usage_error(argv[0], "give --pid PID (one or more) or --match REGEX");
	if (!e->listen && !e->once)
		return ma_usage_error(argv[0], "--listen HOST:PORT is required (or --once)");
	if (e->match && regcomp(&e->re, e->match, REG_EXTENDED | REG_NOSUB) != 0)
		return ma_usage_error(argv[0], "--match '%s': not a valid extended regex", e->match);
	return 0;
}

int cmd_export(int argc, char **argv)
{
	static struct exporter e = { .deadline_ms = 1000 };
	int lfd, rc;

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
		scrape(&e, stdout);
		return MA_EXIT_OK;
	}
	if ((lfd = open_listener(e.listen)) < 0)
		return ma_cmd_error(argv[0], lfd == MA_E_USAGE ? MA_EXIT_USAGE : MA_EXIT_FAIL, "%s",
				    ma_errmsg());
	fprintf(stderr, "memattach export: serving /metrics on %s\n", e.listen);
	/* The signal guards set ma_interrupted without SA_RESTART: accept() returns to see it. */
	while (!ma_interrupted) {
		int fd = accept4(lfd, NULL, NULL, SOCK_CLOEXEC);

		if (fd < 0)
			continue;
		serve_one(&e, fd);
		close(fd);
	}
	close(lfd);
	if (e.match)
		regfree(&e.re);
	return MA_EXIT_OK;
}
