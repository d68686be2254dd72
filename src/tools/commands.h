/* commands.h — entry points of the subcommands (one file each in tools/). */
#ifndef MU_COMMANDS_H
#define MU_COMMANDS_H

#include "muser.h"

#define MU_COMMAND(name, fn, help) int fn(int argc, char **argv);
#include "tools/command_list.h"
#undef MU_COMMAND

#endif
