#include "util/error.h"

#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static _Thread_local char last_error[1024];
static int quiet = -1;

const char *muser_last_error(void) { return last_error; }

void mu_clear_error(void) { last_error[0] = 0; }

int mu_fail(int status, const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(last_error, sizeof last_error, fmt, ap);
    va_end(ap);
    return status;
}

int mu_fail_context(int status, const char *fmt, ...) {
    char prefix[512], old[sizeof last_error];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(prefix, sizeof prefix, fmt, ap);
    va_end(ap);
    memcpy(old, last_error, sizeof old);
    size_t n = strlen(prefix);
    if (n >= sizeof last_error) n = sizeof last_error - 1;
    memcpy(last_error, prefix, n);
    size_t m = strlen(old);
    if (m > sizeof last_error - 1 - n) m = sizeof last_error - 1 - n;
    memcpy(last_error + n, old, m);
    last_error[n + m] = 0;
    return status;
}

int mu_is_quiet(void) {
    if (quiet < 0) {
        const char *q = getenv("MUSER_QUIET");
        quiet = (q && *q && strcmp(q, "0") != 0) ? 1 : 0;
    }
    return quiet;
}

void mu_set_quiet(int q) { quiet = q; }

void mu_warn(const char *fmt, ...) {
    if (mu_is_quiet()) return;
    va_list ap;
    va_start(ap, fmt);
    fputs("muser: warning: ", stderr);
    vfprintf(stderr, fmt, ap);
    fputc('\n', stderr);
    va_end(ap);
}

void mu_info(const char *fmt, ...) {
    if (mu_is_quiet()) return;
    va_list ap;
    va_start(ap, fmt);
    fputs("muser: ", stderr);
    vfprintf(stderr, fmt, ap);
    fputc('\n', stderr);
    va_end(ap);
}
