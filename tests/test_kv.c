/* test_kv.c — ring arithmetic, split-K ownership and the route ladder.
 * A ring is checked against a plain model (an array of every position
 * appended); every split block must be owned exactly once; a tiny-capacity
 * plane and a partially wrapped ring must take the safe (origin) route. */
#include <stdlib.h>
#include <string.h>

#include "engine/engine.h"
#include "kv/kv.h"
#include "testlib.h"

static void test_ring_against_model(void) {
    for (int64_t cap = 1; cap <= 40; cap += 3) {
        mu_kv_plane p;
        mu_kv_plane_init(&p, true, cap);
        int64_t *slot_of = malloc(sizeof(int64_t) * 500); /* position -> slot written */
        for (int64_t pos = 0; pos < 200; pos++) {
            int64_t s = mu_kv_append(&p);
            CHECK(s >= 0 && s < cap);
            slot_of[pos] = s;
            /* The ring holds exactly the last min(pos+1, cap) positions. */
            int64_t held = pos + 1 < cap ? pos + 1 : cap;
            CHECK(p.len == held && p.origin_logical == pos + 1 - held);
            for (int64_t q = 0; q <= pos; q++) {
                int64_t phys = mu_kv_physical(&p, q);
                if (q < pos + 1 - held) CHECK(phys == -1);
                else CHECK(phys == slot_of[q]);
            }
            CHECK(mu_kv_holds(&p, pos + 1 - held, pos) && !mu_kv_holds(&p, pos - held, pos));
        }
        free(slot_of);
    }
}

static void test_growing_and_truncate(void) {
    mu_kv_plane p;
    mu_kv_plane_init(&p, false, 10);
    for (int i = 0; i < 10; i++) CHECK(mu_kv_append(&p) == i);
    CHECK(mu_kv_append(&p) == -1); /* a growing plane never evicts */
    CHECK(mu_kv_truncate(&p, 4) && p.len == 4 && mu_kv_append(&p) == 4);

    mu_kv_plane r;
    mu_kv_plane_init(&r, true, 8);
    for (int i = 0; i < 20; i++) mu_kv_append(&r); /* holds 12..19 */
    CHECK(!mu_kv_truncate(&r, 11));                /* position 11 is gone */
    CHECK(r.len == 8);
    CHECK(mu_kv_truncate(&r, 15) && r.len == 3 && r.origin_logical == 12);
    int64_t s = mu_kv_append(&r); /* position 15 again */
    CHECK(s == mu_kv_physical(&r, 15) && r.len == 4);
    CHECK(mu_kv_truncate(&r, 12) && r.len == 0 && r.origin_logical == 12);
    CHECK(mu_kv_append(&r) >= 0 && mu_kv_physical(&r, 12) >= 0);
}

static void test_splitk_ownership(void) {
    int bad = 0;
    for (int64_t n = 0; n <= 700; n += (n < 100 ? 1 : 37)) {
        for (int workers = 1; workers <= 9; workers++) {
            int *owner = calloc((size_t)n + 1, sizeof(int));
            for (int w = 0; w < workers; w++) {
                mu_splitk_range r = mu_splitk_owned(n, workers, w);
                if (r.n_rows) {
                    /* whole blocks, except the span's final block */
                    if (r.first_row % MU_ATTN_BLOCK) bad++;
                    if (r.first_row + r.n_rows != n && r.n_rows % MU_ATTN_BLOCK) bad++;
                }
                for (int64_t i = r.first_row; i < r.first_row + r.n_rows; i++) owner[i]++;
            }
            for (int64_t i = 0; i < n; i++)
                if (owner[i] != 1) bad++;
            free(owner);
        }
    }
    CHECKF(bad == 0, "%d rows not owned exactly once (or blocks split)", bad);
    mu_splitk_range r = mu_splitk_owned(10, 4, 7);
    CHECK(r.n_rows == 0);
}

static void test_routes(void) {
    mu_route_decision d;
    mu_kv_plane p;
    /* Unwrapped growing plane: contiguous. */
    mu_kv_plane_init(&p, false, 1024);
    for (int i = 0; i < 100; i++) mu_kv_append(&p);
    CHECK(mu_attn_route_select(&p, 99, 100, 0, &d) && d.route == MU_ROUTE_CONTIGUOUS && d.phys_first == 0);
    /* Tiny capacity (below one block): origin, even though unwrapped. */
    mu_kv_plane_init(&p, false, 16);
    for (int i = 0; i < 10; i++) mu_kv_append(&p);
    CHECK(mu_attn_route_select(&p, 9, 10, 0, &d) && d.route == MU_ROUTE_ORIGIN);
    /* Partially wrapped ring: the visible span wraps -> origin. */
    mu_kv_plane_init(&p, true, 40);
    for (int i = 0; i < 50; i++) mu_kv_append(&p); /* holds 10..49, origin_physical 10 */
    CHECK(mu_attn_route_select(&p, 49, 32, 1, &d));
    CHECK(d.first == 18 && d.phys_first == 18 && d.route == MU_ROUTE_ORIGIN); /* 18..39 then 0..9 */
    /* Same ring, a span that does not wrap -> contiguous. */
    mu_kv_plane_init(&p, true, 40);
    for (int i = 0; i < 75; i++) mu_kv_append(&p); /* holds 35..74, origin_physical 35 */
    CHECK(mu_attn_route_select(&p, 74, 32, 1, &d) && d.phys_first == (74 - 31) % 40);
    CHECK(d.route == MU_ROUTE_CONTIGUOUS); /* slots 3..34 */
    /* A span the plane does not hold is refused (fail closed). */
    CHECK(!mu_attn_route_select(&p, 74, 41, 1, &d));
    CHECK(!mu_attn_route_select(&p, 80, 1, 1, &d));
    CHECK(!mu_attn_route_select(&p, 74, 0, 1, &d));
}

int main(void) {
    test_ring_against_model();
    test_growing_and_truncate();
    test_splitk_ownership();
    test_routes();
    return tl_finish("kv");
}
