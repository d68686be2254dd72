/* cpu_internal.h — state of the CPU backend (shared by its files and tests). */
#ifndef MU_CPU_INTERNAL_H
#define MU_CPU_INTERNAL_H

#include <stddef.h>
#include <stdint.h>

#include "cpu/kernels.h"
#include "cpu/pool.h"
#include "engine/engine.h"

typedef struct cpu_backend {
    mu_backend base;
    const mu_model *m;
    mu_session_config cfg;
    const mu_cpu_kernels *k;
    mu_pool *pool;
    int kv_dim;              /* n_head_kv * head_dim                          */
    size_t kv_row_bytes;     /* one K (or V) row in the cache                 */
    mu_kv_plane *planes;     /* [n_layer]                                     */
    void **kcache, **vcache; /* [n_layer] -> [capacity][kv_dim] F16 or F32   */
    mu_route_decision route; /* decode: the current layer's route            */
    /* activations for one chunk of T <= n_batch tokens (token-major)         */
    void *arena;
    float *x;                /* [T][n_embd] residual stream                   */
    float *a;                /* [T][n_embd] normed input                      */
    float *q, *g, *o;        /* [T][n_head*head_dim]                          */
    float *k_cur, *v_cur;    /* [T][kv_dim]                                   */
    float *t;                /* [T][n_embd] branch output                     */
    float *ff_g, *ff_u;      /* [T][n_ff]                                     */
    float *rope_cs;          /* [n_rot] cos/sin pairs                         */
    float *part_m, *part_s;  /* [threads][n_head] split-K partial max and sum */
    float *part_o;           /* [threads][n_head][head_dim] partial values    */
    uint8_t *xq_k, *xq_0;    /* fast lane: [T] quantized input rows           */
} cpu_backend;

/* Ring checkpoints (cpu_checkpoint.c). */
int mu_cpu_checkpoint_save(mu_backend *b, void **blob, size_t *size);
int mu_cpu_checkpoint_restore(mu_backend *b, const void *blob, size_t size, int pos);

#endif
