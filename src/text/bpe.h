/* bpe.h — byte-level BPE (tokenizer.ggml.model "gpt2"): the merge table,
 * built by the loader, and the merge loop over one pre-tokenized piece. */
#ifndef MU_BPE_H
#define MU_BPE_H

#include "gguf/gguf.h"
#include "text/tok_buffers.h"
#include "text/vocab_internal.h"

/* Builds v's merge tables (merges, byte_symbol, byte_merge) and its byte
 * tokens from tokenizer.ggml.merges; needs the token map. */
int mu_bpe_load_merges(struct mu_vocab *v, const gguf_kv *merges);
/* BPE over one pre-tokenized piece of raw bytes (a piece that is a token
 * comes out whole when the vocabulary ignores merges; the scratch's piece
 * cache, if any, is used). */
int mu_bpe_piece(const struct mu_vocab *v, const char *s, size_t n, mu_tok_scratch *scratch, mu_tok_out *out);
/* The merge loop alone (no whole-piece lookup, no cache). */
int mu_bpe_merge_only(const struct mu_vocab *v, const char *s, size_t n, mu_tok_scratch *scratch, mu_tok_out *out);

#endif
