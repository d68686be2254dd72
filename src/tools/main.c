/* main.c — the `muser` command: one binary, one subcommand per job. */
#include <stdbool.h>
#include <stdio.h>
#include <string.h>

#include "tools/commands.h"

static const struct {
    const char *name;
    int (*fn)(int argc, char **argv);
    const char *help;
} commands[] = {
#define MU_COMMAND(name, fn, help) {name, fn, help},
#include "tools/command_list.h"
#undef MU_COMMAND
};

static void usage(FILE *out) {
    fprintf(out, "usage: muser <command> [options]\n       muser help <command>   (or muser <command> --help)\n\n"
                 "commands:\n");
    for (size_t i = 0; i < sizeof commands / sizeof commands[0]; i++)
        fprintf(out, "  %-10s %s\n", commands[i].name, commands[i].help);
    fprintf(out, "\n  -h, --help      this list\n  --version       the version\n");
}

static int find(const char *name) {
    for (size_t i = 0; i < sizeof commands / sizeof commands[0]; i++)
        if (!strcmp(name, commands[i].name)) return (int)i;
    return -1;
}

int main(int argc, char **argv) {
    if (argc < 2) {
        usage(stderr);
        return 2;
    }
    if (!strcmp(argv[1], "--help") || !strcmp(argv[1], "-h") || (!strcmp(argv[1], "help") && argc == 2)) {
        usage(stdout);
        return 0;
    }
    if (!strcmp(argv[1], "--version")) {
        printf("muser %s\n", MUSER_VERSION);
        return 0;
    }
    const bool help = !strcmp(argv[1], "help"); /* muser help CMD: CMD --help */
    const int c = find(argv[help ? 2 : 1]);
    if (c < 0) {
        fprintf(stderr, "muser: unknown command '%s'\n\n", argv[help ? 2 : 1]);
        usage(stderr);
        return 2;
    }
    if (help) return commands[c].fn(2, (char *[]){argv[2], "--help", NULL});
    return commands[c].fn(argc - 1, argv + 1);
}
