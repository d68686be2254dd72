/* fuzz_tokenize.c — libFuzzer target for the tokenizer: arbitrary bytes
 * through the nano vocabulary (byte-level BPE, llama4 pre-tokenizer,
 * special tokens). Any input must tokenize without error; the tokens' raw
 * bytes must give the input back; the streaming detokenizer must emit
 * valid UTF-8. The vocabulary path is MUSER_FUZZ_VOCAB (environment), else
 * the build's tests/data/vocab/nano-vocab.gguf. */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "muser.h"
#include "text/utf8.h"

#include "fuzz_vocab.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    if (size == 0) return 0;
    /* The first byte picks the options; the rest is the text, copied to an
     * exact-size buffer so overreads are caught. */
    bool parse_special = data[0] & 1, add_bos = data[0] & 2;
    size_t len = size - 1;
    char *text = malloc(len ? len : 1);
    if (!text) return 0;
    memcpy(text, data + 1, len);
    int cap = (int)len + 2;
    muser_token *ids = malloc((size_t)cap * sizeof *ids);
    int n = muser_tokenize(model, text, len, add_bos, parse_special, ids, cap);
    if (n < 0 || n > cap) abort(); /* a byte gives at most one token here */

    size_t o = 0;
    char *back = malloc(len * 4 + 64);
    for (int i = add_bos ? 1 : 0; i < n; i++) {
        int k = muser_token_to_bytes(model, ids[i], true, back + o, (int)(len * 4 + 64 - o));
        if (k < 0 || o + (size_t)k > len * 4 + 64) abort();
        o += (size_t)k;
    }
    if (o != len || memcmp(back, text, len) != 0) abort(); /* lossless */

    muser_detok *d = muser_detok_new(model, parse_special);
    for (int i = 0; i <= n; i++) {
        const char *s = i < n ? muser_detok_push(d, ids[i]) : muser_detok_flush(d);
        if (!mu_utf8_valid(s, strlen(s))) abort();
    }
    muser_detok_free(d);
    free(back);
    free(ids);
    free(text);
    return 0;
}
