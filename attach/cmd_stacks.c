/* cmd_stacks.c - placeholder until implemented below. */
#include "commands.h"

int cmd_stacks(int argc, char **argv)
{
	(void)argc;
	return ma_cmd_error(argv[0], MA_EXIT_FAIL, "not implemented yet");
}
