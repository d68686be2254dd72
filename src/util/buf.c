#include "util/buf.h"

#include <stdlib.h>
#include <string.h>

static bool buf_reserve(mu_buf *b, size_t extra) {
    if (b->oom) return false;
    if (b->len + extra + 1 <= b->cap) return true;
    size_t cap = b->cap ? b->cap : 256;
    while (cap < b->len + extra + 1) cap *= 2;
    char *p = realloc(b->data, cap);
    if (!p) {
        b->oom = true;
        return false;
    }
    b->data = p;
    b->cap = cap;
    return true;
}

void mu_buf_put(mu_buf *b, const char *s, size_t n) {
    if (!buf_reserve(b, n)) return;
    if (n) memcpy(b->data + b->len, s, n);
    b->len += n;
    b->data[b->len] = 0;
}

void mu_buf_puts(mu_buf *b, const char *s) { mu_buf_put(b, s, strlen(s)); }

void mu_buf_putc(mu_buf *b, char c) { mu_buf_put(b, &c, 1); }

char *mu_buf_take(mu_buf *b) {
    if (b->oom) {
        mu_buf_free(b);
        return NULL;
    }
    if (!b->data && !buf_reserve(b, 0)) return NULL;
    if (b->len == 0) b->data[0] = 0;
    char *s = b->data;
    b->data = NULL;
    b->len = b->cap = 0;
    return s;
}

void mu_buf_free(mu_buf *b) {
    free(b->data);
    b->data = NULL;
    b->len = b->cap = 0;
    b->oom = false;
}
