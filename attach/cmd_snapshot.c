/* cmd_snapshot.c - not implemented yet. */
#include "commands.h"

int cmd_snapshot(int argc, char **argv)
{
	(void)argc;
	return ma_cmd_error(argv[0], MA_EXIT_FAIL, "not implemented yet");
}
