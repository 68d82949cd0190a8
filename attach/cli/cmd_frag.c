/*
 * cmd_frag.c - memattach frag start|report|stop PID: attribution of slab
 * fragmentation to allocation sites.  Not built yet: it needs an agent in
 * the target (allocation hooks), planned in a later issue.
 */
#include <stdio.h>

#include "commands.h"

static const char usage_text[] =
	"usage: memattach frag start PID [--shift N | --focus SIZE]\n"
	"       memattach frag report PID [--top N] [--json] [-o FILE]\n"
	"       memattach frag stop PID\n\n"
	"Attribute half-empty slabs to the allocation sites whose survivors pin\n"
	"them.  Not available in this version.\n";

int cmd_frag(int argc, char **argv)
{
	for (int i = 1; i < argc; i++) {
		if (ma_is_help(argv[i])) {
			fputs(usage_text, stdout);
			return MA_EXIT_OK;
		}
	}
	return ma_cmd_error(argv[0], MA_EXIT_FAIL, "not available in this version");
}
