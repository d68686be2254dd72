/* tool_util.h — pieces shared by the subcommands. */
#ifndef MU_TOOL_UTIL_H
#define MU_TOOL_UTIL_H

#include <stddef.h>
#include <stdio.h>

#include "muser.h"
#include "tools/args.h"

/* Parses a session option at a->argv[a->i] (--backend, --lane, --kv, -t,
 * -c, -b). Returns true if handled; otherwise prints an error (unknown
 * option or bad value) and returns false. */
bool mu_tool_session_option(mu_args *a, muser_session_params *sp);
/* Help lines of those options with their defaults. backends: the
 * --backend values the command takes, its default first ("auto|cpu|cuda").
 * ctx_default: the default of -c, or NULL when the command sets the
 * context and the batch itself. */
void mu_tool_session_help(FILE *out, const char *backends, const char *ctx_default);
const char *mu_tool_backend_name(muser_backend b);

/* Whole file, malloc'd; prints the error and returns NULL on failure. */
void *mu_tool_read_file(const char *path, size_t *size);
/* False, printing where (what: "the prompt", a file name), when text is
 * not valid UTF-8: text is never silently changed into U+FFFD. */
bool mu_tool_utf8_ok(const char *cmd, const char *what, const char *text, size_t len);
/* Whitespace-separated token ids; prints the error and returns NULL on failure. */
muser_token *mu_tool_read_token_file(const char *path, int *n);

/* A tensor's type under a mix, as quantize and synth write it; when its
 * rows do not fit the rule's type, a line on stderr names the tensor, the
 * type it gets instead and why. rule_name: the name the mix's rules see. */
uint32_t mu_tool_mix_type(const char *cmd, int mix, const char *name, const char *rule_name, int n_dims,
                          int64_t row_len, int n_layer);
/* "F32 11, Q8_0 32, F16 5": how many of the n tensors have each type. */
void mu_tool_type_summary(const uint32_t *types, uint64_t n, char *buf, size_t cap);

#endif
