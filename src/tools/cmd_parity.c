/* cmd_parity.c — `muser parity`: feed a token file and compare our logits
 * with a reference logits file (little-endian f32 [positions][n_vocab]). */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "engine/parity.h"
#include "tools/args.h"
#include "tools/commands.h"
#include "tools/tool_util.h"
#include "util/error.h"

static void usage(FILE *out) {
    fprintf(out,
            "usage: muser parity -m MODEL --tokens FILE --ref FILE [options]\n"
            "Feeds the tokens (no BOS is added) and compares the logits at every position with the\n"
            "reference: max |delta|, RMS delta, mean and max KL(reference || ours), top-1 agreement over\n"
            "all positions and over decisive ones (reference top-1 leads top-2 by >= 0.5).\n\n"
            "  %-28s GGUF model (required)\n"
            "  %-28s token ids, whitespace separated (required)\n"
            "  %-28s float32 [positions][n_vocab] logits, or `float64`: the float64\n"
            "  %-28s reference backend computes them (required)\n"
            "  %-28s one token per step, or the whole file in one prefill\n"
            "  %-28s (default: decode)\n"
            "  %-28s one JSON object instead of the table\n",
            "-m, --model FILE", "--tokens FILE", "--ref FILE|float64", "", "--mode decode|prefill", "", "--json");
    mu_tool_session_help(out, "cpu|cuda|ref", "the tokens, from 512 to the model's");
}

/* Logits from the float64 reference backend, token by token. */
static float *reference_logits(muser_model *model, const muser_token *tokens, int n, const muser_session_params *sp,
                               int V) {
    muser_session_params rp = *sp;
    rp.backend = MUSER_BACKEND_REF;
    if (rp.n_ctx == 0 || rp.n_ctx < n) rp.n_ctx = n;
    muser_session *s = NULL;
    float *out = malloc((size_t)n * V * sizeof(float));
    if (!out || muser_session_new(model, &rp, &s) != 0) {
        fprintf(stderr, "muser parity: %s\n", muser_last_error());
        free(out);
        return NULL;
    }
    for (int p = 0; p < n; p++) {
        if (muser_session_feed(s, tokens + p, 1, false) != 0) {
            fprintf(stderr, "muser parity: %s\n", muser_last_error());
            free(out);
            out = NULL;
            break;
        }
        memcpy(out + (size_t)p * V, muser_session_logits(s), V * sizeof(float));
    }
    muser_session_free(s);
    return out;
}

int cmd_parity(int argc, char **argv) {
    const char *model_path = NULL, *tokens_path = NULL, *ref_path = NULL, *mode = "decode";
    bool json = false;
    muser_session_params sp = muser_session_default_params();
    sp.backend = MUSER_BACKEND_CPU;
    mu_args a = {argc, 1, argv, "parity"};
    for (; a.i < argc; a.i++) {
        if (mu_arg_is(&a, "-h", "--help")) {
            usage(stdout);
            return 0;
        } else if (mu_arg_is(&a, "-m", "--model")) {
            if (!mu_arg_str(&a, &model_path)) return 2;
        } else if (mu_arg_is(&a, NULL, "--tokens")) {
            if (!mu_arg_str(&a, &tokens_path)) return 2;
        } else if (mu_arg_is(&a, NULL, "--ref")) {
            if (!mu_arg_str(&a, &ref_path)) return 2;
        } else if (mu_arg_is(&a, NULL, "--mode")) {
            if (!mu_arg_str(&a, &mode)) return 2;
            if (strcmp(mode, "decode") && strcmp(mode, "prefill")) {
                fprintf(stderr, "muser parity: --mode must be decode or prefill\n");
                return 2;
            }
        } else if (mu_arg_is(&a, NULL, "--json")) {
            json = true;
        } else if (!mu_tool_session_option(&a, &sp)) {
            return 2;
        }
    }
    if (!mu_arg_require("parity", model_path, "-m MODEL") || !mu_arg_require("parity", tokens_path, "--tokens FILE") ||
        !mu_arg_require("parity", ref_path, "--ref FILE"))
        return 2;

    int n_tokens = 0;
    muser_token *tokens = mu_tool_read_token_file(tokens_path, &n_tokens);
    if (!tokens) return 1;
    muser_model *model = NULL;
    if (muser_model_load(model_path, &model) != 0) {
        fprintf(stderr, "muser parity: %s\n", muser_last_error());
        free(tokens);
        return 1;
    }
    muser_model_info info;
    muser_model_get_info(model, &info);
    const int V = info.n_vocab;
    size_t ref_size = 0;
    int rc = 1;
    float *ours = NULL, *ref = NULL;
    muser_session *s = NULL;
    if (!strcmp(ref_path, "float64")) {
        ref = reference_logits(model, tokens, n_tokens, &sp, V);
        ref_size = ref ? (size_t)n_tokens * V * sizeof(float) : 0;
    } else {
        ref = mu_tool_read_file(ref_path, &ref_size);
    }
    if (!ref) goto out;
    if (ref_size == 0 || ref_size % ((size_t)V * sizeof(float))) {
        fprintf(stderr, "muser parity: %s: %zu bytes is not a whole number of rows of %d float32 logits\n", ref_path,
                ref_size, V);
        goto out;
    }
    int positions = (int)(ref_size / ((size_t)V * sizeof(float)));
    if (positions > n_tokens) positions = n_tokens;
    if (positions < n_tokens)
        fprintf(stderr, "muser parity: the reference has %d row%s; comparing the first %d of %d positions\n",
                positions, mu_plural_s(positions), positions, n_tokens);
    if (sp.n_ctx == 0) sp.n_ctx = positions > info.n_ctx_train ? positions : (positions < 512 ? 512 : positions);
    if (sp.n_ctx > info.n_ctx_train) sp.n_ctx = info.n_ctx_train;
    if (muser_session_new(model, &sp, &s) != 0) {
        fprintf(stderr, "muser parity: %s\n", muser_last_error());
        goto out;
    }
    sp.lane = muser_session_lane(s); /* (auto resolved) */
    ours = malloc((size_t)positions * V * sizeof(float));
    if (!ours) goto out;
    if (!strcmp(mode, "prefill")) {
        if (muser_session_feed(s, tokens, positions, true) != 0) {
            fprintf(stderr, "muser parity: %s\n", muser_last_error());
            goto out;
        }
        for (int p = 0; p < positions; p++) memcpy(ours + (size_t)p * V, muser_session_logits_at(s, p), V * sizeof(float));
    } else {
        for (int p = 0; p < positions; p++) {
            if (muser_session_feed(s, tokens + p, 1, false) != 0) {
                fprintf(stderr, "muser parity: %s\n", muser_last_error());
                goto out;
            }
            memcpy(ours + (size_t)p * V, muser_session_logits(s), V * sizeof(float));
        }
    }
    mu_parity r;
    mu_parity_compare(ref, ours, positions, V, &r);
    if (json) {
        printf("{\"positions\": %d, \"max_abs\": %.9g, \"rms\": %.9g, \"mean_kl\": %.9g, \"max_kl\": %.9g, "
               "\"top1\": %.9g, \"top1_decisive\": %.9g}\n",
               r.positions, r.max_abs, r.rms, r.mean_kl, r.max_kl, r.top1, r.top1_decisive);
    } else {
        printf("parity: %s (%s mode, backend %s, lane %s, kv %s)\n", model_path, mode,
               mu_tool_backend_name(muser_session_backend(s)), sp.lane == MUSER_LANE_FAST ? "fast" : "exact",
               sp.kv_type == MUSER_KV_F32 ? "f32" : "f16");
        printf("| positions | max abs | rms | mean KL | max KL | top-1 | top-1 decisive |\n");
        printf("|---|---|---|---|---|---|---|\n");
        printf("| %d | %.3g | %.3g | %.3g | %.3g | %.2f%% | %.2f%% (%d position%s) |\n", r.positions, r.max_abs,
               r.rms, r.mean_kl, r.max_kl, 100 * r.top1, 100 * r.top1_decisive, r.decisive, mu_plural_s(r.decisive));
    }
    rc = 0;
out:
    muser_session_free(s);
    muser_model_free(model);
    free(ours);
    free(ref);
    free(tokens);
    return rc;
}
