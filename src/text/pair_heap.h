/* pair_heap.h — the binary min-heap both tokenizers keep their candidate
 * merges in, written once for any element type: MU_PAIR_HEAP(name, type,
 * before) defines name_push and name_pop, ordered by before(a, b) (true
 * when a must come out first). */
#ifndef MU_PAIR_HEAP_H
#define MU_PAIR_HEAP_H

#include <stddef.h>

#define MU_PAIR_HEAP(name, type, before)                                \
    static void name##_push(type *h, size_t *n, type p) {               \
        size_t i = (*n)++;                                              \
        while (i > 0) {                                                 \
            size_t parent = (i - 1) / 2;                                \
            if (!before(&p, &h[parent])) break;                         \
            h[i] = h[parent];                                           \
            i = parent;                                                 \
        }                                                               \
        h[i] = p;                                                       \
    }                                                                   \
    static type name##_pop(type *h, size_t *n) {                        \
        type top = h[0], last = h[--(*n)];                              \
        size_t i = 0;                                                   \
        for (;;) {                                                      \
            size_t c = 2 * i + 1;                                       \
            if (c >= *n) break;                                         \
            if (c + 1 < *n && before(&h[c + 1], &h[c])) c++;            \
            if (!before(&h[c], &last)) break;                           \
            h[i] = h[c];                                                \
            i = c;                                                      \
        }                                                               \
        h[i] = last;                                                    \
        return top;                                                     \
    }

#endif
