/* buf.h — a growable byte buffer (text being built: JSON, prompts, SSE
 * frames, HTTP bodies). Appends never fail loudly: an allocation failure
 * sets oom, later appends do nothing, and mu_buf_take returns NULL. */
#ifndef MU_BUF_H
#define MU_BUF_H

#include <stdbool.h>
#include <stddef.h>

typedef struct mu_buf {
    char *data; /* always NUL-terminated once anything was written */
    size_t len, cap;
    bool oom; /* an allocation failed; contents are incomplete */
} mu_buf;

void mu_buf_put(mu_buf *b, const char *s, size_t n);
void mu_buf_puts(mu_buf *b, const char *s);
void mu_buf_putc(mu_buf *b, char c);
/* Hands the contents over (malloc'd, NUL-terminated; "" when empty) and
 * resets the buffer. NULL when out of memory. */
char *mu_buf_take(mu_buf *b);
void mu_buf_free(mu_buf *b);

#endif
