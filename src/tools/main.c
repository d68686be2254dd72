/* main.c — the `muser` command: one binary, one subcommand per job. */
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
    fprintf(out, "usage: muser <command> [options]   (muser <command> --help for details)\n\ncommands:\n");
    for (size_t i = 0; i < sizeof commands / sizeof commands[0]; i++)
        fprintf(out, "  %-10s %s\n", commands[i].name, commands[i].help);
}

int main(int argc, char **argv) {
    if (argc < 2 || !strcmp(argv[1], "--help") || !strcmp(argv[1], "-h") || !strcmp(argv[1], "help")) {
        usage(argc < 2 ? stderr : stdout);
        return argc < 2 ? 2 : 0;
    }
    if (!strcmp(argv[1], "--version")) {
        printf("muser %s\n", MUSER_VERSION);
        return 0;
    }
    for (size_t i = 0; i < sizeof commands / sizeof commands[0]; i++)
        if (!strcmp(argv[1], commands[i].name)) return commands[i].fn(argc - 1, argv + 1);
    fprintf(stderr, "muser: unknown command '%s'\n\n", argv[1]);
    usage(stderr);
    return 2;
}
