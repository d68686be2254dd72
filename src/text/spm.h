/* spm.h — SentencePiece-style tokenization (tokenizer.ggml.model "llama"). */
#ifndef MU_SPM_H
#define MU_SPM_H

#include <stdbool.h>

#include "text/tok_buffers.h"
#include "text/vocab_internal.h"

/* SPM over one text fragment (escapes spaces, adds the prefix space). */
int mu_spm_fragment(const struct mu_vocab *v, const char *s, size_t n, bool add_prefix_space, mu_tok_scratch *scratch,
                    mu_tok_out *out);

#endif
