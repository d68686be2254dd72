/* kv.h — KV planes and the one place where ring arithmetic lives.
 *
 * A plane holds, per token, one row of K and one of V (n_head_kv * head_dim
 * elements each). Sliding-window layers keep a ring; full layers keep a
 * growing plane. Rows are addressed through explicit origins:
 *
 *   the plane holds logical positions [origin_logical, origin_logical + len)
 *   physical(p) = (origin_physical + (p - origin_logical)) % capacity
 *
 * During chunked prefill a ring must hold window + chunk - 1 rows: the first
 * query of a chunk still needs window - 1 rows from before the chunk while
 * the whole chunk has been appended.
 */
#ifndef MU_KV_H
#define MU_KV_H

#include <stdbool.h>
#include <stdint.h>

typedef struct mu_kv_plane {
    bool ring;               /* sliding-window ring (else growing plane)   */
    int64_t capacity;        /* rows allocated                             */
    int64_t origin_logical;  /* logical position of the oldest row held    */
    int64_t origin_physical; /* its physical slot                          */
    int64_t len;             /* rows held                                  */
} mu_kv_plane;

void mu_kv_plane_init(mu_kv_plane *p, bool ring, int64_t capacity);
void mu_kv_plane_reset(mu_kv_plane *p);

/* Physical slot of logical position pos; -1 if the plane does not hold it. */
int64_t mu_kv_physical(const mu_kv_plane *p, int64_t pos);
/* Reserves the slot for the next position (origin_logical + len), evicting
 * the oldest row of a full ring; returns the slot, or -1 when a growing
 * plane is full. */
int64_t mu_kv_append(mu_kv_plane *p);
/* True when every position in [first, last] is held. */
bool mu_kv_holds(const mu_kv_plane *p, int64_t first, int64_t last);
/* Drops positions >= pos. Fails (returns false, plane unchanged) when
 * pos lies before the oldest row still held. */
bool mu_kv_truncate(mu_kv_plane *p, int64_t pos);
/* Empties the plane so that its next append is position pos (a drafter
 * whose rings could not rewind: it goes on without the older context). */
void mu_kv_plane_restart(mu_kv_plane *p, int64_t pos);
/* True when the held rows sit in one unwrapped physical run. */
static inline bool mu_kv_contiguous(const mu_kv_plane *p) {
    return p->origin_physical + p->len <= p->capacity;
}

/* ---- split-K plans -------------------------------------------------------
 * Decode attention splits the visible rows into blocks of MU_ATTN_BLOCK rows;
 * each worker owns a run of whole blocks. Every block is owned exactly once. */
#define MU_ATTN_BLOCK 32

typedef struct mu_splitk_range {
    int64_t first_row; /* offset within the visible span */
    int64_t n_rows;
} mu_splitk_range;

/* The rows worker `w` of `n_workers` owns among n_rows visible rows. */
mu_splitk_range mu_splitk_owned(int64_t n_rows, int n_workers, int w);

#endif
