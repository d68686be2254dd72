#include "tools/args.h"

#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cpu/pool.h"

bool mu_arg_is(const mu_args *a, const char *short_name, const char *long_name) {
    const char *s = a->argv[a->i];
    return (short_name && !strcmp(s, short_name)) || (long_name && !strcmp(s, long_name));
}

bool mu_arg_str(mu_args *a, const char **out) {
    if (a->i + 1 >= a->argc) {
        fprintf(stderr, "muser %s: option %s needs a value\n", a->cmd, a->argv[a->i]);
        return false;
    }
    *out = a->argv[++a->i];
    return true;
}

bool mu_arg_int(mu_args *a, long lo, long hi, int *out) {
    const char *opt = a->argv[a->i], *s;
    if (!mu_arg_str(a, &s)) return false;
    char *end;
    errno = 0;
    long v = strtol(s, &end, 10);
    if (errno || end == s || *end || v < lo || v > hi) {
        fprintf(stderr, "muser %s: %s expects an integer in [%ld, %ld], got '%s'\n", a->cmd, opt, lo, hi, s);
        return false;
    }
    *out = (int)v;
    return true;
}

bool mu_arg_u64(mu_args *a, uint64_t *out) {
    const char *opt = a->argv[a->i], *s;
    if (!mu_arg_str(a, &s)) return false;
    char *end;
    errno = 0;
    unsigned long long v = strtoull(s, &end, 10);
    if (errno || end == s || *end || s[0] == '-') {
        fprintf(stderr, "muser %s: %s expects a non-negative integer, got '%s'\n", a->cmd, opt, s);
        return false;
    }
    *out = v;
    return true;
}

bool mu_arg_float(mu_args *a, double lo, double hi, float *out) {
    const char *opt = a->argv[a->i], *s;
    if (!mu_arg_str(a, &s)) return false;
    char *end;
    errno = 0;
    double v = strtod(s, &end);
    if (errno || end == s || *end || !isfinite(v) || v < lo || v > hi) {
        fprintf(stderr, "muser %s: %s expects a number in [%g, %g], got '%s'\n", a->cmd, opt, lo, hi, s);
        return false;
    }
    *out = (float)v;
    return true;
}

bool mu_arg_int_list(mu_args *a, long *out, int cap, int *n) {
    const char *opt = a->argv[a->i], *s;
    if (!mu_arg_str(a, &s)) return false;
    *n = 0;
    while (*s) {
        char *end;
        errno = 0;
        long v = strtol(s, &end, 10);
        if (errno || end == s || v < 0 || *n >= cap || (*end && *end != ',')) {
            fprintf(stderr, "muser %s: %s expects a comma-separated list of non-negative integers\n", a->cmd, opt);
            return false;
        }
        out[(*n)++] = v;
        s = *end ? end + 1 : end;
    }
    if (*n == 0) {
        fprintf(stderr, "muser %s: %s expects at least one value\n", a->cmd, opt);
        return false;
    }
    return true;
}

bool mu_arg_threads(mu_args *a, int *out) {
    const char *opt = a->argv[a->i], *s;
    return mu_arg_str(a, &s) && mu_threads_value(a->cmd, opt, s, out);
}

bool mu_threads_value(const char *cmd, const char *opt, const char *s, int *out) {
    char *end;
    errno = 0;
    long v = strtol(s, &end, 10);
    if (errno || end == s || *end || v < 1 || v > 1024) {
        fprintf(stderr, "muser %s: %s expects a thread count from 1 to 1024 (at least one thread runs the model), "
                        "got '%s'\n", cmd, opt, s);
        return false;
    }
    const int cores = mu_cpu_count();
    if (v > cores) {
        fprintf(stderr, "muser %s: %s %ld is more than the %d cores online; using %d\n", cmd, opt, v, cores, cores);
        v = cores;
    }
    *out = (int)v;
    return true;
}

bool mu_arg_positional(const mu_args *a) {
    const char *s = a->argv[a->i];
    return s[0] != '-' || s[1] == 0;
}

void mu_arg_unknown(const mu_args *a) {
    fprintf(stderr, "muser %s: %s '%s' (see muser %s --help)\n", a->cmd,
            mu_arg_positional(a) ? "unexpected argument" : "unknown option", a->argv[a->i], a->cmd);
}

bool mu_arg_require(const char *cmd, const void *value, const char *what) {
    if (value) return true;
    fprintf(stderr, "muser %s: %s is required (see muser %s --help)\n", cmd, what, cmd);
    return false;
}
