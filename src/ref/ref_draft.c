/* ref_draft.c — the float64 reference of a DFlash drafter's block pass:
 * the oracle of the CPU drafter's tests. It shares nothing with the CPU
 * drafter but the binding: no cache (the context K/V are made from the
 * features every call), its own position masks, RoPE and softmax. */
#include "ref/ref_draft.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "quant/quant.h"
#include "ref/ref_ops.h"
#include "util/error.h"

/* Key position kp is visible to query position qp: the block is
 * non-causal, so only a layer's sliding window masks. */
static bool visible(const mu_hparams *hp, const mu_layer *L, int64_t qp, int64_t kp) {
    return !(L->is_swa && hp->n_swa > 0 && qp - kp >= hp->n_swa);
}

int mu_ref_draft_logits(const mu_drafter *d, const float *features, int P, const muser_token *block, int n,
                        double *logits) {
    const mu_model *m = &d->m;
    const mu_hparams *hp = &m->hp;
    const int E = hp->n_embd, hd = hp->head_dim, H = hp->n_head, HKV = hp->n_head_kv, KVD = HKV * hd;
    const int W = d->n_target_layers * E, N = P + n; /* keys: P context rows, then the block */
    int widest = W > hp->n_ff ? W : hp->n_ff;
    if (H * hd > widest) widest = H * hd;
    double *g = malloc(sizeof(double) * (size_t)(P ? P : 1) * E);    /* [P][E] fused features */
    double *K = malloc(sizeof(double) * (size_t)N * KVD);            /* [N][KVD] one layer's keys */
    double *Vv = malloc(sizeof(double) * (size_t)N * KVD);           /* [N][KVD] one layer's values */
    double *h = malloc(sizeof(double) * (size_t)n * E);              /* [n][E] block residual stream */
    double *q = malloc(sizeof(double) * (size_t)n * H * hd);         /* [n][H*hd] */
    double *a = malloc(sizeof(double) * (size_t)widest);
    double *o = malloc(sizeof(double) * (size_t)H * hd);
    double *t = malloc(sizeof(double) * (size_t)E);
    double *fg = malloc(sizeof(double) * (size_t)hp->n_ff), *fu = malloc(sizeof(double) * (size_t)hp->n_ff);
    double *sc = malloc(sizeof(double) * (size_t)N);
    float *row = malloc(sizeof(float) * (size_t)widest);
    int rc = 0;
    if (!g || !K || !Vv || !h || !q || !a || !o || !t || !fg || !fu || !sc || !row) {
        rc = mu_fail(MUSER_ENOMEM, "out of memory (drafter reference)");
        goto out;
    }
    /* fuse: g = rms(fc(features) * fc_scale) * enc_norm */
    for (int p = 0; p < P; p++) {
        for (int i = 0; i < W; i++) a[i] = features[(size_t)p * W + i];
        mu_ref_matvec(row, &d->fc, a, g + (size_t)p * E);
        for (int i = 0; i < E; i++) g[(size_t)p * E + i] *= d->fc_scale;
        mu_ref_rmsnorm(g + (size_t)p * E, d->enc_norm, g + (size_t)p * E, E, hp->rms_eps);
    }
    /* the block's raw (unnormed) embeddings */
    for (int i = 0; i < n; i++) {
        mu_dequant_row(m->tok_embd.type, (const uint8_t *)m->tok_embd.data + (uint64_t)block[i] * m->tok_embd.row_bytes,
                       row, E);
        for (int e = 0; e < E; e++) h[(size_t)i * E + e] = row[e];
    }
    for (int l = 0; l < hp->n_layer; l++) {
        const mu_layer *L = &m->layers[l];
        /* context keys and values: no attention norm, K-norm and RoPE */
        for (int p = 0; p < P; p++) {
            double *k = K + (size_t)p * KVD;
            mu_ref_matvec(row, &L->wk, g + (size_t)p * E, k);
            mu_ref_matvec(row, &L->wv, g + (size_t)p * E, Vv + (size_t)p * KVD);
            for (int hh = 0; hh < HKV; hh++) mu_ref_rmsnorm(k + hh * hd, L->k_norm, k + hh * hd, hd, hp->rms_eps);
            mu_ref_rope(hp, L->rope_base, NULL, p, k, HKV);
        }
        /* the block's queries, keys and values */
        for (int i = 0; i < n; i++) {
            double *k = K + (size_t)(P + i) * KVD, *qi = q + (size_t)i * H * hd;
            mu_ref_rmsnorm(h + (size_t)i * E, L->attn_norm, a, E, hp->rms_eps);
            mu_ref_matvec(row, &L->wq, a, qi);
            mu_ref_matvec(row, &L->wk, a, k);
            mu_ref_matvec(row, &L->wv, a, Vv + (size_t)(P + i) * KVD);
            for (int hh = 0; hh < H; hh++) mu_ref_rmsnorm(qi + hh * hd, L->q_norm, qi + hh * hd, hd, hp->rms_eps);
            for (int hh = 0; hh < HKV; hh++) mu_ref_rmsnorm(k + hh * hd, L->k_norm, k + hh * hd, hd, hp->rms_eps);
            mu_ref_rope(hp, L->rope_base, NULL, P + i, qi, H);
            mu_ref_rope(hp, L->rope_base, NULL, P + i, k, HKV);
        }
        for (int i = 0; i < n; i++) {
            const int64_t qp = P + i;
            for (int hh = 0; hh < H; hh++) {
                const int kvh = hh / (H / HKV);
                const double *qv = q + (size_t)i * H * hd + (size_t)hh * hd;
                double mx = -INFINITY;
                for (int j = 0; j < N; j++) {
                    sc[j] = -INFINITY;
                    if (!visible(hp, L, qp, j)) continue;
                    double s = 0.0;
                    for (int e = 0; e < hd; e++) s += qv[e] * K[(size_t)j * KVD + kvh * hd + e];
                    sc[j] = s * hp->attn_scale;
                    if (sc[j] > mx) mx = sc[j];
                }
                double sum = 0.0;
                for (int j = 0; j < N; j++) sum += (sc[j] = sc[j] == -INFINITY ? 0.0 : exp(sc[j] - mx));
                for (int e = 0; e < hd; e++) {
                    double acc = 0.0;
                    for (int j = 0; j < N; j++) acc += sc[j] * Vv[(size_t)j * KVD + kvh * hd + e];
                    o[hh * hd + e] = acc / sum;
                }
            }
            mu_ref_matvec(row, &L->wo, o, t);
            for (int e = 0; e < E; e++) h[(size_t)i * E + e] += t[e];
        }
        for (int i = 0; i < n; i++) {
            double *hi = h + (size_t)i * E;
            mu_ref_rmsnorm(hi, L->ffn_norm, a, E, hp->rms_eps);
            mu_ref_matvec(row, &L->ffn_gate, a, fg);
            mu_ref_matvec(row, &L->ffn_up, a, fu);
            for (int f = 0; f < hp->n_ff; f++) fg[f] = fg[f] / (1.0 + exp(-fg[f])) * fu[f];
            mu_ref_matvec(row, &L->ffn_down, fg, t);
            for (int e = 0; e < E; e++) hi[e] += t[e];
        }
    }
    /* the output norm and the head (no logit scale or softcap: llama.cpp's
     * dflash applies the target's matrix alone) */
    for (int i = 0; i < n; i++) {
        mu_ref_rmsnorm(h + (size_t)i * E, m->output_norm, a, E, hp->rms_eps);
        mu_ref_matvec(row, &m->output, a, logits + (size_t)i * hp->n_vocab);
    }
out:
    free(g), free(K), free(Vv), free(h), free(q), free(a), free(o), free(t), free(fg), free(fu), free(sc), free(row);
    return rc;
}
