#include <stdio.h>

#include "tools/commands.h"

int cmd_version(int argc, char **argv) {
    (void)argc;
    (void)argv;
    printf("muser %s\n", MUSER_VERSION);
    return 0;
}
