/* special.h — special tokens in raw text: the trie, built by the loader,
 * and the partition of a text before tokenizing. */
#ifndef MU_SPECIAL_H
#define MU_SPECIAL_H

#include <stdbool.h>
#include <stddef.h>

#include "text/vocab_internal.h"

/* Builds v's special-token trie and priorities from the attributes. */
int mu_special_build(struct mu_vocab *v);

/* A text fragment or a matched special token, in text order. */
typedef struct mu_fragment {
    size_t off, len; /* raw text (token < 0)                     */
    int32_t token;   /* special token id, or -1 for raw text      */
} mu_fragment;

/* Splits text at special tokens as llama.cpp does (longest tokens first,
 * leftmost occurrences, LSTRIP/RSTRIP). Returns the fragment count and a
 * malloc'd array in *frags, or a negative status. */
int mu_special_partition(const struct mu_vocab *v, const char *text, size_t len, bool parse_special,
                         mu_fragment **frags);

#endif
