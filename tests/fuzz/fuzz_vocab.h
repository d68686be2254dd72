/* fuzz_vocab.h — a fuzz target that needs one tokenizer (fuzz_request)
 * loads it once (MUSER_FUZZ_VOCAB, else the build's default) in
 * LLVMFuzzerInitialize. */
#ifndef MU_FUZZ_VOCAB_H
#define MU_FUZZ_VOCAB_H

#include <stdio.h>
#include <stdlib.h>

#include "muser.h"

static muser_model *model;

int LLVMFuzzerInitialize(int *argc, char ***argv) {
    (void)argc;
    (void)argv;
    const char *path = getenv("MUSER_FUZZ_VOCAB");
    if (!path) path = MUSER_FUZZ_VOCAB;
    if (muser_model_load_vocab(path, &model) != 0) {
        fprintf(stderr, "fuzz: %s: %s\n", path, muser_last_error());
        abort();
    }
    return 0;
}

#endif
