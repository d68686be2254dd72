/* tokenize.c — text -> ids: special-token partition, then BPE or SPM on
 * every raw-text fragment (llama.cpp's llama_vocab::impl::tokenize). */
#include <stdint.h>
#include <stdlib.h>

#include "text/pretokenize.h"
#include "text/special.h"
#include "text/spm.h"
#include "text/tok_buffers.h"
#include "util/error.h"

int mu_vocab_tokenize(const struct mu_vocab *v, const char *text, size_t len, bool add_bos, bool parse_special,
                      int32_t *ids, int cap) {
    if (!text && len) return mu_fail(MUSER_EINVAL, "tokenize: text is NULL");
    if (cap < 0 || (cap > 0 && !ids)) return mu_fail(MUSER_EINVAL, "tokenize: bad output buffer");
    /* A byte yields at most 3 tokens (SPM's escaped space as byte tokens),
     * so this bound keeps every count inside an int. */
    if (len > INT32_MAX / 4) return mu_fail(MUSER_EINVAL, "tokenize: %zu bytes of text is too long", len);
    mu_tok_out out = {ids, cap, 0};
    if (add_bos) {
        if (v->sp.bos < 0) return mu_fail(MUSER_EINVAL, "tokenize: the vocabulary has no BOS token");
        mu_tok_emit(&out, v->sp.bos);
    }
    if (len == 0) return out.n;

    mu_fragment *frags = NULL;
    int n_frag = mu_special_partition(v, text, len, parse_special, &frags);
    if (n_frag < 0) return n_frag;
    mu_tok_scratch scratch = {0};
    mu_pretok_scratch pretok = {0};
    /* The piece cache pays for its 0.4 MB only on long texts. */
    if (v->kind == MU_VOCAB_BPE && len >= 16384) scratch.cache = calloc(1, sizeof *scratch.cache);
    int rc = 0;
    /* SPM puts the space prefix on a fragment at the start of the text or
     * right after a special token. */
    bool after_special = true;
    for (int i = 0; i < n_frag && !rc; i++) {
        const mu_fragment *f = &frags[i];
        if (f->token >= 0) {
            mu_tok_emit(&out, f->token);
            after_special = true;
            continue;
        }
        if (v->kind == MU_VOCAB_SPM)
            rc = mu_spm_fragment(v, text + f->off, f->len, v->add_space_prefix && after_special, &scratch, &out);
        else
            rc = mu_pretok_fragment(v, text + f->off, f->len, &pretok, &scratch, &out);
        after_special = false;
    }
    mu_pretok_scratch_free(&pretok);
    mu_tok_scratch_free(&scratch);
    free(frags);
    return rc ? rc : out.n;
}
