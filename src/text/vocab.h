/* vocab.h — the tokenizer vocabulary read from tokenizer.ggml.* metadata
 * (the model owns one; muser.h's text functions use it). */
#ifndef MU_VOCAB_H
#define MU_VOCAB_H

#include "gguf/gguf.h"

struct mu_vocab;

/* Loads the vocabulary. A file without tokenizer metadata gives *out = NULL
 * and success (such a model can run on token ids only). n_vocab is the
 * model's embedding row count, which the vocabulary must not exceed. */
int mu_vocab_load(const gguf_file *f, int n_vocab, struct mu_vocab **out);
void mu_vocab_free(struct mu_vocab *v);

#endif
