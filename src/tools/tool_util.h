/* tool_util.h — pieces shared by the subcommands. */
#ifndef MU_TOOL_UTIL_H
#define MU_TOOL_UTIL_H

#include <stddef.h>

#include "muser.h"
#include "tools/args.h"

/* Parses a session option at a->argv[a->i] (--backend, --lane, --kv, -t,
 * -c, -b). Returns true if handled; otherwise prints an error (unknown
 * option or bad value) and returns false. */
bool mu_tool_session_option(mu_args *a, muser_session_params *sp);
const char *mu_tool_backend_name(muser_backend b);

/* Whole file, malloc'd; prints the error and returns NULL on failure. */
void *mu_tool_read_file(const char *path, size_t *size);
/* Whitespace-separated token ids; prints the error and returns NULL on failure. */
muser_token *mu_tool_read_token_file(const char *path, int *n);

#endif
