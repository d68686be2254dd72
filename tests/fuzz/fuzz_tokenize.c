/* fuzz_tokenize.c — libFuzzer target for the tokenizer: arbitrary bytes
 * through one of five vocabularies (tests/data/vocab): the nano fixture's
 * byte-level BPE (llama4 pre-tokenizer, Muse Glimmer's special tokens),
 * GPT-2 and StarCoder BPE, LLaMA and Phi-3 SentencePiece. Any input must
 * tokenize without error into ids of the vocabulary, with a count that
 * does not depend on the buffer; the streaming detokenizer must emit valid
 * UTF-8. Byte-level BPE gives one token at most per byte and, with a token
 * for every byte (not StarCoder's: it has none for 0xFE and 0xFF, which are
 * dropped as llama.cpp drops them), is lossless: the tokens' raw bytes give
 * the input back. Byte 0 picks the options (bit 0:
 * parse special tokens, bit 1: BOS, bits 2-4: the vocabulary); the rest is
 * the text. Vocabulary directory: MUSER_FUZZ_VOCAB_DIR (environment), else
 * the build's tests/data/vocab. */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "model/model.h"
#include "muser.h"
#include "text/utf8.h"
#include "text/vocab.h"
#include "util/error.h"

static const char *const VOCABS[] = {"nano-vocab.gguf", "ggml-vocab-gpt-2.gguf", "ggml-vocab-starcoder.gguf",
                                     "ggml-vocab-llama-spm.gguf", "ggml-vocab-phi-3.gguf"};
#define N_VOCABS (sizeof VOCABS / sizeof *VOCABS)
static muser_model *models[N_VOCABS];
static bool every_byte[N_VOCABS]; /* byte-level BPE with a token for each of the 256 bytes */

static bool has_every_byte(const muser_model *m) {
    if (mu_vocab_get_kind(m->vocab) != MU_VOCAB_BPE) return false;
    for (int b = 0; b < 256; b++) {
        char c = (char)b, piece[8];
        muser_token t;
        if (muser_tokenize(m, &c, 1, false, false, &t, 1) != 1 ||
            muser_token_to_bytes(m, t, true, piece, sizeof piece) != 1 || piece[0] != c)
            return false;
    }
    return true;
}

int LLVMFuzzerInitialize(int *argc, char ***argv) {
    (void)argc;
    (void)argv;
    mu_set_quiet(1);
    const char *dir = getenv("MUSER_FUZZ_VOCAB_DIR");
    if (!dir) dir = MUSER_FUZZ_VOCAB_DIR;
    for (size_t i = 0; i < N_VOCABS; i++) {
        char path[4096];
        snprintf(path, sizeof path, "%s/%s", dir, VOCABS[i]);
        if (muser_model_load_vocab(path, &models[i]) != 0) {
            fprintf(stderr, "fuzz: %s: %s\n", path, muser_last_error());
            abort();
        }
        every_byte[i] = has_every_byte(models[i]);
    }
    return 0;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    if (size == 0) return 0;
    bool parse_special = data[0] & 1, add_bos = data[0] & 2;
    const size_t which = (data[0] >> 2) % N_VOCABS;
    const muser_model *model = models[which];
    const bool byte_level = mu_vocab_get_kind(model->vocab) == MU_VOCAB_BPE;
    size_t len = size - 1;
    char *text = malloc(len ? len : 1); /* exact size, so overreads are caught */
    if (!text) return 0;
    memcpy(text, data + 1, len);
    /* SentencePiece may give up to 3 tokens a byte (an escaped space as byte tokens) */
    int cap = 3 * (int)len + 2;
    muser_token *ids = malloc((size_t)cap * sizeof *ids);
    muser_token one;
    int n = muser_tokenize(model, text, len, add_bos, parse_special, ids, cap);
    if (n < 0 || n > cap || muser_tokenize(model, text, len, add_bos, parse_special, &one, 1) != n) abort();
    if (byte_level && n > (int)len + 1) abort(); /* a byte gives at most one token */
    const int n_vocab = muser_vocab_size(model);
    for (int i = 0; i < n; i++)
        if (ids[i] < 0 || ids[i] >= n_vocab) abort();

    if (every_byte[which]) {
        size_t o = 0, room = len * 4 + 64;
        char *back = malloc(room);
        for (int i = add_bos ? 1 : 0; i < n; i++) {
            int k = muser_token_to_bytes(model, ids[i], true, back + o, (int)(room - o));
            if (k < 0 || o + (size_t)k > room) abort();
            o += (size_t)k;
        }
        if (o != len || memcmp(back, text, len) != 0) abort(); /* lossless */
        free(back);
    }

    muser_detok *d = muser_detok_new(model, parse_special);
    for (int i = 0; i <= n; i++) {
        const char *s = i < n ? muser_detok_push(d, ids[i]) : muser_detok_flush(d);
        if (!mu_utf8_valid(s, strlen(s))) abort();
    }
    muser_detok_free(d);
    free(ids);
    free(text);
    return 0;
}
