/* engine.h — sessions, the backend boundary, and attention routes.
 *
 * A backend implements the whole forward pass of one chunk of tokens: a GPU
 * backend captures a token step as one graph, which a finer op-by-op
 * boundary would prevent. The engine never names a backend: the layer above
 * it (backends.h) picks and opens one and hands it to mu_session_open. What
 * all backends share lives outside them: hyperparameters and weights
 * (model/), ring arithmetic (kv/), and the route predicates below.
 */
#ifndef MU_ENGINE_H
#define MU_ENGINE_H

#include <stdbool.h>
#include <stdint.h>

#include "kv/kv.h"
#include "model/model.h"
#include "muser.h"
#include "quant/quant.h"

/* ---- profiling (muser bench --profile) -------------------------------------
 * Families: weight matmuls by weight type (index = the type id), then the
 * rest. Times are wall time on the session's thread. */
enum {
    MU_PROF_ATTN = MU_TYPE_COUNT, /* attention over the KV planes            */
    MU_PROF_ELEMWISE,             /* norms, RoPE, gates, SwiGLU, KV stores   */
    MU_PROF_QUANT,                /* fast lane: activation quantization      */
    MU_PROF_LM_HEAD,              /* the output matrix                       */
    MU_PROF_EMBED,                /* the embedding row                       */
    MU_PROF_COUNT
};
typedef struct mu_prof_entry {
    uint64_t ns, calls, bytes;
} mu_prof_entry;

typedef struct mu_backend mu_backend;

typedef struct mu_backend_ops {
    const char *name;
    /* Runs n tokens (n <= n_batch) at positions pos0 .. pos0+n-1. Writes
     * logits for every token (all_logits) or only the last, [rows][n_vocab].
     * The caller has checked ids and the context bound. */
    int (*forward)(mu_backend *b, const muser_token *tokens, int n, int pos0, bool all_logits, float *logits);
    /* Drops positions >= pos; MUSER_EUNSUPPORTED if a ring cannot. */
    int (*truncate)(mu_backend *b, int pos);
    void (*reset)(mu_backend *b);
    void (*free)(mu_backend *b);
    /* Optional (NULL where unsupported), for `muser bench` only:
     * fill_kv makes the planes hold positions 0..depth-1 of random finite
     * K/V (no forward pass), as if depth tokens had been decoded;
     * profile turns per-family timers on (and zeroes them) or off and
     * returns them ([MU_PROF_COUNT]). */
    int (*fill_kv)(mu_backend *b, int depth, uint64_t seed);
    const mu_prof_entry *(*profile)(mu_backend *b, bool on);
    /* Optional, for `muser bench`: the name of profile family f when the
     * backend has families of its own (NULL: matmuls by weight type, then
     * the MU_PROF_* rest); the backend's own memory-bandwidth ceiling,
     * measured now (GB/s), with what was measured (NULL: the host's read
     * bandwidth applies); one line naming the device and settings. */
    const char *(*profile_name)(mu_backend *b, int family);
    int (*membw)(mu_backend *b, double *gbps, const char **what);
    const char *(*describe)(mu_backend *b);
    /* Ring checkpoints (optional; NULL when the backend never needs them):
     * save copies every sliding ring (bookkeeping and rows) into a blob;
     * restore puts the rings back and cuts the growing planes to pos, the
     * position the blob was saved at. The caller guarantees the growing
     * planes still hold that prefix. */
    int (*checkpoint_save)(mu_backend *b, void **blob, size_t *size);
    int (*checkpoint_restore)(mu_backend *b, const void *blob, size_t size, int pos);
    /* Batched decode (optional; NULL: the engine feeds rows one by one):
     * one token for each of n sequences through the weights once, as an
     * n-row matmul. Row i has its own KV state (rows[i], a backend with
     * these ops on the same model) and position pos[i], used for its RoPE,
     * KV append and attention; logits[i] receives its [n_vocab]. Runs on
     * rows[0]'s threads and activations; n <= rows[0]'s n_batch. On
     * failure rows may hold an extra KV row: the caller truncates.
     * MUSER_EUNSUPPORTED, before changing anything: rows it does not mix
     * (or too few to gain from it); the engine feeds that chunk's rows one
     * by one through forward. */
    int (*forward_batch)(mu_backend *const *rows, const muser_token *tokens, const int *pos, int n,
                         float *const *logits);
    /* forward_batch_greedy (optional; NULL: forward_batch, and the host
     * scans the rows): forward_batch's step, but next[i] receives row i's
     * greedy choice (mu_argmax's answer, engine/parity.h) made where the
     * logits are, and no logits cross to the host (a GPU copies n ids, not
     * n x n_vocab floats). Same contract otherwise. */
    int (*forward_batch_greedy)(mu_backend *const *rows, const muser_token *tokens, const int *pos, int n,
                                muser_token *next);
    /* forward_batch_top (optional; NULL: forward_batch, and the host
     * takes them from the rows): forward_batch's step, then row i's k top
     * logits after bias[i] (bias NULL: none), as muser_batch_decode_top
     * hands them back: vals, ids [n][k]. Same contract otherwise. */
    int (*forward_batch_top)(mu_backend *const *rows, const muser_token *tokens, const int *pos, int n,
                             const muser_logit_bias *bias, int k, float *vals, muser_token *ids);
    /* ---- speculative decoding (optional; NULL where unsupported) ---------
     * set_capture: from the next forward on, each token of a chunk also
     * writes the residual stream entering each of the n layers `layers`
     * (those layers' inputs, as llama.cpp's t_layer_inp) to
     * rows [T][n][n_embd]; n = 0 turns it off. No extra pass: the rows are
     * copied where the forward pass already has them. */
    int (*set_capture)(mu_backend *b, const int *layers, int n, float *rows);
    /* tentative_begin: the next n appended positions may be taken back
     * (a verify step): the ring rows their appends will overwrite are kept.
     * tentative_keep: keeps the first n_keep of those positions, drops the
     * rest and puts every overwritten ring row back, so the planes are what
     * appending only n_keep positions would have made (engine/tentative.c). */
    int (*tentative_begin)(mu_backend *b, int n);
    int (*tentative_keep)(mu_backend *b, int n_keep);
    /* forward_argmax (optional; NULL: forward, and the host scans the rows):
     * forward with every row's logits, which stay with the backend (a GPU
     * copies no vocabulary rows back); ids[t] receives row t's greedy
     * choice, mu_argmax's answer (the first largest; engine/parity.h).
     * logits_row then copies row t of those logits ([n_vocab]), until the
     * next forward of any kind. */
    int (*forward_argmax)(mu_backend *b, const muser_token *tokens, int n, int pos0, muser_token *ids);
    int (*logits_row)(mu_backend *b, int t, float *logits);
    /* Drafter backends only (opened on a DFlash drafter, backends.h): their
     * forward is non-causal inside the chunk (every token of the block sees
     * every other), and draft_inject appends the K/V rows made from n rows
     * of target features [n][n_target_layers * n_embd] at positions pos0.. */
    int (*draft_inject)(mu_backend *b, const float *features, int n, int pos0);
    /* ---- a side of a layer split (optional; backends_split.c) -----------
     * A backend opened on a layer view of the model (mu_model_layer_view)
     * whose chunks do not start from the embedding or do not end with the
     * head (mu_model_embeds, mu_model_heads) exchanges the residual stream
     * through host rows [n_batch][n_embd], given here once: such a chunk
     * (forward, or forward_batch's row i) reads the input of its first
     * layer from row t of `rows` instead of embedding token t, or writes
     * the residual stream after its last layer there and no logits. */
    int (*set_hidden)(mu_backend *b, float *rows);
} mu_backend_ops;

/* Optional: decodes one token at pos and chooses the next one where the
 * logits live (greedy when temperature <= 0, else a softmax sample with that
 * temperature and seed), so a GPU need not copy the whole vocabulary back;
 * writes the logits only when logits != NULL. */
typedef int (*mu_decode_select_fn)(mu_backend *b, muser_token token, int pos, float temperature, uint64_t seed,
                                   float *logits, muser_token *next);

struct mu_backend {
    const mu_backend_ops *ops;
    mu_decode_select_fn decode_select; /* NULL when the backend has none (zeroed by calloc) */
};

/* Resolved session settings every backend receives. */
typedef struct mu_session_config {
    int n_ctx, n_batch, n_threads;
    muser_lane lane;
    muser_kv_type kv_type;
    int gpus;
    uint64_t gpu_mem; /* CUDA: the cap on what Muser allocates on each GPU (0: none but the free memory) */
} mu_session_config;

/* Checks the model and the public parameters and fills cfg with the
 * defaults applied, except what depends on the backend and the machine:
 * n_threads stays 0 when p leaves it 0, and lane may stay AUTO. The
 * backend selection above the engine (backends.c) settles those. */
int mu_session_config_resolve(const mu_model *m, const muser_session_params *p, mu_session_config *cfg);
/* A session around a backend opened on m with cfg (lane resolved); the
 * session owns the backend from here on, and frees it if this fails. kind
 * is what muser_session_backend reports. */
int mu_session_open(const mu_model *m, const mu_session_config *cfg, muser_backend kind, mu_backend *backend,
                    muser_session **out);

/* muser_model_load (vocab_only: muser_model_load_vocab) of an opened file,
 * which the model then owns; on failure f is closed. For files in memory
 * (gguf_open_memory): the fuzz targets. */
int mu_model_from_gguf(gguf_file *f, bool vocab_only, muser_model **out);

/* Feeds one token and chooses the next through the backend's decode_select
 * (device-side on CUDA), else with the sampler (sample/) from the logits on
 * the host: greedy when temperature <= 0, else a softmax draw at that
 * temperature whose stream goes on while temperature and seed stay the
 * same. The session advances by one position. Logits are kept only when
 * keep_logits. */
int mu_session_decode_select(muser_session *s, muser_token token, float temperature, uint64_t seed, bool keep_logits,
                             muser_token *next);

/* Test hook of speculative decoding (engine/spec.c): fn proposes the n
 * tokens after `last` (at position pos) instead of the drafter; a test
 * that proposes the target's own future tokens sees every draft accepted.
 * A session without a drafter ignores it. */
typedef int (*mu_draft_override_fn)(void *ctx, int pos, muser_token last, int n, muser_token *drafts);
void mu_session_set_draft_override(muser_session *s, mu_draft_override_fn fn, void *ctx);

/* Bench hooks on a session (see mu_backend_ops). fill_kv resets the
 * session, fills its planes and sets its position to depth. */
int mu_session_fill_kv(muser_session *s, int depth, uint64_t seed);
/* NULL when the backend has no profiler. */
const mu_prof_entry *mu_session_profile(muser_session *s, bool on);
const mu_model *mu_session_model(const muser_session *s);
mu_backend *mu_session_backend_of(muser_session *s);
const mu_session_config *mu_session_config_of(const muser_session *s);

/* ---- attention routes ----------------------------------------------------
 * The route ladder for decode attention over one plane. Predicates fail
 * closed: any doubt sends a plane to the explicit-origin route, which
 * addresses every row through mu_kv_physical and is always safe. */
typedef enum mu_attn_route {
    MU_ROUTE_CONTIGUOUS = 0, /* visible rows are one unwrapped physical run, read in whole blocks */
    MU_ROUTE_ORIGIN = 1,     /* partially wrapped ring or tiny plane: per-row explicit addressing */
} mu_attn_route;

typedef struct mu_route_decision {
    mu_attn_route route;
    int64_t first;      /* logical position of the first visible row */
    int64_t n_visible;  /* rows the query sees                        */
    int64_t phys_first; /* physical slot of `first`                   */
    const char *why;    /* the predicate that decided                 */
} mu_route_decision;

/* Decides the route for a query at logical position pos that sees the n
 * most recent positions (n = mu_layer_visible). Logs it when
 * MUSER_LOG_ROUTES=1 (layer is only used for the log line). Returns false
 * (fail closed) when the plane does not hold what the query needs. */
bool mu_attn_route_select(const mu_kv_plane *p, int64_t pos, int64_t n_visible, int layer,
                          mu_route_decision *d);

/* Rewinds a backend's planes (one per layer) to hold positions < pos
 * (0: empty). Every plane is checked first, so a refusal (a sliding ring
 * that no longer holds what position pos would see) leaves them all
 * unchanged. */
int mu_planes_truncate(const mu_model *m, mu_kv_plane *planes, int pos);
/* The keys [*first, *last] that the query at pos of a chunk whose last row
 * is at chunk_last sees in layer l's plane p: causal, [pos - visible + 1,
 * pos]; bidirectional (a drafter's noise block), up to the chunk's last
 * row, and never before the plane's oldest row (a drafter that lost older
 * context, a rewind its rings could not follow, drafts from what it holds).
 * Every backend's chunk attention takes its spans from here. */
void mu_attn_span(const mu_model *m, int l, const mu_kv_plane *p, int64_t pos, int64_t chunk_last, bool bidirectional,
                  int64_t *first, int64_t *last);
/* A drafter's rewind: mu_planes_truncate when every plane reaches pos and
 * can be cut back to it, else every plane restarts empty at pos. Never
 * fails (a drafter's cache only steers its guesses, never the output). */
void mu_planes_rewind_or_restart(const mu_model *m, mu_kv_plane *planes, int pos);
/* set_capture's argument check: each layer in [0, n_layer). */
int mu_capture_check(const mu_model *m, const int *layers, int n);

/* Ring checkpoints (engine/checkpoint.c): one blob format for every
 * backend, holding each ring's bookkeeping and the rows it holds. copy
 * moves the K and V rows of layer's physical slots [slot0, slot0 + n)
 * between the backend's cache and the blob: into k_blob/v_blob when
 * to_blob, else out of them. Restore validates the whole blob before
 * changing anything. */
typedef int (*mu_ckpt_copy)(void *ctx, int layer, bool to_blob, int64_t slot0, int64_t n, uint8_t *k_blob,
                            uint8_t *v_blob);
int mu_ckpt_save(const mu_model *m, const mu_kv_plane *planes, size_t row_bytes, mu_ckpt_copy copy, void *ctx,
                 void **out, size_t *size);
int mu_ckpt_restore(const mu_model *m, mu_kv_plane *planes, size_t row_bytes, mu_ckpt_copy copy, void *ctx,
                    const void *blob, size_t size, int pos);

/* Tentative positions (engine/tentative.c), for backends whose planes
 * live behind a checkpoint copy callback. */
typedef struct mu_tentative {
    mu_kv_plane *saved; /* [n_layer] the planes before the guarded appends      */
    uint8_t *rows;      /* [n_layer][2][cap_rows][row_bytes] overwritten K, V rows */
    int cap_rows, n;
    bool active;
} mu_tentative;
int mu_tentative_begin(mu_tentative *t, const mu_model *m, const mu_kv_plane *planes, size_t row_bytes, int n,
                       mu_ckpt_copy copy, void *ctx);
int mu_tentative_keep(mu_tentative *t, const mu_model *m, mu_kv_plane *planes, size_t row_bytes, int n_keep,
                      mu_ckpt_copy copy, void *ctx);
void mu_tentative_free(mu_tentative *t);

#endif
