/* spm.c — SentencePiece-style tokenization (tokenizer.ggml.model "llama"),
 * with llama.cpp's semantics:
 *   - spaces become U+2581 ("▁"), and a fragment at the start of the text
 *     or right after a special token gets a "▁" prefix when
 *     add_space_prefix is set;
 *   - the text is cut into UTF-8 characters (by lead byte, so ill-formed
 *     bytes are characters too);
 *   - adjacent symbols whose concatenation is a token are merged, highest
 *     token score first, leftmost first on ties;
 *   - a final symbol that is not a token is emitted as byte tokens <0xXX>
 *     (or as the byte's own one-character token, else the unknown token).
 */
#include <stdlib.h>
#include <string.h>

#include "text/spm.h"

#include "text/pair_heap.h"
#include "text/utf8.h"
#include "util/error.h"

typedef struct spm_symbol {
    int32_t prev, next;
    uint32_t start, len; /* len 0: merged away */
} spm_symbol;

typedef struct spm_pair {
    float score;
    int32_t left, right;
    uint32_t len; /* bytes of left + right when queued */
} spm_pair;

static inline bool pair_before(const spm_pair *a, const spm_pair *b) {
    return a->score > b->score || (a->score == b->score && a->left < b->left);
}

MU_PAIR_HEAP(heap, spm_pair, pair_before)


static int32_t lookup(const struct mu_vocab *v, const char *s, size_t n) {
    return mu_strmap_get(&v->token_map, v->text_arena, s, n);
}

static void queue_pair(const struct mu_vocab *v, const char *text, const spm_symbol *s, int32_t left, spm_pair *h,
                       size_t *nh) {
    if (left < 0 || s[left].next < 0) return;
    int32_t right = s[left].next;
    uint32_t len = s[left].len + s[right].len;
    int32_t id = lookup(v, text + s[left].start, len);
    if (id < 0) return;
    spm_pair p = {v->score[id], left, right, len};
    heap_push(h, nh, p);
}

static void emit_bytes(const struct mu_vocab *v, const char *s, size_t n, mu_tok_out *out) {
    for (size_t k = 0; k < n; k++) {
        int32_t b = v->byte_token[(uint8_t)s[k]];
        if (b < 0) b = lookup(v, s + k, 1); /* a vocabulary without <0xXX> */
        if (b < 0) b = v->sp.unk;
        if (b >= 0) mu_tok_emit(out, b);
    }
}

int mu_spm_fragment(const struct mu_vocab *v, const char *s, size_t n, bool add_prefix_space, mu_tok_scratch *sc,
                    mu_tok_out *out) {
    /* Escape: ' ' -> U+2581 (3 bytes). */
    size_t spaces = add_prefix_space ? 1 : 0;
    for (size_t i = 0; i < n; i++) spaces += s[i] == ' ';
    size_t tn = n + (add_prefix_space ? 1 : 0) + 2 * spaces;
    if (tn == 0) return 0;
    if (tn > INT32_MAX / 4) return mu_fail(MUSER_EINVAL, "a text fragment of %zu bytes is too long", n);
    int rc = mu_tok_grow(&sc->text, &sc->text_cap, tn);
    if (rc) return rc;
    char *t = sc->text;
    size_t o = 0;
    static const char lower_one_eighth_block[3] = {'\xE2', '\x96', '\x81'};
    if (add_prefix_space) {
        memcpy(t, lower_one_eighth_block, 3);
        o = 3;
    }
    for (size_t i = 0; i < n; i++) {
        if (s[i] == ' ') {
            memcpy(t + o, lower_one_eighth_block, 3);
            o += 3;
        } else {
            t[o++] = s[i];
        }
    }

    /* Symbols: UTF-8 characters by lead byte. */
    size_t ns = 0;
    for (size_t i = 0; i < tn; ns++) {
        size_t len = mu_utf8_lead_len((uint8_t)t[i]);
        i += len < tn - i ? len : tn - i;
    }
    if ((rc = mu_tok_grow(&sc->buf, &sc->cap, ns * sizeof(spm_symbol)))) return rc;
    if ((rc = mu_tok_grow(&sc->heap, &sc->heap_cap, 3 * ns * sizeof(spm_pair)))) return rc;
    spm_symbol *sym = sc->buf;
    spm_pair *heap = sc->heap;
    size_t k = 0;
    for (size_t i = 0; i < tn; k++) {
        size_t len = mu_utf8_lead_len((uint8_t)t[i]);
        if (len > tn - i) len = tn - i;
        sym[k].prev = (int32_t)k - 1;
        sym[k].next = k + 1 < ns ? (int32_t)k + 1 : -1;
        sym[k].start = (uint32_t)i;
        sym[k].len = (uint32_t)len;
        i += len;
    }

    size_t nh = 0;
    for (size_t i = 0; i + 1 < ns; i++) queue_pair(v, t, sym, (int32_t)i, heap, &nh);
    while (nh) {
        spm_pair p = heap_pop(heap, &nh);
        spm_symbol *l = &sym[p.left], *r = &sym[p.right];
        if (!l->len || !r->len || l->next != p.right || l->len + r->len != p.len) continue; /* stale */
        l->len += r->len;
        r->len = 0;
        l->next = r->next;
        if (r->next >= 0) sym[r->next].prev = p.left;
        queue_pair(v, t, sym, l->prev, heap, &nh);
        queue_pair(v, t, sym, p.left, heap, &nh);
    }

    for (int32_t i = 0; i >= 0; i = sym[i].next) {
        int32_t id = lookup(v, t + sym[i].start, sym[i].len);
        if (id >= 0) mu_tok_emit(out, id);
        else emit_bytes(v, t + sym[i].start, sym[i].len, out);
    }
    return 0;
}
