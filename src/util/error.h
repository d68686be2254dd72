/* error.h — thread-local error messages behind muser_last_error().
 *
 * Every failing function sets a message with mu_fail() and returns the
 * status, so callers can write `return mu_fail(MUSER_EFORMAT, "...")`.
 */
#ifndef MU_ERROR_H
#define MU_ERROR_H

#include "muser.h"

#if defined(__GNUC__)
#define MU_PRINTF(a, b) __attribute__((format(printf, a, b)))
#else
#define MU_PRINTF(a, b)
#endif

/* Sets the thread's error message and returns status. */
int mu_fail(int status, const char *fmt, ...) MU_PRINTF(2, 3);
/* Prepends context ("loading x: ") to the current message; returns status. */
int mu_fail_context(int status, const char *fmt, ...) MU_PRINTF(2, 3);
void mu_clear_error(void);

/* Warnings go to stderr unless silenced (MUSER_QUIET=1 or mu_set_quiet). */
void mu_warn(const char *fmt, ...) MU_PRINTF(1, 2);
void mu_info(const char *fmt, ...) MU_PRINTF(1, 2);
void mu_set_quiet(int quiet);

/* "s" unless n is 1: "%d token%s", n, mu_plural_s(n). */
static inline const char *mu_plural_s(long long n) { return n == 1 ? "" : "s"; }
int mu_is_quiet(void);

#endif
