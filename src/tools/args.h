/* args.h — small helpers for subcommand option parsing. Each returns false
 * (after printing a message naming the option) when a value is missing or
 * malformed, so commands can exit with status 2 on usage errors. */
#ifndef MU_ARGS_H
#define MU_ARGS_H

#include <stdbool.h>
#include <stdint.h>

typedef struct mu_args {
    int argc, i;
    char **argv;
    const char *cmd;
} mu_args;

/* True when argv[i] equals one of the names (e.g. "-m", "--model"). */
bool mu_arg_is(const mu_args *a, const char *short_name, const char *long_name);
bool mu_arg_str(mu_args *a, const char **out);
bool mu_arg_int(mu_args *a, long lo, long hi, int *out);
bool mu_arg_u64(mu_args *a, uint64_t *out);
bool mu_arg_float(mu_args *a, double lo, double hi, float *out);
/* Parses a comma-separated list of non-negative integers (at most cap). */
bool mu_arg_int_list(mu_args *a, long *out, int cap, int *n);
/* A thread count from 1 to 1024, capped at the cores online with a notice
 * (threads beyond the cores only wait for each other). */
bool mu_arg_threads(mu_args *a, int *out);
/* The same for a value s given otherwise (opt names it in messages). */
bool mu_threads_value(const char *cmd, const char *opt, const char *s, int *out);
/* argv[i] is not an option ("-" alone, for stdin, is not one either). */
bool mu_arg_positional(const mu_args *a);
/* "unknown option" or "unexpected argument", naming it. */
void mu_arg_unknown(const mu_args *a);
/* False, naming what is missing ("-m MODEL"), when value is NULL. */
bool mu_arg_require(const char *cmd, const void *value, const char *what);

#endif
