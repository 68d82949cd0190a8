/*
 * Unit test: the exposition of a target whose name (comm) holds every kind
 * of byte a process name can: label values escape backslash, double quote
 * and line feed, keep other control bytes, and carry U+FFFD for bytes that
 * are not UTF-8 (Prometheus refuses a whole scrape over one invalid label
 * value); the two formats differ only where they must (a counter's HELP and
 * TYPE, UNIT, # EOF).
 */
#include <stdlib.h>
#include <string.h>

#include "check.h"
#include "openmetrics.h"

static char *expose(const struct ma_om_target *t, enum ma_om_format fmt)
{
	char *text = NULL;
	size_t len = 0;
	FILE *f = open_memstream(&text, &len);

	ma_om_write_format(f, t, 1, true, fmt);
	fclose(f);
	return text;
}

/* Every line is a comment or a sample whose labels close on the same line. */
static int lines_well_formed(const char *text)
{
	for (const char *line = text; *line;) {
		const char *end = strchr(line, '\n');

		if (!end)
			return 0;
		if (line[0] != '#' && !memmem(line, (size_t)(end - line), "\"} ", 3))
			return 0;
		line = end + 1;
	}
	return 1;
}

int main(void)
{
	struct ma_om_target t = { .pid = 42, .failures = 3 };
	const char *comm_label =
		"comm=\"q\\\"b\\\\s\\\\x01\\\\x1b\xEF\xBF\xBD\\n\xC3\xA9\\\\x9b\\\\u202e\"";
	char *om, *text;

	/*
	 * quote, backslash, two control bytes (as the text \x01, \x1b: a
	 * terminal must not obey them), a lone 0xff, a line feed, a valid é,
	 * a C1 control (U+009B, CSI), a bidirectional override (U+202E)
	 */
	strcpy(t.comm, "q\"b\\s\x01\x1b\xff\n\xC3\xA9\xC2\x9B\xE2\x80\xAE");
	om = expose(&t, MA_OM_OPENMETRICS);
	text = expose(&t, MA_OM_PROMETHEUS_TEXT);

	CHECK("OpenMetrics: the comm label escaped, not UTF-8 as U+FFFD, controls as text",
	      strstr(om, comm_label));
	CHECK("text 0.0.4: the same label value", strstr(text, comm_label));
	CHECK("OpenMetrics: no line broken by the name", lines_well_formed(om));
	CHECK("text 0.0.4: no line broken by the name", lines_well_formed(text));
	CHECK("OpenMetrics: the counter family is named without _total",
	      strstr(om, "# TYPE memattach_scrape_failures counter\n") &&
		      strstr(om, "# HELP memattach_scrape_failures Scrapes"));
	CHECK("OpenMetrics: its sample ends in _total",
	      strstr(om, "\nmemattach_scrape_failures_total{pid=\"42\","));
	CHECK("text 0.0.4: the counter's HELP and TYPE name the _total sample",
	      strstr(text, "# TYPE memattach_scrape_failures_total counter\n") &&
		      strstr(text, "# HELP memattach_scrape_failures_total Scrapes"));
	CHECK("OpenMetrics: UNIT lines and the closing # EOF",
	      strstr(om, "# UNIT jemalloc_allocated_bytes bytes\n") &&
		      strcmp(om + strlen(om) - 6, "# EOF\n") == 0);
	CHECK("text 0.0.4: no UNIT, no # EOF", !strstr(text, "# UNIT") && !strstr(text, "# EOF"));
	free(om);
	free(text);
	CHECK_DONE();
}
