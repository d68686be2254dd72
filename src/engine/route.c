/* route.c — the decode-attention route ladder (seeds, Ch 16).
 *
 *   contiguous: the visible span is one unwrapped physical run and the plane
 *               is at least one block large, so a kernel may read whole
 *               32-row blocks by pointer arithmetic without reading past
 *               the allocation;
 *   origin:     everything else (a partially wrapped ring, a plane smaller
 *               than a block): every row goes through the explicit origins.
 *
 * Also what every backend's planes share beyond a route: a chunk query's
 * span (causal or a drafter's non-causal block), rewinding them (a
 * drafter's rewind that restarts instead of failing) and checking a
 * hidden-state capture's layers.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "engine/engine.h"
#include "util/error.h"

static int log_routes = -1;

static bool routes_logged(void) {
    if (log_routes < 0) {
        const char *e = getenv("MUSER_LOG_ROUTES");
        log_routes = e && *e && strcmp(e, "0") != 0;
    }
    return log_routes;
}

bool mu_attn_route_select(const mu_kv_plane *p, int64_t pos, int64_t n_visible, int layer, mu_route_decision *d) {
    d->first = pos - n_visible + 1;
    d->n_visible = n_visible;
    d->route = MU_ROUTE_ORIGIN;
    d->phys_first = -1;
    if (n_visible <= 0 || !mu_kv_holds(p, d->first, pos)) {
        d->why = "plane does not hold the visible span";
        if (routes_logged())
            fprintf(stderr, "route layer=%d pos=%lld REFUSED: %s (origin_logical=%lld len=%lld)\n", layer,
                    (long long)pos, d->why, (long long)p->origin_logical, (long long)p->len);
        return false;
    }
    d->phys_first = mu_kv_physical(p, d->first);
    if (p->capacity < MU_ATTN_BLOCK) {
        d->why = "capacity below one block";
    } else if (d->phys_first + n_visible > p->capacity) {
        d->why = "visible span wraps the ring";
    } else {
        d->route = MU_ROUTE_CONTIGUOUS;
        d->why = p->ring && p->len == p->capacity ? "full ring, span unwrapped" : "unwrapped span";
    }
    if (routes_logged())
        fprintf(stderr,
                "route layer=%d pos=%lld route=%s why=\"%s\" first=%lld n=%lld phys_first=%lld "
                "origin_logical=%lld origin_physical=%lld len=%lld capacity=%lld\n",
                layer, (long long)pos, d->route == MU_ROUTE_CONTIGUOUS ? "contiguous" : "origin", d->why,
                (long long)d->first, (long long)n_visible, (long long)d->phys_first, (long long)p->origin_logical,
                (long long)p->origin_physical, (long long)p->len, (long long)p->capacity);
    return true;
}

int mu_planes_truncate(const mu_model *m, mu_kv_plane *planes, int pos) {
    const mu_hparams *hp = &m->hp;
    for (int l = 0; l < hp->n_layer; l++) {
        const mu_kv_plane *p = &planes[l];
        int64_t need = pos > 0 ? pos - (mu_layer_visible(hp, &m->layers[l], pos) - 1) : 0;
        if (pos > 0 && p->origin_logical > need)
            return mu_fail(MUSER_EUNSUPPORTED,
                           "cannot rewind to position %d: layer %d's sliding ring no longer holds position %lld", pos,
                           l, (long long)need);
    }
    for (int l = 0; l < hp->n_layer; l++) {
        if (pos == 0) mu_kv_plane_reset(&planes[l]);
        else mu_kv_truncate(&planes[l], pos);
    }
    return 0;
}

void mu_planes_rewind_or_restart(const mu_model *m, mu_kv_plane *planes, int pos) {
    bool reaches = true;
    for (int l = 0; l < m->hp.n_layer; l++) reaches = reaches && planes[l].origin_logical + planes[l].len >= pos;
    if (reaches && mu_planes_truncate(m, planes, pos) == 0) return;
    mu_clear_error();
    for (int l = 0; l < m->hp.n_layer; l++) mu_kv_plane_restart(&planes[l], pos);
}

int mu_capture_check(const mu_model *m, const int *layers, int n) {
    for (int k = 0; k < n; k++)
        if (layers[k] < 0 || layers[k] >= m->hp.n_layer)
            return mu_fail(MUSER_ERANGE, "capture: layer %d is outside the model's %d layers", layers[k], m->hp.n_layer);
    return 0;
}

void mu_attn_span(const mu_model *m, int l, const mu_kv_plane *p, int64_t pos, int64_t chunk_last, bool bidirectional,
                  int64_t *first, int64_t *last) {
    *last = bidirectional ? chunk_last : pos;
    *first = pos - mu_layer_visible(&m->hp, &m->layers[l], pos) + 1;
    if (bidirectional && *first < p->origin_logical) *first = p->origin_logical;
}
