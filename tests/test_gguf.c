/* test_gguf.c — GGUF reader/writer: round trip of every value type, and
 * hostile files (truncations at every byte, corrupted fields, bit flips)
 * that must fail with a clear message and never crash. */
#include <stdlib.h>
#include <string.h>

#include "gguf/gguf.h"
#include "quant/quant.h"
#include "muser.h"
#include "testlib.h"

/* Writes a small file covering every value type into a malloc'd buffer. */
static uint8_t *make_file(size_t *size) {
    gguf_writer *w = gguf_writer_new();
    gguf_writer_add_str(w, "general.architecture", "test-arch");
    gguf_writer_add_u32(w, "t.u32", 4000000000u);
    gguf_writer_add_i32(w, "t.i32", -7);
    gguf_writer_add_u64(w, "t.u64", 1ull << 40);
    gguf_writer_add_f32(w, "t.f32", 0.25f);
    gguf_writer_add_bool(w, "t.bool", true);
    const bool bools[5] = {true, true, false, true, false};
    gguf_writer_add_arr(w, "t.bools", GGUF_TYPE_BOOL, bools, 5);
    const int32_t ints[3] = {-1, 2, 300000};
    gguf_writer_add_arr(w, "t.ints", GGUF_TYPE_INT32, ints, 3);
    const float floats[2] = {1.5f, -2.0f};
    gguf_writer_add_arr(w, "t.floats", GGUF_TYPE_FLOAT32, floats, 2);
    const char *strs[3] = {"a", "", "h\xc3\xa9llo"};
    gguf_writer_add_arr_str(w, "t.strs", strs, NULL, 3);
    int64_t ne_a[2] = {64, 3}, ne_b[1] = {256}, ne_c[2] = {256, 2};
    int ia = gguf_writer_add_tensor(w, "a.weight", MU_TYPE_F32, 2, ne_a);
    int ib = gguf_writer_add_tensor(w, "b.weight", MU_TYPE_F16, 1, ne_b);
    int ic = gguf_writer_add_tensor(w, "c.weight", MU_TYPE_Q4_K, 2, ne_c);
    CHECK(ia == 0 && ib == 1 && ic == 2);

    char *buf = NULL;
    size_t len = 0;
    FILE *fp = open_memstream(&buf, &len);
    CHECK(gguf_writer_begin(w, fp) == 0);
    float a[64 * 3];
    for (int i = 0; i < 64 * 3; i++) a[i] = (float)i;
    uint16_t b[256];
    for (int i = 0; i < 256; i++) b[i] = (uint16_t)i;
    uint8_t c[144 * 2];
    for (int i = 0; i < (int)sizeof c; i++) c[i] = (uint8_t)(i * 7);
    CHECK(gguf_writer_write_tensor(w, 0, a) == 0);
    /* b in two pieces */
    CHECK(gguf_writer_write_data(w, b, 256) == 0);
    CHECK(gguf_writer_write_data(w, (uint8_t *)b + 256, 256) == 0);
    CHECK(gguf_writer_end_tensor(w) == 0);
    CHECK(gguf_writer_write_tensor(w, 2, c) == 0);
    CHECK(gguf_writer_finish(w) == 0);
    uint64_t total = gguf_writer_total_bytes(w);
    fclose(fp);
    CHECKF(total == len, "total %llu vs written %zu", (unsigned long long)total, len);
    gguf_writer_free(w);
    *size = len;
    return (uint8_t *)buf;
}

static void test_round_trip(void) {
    size_t size;
    uint8_t *buf = make_file(&size);
    gguf_file *f = NULL;
    int rc = gguf_open_memory(buf, size, "roundtrip", &f);
    CHECKF(rc == 0, "%s", muser_last_error());
    if (rc) {
        free(buf);
        return;
    }
    CHECK(f->n_kv == 10 && f->n_tensors == 3);
    gguf_str s;
    CHECK(gguf_get_str(f, "general.architecture", &s) == 1 && gguf_str_eq(s, "test-arch"));
    uint32_t u32;
    CHECK(gguf_get_u32(f, "t.u32", &u32) == 1 && u32 == 4000000000u);
    int32_t i32;
    CHECK(gguf_get_i32(f, "t.i32", &i32) == 1 && i32 == -7);
    CHECK(gguf_get_u32(f, "t.i32", &u32) < 0); /* negative into unsigned: range error */
    CHECK(gguf_get_i32(f, "t.u32", &i32) < 0); /* too big for i32 */
    uint64_t u64;
    CHECK(gguf_get_u64(f, "t.u64", &u64) == 1 && u64 == (1ull << 40));
    CHECK(gguf_get_u32(f, "t.u64", &u32) < 0);
    float fl;
    CHECK(gguf_get_f32(f, "t.f32", &fl) == 1 && fl == 0.25f);
    bool b;
    CHECK(gguf_get_bool(f, "t.bool", &b) == 1 && b);
    CHECK(gguf_get_bool(f, "t.u32", &b) < 0);
    CHECK(gguf_get_str(f, "t.u32", &s) < 0);
    CHECK(gguf_get_u32(f, "missing", &u32) == 0);
    const gguf_kv *kv = gguf_find(f, "t.bools");
    CHECK(kv && kv->type == GGUF_TYPE_ARRAY && kv->arr_type == GGUF_TYPE_BOOL && kv->arr_count == 5);
    if (kv) CHECK(gguf_arr_int(kv, 0) == 1 && gguf_arr_int(kv, 2) == 0 && gguf_arr_int(kv, 3) == 1);
    kv = gguf_find(f, "t.ints");
    if (kv) CHECK(gguf_arr_int(kv, 0) == -1 && gguf_arr_int(kv, 2) == 300000);
    kv = gguf_find(f, "t.floats");
    if (kv) CHECK(gguf_arr_float(kv, 0) == 1.5 && gguf_arr_float(kv, 1) == -2.0);
    kv = gguf_find(f, "t.strs");
    CHECK(kv && kv->arr_type == GGUF_TYPE_STRING && kv->arr_count == 3);
    if (kv) CHECK(gguf_str_eq(kv->arr_strs[0], "a") && gguf_str_eq(kv->arr_strs[1], "") &&
                  gguf_str_eq(kv->arr_strs[2], "h\xc3\xa9llo"));
    const gguf_tensor *t = gguf_find_tensor(f, "a.weight");
    CHECK(t && t->ne[0] == 64 && t->ne[1] == 3 && t->n_bytes == 64 * 3 * 4 && t->type == MU_TYPE_F32);
    if (t) {
        CHECK(((uintptr_t)t->data - (uintptr_t)buf) % 32 == 0);
        CHECK(((const float *)t->data)[100] == 100.0f);
    }
    t = gguf_find_tensor(f, "b.weight");
    CHECK(t && t->n_bytes == 512 && ((const uint16_t *)t->data)[255] == 255);
    t = gguf_find_tensor(f, "c.weight");
    CHECK(t && t->n_bytes == 288 && ((const uint8_t *)t->data)[287] == (uint8_t)(287 * 7));
    CHECK(gguf_find_tensor(f, "nope") == NULL);

    /* Copying every kv through the writer reproduces the metadata bytes. */
    gguf_writer *w = gguf_writer_new();
    for (uint64_t i = 0; i < f->n_kv; i++) CHECK(gguf_writer_copy_kv(w, &f->kv[i]) == 0);
    char *buf2 = NULL;
    size_t len2 = 0;
    FILE *fp = open_memstream(&buf2, &len2);
    CHECK(gguf_writer_begin(w, fp) == 0 && gguf_writer_finish(w) == 0);
    fclose(fp);
    uint64_t meta_end = f->tensors[0].info_offset;
    CHECK(len2 >= meta_end && memcmp(buf2 + 24, buf + 24, meta_end - 24) == 0);
    free(buf2);
    gguf_writer_free(w);
    gguf_close(f);
    free(buf);
}

/* Every proper prefix of a valid file must be rejected cleanly. */
static void test_truncations(void) {
    size_t size;
    uint8_t *buf = make_file(&size);
    int failures = 0, crashes_avoided = 0;
    for (size_t n = 0; n < size; n++) {
        uint8_t *copy = malloc(n ? n : 1); /* exact size so ASan sees overreads */
        memcpy(copy, buf, n);
        gguf_file *f = NULL;
        int rc = gguf_open_memory(copy, n, "trunc", &f);
        /* The only prefix that can pass is one that cuts padding after the
         * last tensor; ours pads every tensor, so every prefix must fail. */
        if (rc == 0) failures++;
        else if (strstr(muser_last_error(), "trunc") && strstr(muser_last_error(), "offset")) crashes_avoided++;
        gguf_close(f);
        free(copy);
    }
    CHECKF(failures == 0, "%d truncated prefixes were accepted", failures);
    CHECKF(crashes_avoided == (int)size, "%d of %zu errors name the file and offset", crashes_avoided, size);
    free(buf);
}

static int open_patched(const uint8_t *buf, size_t size, size_t at, const void *patch, size_t n) {
    uint8_t *copy = malloc(size);
    memcpy(copy, buf, size);
    memcpy(copy + at, patch, n);
    gguf_file *f = NULL;
    int rc = gguf_open_memory(copy, size, "patched", &f);
    gguf_close(f);
    free(copy);
    return rc;
}

static void test_corruptions(void) {
    size_t size;
    uint8_t *buf = make_file(&size);
    gguf_file *f = NULL;
    CHECK(gguf_open_memory(buf, size, "x", &f) == 0);
    const uint32_t v2 = 2, bad = 0xFFFFFFFFu;
    const uint64_t huge = 0xFFFFFFFFFFFFFFFFull, zero = 0;
    CHECK(open_patched(buf, size, 0, "GGUX", 4) == MUSER_EFORMAT);
    CHECK(strstr(muser_last_error(), "magic") != NULL);
    CHECK(open_patched(buf, size, 4, &v2, 4) == MUSER_EFORMAT);
    CHECK(strstr(muser_last_error(), "version") != NULL);
    CHECK(open_patched(buf, size, 8, &huge, 8) == MUSER_EFORMAT);  /* tensor count */
    CHECK(open_patched(buf, size, 16, &huge, 8) == MUSER_EFORMAT); /* kv count */
    /* First key length huge */
    CHECK(open_patched(buf, size, 24, &huge, 8) == MUSER_EFORMAT);
    CHECK(strstr(muser_last_error(), "string length") != NULL);
    /* Type of the first kv: after 8-byte length + 20-byte key */
    size_t type_at = 24 + 8 + strlen("general.architecture");
    CHECK(open_patched(buf, size, type_at, &bad, 4) == MUSER_EFORMAT);
    CHECK(strstr(muser_last_error(), "unknown value type") != NULL);
    /* Bool value 2 */
    const gguf_kv *kv = gguf_find(f, "t.bool");
    size_t bool_at = kv->offset + 8 + kv->key.len + 4;
    uint8_t two = 2;
    CHECK(open_patched(buf, size, bool_at, &two, 1) == MUSER_EFORMAT);
    /* Array count huge, and nested array type */
    kv = gguf_find(f, "t.ints");
    size_t arr_at = kv->offset + 8 + kv->key.len + 4;
    CHECK(open_patched(buf, size, arr_at + 4, &huge, 8) == MUSER_EFORMAT);
    uint32_t arr_t = GGUF_TYPE_ARRAY;
    CHECK(open_patched(buf, size, arr_at, &arr_t, 4) == MUSER_EFORMAT);
    kv = gguf_find(f, "t.strs");
    arr_at = kv->offset + 8 + kv->key.len + 4;
    CHECK(open_patched(buf, size, arr_at + 4, &huge, 8) == MUSER_EFORMAT);
    /* Tensor info fields of a.weight: name, n_dims, ne[2], type, offset */
    const gguf_tensor *t = &f->tensors[0];
    size_t ti = t->info_offset + 8 + strlen(t->name);
    uint32_t dims9 = 9, dims0 = 0;
    CHECK(open_patched(buf, size, ti, &dims9, 4) == MUSER_EFORMAT);
    CHECK(open_patched(buf, size, ti, &dims0, 4) == MUSER_EFORMAT);
    CHECK(open_patched(buf, size, ti + 4, &zero, 8) == MUSER_EFORMAT); /* zero dim */
    uint64_t big = 1ull << 62;
    CHECK(open_patched(buf, size, ti + 4, &big, 8) == MUSER_EFORMAT);
    CHECK(open_patched(buf, size, ti + 12, &big, 8) == MUSER_EFORMAT); /* overflow */
    CHECK(strstr(muser_last_error(), "overflow") != NULL || strstr(muser_last_error(), "outside") != NULL);
    uint32_t q4k = MU_TYPE_Q4_K, removed = 4;
    CHECK(open_patched(buf, size, ti + 20, &removed, 4) == MUSER_EFORMAT); /* removed type id */
    CHECK(strstr(muser_last_error(), "unknown tensor type") != NULL);
    CHECK(open_patched(buf, size, ti + 20, &bad, 4) == MUSER_EFORMAT);
    CHECK(open_patched(buf, size, ti + 20, &q4k, 4) == MUSER_EFORMAT); /* 64 % 256 != 0 */
    uint64_t misaligned = 4, outside = 1ull << 40;
    CHECK(open_patched(buf, size, ti + 24, &misaligned, 8) == MUSER_EFORMAT);
    CHECK(strstr(muser_last_error(), "aligned") != NULL);
    CHECK(open_patched(buf, size, ti + 24, &outside, 8) == MUSER_EFORMAT);
    CHECK(strstr(muser_last_error(), "outside") != NULL);
    /* Duplicate tensor name: rename b.weight to a.weight */
    size_t tb = f->tensors[1].info_offset + 8;
    CHECK(open_patched(buf, size, tb, "a", 1) == MUSER_EFORMAT);
    CHECK(strstr(muser_last_error(), "duplicate") != NULL);
    gguf_close(f);

    /* Random byte corruption: must never crash (ASan/UBSan watch the reads). */
    uint64_t rng = 42;
    int accepted = 0;
    for (int i = 0; i < 4000; i++) {
        uint8_t *copy = malloc(size);
        memcpy(copy, buf, size);
        int flips = 1 + (int)(tl_rand_u64(&rng) % 4);
        for (int k = 0; k < flips; k++) {
            size_t at = tl_rand_u64(&rng) % size;
            copy[at] ^= (uint8_t)(1u << (tl_rand_u64(&rng) % 8));
        }
        gguf_file *g = NULL;
        if (gguf_open_memory(copy, size, "flip", &g) == 0) {
            accepted++;
            for (uint64_t j = 0; j < g->n_tensors; j++) {
                const gguf_tensor *tt = &g->tensors[j];
                volatile uint8_t sink = ((const uint8_t *)tt->data)[tt->n_bytes - 1];
                (void)sink;
            }
        }
        gguf_close(g);
        free(copy);
    }
    CHECK(accepted < 4000); /* some corruptions must be detected */
    free(buf);
}

/* general.alignment: the spec's multiples of 8 (powers of two) only, so
 * that block fields are aligned; and a buffer must be 8-byte aligned. */
static void test_alignment(void) {
    for (uint32_t a = 1; a <= 64; a *= 2) {
        gguf_writer *w = gguf_writer_new();
        gguf_writer_set_alignment(w, a);
        gguf_writer_add_u32(w, "general.alignment", a);
        int64_t ne[1] = {3};
        gguf_writer_add_tensor(w, "x", MU_TYPE_F16, 1, ne);
        char *buf = NULL;
        size_t len = 0;
        FILE *fp = open_memstream(&buf, &len);
        const uint16_t x[3] = {1, 2, 3};
        CHECK(gguf_writer_begin(w, fp) == 0 && gguf_writer_write_tensor(w, 0, x) == 0 && gguf_writer_finish(w) == 0);
        fclose(fp);
        gguf_writer_free(w);
        gguf_file *f = NULL;
        int rc = gguf_open_memory(buf, len, "align", &f);
        CHECKF(a >= 8 ? rc == 0 : rc == MUSER_EFORMAT && strstr(muser_last_error(), "from 8"), "alignment %u: %d %s", a,
               rc, muser_last_error());
        gguf_close(f);
        char *shifted = malloc(len + 1);
        memcpy(shifted + 1, buf, len);
        CHECK(gguf_open_memory(shifted + 1, len, "shifted", &f) == MUSER_EINVAL);
        free(shifted);
        free(buf);
    }
}

static void test_open_errors(void) {
    gguf_file *f = NULL;
    CHECK(gguf_open("/nonexistent/file.gguf", &f) == MUSER_EIO && f == NULL);
    CHECK(strstr(muser_last_error(), "/nonexistent/file.gguf") != NULL);
    CHECK(gguf_open("/", &f) == MUSER_EIO);
    CHECK(gguf_open_memory("", 0, "empty", &f) == MUSER_EFORMAT);
}

int main(void) {
    test_round_trip();
    test_truncations();
    test_corruptions();
    test_alignment();
    test_open_errors();
    return tl_finish("gguf");
}
