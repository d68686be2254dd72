/* ref_backend.c — the float64 reference forward: the oracle for tests and
 * `muser parity`. Plain loops, one token at a time, every weight row
 * dequantized (exactly, in f32) and multiplied in double. It shares nothing
 * with the CPU engine but the model binding: its own KV history (every
 * position kept, no ring), its own masking by position, its own RoPE
 * (angles in double), its own softmax. */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "engine/engine.h"
#include "ref/ref_ops.h"
#include "quant/quant.h"
#include "util/error.h"

typedef struct ref_backend {
    mu_backend base;
    const mu_model *m;
    mu_session_config cfg;
    int n_pos;          /* positions stored                        */
    int cap_pos;
    double **k, **v;    /* [n_layer] -> [cap_pos][kv_dim]           */
    float *row;         /* one dequantized weight row               */
} ref_backend;

static int grow(ref_backend *b, int need) {
    if (need <= b->cap_pos) return 0;
    const mu_hparams *hp = &b->m->hp;
    int cap = b->cap_pos ? b->cap_pos : 64;
    while (cap < need) cap *= 2;
    size_t kvd = (size_t)hp->n_head_kv * hp->head_dim;
    for (int l = 0; l < hp->n_layer; l++) {
        double *k = realloc(b->k[l], (size_t)cap * kvd * sizeof(double));
        if (!k) return mu_fail(MUSER_ENOMEM, "out of memory (reference KV)");
        b->k[l] = k;
        double *v = realloc(b->v[l], (size_t)cap * kvd * sizeof(double));
        if (!v) return mu_fail(MUSER_ENOMEM, "out of memory (reference KV)");
        b->v[l] = v;
    }
    b->cap_pos = cap;
    return 0;
}

/* Rounds through the cache type, as a real cache would. */
static double kv_round(const ref_backend *b, double x) {
    return b->cfg.kv_type == MUSER_KV_F16 ? (double)mu_f16_to_f32(mu_f32_to_f16((float)x)) : (double)(float)x;
}

static int ref_token(ref_backend *b, muser_token tok, int pos, float *logits) {
    const mu_model *m = b->m;
    const mu_hparams *hp = &m->hp;
    const int64_t E = hp->n_embd, Q = (int64_t)hp->n_head * hp->head_dim, KVD = (int64_t)hp->n_head_kv * hp->head_dim,
                  F = hp->n_ff, V = hp->n_vocab, hd = hp->head_dim;
    int rc = grow(b, pos + 1);
    if (rc) return rc;
    size_t nd = (size_t)(4 * E + 4 * Q + 2 * KVD + 2 * F + V + pos + 1);
    double *buf = malloc(nd * sizeof(double));
    if (!buf) return mu_fail(MUSER_ENOMEM, "out of memory (reference)");
    double *h = buf, *a = h + E, *t = a + E, *x = t + E, *q = x + E, *g = q + Q, *o = g + Q, *tmp = o + Q, *k = tmp + Q,
           *v = k + KVD, *fg = v + KVD, *fu = fg + F, *lg = fu + F, *sc = lg + V;

    mu_dequant_row(m->tok_embd.type, (const uint8_t *)m->tok_embd.data + (uint64_t)tok * m->tok_embd.row_bytes,
                   b->row, E);
    for (int64_t i = 0; i < E; i++) h[i] = b->row[i];
    if (hp->embd_norm) mu_ref_rmsnorm(h, NULL, h, E, hp->rms_eps);

    for (int l = 0; l < hp->n_layer; l++) {
        const mu_layer *L = &m->layers[l];
        mu_ref_rmsnorm(h, L->attn_norm, a, E, hp->rms_eps);
        mu_ref_matvec(b->row, &L->wq, a, q);
        mu_ref_matvec(b->row, &L->wk, a, k);
        mu_ref_matvec(b->row, &L->wv, a, v);
        if (L->wgate.data) mu_ref_matvec(b->row, &L->wgate, a, g);
        if (L->q_norm) {
            for (int hh = 0; hh < hp->n_head; hh++) mu_ref_rmsnorm(q + hh * hd, L->q_norm, q + hh * hd, hd, hp->rms_eps);
            for (int hh = 0; hh < hp->n_head_kv; hh++) mu_ref_rmsnorm(k + hh * hd, L->k_norm, k + hh * hd, hd, hp->rms_eps);
        }
        if (L->use_rope) {
            mu_ref_rope(hp, L->rope_base, m->rope_freq_factors, pos, q, hp->n_head);
            mu_ref_rope(hp, L->rope_base, m->rope_freq_factors, pos, k, hp->n_head_kv);
        }
        for (int64_t i = 0; i < KVD; i++) {
            b->k[l][(size_t)pos * KVD + i] = kv_round(b, k[i]);
            b->v[l][(size_t)pos * KVD + i] = kv_round(b, v[i]);
        }
        /* Keys at positions p0 with pos - p0 < window are visible (masking by position). */
        int first = 0;
        if (L->is_swa && hp->n_swa > 0 && pos - hp->n_swa + 1 > 0) first = pos - hp->n_swa + 1;
        const int per_kv = hp->n_head / hp->n_head_kv;
        for (int hh = 0; hh < hp->n_head; hh++) {
            const int kvh = hh / per_kv;
            const double *qh = q + hh * hd;
            double mx = -INFINITY;
            for (int p = first; p <= pos; p++) {
                const double *kr = b->k[l] + (size_t)p * KVD + kvh * hd;
                double s = 0.0;
                for (int e = 0; e < hd; e++) s += qh[e] * kr[e];
                sc[p] = s * (1.0 / sqrt((double)hd));
                if (sc[p] > mx) mx = sc[p];
            }
            double sum = 0.0;
            for (int p = first; p <= pos; p++) sum += (sc[p] = exp(sc[p] - mx));
            double *oh = o + hh * hd;
            for (int e = 0; e < hd; e++) oh[e] = 0.0;
            for (int p = first; p <= pos; p++) {
                const double *vr = b->v[l] + (size_t)p * KVD + kvh * hd;
                double w = sc[p] / sum;
                for (int e = 0; e < hd; e++) oh[e] += w * vr[e];
            }
        }
        if (L->wgate.data)
            for (int64_t i = 0; i < Q; i++) o[i] *= 1.0 / (1.0 + exp(-g[i]));
        mu_ref_matvec(b->row, &L->wo, o, t);
        if (L->post_attn_norm) mu_ref_rmsnorm(t, L->post_attn_norm, t, E, hp->post_norm_eps);
        for (int64_t i = 0; i < E; i++) h[i] += t[i];

        mu_ref_rmsnorm(h, L->ffn_norm, a, E, hp->rms_eps);
        mu_ref_matvec(b->row, &L->ffn_gate, a, fg);
        mu_ref_matvec(b->row, &L->ffn_up, a, fu);
        for (int64_t i = 0; i < F; i++) fg[i] = fg[i] / (1.0 + exp(-fg[i])) * fu[i];
        mu_ref_matvec(b->row, &L->ffn_down, fg, t);
        if (L->post_ffn_norm) mu_ref_rmsnorm(t, L->post_ffn_norm, t, E, hp->post_norm_eps);
        for (int64_t i = 0; i < E; i++) h[i] += t[i];
    }
    if (logits) {
        mu_ref_rmsnorm(h, m->output_norm, a, E, hp->rms_eps);
        mu_ref_matvec(b->row, &m->output, a, lg);
        for (int64_t i = 0; i < V; i++) {
            double z = lg[i] * hp->logit_scale;
            if (hp->softcap != 0.0f) z = tanh(z / hp->softcap) * hp->softcap;
            logits[i] = (float)z;
        }
    }
    free(buf);
    b->n_pos = pos + 1;
    return 0;
}

static int ref_forward(mu_backend *base, const muser_token *tokens, int n, int pos0, bool all_logits, float *logits) {
    ref_backend *b = (ref_backend *)base;
    const int64_t V = b->m->hp.n_vocab;
    for (int i = 0; i < n; i++) {
        float *dst = all_logits ? logits + i * V : (i == n - 1 ? logits : NULL);
        int rc = ref_token(b, tokens[i], pos0 + i, dst);
        if (rc) return rc;
    }
    return 0;
}

static int ref_truncate(mu_backend *base, int pos) {
    ((ref_backend *)base)->n_pos = pos; /* the full history is kept: always possible */
    return 0;
}

static void ref_reset(mu_backend *base) { ((ref_backend *)base)->n_pos = 0; }

static void ref_free(mu_backend *base) {
    ref_backend *b = (ref_backend *)base;
    if (!b) return;
    for (int l = 0; b->k && l < b->m->hp.n_layer; l++) {
        free(b->k[l]);
        free(b->v[l]);
    }
    free(b->k);
    free(b->v);
    free(b->row);
    free(b);
}

static const mu_backend_ops ref_ops = {
    .name = "ref", .forward = ref_forward, .truncate = ref_truncate, .reset = ref_reset, .free = ref_free};

int mu_ref_backend_new(const mu_model *m, const mu_session_config *cfg, mu_backend **out) {
    ref_backend *b = calloc(1, sizeof *b);
    if (!b) return mu_fail(MUSER_ENOMEM, "out of memory");
    b->base.ops = &ref_ops;
    b->m = m;
    b->cfg = *cfg;
    const mu_hparams *hp = &m->hp;
    int64_t widest = hp->n_embd > hp->n_ff ? hp->n_embd : hp->n_ff;
    if ((int64_t)hp->n_head * hp->head_dim > widest) widest = (int64_t)hp->n_head * hp->head_dim;
    b->row = malloc((size_t)widest * sizeof(float));
    b->k = calloc((size_t)hp->n_layer, sizeof(double *));
    b->v = calloc((size_t)hp->n_layer, sizeof(double *));
    if (!b->row || !b->k || !b->v) {
        ref_free(&b->base);
        return mu_fail(MUSER_ENOMEM, "out of memory");
    }
    *out = &b->base;
    return 0;
}
