#include "kv/kv.h"

void mu_kv_plane_init(mu_kv_plane *p, bool ring, int64_t capacity) {
    p->ring = ring;
    p->capacity = capacity;
    mu_kv_plane_reset(p);
}

void mu_kv_plane_reset(mu_kv_plane *p) {
    p->origin_logical = 0;
    p->origin_physical = 0;
    p->len = 0;
}

void mu_kv_plane_restart(mu_kv_plane *p, int64_t pos) {
    mu_kv_plane_reset(p);
    p->origin_logical = pos;
}

int64_t mu_kv_physical(const mu_kv_plane *p, int64_t pos) {
    if (pos < p->origin_logical || pos >= p->origin_logical + p->len) return -1;
    return (p->origin_physical + (pos - p->origin_logical)) % p->capacity;
}

int64_t mu_kv_append(mu_kv_plane *p) {
    if (p->len < p->capacity) {
        int64_t slot = (p->origin_physical + p->len) % p->capacity;
        p->len++;
        return slot;
    }
    if (!p->ring || p->capacity == 0) return -1;
    /* Full ring: the new row takes the oldest row's slot. */
    int64_t slot = p->origin_physical;
    p->origin_physical = (p->origin_physical + 1) % p->capacity;
    p->origin_logical++;
    return slot;
}

bool mu_kv_holds(const mu_kv_plane *p, int64_t first, int64_t last) {
    return first <= last && first >= p->origin_logical && last < p->origin_logical + p->len;
}

bool mu_kv_truncate(mu_kv_plane *p, int64_t pos) {
    int64_t end = p->origin_logical + p->len;
    if (pos >= end) return true;
    if (pos < p->origin_logical) return false;
    p->len = pos - p->origin_logical;
    if (p->len == 0) {
        /* Keep the logical origin: the next append is position pos. */
        p->origin_logical = pos;
    }
    return true;
}

mu_splitk_range mu_splitk_owned(int64_t n_rows, int n_workers, int w) {
    mu_splitk_range r = {0, 0};
    if (n_rows <= 0 || n_workers <= 0 || w < 0 || w >= n_workers) return r;
    int64_t blocks = (n_rows + MU_ATTN_BLOCK - 1) / MU_ATTN_BLOCK;
    int64_t per = blocks / n_workers, extra = blocks % n_workers;
    int64_t b0 = w * per + (w < extra ? w : extra);
    int64_t nb = per + (w < extra ? 1 : 0);
    r.first_row = b0 * MU_ATTN_BLOCK;
    int64_t end = (b0 + nb) * MU_ATTN_BLOCK;
    if (end > n_rows) end = n_rows;
    r.n_rows = end > r.first_row ? end - r.first_row : 0;
    return r;
}
