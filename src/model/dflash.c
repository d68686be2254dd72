/* dflash.c — loading and validating a DFlash drafter against its target.
 * The keys and tensors are llama.cpp's `dflash` architecture
 * (docs/dflash.md lists them with what each means). */
#include "model/dflash.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "quant/quant.h"
#include "util/error.h"

/* Tensors that mark a variant Muser does not run, with its name. */
static int refuse_variants(const gguf_file *f) {
    if (gguf_find_tensor(f, "markov_w1.weight"))
        return mu_fail(MUSER_EUNSUPPORTED,
                       "%s: DSpark drafter (a DFlash drafter with Markov and confidence heads, tensor "
                       "'markov_w1.weight'): not supported, only plain DFlash drafters run",
                       f->path);
    if (gguf_find(f, "dflash.hyper_connection.count") || gguf_find_tensor(f, "hc_head_fn.weight"))
        return mu_fail(MUSER_EUNSUPPORTED,
                       "%s: DSpark drafter on a DeepSeek-V4 backbone (hyper-connections, MLA, MoE stages): not "
                       "supported, only plain DFlash drafters run",
                       f->path);
    if (gguf_find_tensor(f, "blk.0.attn_q_a.weight") || gguf_find_tensor(f, "blk.0.ffn_gate_exps.weight"))
        return mu_fail(MUSER_EUNSUPPORTED,
                       "%s: DFlash drafter with another backbone (MLA or MoE layers): not supported, only the "
                       "dense Qwen3-style DFlash decoder runs",
                       f->path);
    return 0;
}

static int read_target_layers(const gguf_file *f, const mu_model *target, mu_drafter *d) {
    const gguf_kv *kv = gguf_find(f, "dflash.target_layers");
    if (!kv) return mu_fail(MUSER_EFORMAT, "%s: required metadata 'dflash.target_layers' is missing", f->path);
    if (kv->type != GGUF_TYPE_ARRAY || kv->arr_type == GGUF_TYPE_STRING || kv->arr_type == GGUF_TYPE_FLOAT32 ||
        kv->arr_type == GGUF_TYPE_FLOAT64 || kv->arr_type == GGUF_TYPE_BOOL)
        return mu_fail(MUSER_EFORMAT, "%s: 'dflash.target_layers' must be an array of integers", f->path);
    if (kv->arr_count < 1 || kv->arr_count > MU_DRAFT_MAX_TARGET_LAYERS)
        return mu_fail(MUSER_EFORMAT, "%s: 'dflash.target_layers' has %llu entries (1 to %d supported)", f->path,
                       (unsigned long long)kv->arr_count, MU_DRAFT_MAX_TARGET_LAYERS);
    d->n_target_layers = (int)kv->arr_count;
    for (int i = 0; i < d->n_target_layers; i++) {
        const int64_t l = gguf_arr_int(kv, (uint64_t)i);
        /* the input of layer l exists for l in [0, n_layer) */
        if (l < 0 || l >= target->hp.n_layer)
            return mu_fail(MUSER_EINVAL,
                           "%s: dflash.target_layers[%d] = %lld is out of range: the target has %d layers, so a "
                           "layer input is 0..%d",
                           f->path, i, (long long)l, target->hp.n_layer, target->hp.n_layer - 1);
        d->target_layers[i] = (int)l;
    }
    return 0;
}

/* The optional reduced draft vocabulary: d2t maps each draft-head row to
 * a target token id. Returns the head's row count through *n_head. */
static int read_d2t(const gguf_file *f, const mu_model *target, mu_drafter *d, int *n_head) {
    *n_head = target->hp.n_vocab;
    const gguf_tensor *t = gguf_find_tensor(f, "d2t");
    if (!t) return 0;
    if (t->type != MU_TYPE_I64 || t->n_dims != 1 || t->ne[0] < 1 || t->ne[0] > target->hp.n_vocab)
        return mu_fail(MUSER_EFORMAT, "%s: tensor 'd2t' must be I64 with 1 to %d entries", f->path,
                       target->hp.n_vocab);
    d->d2t = malloc(sizeof(int32_t) * (size_t)t->ne[0]);
    if (!d->d2t) return mu_fail(MUSER_ENOMEM, "out of memory");
    for (int64_t i = 0; i < t->ne[0]; i++) {
        int64_t id;
        memcpy(&id, (const uint8_t *)t->data + 8 * i, sizeof id);
        if (id < 0 || id >= target->hp.n_vocab)
            return mu_fail(MUSER_EFORMAT, "%s: d2t[%lld] = %lld is outside the target's vocabulary [0, %d)", f->path,
                           (long long)i, (long long)id, target->hp.n_vocab);
        d->d2t[i] = (int32_t)id;
    }
    *n_head = (int)t->ne[0];
    return 0;
}

/* The drafter shares the target's hidden size, vocabulary and (unless it
 * ships its own) embedding and LM head. */
static int check_fit(const gguf_file *f, const mu_model *target, mu_drafter *d) {
    const mu_hparams *hp = &d->m.hp, *th = &target->hp;
    if (hp->n_embd != th->n_embd)
        return mu_fail(MUSER_EINVAL, "%s: the drafter's hidden size %d differs from the target's %d", f->path,
                       hp->n_embd, th->n_embd);
    const gguf_kv *toks = gguf_find(f, "tokenizer.ggml.tokens");
    if (toks && toks->type == GGUF_TYPE_ARRAY && toks->arr_count != (uint64_t)th->n_vocab)
        return mu_fail(MUSER_EINVAL, "%s: the drafter's vocabulary has %llu tokens, the target's %d", f->path,
                       (unsigned long long)toks->arr_count, th->n_vocab);
    if (!d->m.tok_embd.data) d->m.tok_embd = target->tok_embd;
    if (!d->m.output.data) {
        if (d->d2t) return mu_fail(MUSER_EFORMAT, "%s: a drafter with 'd2t' needs its own 'output.weight'", f->path);
        d->m.output = target->output;
    }
    uint32_t v = 16; /* llama.cpp's common/speculative.cpp: 16 when the key is absent */
    int rc = gguf_get_u32(f, "dflash.block_size", &v);
    if (rc < 0) return rc;
    if (v < 2 || v > 256)
        return mu_fail(MUSER_EFORMAT, "%s: dflash.block_size = %u is out of range [2, 256]", f->path, v);
    d->block_size = (int)v;
    rc = gguf_get_u32(f, "tokenizer.ggml.mask_token_id", &v);
    if (rc < 0) return rc;
    if (rc == 0)
        return mu_fail(MUSER_EFORMAT, "%s: required metadata 'tokenizer.ggml.mask_token_id' is missing", f->path);
    if (v >= (uint32_t)th->n_vocab)
        return mu_fail(MUSER_EINVAL, "%s: mask token %u is outside the target's vocabulary [0, %d)", f->path, v,
                       th->n_vocab);
    d->mask_token = (muser_token)v;
    return 0;
}

int mu_drafter_from_gguf(gguf_file *f, const mu_model *target, mu_drafter **out) {
    *out = NULL;
    mu_drafter *d = calloc(1, sizeof *d);
    if (!d) {
        gguf_close(f);
        return mu_fail(MUSER_ENOMEM, "out of memory");
    }
    d->file = f;
    d->fc_scale = 1.0f;
    gguf_str arch;
    int rc = gguf_get_str(f, "general.architecture", &arch);
    if (rc == 0) rc = mu_fail(MUSER_EFORMAT, "%s: 'general.architecture' is missing", f->path);
    if (rc == 1 && !gguf_str_eq(arch, "dflash")) {
        char a[64];
        rc = mu_fail(MUSER_EUNSUPPORTED, "%s: architecture '%s' is not a drafter Muser runs (only 'dflash')", f->path,
                     gguf_str_copy(arch, a, sizeof a));
    }
    int n_head = 0;
    if (rc == 1) rc = 0;
    if (!rc && (!target || !target->layers)) rc = mu_fail(MUSER_EINVAL, "a drafter needs a loaded target model");
    if (!rc) rc = refuse_variants(f);
    if (!rc) rc = read_target_layers(f, target, d);
    if (!rc) rc = read_d2t(f, target, d, &n_head);
    if (!rc) rc = mu_model_bind_drafter(f, target->hp.n_vocab, n_head, &d->m);
    if (!rc) rc = check_fit(f, target, d);
    if (!rc) {
        const int64_t E = d->m.hp.n_embd;
        rc = mu_model_bind_weight(f, "fc.weight", (int64_t)d->n_target_layers * E, E, false, &d->fc);
        float *scale = NULL;
        if (!rc) rc = mu_model_bind_norm(f, "fc.scale", 1, true, &scale);
        if (scale) d->fc_scale = scale[0];
        free(scale);
        if (!rc) rc = mu_model_bind_norm(f, "enc.output_norm.weight", E, false, &d->enc_norm);
    }
    if (rc) {
        mu_drafter_free(d);
        return rc;
    }
    d->m.file = f;
    *out = d;
    return 0;
}

int mu_drafter_load(const char *path, const mu_model *target, mu_drafter **out) {
    *out = NULL;
    gguf_file *f = NULL;
    int rc = gguf_open(path, &f);
    return rc ? rc : mu_drafter_from_gguf(f, target, out);
}

void mu_drafter_free(mu_drafter *d) {
    if (!d) return;
    if (d->m.layers) mu_model_unbind(&d->m);
    free(d->enc_norm);
    free(d->d2t);
    gguf_close(d->file);
    free(d);
}
