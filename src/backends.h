/* backends.h — the backends, side by side below the engine, and the one
 * place that picks and opens one (backends.c, which also implements
 * muser_session_new).
 *
 *          include/muser.h (muser_session_new)
 *                 │
 *            backends.c ── picks: cpu, cuda or ref
 *             │        │
 *       engine/     cpu/  cuda/  ref/
 *
 * The engine receives an opened mu_backend and never names one; each
 * backend implements engine.h's mu_backend_ops. */
#ifndef MU_BACKENDS_H
#define MU_BACKENDS_H

#include "engine/engine.h"

/* The backends' entry points (each defined in its own folder): open a
 * backend on m with resolved settings (cfg's lane is EXACT or FAST). */
int mu_cpu_backend_new(const mu_model *m, const mu_session_config *cfg, mu_backend **out);
int mu_ref_backend_new(const mu_model *m, const mu_session_config *cfg, mu_backend **out);
/* MUSER_EBACKEND with a clear message when there is no usable GPU, or when
 * the build has no CUDA backend. */
int mu_cuda_backend_new(const mu_model *m, const mu_session_config *cfg, mu_backend **out);

/* How many of m's layers fit on the GPU under cfg's settings and
 * --gpu-mem (cuda_memory.c's plan, against what the GPU has free and what
 * Muser's sessions already hold there): *n in [0, n_layer], n_layer
 * meaning the head too (--gpu-layers auto). MUSER_EBACKEND without a
 * usable GPU. */
int mu_cuda_fit_layers(const mu_model *m, const mu_session_config *cfg, int *n);

/* A split of m's layers between two backends (backends_split.c): the
 * embedding and the first n_first layers on a backend of kind `first`,
 * the rest and the head on one of kind `second` (CUDA then CPU for
 * --gpu-layers; CPU then CPU in the tests), 0 < n_first < n_layer. cfg:
 * resolved, the lane included; both sides take it. */
int mu_split_backend_new(const mu_model *m, const mu_session_config *cfg, int n_first, muser_backend first,
                         muser_backend second, mu_backend **out);
bool mu_backend_is_split(const mu_backend *b);

/* A DFlash drafter's backend, beside a target session running on `kind`
 * (the drafter runs where the target runs: it reads the target's hidden
 * states and shares its embedding and LM head; target: the target
 * session's backend, where CUDA finds them on the device). cfg: the
 * target's settings. The reference backend refuses with a message. */
struct muser_drafter;
int mu_backend_open_drafter(muser_backend kind, const struct muser_drafter *d, const mu_session_config *cfg,
                            mu_backend *target, mu_backend **out);
int mu_cpu_drafter_new(const struct muser_drafter *d, const mu_session_config *cfg, mu_backend **out);
/* MUSER_EUNSUPPORTED unless target is a one-GPU CUDA session (cuda_draft.c). */
int mu_cuda_drafter_new(const struct muser_drafter *d, const mu_session_config *cfg, mu_backend *target,
                        mu_backend **out);
#endif
