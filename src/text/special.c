/* special.c — matching special tokens in raw text before tokenizing.
 *
 * llama.cpp's rule (tokenizer_st_partition): take the control, user-defined
 * and unknown tokens longest text first; for each, split every remaining
 * raw-text fragment at its leftmost non-overlapping occurrences. With
 * parse_special off, only user-defined tokens take part (so Muse Glimmer's
 * <|start|> and <|message|>, re-typed user-defined at load, always match).
 * A match of an LSTRIP/RSTRIP token also swallows the whitespace next to it
 * inside its fragment.
 *
 * We get the same result in one pass: a trie finds every occurrence of
 * every special token, then occurrences are taken in (priority, position)
 * order when all their bytes are still free. Text without any special
 * token costs one table lookup per byte.
 */
#include <ctype.h>
#include <stdlib.h>
#include <string.h>

#include "text/special.h"
#include "util/error.h"

static bool is_special(uint16_t attr) {
    return (attr & (MU_TOKEN_CONTROL | MU_TOKEN_USER_DEFINED | MU_TOKEN_UNKNOWN)) != 0;
}

static _Thread_local const struct mu_vocab *sort_vocab; /* qsort has no context argument */

static int by_priority(const void *a, const void *b) {
    int32_t x = *(const int32_t *)a, y = *(const int32_t *)b;
    uint32_t lx = sort_vocab->text_len[x], ly = sort_vocab->text_len[y];
    if (lx != ly) return lx > ly ? -1 : 1; /* longer text first */
    return x < y ? -1 : x > y;             /* then lower id (llama.cpp leaves ties unordered) */
}

int mu_special_build(struct mu_vocab *v) {
    int n_special = 0;
    size_t trie_cap = 1;
    for (int i = 0; i < v->n_tokens; i++)
        if (is_special(v->attr[i]) && v->text_len[i]) {
            n_special++;
            trie_cap += v->text_len[i];
        }
    for (int b = 0; b < 256; b++) v->root_child[b] = -1;
    v->special_order = malloc((size_t)v->n_tokens * sizeof *v->special_order);
    int32_t *ids = malloc((n_special ? (size_t)n_special : 1) * sizeof *ids);
    v->trie = malloc(trie_cap * sizeof *v->trie);
    if (!v->special_order || !ids || !v->trie) {
        free(ids);
        return mu_fail(MUSER_ENOMEM, "out of memory for the special-token table");
    }
    int k = 0;
    for (int i = 0; i < v->n_tokens; i++) {
        v->special_order[i] = -1;
        if (is_special(v->attr[i]) && v->text_len[i]) ids[k++] = i;
    }
    sort_vocab = v;
    qsort(ids, (size_t)n_special, sizeof *ids, by_priority);
    sort_vocab = NULL;

    v->n_trie = 0;
    v->max_special_len = 0;
    for (int r = 0; r < n_special; r++) {
        int32_t id = ids[r];
        v->special_order[id] = r;
        const uint8_t *t = (const uint8_t *)v->text_arena + v->text_off[id];
        uint32_t len = v->text_len[id];
        if (len > v->max_special_len) v->max_special_len = len;
        int32_t node = -1;
        for (uint32_t j = 0; j < len; j++) {
            int32_t *link = node < 0 ? &v->root_child[t[j]] : &v->trie[node].first_child;
            int32_t child = *link;
            if (node >= 0)
                while (child >= 0 && v->trie[child].byte != t[j]) child = v->trie[child].next_sibling;
            if (child < 0) {
                child = v->n_trie++;
                mu_trie_node *c = &v->trie[child];
                c->byte = t[j];
                c->token = -1;
                c->first_child = -1;
                c->next_sibling = node < 0 ? -1 : *link;
                *link = child;
            }
            node = child;
        }
        /* Two tokens with the same text: the first by priority keeps it. */
        if (v->trie[node].token < 0) v->trie[node].token = id;
    }
    free(ids);
    return 0;
}

typedef struct occurrence {
    int32_t order, token;
    size_t pos;
} occurrence;

static int by_order_then_pos(const void *a, const void *b) {
    const occurrence *x = a, *y = b;
    if (x->order != y->order) return x->order < y->order ? -1 : 1;
    return x->pos < y->pos ? -1 : x->pos > y->pos;
}

enum { BYTE_FREE = 0, BYTE_TOKEN_START = 1, BYTE_TOKEN_REST = 2, BYTE_STRIPPED = 3 };

static bool c_isspace(char c) { return c == ' ' || (c >= '\t' && c <= '\r'); }

int mu_special_partition(const struct mu_vocab *v, const char *text, size_t len, bool parse_special,
                         mu_fragment **frags) {
    *frags = NULL;
    const uint16_t skip = parse_special ? 0 : (MU_TOKEN_CONTROL | MU_TOKEN_UNKNOWN);
    occurrence *occ = NULL;
    size_t n_occ = 0, cap_occ = 0;
    const uint8_t *t = (const uint8_t *)text;
    for (size_t pos = 0; pos < len; pos++) {
        int32_t node = v->root_child[t[pos]];
        for (size_t j = pos; node >= 0;) {
            int32_t id = v->trie[node].token;
            if (id >= 0 && !(v->attr[id] & skip)) {
                if (n_occ == cap_occ) {
                    cap_occ = cap_occ ? cap_occ * 2 : 16;
                    occurrence *o = realloc(occ, cap_occ * sizeof *o);
                    if (!o) {
                        free(occ);
                        return mu_fail(MUSER_ENOMEM, "out of memory matching special tokens");
                    }
                    occ = o;
                }
                occ[n_occ++] = (occurrence){v->special_order[id], id, pos};
            }
            if (++j >= len) break;
            int32_t child = v->trie[node].first_child;
            while (child >= 0 && v->trie[child].byte != t[j]) child = v->trie[child].next_sibling;
            node = child;
        }
    }

    uint8_t *state = NULL;
    int32_t *token_at = NULL;
    if (n_occ) {
        state = calloc(len, 1);
        token_at = malloc(len * sizeof *token_at);
        if (!state || !token_at) {
            free(occ);
            free(state);
            free(token_at);
            return mu_fail(MUSER_ENOMEM, "out of memory matching special tokens");
        }
        qsort(occ, n_occ, sizeof *occ, by_order_then_pos);
        for (size_t i = 0; i < n_occ; i++) {
            size_t p = occ[i].pos, n = v->text_len[occ[i].token];
            bool free_span = true;
            for (size_t j = p; j < p + n && free_span; j++) free_span = state[j] == BYTE_FREE;
            if (!free_span) continue;
            state[p] = BYTE_TOKEN_START;
            token_at[p] = occ[i].token;
            for (size_t j = p + 1; j < p + n; j++) state[j] = BYTE_TOKEN_REST;
            uint16_t a = v->attr[occ[i].token];
            if (a & MU_TOKEN_LSTRIP)
                for (size_t j = p; j > 0 && state[j - 1] == BYTE_FREE && c_isspace(text[j - 1]); j--)
                    state[j - 1] = BYTE_STRIPPED;
            if (a & MU_TOKEN_RSTRIP)
                for (size_t j = p + n; j < len && state[j] == BYTE_FREE && c_isspace(text[j]); j++)
                    state[j] = BYTE_STRIPPED;
        }
    }
    free(occ);

    /* Fragments in text order: runs of free bytes and the matched tokens. */
    size_t n_frag = 0, cap_frag = 4;
    mu_fragment *f = malloc(cap_frag * sizeof *f);
    if (!f) {
        free(state);
        free(token_at);
        return mu_fail(MUSER_ENOMEM, "out of memory matching special tokens");
    }
    for (size_t pos = 0; pos < len;) {
        mu_fragment next;
        if (!state || state[pos] == BYTE_FREE) {
            size_t end = pos;
            while (end < len && (!state || state[end] == BYTE_FREE)) end++;
            next = (mu_fragment){pos, end - pos, -1};
            pos = end;
        } else if (state[pos] == BYTE_TOKEN_START) {
            next = (mu_fragment){pos, v->text_len[token_at[pos]], token_at[pos]};
            pos += next.len;
        } else {
            pos++; /* stripped whitespace */
            continue;
        }
        if (n_frag == cap_frag) {
            cap_frag *= 2;
            mu_fragment *g = realloc(f, cap_frag * sizeof *g);
            if (!g) {
                free(f);
                free(state);
                free(token_at);
                return mu_fail(MUSER_ENOMEM, "out of memory matching special tokens");
            }
            f = g;
        }
        f[n_frag++] = next;
    }
    free(state);
    free(token_at);
    if (n_frag > INT32_MAX) {
        free(f);
        return mu_fail(MUSER_EINVAL, "text too long");
    }
    *frags = f;
    return (int)n_frag;
}
