/* cuda_memory.c — a session's GPU memory: its plan made from the model and
 * the settings before anything is uploaded (the arithmetic in
 * cuda_plan.c), checked against --gpu-mem and the GPU's free memory, and
 * the ledger of what Muser holds on each GPU, so that the cap covers every
 * session of the process (weights shared by a model's sessions count
 * once). */
#include <pthread.h>
#include <stdio.h>
#include <string.h>

#include "backends.h"
#include "cuda/cuda_api.h"
#include "cuda/cuda_internal.h"
#include "cuda/cuda_plan.h"
#include "model/dflash.h"

#define LEDGER_DEVICES 64
static pthread_mutex_t g_ledger_lock = PTHREAD_MUTEX_INITIALIZER;
static uint64_t g_held[LEDGER_DEVICES]; /* bytes planned and held, per GPU */

/* Takes bytes on device if held + bytes stays within cap (0: no cap);
 * *held_before: what was held. false: nothing taken. */
static bool ledger_take(int device, uint64_t cap, uint64_t bytes, uint64_t *held_before) {
    if (device < 0 || device >= LEDGER_DEVICES) return false;
    pthread_mutex_lock(&g_ledger_lock);
    *held_before = g_held[device];
    const bool ok = !cap || (g_held[device] <= cap && bytes <= cap - g_held[device]);
    if (ok) g_held[device] += bytes;
    pthread_mutex_unlock(&g_ledger_lock);
    return ok;
}

void cuda_ledger_release(int device, uint64_t bytes) {
    if (device < 0 || device >= LEDGER_DEVICES || !bytes) return;
    pthread_mutex_lock(&g_ledger_lock);
    g_held[device] = g_held[device] > bytes ? g_held[device] - bytes : 0;
    pthread_mutex_unlock(&g_ledger_lock);
}

static uint64_t held_on(int device) {
    if (device < 0 || device >= LEDGER_DEVICES) return 0;
    pthread_mutex_lock(&g_ledger_lock);
    const uint64_t h = g_held[device];
    pthread_mutex_unlock(&g_ledger_lock);
    return h;
}

/* The plan's inputs from the session being created (b: lane, KV type,
 * whether the weights are resident). */
static void plan_input(const cuda_backend *b, const mu_session_config *cfg, uint64_t available, mu_gpu_plan_in *in) {
    const mu_hparams *hp = &b->m->hp;
    memset(in, 0, sizeof *in);
    mu_gpu_plan_geometry(b->m, cuda_weight_dev_bytes, mu_cu_rec_bytes(hp->n_layer, b->n_bases > 0 ? b->n_bases : 1,
                                                                      hp->n_rot), in);
    if (b->draft) { /* a drafter: the target's embedding and head are borrowed, fc is its own; no f16 copy */
        const mu_weight *head[2] = {&b->m->tok_embd, &b->m->output};
        for (int i = 0; i < 2; i++)
            if (cuda_weight_borrowed(b, head[i])) in->weight_bytes -= cuda_weight_dev_bytes(head[i]);
        const mu_weight *fc = &b->draft->fc;
        in->weight_bytes += cuda_weight_dev_bytes(fc);
        if ((uint64_t)(fc->rows * fc->cols) > in->max_matrix_elems) in->max_matrix_elems = (uint64_t)(fc->rows * fc->cols);
    }
    const bool resident = b->w != NULL;
    if (resident) in->weight_bytes = in->norm_bytes = 0;
    in->cache_resident = resident && b->w->f16bytes > 0;
    in->n_ctx = cfg->n_ctx, in->n_batch = cfg->n_batch;
    in->kv_f32 = b->kv_f32, in->fast = b->fast;
    in->prefill_cache = b->draft ? 0 : b->tune.prefill_cache;
    in->available = available;
}

/* What a new session may take on the current GPU: the smaller of what it
 * has free and --gpu-mem less what Muser's sessions hold there. */
static int available_on(int device, uint64_t cap, uint64_t *available, uint64_t *free_bytes) {
    size_t free_b = 0, total_b = 0;
    CU_CHECK(cudaMemGetInfo(&free_b, &total_b));
    const uint64_t held = held_on(device);
    *free_bytes = free_b;
    *available = free_b;
    if (cap) {
        const uint64_t left = cap > held ? cap - held : 0;
        if (left < *available) *available = left;
    }
    return 0;
}

int cuda_rope_bases(const mu_model *m, float bases[8]) {
    int n = 0;
    for (int l = 0; l < m->hp.n_layer; l++) {
        const mu_layer *L = &m->layers[l];
        int i = 0;
        while (L->use_rope && i < n && bases[i] != L->rope_base) i++;
        if (!L->use_rope || i < n) continue;
        if (n == 8) return -1;
        bases[n++] = L->rope_base;
    }
    return n;
}

/* a view's step record, as its session will lay it out (rank_init) */
static int64_t view_rec_bytes(const mu_model *v) {
    float bases[8];
    const int n = cuda_rope_bases(v, bases);
    return mu_cu_rec_bytes(v->hp.n_layer, n > 0 ? n : 1, v->hp.n_rot);
}

static bool view_resident(const mu_model *v, void *ctx, bool *f16_cache) {
    return cuda_weights_resident(v, *(const int *)ctx, f16_cache);
}

/* The most of m's layers whose plan fits `settings` (lane, KV, context,
 * batch, available) on device: the weights of a view already resident
 * there count once. */
static int fit_layers(const mu_model *m, const mu_gpu_plan_in *settings, int device) {
    int dev = device;
    mu_gpu_layers_model c = {m, cuda_weight_dev_bytes, view_rec_bytes, view_resident, &dev, settings};
    return mu_gpu_plan_fit_layers(m->hp.n_layer, mu_gpu_plan_model_layers, &c, NULL);
}

/* A one-GPU session's settings as the plan takes them, and what it may
 * take on GPU 0 now. */
static int settings_of(const mu_session_config *cfg, mu_gpu_plan_in *settings) {
    memset(settings, 0, sizeof *settings);
    RC(mu_cuda_probe());
    CU_CHECK(cudaSetDevice(0));
    mu_cuda_tuning tune;
    RC(mu_cuda_tuning_from_env(&tune));
    uint64_t free_b = 0;
    RC(available_on(0, cfg->gpu_mem, &settings->available, &free_b));
    settings->n_ctx = cfg->n_ctx, settings->n_batch = cfg->n_batch;
    settings->kv_f32 = cfg->kv_type == MUSER_KV_F32, settings->fast = cfg->lane == MUSER_LANE_FAST;
    settings->prefill_cache = tune.prefill_cache;
    return 0;
}

int mu_cuda_fit_layers(const mu_model *m, const mu_session_config *cfg, int *n) {
    *n = 0;
    mu_gpu_plan_in settings;
    RC(settings_of(cfg, &settings));
    *n = fit_layers(m, &settings, 0);
    return 0;
}

int mu_cuda_plan_layers(const mu_model *m, const mu_session_config *cfg, int n, mu_gpu_plan *plan) {
    if (n < 1 || n > m->hp.n_layer) return mu_fail(MUSER_EINVAL, "no plan for %d of %d layers", n, m->hp.n_layer);
    mu_gpu_plan_in settings, in;
    RC(settings_of(cfg, &settings));
    int dev = 0;
    mu_gpu_layers_model c = {m, cuda_weight_dev_bytes, view_rec_bytes, view_resident, &dev, &settings};
    mu_gpu_plan_model_layers(&c, n, &in);
    mu_gpu_plan_make(&in, plan);
    return 0;
}

int cuda_plan_session(cuda_backend *b, const mu_session_config *cfg, const struct cudaDeviceProp *prop,
                      mu_gpu_plan *plan) {
    const uint64_t cap = cfg->gpu_mem;
    uint64_t available = 0, free_b = 0;
    RC(available_on(b->device, cap, &available, &free_b));
    mu_gpu_plan_in in;
    plan_input(b, cfg, available, &in);
    mu_gpu_plan_make(&in, plan);
    /* a later session of a resident model with the same chunk, split and
     * lane shares the work buffers of an earlier one */
    b->wk = cuda_work_find(b, plan->parts, cuda_work_tiles(b, plan));
    if (b->wk) {
        in.work_shared = true;
        mu_gpu_plan_make(&in, plan);
    }
    if (!plan->fits) {
        /* the advice of a split: the most layers of the whole model that fit */
        const mu_model *whole = b->m->whole ? b->m->whole : b->m;
        const int fit = b->tp || b->draft ? -1 : fit_layers(whole, &in, b->device);
        char msg[1400];
        mu_gpu_plan_explain(&in, plan, cap, free_b, b->device, fit, whole->hp.n_layer, msg, sizeof msg);
        return mu_fail(MUSER_EBACKEND, "GPU %d (%s): %s", b->device, prop->name, msg);
    }
    uint64_t before = 0;
    if (!ledger_take(b->device, cap, plan->total, &before)) /* (another session took it meanwhile) */
        return mu_fail(MUSER_EBACKEND, "GPU %d: --gpu-mem %.2f GiB is taken: Muser's sessions hold %.2f GiB and this "
                       "one needs %.2f GiB", b->device, cap / 1073741824.0, before / 1073741824.0,
                       plan->total / 1073741824.0);
    /* the weights' part goes with the weights (shared by the model's sessions) */
    b->held_bytes = plan->total - plan->weights - plan->f16_cache - plan->work; /* (the work carries its own) */
    b->weights_held = plan->weights + plan->f16_cache;
    return 0;
}
