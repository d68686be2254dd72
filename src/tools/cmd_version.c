#include <stdio.h>

#include "tools/args.h"
#include "tools/commands.h"

int cmd_version(int argc, char **argv) {
    mu_args a = {argc, 1, argv, "version"};
    if (argc > 1 && mu_arg_is(&a, "-h", "--help")) {
        printf("usage: muser version\nPrints the version (as muser --version does).\n");
        return 0;
    }
    if (argc > 1) {
        mu_arg_unknown(&a);
        return 2;
    }
    printf("muser %s\n", MUSER_VERSION);
    return 0;
}
