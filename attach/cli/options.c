/*
 * options.c - the option system (options.h): parsing against a command's
 * table, the messages for bad values, and the usage generated from it.
 */
#include <errno.h>
#include <limits.h>
#include <stdlib.h>
#include <string.h>

#include "cmdutil.h"
#include "commands.h"
#include "options.h"

#define USAGE_WIDTH 80
#define HELP_COLUMN 16

/* ---- values ---- */

/* A duration in ms as a person says it: "10 minutes", "1 s", "250 ms". */
static void say_ms(char *buf, size_t n, long ms)
{
	if (ms >= 60000 && ms % 60000 == 0)
		snprintf(buf, n, "%ld minute%s", ms / 60000, ms == 60000 ? "" : "s");
	else if (ms >= 1000 && ms % 1000 == 0)
		snprintf(buf, n, "%ld s", ms / 1000);
	else
		snprintf(buf, n, "%ldms", ms);
}

/* What a value of O must be, for its messages. */
static void want_of(const struct ma_opt *o, char *buf, size_t n)
{
	char lo[32], hi[32];

	switch (o->kind) {
	case MA_OPT_COUNT:
		if (o->zero_all)
			snprintf(buf, n, "a count, 0 or more (0 = all)");
		else if (o->max)
			snprintf(buf, n, "%s, %ld to %ld", o->metavar ? o->metavar : "N", o->min, o->max);
		else
			snprintf(buf, n, "%s, %ld or more", o->metavar ? o->metavar : "N", o->min);
		return;
	case MA_OPT_DURATION:
		say_ms(lo, sizeof(lo), o->min);
		say_ms(hi, sizeof(hi), o->max);
		snprintf(buf, n, "a duration%s%s%s%s: %s, or with a unit (500ms, 2s, 1m)",
			 o->min > 0 ? " from " : "", o->min > 0 ? lo : "",
			 o->max ? (o->min > 0 ? " to " : " up to ") : "", o->max ? hi : "",
			 o->unit_ms == 1000 ? "seconds" : "milliseconds");
		return;
	case MA_OPT_ID:
		snprintf(buf, n, "%s (a positive number)",
			 o->metavar && strcmp(o->metavar, "TID") == 0 ? "a thread id" : "a process id");
		return;
	default:
		snprintf(buf, n, "%s", o->metavar ? o->metavar : "a value");
	}
}

/* A bad (or, VAL NULL, missing) value of option NAME (as given). */
static int bad_value(const char *cmd, const struct ma_opt *o, const char *name, const char *val)
{
	char want[160];

	want_of(o, want, sizeof(want));
	if (!val)
		return ma_usage_error(cmd, "%s needs a value: %s", name, want);
	return ma_usage_error(cmd, "%s '%s': expected %s", name, val, want);
}

/* Store VAL in O's destination: 0, or 1 if it is not a value O takes. */
static int store(const struct ma_opt *o, const char *val)
{
	long v;
	pid_t id;

	switch (o->kind) {
	case MA_OPT_STR:
		*(const char **)o->dst = val;
		return 0;
	case MA_OPT_COUNT:
		if (!ma_parse_long(val, &v) || v < o->min || (o->max && v > o->max))
			return 1;
		*(long *)o->dst = o->zero_all && v == 0 ? LONG_MAX : v;
		return 0;
	case MA_OPT_DURATION:
		if (!ma_parse_duration_ms(val, o->unit_ms ? o->unit_ms : 1, &v) || v < o->min ||
		    (o->max && v > o->max))
			return 1;
		*(long *)o->dst = v;
		return 0;
	case MA_OPT_ID:
		if (!ma_parse_pid(val, &id))
			return 1;
		*(pid_t *)o->dst = id;
		return 0;
	default:
		return 1;
	}
}

int ma_opt_timeout(const struct ma_opt *o, const char *value)
{
	struct ma_session_opts *so = o->ctx;
	long v;

	if (!ma_parse_duration_ms(value, 1, &v) || v > 600000)
		return -1;
	so->deadline_ms = so->run_ms = (int)v;
	return 0;
}

int ma_opt_tid(const struct ma_opt *o, const char *value)
{
	struct ma_session_opts *so = o->ctx;

	if (!ma_parse_pid(value, &so->tid))
		return -1;
	/* Asked for by name: borrowed even if that creates its jemalloc state,
	 * or if it is in a wait a stop ends with EINTR. */
	so->fresh_ok = true;
	return 0;
}

int ma_opt_allow_eintr(const struct ma_opt *o, const char *value)
{
	(void)value;
	((struct ma_session_opts *)o->ctx)->strict = false; /* the default now */
	return 0;
}

/* ---- parsing ---- */

/* The option named ARG (up to LEN characters), or NULL. */
static const struct ma_opt *find(const struct ma_cmd_spec *c, const char *arg, size_t len)
{
	for (const struct ma_opt *o = c->opts; o && o->kind != MA_OPT_END; o++) {
		if (o->kind == MA_OPT_HEADING)
			continue;
		if ((strlen(o->name) == len && strncmp(o->name, arg, len) == 0) ||
		    (o->alias && strlen(o->alias) == len && strncmp(o->alias, arg, len) == 0))
			return o;
	}
	return NULL;
}

static bool takes_value(const struct ma_opt *o)
{
	return o->kind == MA_OPT_CALL ? o->takes_value : o->kind != MA_OPT_FLAG;
}

/* A timeout's or thread id's messages, as every other value's. */
static void want_of_call(const struct ma_opt *o, struct ma_opt *as)
{
	*as = *o;
	if (o->call == ma_opt_timeout) {
		as->kind = MA_OPT_DURATION;
		as->max = 600000;
	} else if (o->call == ma_opt_tid || (o->metavar && (strcmp(o->metavar, "PID") == 0 ||
							   strcmp(o->metavar, "TID") == 0))) {
		as->kind = MA_OPT_ID;
	}
}

/* Option O given as NAME, with VAL (NULL if none): 0 or an exit status. */
static int take(const struct ma_cmd_spec *c, const struct ma_opt *o, const char *name, const char *val)
{
	struct ma_opt as;
	int rc;

	if (!takes_value(o)) {
		if (val)
			return ma_usage_error(c->cmd, "%s takes no value", name);
		if (o->kind == MA_OPT_FLAG)
			*(bool *)o->dst = true;
		else if ((rc = o->call(o, NULL)))
			return rc < 0 ? MA_EXIT_USAGE : rc;
		return 0;
	}
	if (o->kind == MA_OPT_CALL) {
		want_of_call(o, &as);
		if (!val)
			return bad_value(c->cmd, &as, name, NULL);
		rc = o->call(o, val);
		return rc < 0 ? bad_value(c->cmd, &as, name, val) : rc;
	}
	if (!val || store(o, val))
		return bad_value(c->cmd, o, name, val);
	return 0;
}

/* A free argument: the PID while it is due, then the positional ones. */
static int take_free(const struct ma_cmd_spec *c, const char *arg, size_t *npos)
{
	if (c->pid && !*c->pid) {
		if (!ma_parse_pid(arg, c->pid))
			return ma_usage_error(c->cmd, "'%s' is not a process id (a number from 1 to %d)",
					      arg, INT_MAX);
		return 0;
	}
	if (c->positional && *npos < c->npositional) {
		c->positional[(*npos)++] = arg;
		return 0;
	}
	return ma_usage_error(c->cmd, "unexpected argument '%s'", arg);
}

int ma_opts_parse(int argc, char **argv, const struct ma_cmd_spec *c)
{
	size_t npos = 0;
	int rc;

	for (int i = 1; i < argc; i++)
		if (ma_is_help(argv[i])) {
			ma_opts_usage(stdout, c);
			return -1;
		}
	for (int i = 1; i < argc; i++) {
		const char *a = argv[i], *eq = strchr(a, '=');
		const struct ma_opt *o;
		bool negative = a[0] == '-' && a[1] >= '0' && a[1] <= '9';

		if (a[0] != '-' || a[1] == '\0' || (negative && c->pid && !*c->pid)) {
			if ((rc = take_free(c, a, &npos)))
				return rc;
			continue;
		}
		o = find(c, a, eq && a[1] == '-' ? (size_t)(eq - a) : strlen(a));
		if (!o)
			return ma_usage_error(c->cmd, "unknown option '%.*s'",
					      (int)(eq && a[1] == '-' ? eq - a : (long)strlen(a)), a);
		if (eq && a[1] == '-') {
			char name[64];

			snprintf(name, sizeof(name), "%.*s", (int)(eq - a), a);
			rc = take(c, o, name, eq + 1);
		} else if (takes_value(o)) {
			rc = take(c, o, a, i + 1 < argc ? argv[i + 1] : NULL);
			i += rc == 0;
		} else {
			rc = take(c, o, a, NULL);
		}
		if (rc)
			return rc;
	}
	return 0;
}

int ma_opts_parse_pid(int argc, char **argv, const char *about, const struct ma_opt *opts, pid_t *pid)
{
	return ma_opts_parse(argc, argv, &(struct ma_cmd_spec){ .cmd = argv[0], .args = "PID", .about = about,
							       .opts = opts, .footer = MA_FOOTER_EXIT,
							       .pid = pid });
}

bool ma_opts_given(int argc, char **argv, const char *name)
{
	size_t n = strlen(name);

	for (int i = 1; i < argc; i++)
		if (strncmp(argv[i], name, n) == 0 && (argv[i][n] == '\0' || argv[i][n] == '='))
			return true;
	return false;
}

/* ---- the usage ---- */

/* Write TEXT from column COL (already there) to the width, continuing at COL. */
static void put_wrapped(FILE *f, const char *text, size_t col)
{
	size_t at = col;

	while (*text) {
		size_t word = strcspn(text, " \n");

		if (at > col && at + 1 + word > USAGE_WIDTH) {
			fprintf(f, "\n%*s", (int)col, "");
			at = col;
		} else if (at > col) {
			fputc(' ', f);
			at++;
		}
		fwrite(text, 1, word, f);
		at += word;
		text += word;
		if (*text == '\n') {
			fprintf(f, "\n%*s", (int)col, "");
			at = col;
		}
		while (*text == ' ' || *text == '\n')
			text++;
	}
	fputc('\n', f);
}

/* "--top N, -n N" or "--json". */
static void label_of(const struct ma_opt *o, char *buf, size_t n)
{
	const char *m = takes_value(o) && o->metavar ? o->metavar : NULL;

	if (o->alias)
		snprintf(buf, n, "%s%s%s, %s%s%s", o->name, m ? " " : "", m ? m : "", o->alias,
			 m ? " " : "", m ? m : "");
	else
		snprintf(buf, n, "%s%s%s", o->name, m ? " " : "", m ? m : "");
}

static void synopsis(FILE *f, const struct ma_cmd_spec *c)
{
	char line[1024], item[128];
	size_t indent = strlen("usage: memattach ") + strlen(c->cmd) + 1, len;

	len = (size_t)snprintf(line, sizeof(line), "usage: memattach %s%s%s", c->cmd,
			       c->args ? " " : "", c->args ? c->args : "");
	fputs(line, f);
	for (const struct ma_opt *o = c->opts; o && o->kind != MA_OPT_END; o++) {
		const char *m = takes_value(o) && o->metavar ? o->metavar : NULL;
		size_t n;

		if (o->kind == MA_OPT_HEADING || o->hidden || o->in_args)
			continue;
		n = (size_t)snprintf(item, sizeof(item), "%s%s%s%s%s", o->required ? "" : "[", o->name,
				     m ? " " : "", m ? m : "", o->required ? "" : "]");
		if (len + 1 + n > USAGE_WIDTH) {
			fprintf(f, "\n%*s", (int)indent, "");
			len = indent;
		} else {
			fputc(' ', f);
			len++;
		}
		fputs(item, f);
		len += n;
	}
	fputc('\n', f);
}

void ma_opts_usage(FILE *f, const struct ma_cmd_spec *c)
{
	char label[160];

	synopsis(f, c);
	if (c->about)
		fprintf(f, "\n%s", c->about);
	fputc('\n', f);
	for (const struct ma_opt *o = c->opts; o && o->kind != MA_OPT_END; o++) {
		if (o->kind == MA_OPT_HEADING) {
			fprintf(f, "%s\n", o->help);
			continue;
		}
		if (o->hidden)
			continue;
		label_of(o, label, sizeof(label));
		fprintf(f, "  %s", label);
		if (2 + strlen(label) + 1 > HELP_COLUMN)
			fprintf(f, "\n%*s", HELP_COLUMN, "");
		else
			fprintf(f, "%*s", (int)(HELP_COLUMN - 2 - strlen(label)), "");
		put_wrapped(f, o->help ? o->help : "", HELP_COLUMN);
	}
	if (c->footer)
		fprintf(f, "%s\n", c->footer);
}
