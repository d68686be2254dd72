/* fuzz_model.c — libFuzzer target for model files: GGUF bytes through
 * everything a file reaches before and during the first tokens.
 *
 * Each input is loaded twice, as muser_model_load_vocab and as
 * muser_model_load do it (hyperparameters and their cross-checks, tensor
 * binding and shapes for muse-glimmer and llama, vocabulary, merges, the
 * pre-tokenizer, the special-token fixes). A failed load must say why. A
 * file that loads in full must also load as a tokenizer, and both must
 * tokenize alike. With a tokenizer: the chat format is chosen as the server
 * chooses it (the architecture) and its prompt, rendered for Muse Glimmer,
 * is tokenized; ids must lie in the vocabulary, counts must not depend on
 * the buffer, and the streaming detokenizer must emit valid UTF-8. A file
 * that binds and is small enough then runs a short prompt and one sampled
 * token on the CPU backend (lane, KV type and instruction set picked by the
 * input's size) and one token on the float64 reference.
 *
 * A DFlash drafter (general.architecture = dflash) is loaded instead as
 * the drafter of a tiny target built at start-up (the fuzz_drafter_target
 * geometry below); one that loads is attached to a session of that target,
 * which prefills a few tokens and takes speculative steps.
 *
 * The structure-aware mutator (gguf_mutator.c) keeps most inputs valid
 * containers. Seeds: tests/fuzz/corpus/model (tiny models of each
 * architecture and tokenizer type, and drafters; docs/fuzzing.md). */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "cpu/kernels.h"
#include "engine/engine.h"
#include "gguf/gguf.h"
#include "model/dflash.h"
#include "text/utf8.h"
#include "tinymodel.h"
#include "util/error.h"

/* Compute is skipped for files that would take long per input. */
#define MAX_CPU_BYTES_PER_TOKEN (2u << 20)
#define MAX_REF_BYTES_PER_TOKEN (256u << 10)
#define MAX_TOKENS 4096

static const char CONVERSATION[] =
    "[{\"role\":\"system\",\"content\":\"Be brief.\"},"
    "{\"role\":\"user\",\"content\":\"Weather in Oslo? \\u00e9 \\ud83d\\udc4b\"}]";
static const char TOOLS[] = "[{\"type\":\"function\",\"function\":{\"name\":\"get_weather\",\"parameters\":"
                            "{\"type\":\"object\",\"properties\":{\"city\":{\"type\":\"string\"}}}}}]";
/* Words, specials of several families, multi-byte and ill-formed UTF-8. */
static const char TEXT[] = "the theater <|eot|> <|start|>assistant<|message|>\n\xc3\xa9 \xf0\x9f\x91\x8b <s> </s>"
                           " <unk> <|eot_id|> 12345 \xff\xc3 ";

static char *prompt; /* the Muse Glimmer prompt of CONVERSATION */
static uint8_t *draft_target_image; /* the drafters' target: its GGUF image and model */
static muser_model *draft_target;
static const mu_cpu_kernels *isas[8]; /* the kernel tables this CPU runs */
static int n_isas;

int LLVMFuzzerInitialize(int *argc, char ***argv) {
    (void)argc;
    (void)argv;
    mu_set_quiet(1);
    muser_chat_options o = {.add_generation_prompt = true, .current_date = "2026-01-01"};
    if (muser_chat_render(CONVERSATION, TOOLS, &o, &prompt) != 0) abort();
    n_isas = mu_cpu_kernels_all(isas, 8);
    /* the target of the drafter inputs (make_model_seeds writes drafters for it) */
    tm_opts o2 = tm_defaults();
    o2.n_embd = 16, o2.n_head = 2, o2.n_head_kv = 1, o2.head_dim = 8, o2.n_ff = 16, o2.n_layer = 3;
    o2.window = 4, o2.ctx = 32, o2.vocab = 24;
    size_t n = 0;
    draft_target_image = tm_build(&o2, &n);
    gguf_file *f = NULL;
    if (!draft_target_image || gguf_open_memory(draft_target_image, n, "target", &f) ||
        mu_model_from_gguf(f, false, &draft_target))
        abort();
    return 0;
}


/* A failure must carry a status and a message. */
static void expect_failure_explained(int rc) {
    if (rc >= 0 || !muser_last_error()[0]) abort();
}

/* Loads from an exact-size copy (overreads trip ASan), aligned as a
 * mapping would be. */
static muser_model *load(const uint8_t *data, size_t size, bool vocab_only, uint8_t **copy) {
    *copy = NULL;
    if (posix_memalign((void **)copy, 64, size ? size : 1) != 0) return NULL;
    memcpy(*copy, data, size);
    mu_clear_error();
    gguf_file *f = NULL;
    int rc = gguf_open_memory(*copy, size, "fuzz", &f);
    muser_model *m = NULL;
    if (!rc) rc = mu_model_from_gguf(f, vocab_only, &m);
    if (rc) {
        expect_failure_explained(rc);
        free(*copy);
        *copy = NULL;
        return NULL;
    }
    return m;
}

/* Tokenizes text; checks the ids and that the count does not depend on cap.
 * Returns the count (0 on a clean failure); ids in out[MAX_TOKENS]. */
static int tokenize(const muser_model *m, const char *text, size_t len, bool special, muser_token *out) {
    const int n_vocab = muser_vocab_size(m);
    muser_token one;
    int n1 = muser_tokenize(m, text, len, muser_vocab_add_bos(m), special, &one, 1);
    int n = muser_tokenize(m, text, len, muser_vocab_add_bos(m), special, out, MAX_TOKENS);
    if (n < 0) {
        expect_failure_explained(n);
        if (n1 >= 0) abort();
        return 0;
    }
    if (n1 != n) abort();
    if (n > MAX_TOKENS) n = MAX_TOKENS;
    for (int i = 0; i < n; i++)
        if (out[i] < 0 || out[i] >= n_vocab) abort();
    return n;
}

/* Pieces and the streaming detokenizer over ids. */
static void detokenize(const muser_model *m, const muser_token *ids, int n) {
    char piece[256];
    for (int i = 0; i < n; i++) {
        int k = muser_token_to_bytes(m, ids[i], true, piece, 0);
        if (k < 0) abort();
        if (k <= (int)sizeof piece && muser_token_to_bytes(m, ids[i], true, piece, (int)sizeof piece) != k) abort();
        (void)muser_vocab_is_eog(m, ids[i]);
    }
    for (int show = 0; show < 2; show++) {
        muser_detok *d = muser_detok_new(m, show);
        if (!d) abort();
        for (int i = 0; i <= n; i++) {
            const char *s = i < n ? muser_detok_push(d, ids[i]) : muser_detok_flush(d);
            if (!mu_utf8_valid(s, strlen(s))) abort();
        }
        muser_detok_free(d);
    }
}

/* The text side of a model; returns the prompt's ids (count in *n). */
static muser_token *exercise_text(const muser_model *m, int *n) {
    static muser_token ids[MAX_TOKENS];
    *n = 0;
    if (!muser_vocab_size(m)) return ids;
    muser_model_info info;
    muser_model_get_info(m, &info);
    (void)muser_vocab_bos(m);
    (void)muser_vocab_eos(m);
    /* the chat format, as the server picks it: Muse Glimmer's own, else plain text */
    const bool glimmer = strcmp(info.arch, "muse-glimmer") == 0;
    size_t tl = 0;
    const char *tmpl = muser_model_meta_str(m, "tokenizer.chat_template", &tl);
    if (tmpl && tl) {
        volatile char ends = (char)(tmpl[0] ^ tmpl[tl - 1]); /* inside the buffer, or ASan says so */
        (void)ends;
    }
    int k = tokenize(m, TEXT, sizeof TEXT - 1, false, ids);
    detokenize(m, ids, k);
    const char *p = glimmer ? prompt : TEXT;
    *n = tokenize(m, p, strlen(p), true, ids);
    detokenize(m, ids, *n);
    return ids;
}

/* A short prompt and one sampled token through a backend. */
static void run_tokens(const muser_model *m, muser_backend backend, size_t pick, const muser_token *prompt_ids,
                       int n_prompt) {
    muser_model_info info;
    muser_model_get_info(m, &info);
    muser_session_params sp = muser_session_default_params();
    sp.backend = backend;
    sp.n_threads = 1;
    sp.n_ctx = info.n_ctx_train < 8 ? info.n_ctx_train : 8;
    sp.n_batch = 4;
    sp.lane = pick & 1 ? MUSER_LANE_FAST : MUSER_LANE_EXACT;
    sp.kv_type = pick & 2 ? MUSER_KV_F32 : MUSER_KV_F16;
    if (backend == MUSER_BACKEND_CPU) setenv("MUSER_ISA", isas[(pick >> 2) % (size_t)n_isas]->isa, 1);
    muser_session *s = NULL;
    int rc = muser_session_new(m, &sp, &s);
    if (rc) {
        expect_failure_explained(rc);
        return;
    }
    muser_token first[3] = {0, 0, 0};
    int n = n_prompt < 3 ? n_prompt : 3;
    if (n) memcpy(first, prompt_ids, sizeof(muser_token) * (size_t)n);
    if (backend == MUSER_BACKEND_REF || n == 0) n = 1;
    rc = muser_session_feed(s, first, n, false);
    if (rc == 0) {
        if (!muser_session_logits(s) || muser_session_pos(s) != n) abort();
        muser_sampler_params p = muser_sampler_default_params(m);
        muser_sampler *smp = muser_sampler_new(&p, info.n_vocab);
        if (!smp) abort();
        muser_token t = muser_sampler_sample(smp, muser_session_logits(s));
        muser_sampler_free(smp);
        if (t < 0 || t >= info.n_vocab) abort();
        if (backend == MUSER_BACKEND_CPU) {
            rc = muser_session_feed(s, &t, 1, false);
            if (rc) expect_failure_explained(rc); /* a context of n tokens is full */
        }
    } else {
        expect_failure_explained(rc);
    }
    muser_session_free(s);
}

/* A drafter input: loads against the tiny target or says why not; one that
 * loads drafts and verifies a few steps beside it. */
static void exercise_drafter(gguf_file *f) {
    mu_drafter *d = NULL;
    mu_clear_error();
    int rc = mu_drafter_from_gguf(f, draft_target, &d);
    if (rc) {
        expect_failure_explained(rc);
        return;
    }
    if (d->m.hp.n_vocab < 1 || d->block_size < 2 || d->n_target_layers < 1) abort();
    if (mu_model_weight_bytes_per_token(&d->m) <= MAX_CPU_BYTES_PER_TOKEN) {
        muser_session_params sp = muser_session_default_params();
        sp.backend = MUSER_BACKEND_CPU;
        sp.n_threads = 1;
        sp.n_ctx = 24;
        sp.n_batch = 8;
        muser_session *s = NULL;
        rc = muser_session_new(draft_target, &sp, &s);
        if (!rc) rc = muser_session_set_drafter(s, d, 0);
        const muser_token prompt_ids[5] = {1, 7, 3, 9, 4};
        if (!rc) rc = muser_session_feed(s, prompt_ids, 5, false);
        muser_token last = 2, out[8];
        for (int step = 0; step < 3 && !rc; step++) {
            int got = 0;
            rc = muser_session_spec_step(s, last, NULL, 8, out, &got);
            if (rc) break;
            if (got < 1 || got > 8) abort();
            for (int i = 0; i < got; i++)
                if (out[i] < 0 || out[i] >= 24) abort();
            last = out[got - 1];
        }
        if (rc) expect_failure_explained(rc);
        muser_session_free(s);
    }
    mu_drafter_free(d);
}

/* True (and the drafter exercised) when the input is a DFlash drafter. */
static bool drafter_input(const uint8_t *data, size_t size) {
    uint8_t *copy = NULL;
    if (posix_memalign((void **)&copy, 64, size ? size : 1) != 0) return false;
    memcpy(copy, data, size);
    gguf_file *f = NULL;
    gguf_str arch;
    if (gguf_open_memory(copy, size, "fuzz-drafter", &f) != 0 || gguf_get_str(f, "general.architecture", &arch) != 1 ||
        !gguf_str_eq(arch, "dflash")) {
        gguf_close(f);
        free(copy);
        return false;
    }
    exercise_drafter(f); /* the drafter owns f from here */
    free(copy);
    return true;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    uint8_t *vocab_copy, *model_copy;
    if (drafter_input(data, size)) return 0;
    muser_model *vocab_only = load(data, size, true, &vocab_copy);
    muser_model *model = load(data, size, false, &model_copy);
    if (model && muser_vocab_size(model) && !vocab_only) abort(); /* a full load's tokenizer loads alone */

    int n_vocab_ids = 0, n_ids = 0;
    muser_token *ids = NULL;
    if (vocab_only) {
        ids = exercise_text(vocab_only, &n_vocab_ids);
        muser_token *copy = malloc(sizeof(muser_token) * (size_t)(n_vocab_ids ? n_vocab_ids : 1));
        memcpy(copy, ids, sizeof(muser_token) * (size_t)n_vocab_ids);
        ids = copy;
    }
    if (model) {
        const muser_token *mids = exercise_text(model, &n_ids);
        if (muser_vocab_size(model) && (n_ids != n_vocab_ids || memcmp(mids, ids, sizeof(muser_token) * (size_t)n_ids)))
            abort(); /* one tokenizer, however it was loaded */
        muser_model_info info;
        muser_model_get_info(model, &info);
        if (info.weight_bytes_per_token <= MAX_CPU_BYTES_PER_TOKEN)
            run_tokens(model, MUSER_BACKEND_CPU, size, mids, n_ids);
        if (info.weight_bytes_per_token <= MAX_REF_BYTES_PER_TOKEN)
            run_tokens(model, MUSER_BACKEND_REF, 0, mids, n_ids);
    }
    free(ids);
    muser_model_free(model);
    muser_model_free(vocab_only);
    free(model_copy);
    free(vocab_copy);
    return 0;
}
