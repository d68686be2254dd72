/* gguf_write.c — GGUF v3 writer. Metadata and tensor infos are collected in
 * memory; tensor data is streamed afterwards in declaration order, so a
 * 17 GB file never has to exist in memory. */
#include <stdlib.h>
#include <string.h>

#include "gguf/gguf.h"
#include "quant/quant.h"
#include "util/error.h"

typedef struct wtensor {
    char *name;
    uint32_t type;
    int n_dims;
    int64_t ne[GGUF_MAX_DIMS];
    uint64_t n_bytes, offset;
} wtensor;

struct gguf_writer {
    uint8_t *meta;     /* serialized kv pairs */
    size_t meta_len, meta_cap;
    uint64_t n_kv;
    wtensor *tensors;
    int n_tensors, cap_tensors;
    uint32_t alignment;
    FILE *fp;
    int current;       /* tensor being written */
    uint64_t written;  /* bytes of the current tensor written */
    uint64_t total;    /* whole file size */
    int failed;
};

gguf_writer *gguf_writer_new(void) {
    gguf_writer *w = calloc(1, sizeof *w);
    if (w) w->alignment = GGUF_DEFAULT_ALIGNMENT;
    return w;
}

void gguf_writer_free(gguf_writer *w) {
    if (!w) return;
    for (int i = 0; i < w->n_tensors; i++) free(w->tensors[i].name);
    free(w->tensors);
    free(w->meta);
    free(w);
}

void gguf_writer_set_alignment(gguf_writer *w, uint32_t alignment) { w->alignment = alignment; }

static int put(gguf_writer *w, const void *p, size_t n) {
    if (w->meta_len + n > w->meta_cap) {
        size_t cap = w->meta_cap ? w->meta_cap : 4096;
        while (cap < w->meta_len + n) cap *= 2;
        uint8_t *m = realloc(w->meta, cap);
        if (!m) return mu_fail(MUSER_ENOMEM, "gguf writer: out of memory");
        w->meta = m;
        w->meta_cap = cap;
    }
    memcpy(w->meta + w->meta_len, p, n);
    w->meta_len += n;
    return 0;
}

static int put_u32(gguf_writer *w, uint32_t v) { return put(w, &v, 4); }
static int put_u64(gguf_writer *w, uint64_t v) { return put(w, &v, 8); }
static int put_str(gguf_writer *w, const char *s, uint64_t len) {
    int rc = put_u64(w, len);
    return rc ? rc : put(w, s, len);
}

static int begin_kv(gguf_writer *w, const char *key, uint32_t type) {
    w->n_kv++;
    int rc = put_str(w, key, strlen(key));
    return rc ? rc : put_u32(w, type);
}

int gguf_writer_add_u32(gguf_writer *w, const char *key, uint32_t v) {
    int rc = begin_kv(w, key, GGUF_TYPE_UINT32);
    return rc ? rc : put(w, &v, 4);
}
int gguf_writer_add_i32(gguf_writer *w, const char *key, int32_t v) {
    int rc = begin_kv(w, key, GGUF_TYPE_INT32);
    return rc ? rc : put(w, &v, 4);
}
int gguf_writer_add_u64(gguf_writer *w, const char *key, uint64_t v) {
    int rc = begin_kv(w, key, GGUF_TYPE_UINT64);
    return rc ? rc : put(w, &v, 8);
}
int gguf_writer_add_f32(gguf_writer *w, const char *key, float v) {
    int rc = begin_kv(w, key, GGUF_TYPE_FLOAT32);
    return rc ? rc : put(w, &v, 4);
}
int gguf_writer_add_bool(gguf_writer *w, const char *key, bool v) {
    uint8_t b = v ? 1 : 0;
    int rc = begin_kv(w, key, GGUF_TYPE_BOOL);
    return rc ? rc : put(w, &b, 1);
}
int gguf_writer_add_str(gguf_writer *w, const char *key, const char *v) {
    int rc = begin_kv(w, key, GGUF_TYPE_STRING);
    return rc ? rc : put_str(w, v, strlen(v));
}

int gguf_writer_add_arr(gguf_writer *w, const char *key, uint32_t elem_type, const void *data, uint64_t count) {
    size_t es = gguf_value_type_size(elem_type);
    if (!es) return mu_fail(MUSER_EINVAL, "gguf writer: '%s': bad array element type %u", key, elem_type);
    int rc = begin_kv(w, key, GGUF_TYPE_ARRAY);
    if (!rc) rc = put_u32(w, elem_type);
    if (!rc) rc = put_u64(w, count);
    if (!rc) rc = put(w, data, es * count);
    return rc;
}

int gguf_writer_add_arr_str(gguf_writer *w, const char *key, const char *const *strs, const uint64_t *lens,
                            uint64_t count) {
    int rc = begin_kv(w, key, GGUF_TYPE_ARRAY);
    if (!rc) rc = put_u32(w, GGUF_TYPE_STRING);
    if (!rc) rc = put_u64(w, count);
    for (uint64_t i = 0; !rc && i < count; i++) rc = put_str(w, strs[i], lens ? lens[i] : strlen(strs[i]));
    return rc;
}

int gguf_writer_copy_kv(gguf_writer *w, const gguf_kv *kv) {
    int rc = put_str(w, kv->key.ptr, kv->key.len);
    if (!rc) rc = put_u32(w, kv->type);
    if (rc) return rc;
    w->n_kv++;
    switch (kv->type) {
    case GGUF_TYPE_STRING: return put_str(w, kv->v.str.ptr, kv->v.str.len);
    case GGUF_TYPE_ARRAY:
        rc = put_u32(w, kv->arr_type);
        if (!rc) rc = put_u64(w, kv->arr_count);
        if (rc) return rc;
        if (kv->arr_type == GGUF_TYPE_STRING) {
            for (uint64_t i = 0; !rc && i < kv->arr_count; i++)
                rc = put_str(w, kv->arr_strs[i].ptr, kv->arr_strs[i].len);
            return rc;
        }
        return put(w, kv->arr_data, gguf_value_type_size(kv->arr_type) * kv->arr_count);
    case GGUF_TYPE_BOOL: {
        uint8_t b = kv->v.b;
        return put(w, &b, 1);
    }
    case GGUF_TYPE_FLOAT32: {
        float f = (float)kv->v.f64;
        return put(w, &f, 4);
    }
    case GGUF_TYPE_FLOAT64: return put(w, &kv->v.f64, 8);
    default: /* integers: the low bytes of the widened value, little-endian */
        return put(w, &kv->v.u64, gguf_value_type_size(kv->type));
    }
}

int gguf_writer_add_tensor(gguf_writer *w, const char *name, uint32_t type, int n_dims, const int64_t *ne) {
    const mu_type_traits *tr = mu_type_get(type);
    if (!tr) return mu_fail(MUSER_EINVAL, "gguf writer: tensor '%s': invalid type %u", name, type);
    if (n_dims < 1 || n_dims > GGUF_MAX_DIMS)
        return mu_fail(MUSER_EINVAL, "gguf writer: tensor '%s': bad n_dims %d", name, n_dims);
    if (w->n_tensors == w->cap_tensors) {
        int cap = w->cap_tensors ? w->cap_tensors * 2 : 64;
        wtensor *t = realloc(w->tensors, (size_t)cap * sizeof *t);
        if (!t) return mu_fail(MUSER_ENOMEM, "gguf writer: out of memory");
        w->tensors = t;
        w->cap_tensors = cap;
    }
    wtensor *t = &w->tensors[w->n_tensors];
    memset(t, 0, sizeof *t);
    uint64_t n_el = 1;
    for (int d = 0; d < GGUF_MAX_DIMS; d++) t->ne[d] = d < n_dims ? ne[d] : 1;
    for (int d = 0; d < n_dims; d++) {
        if (ne[d] <= 0) return mu_fail(MUSER_EINVAL, "gguf writer: tensor '%s': bad dimension", name);
        n_el *= (uint64_t)ne[d];
    }
    if (ne[0] % tr->block_elems)
        return mu_fail(MUSER_EINVAL, "gguf writer: tensor '%s': row %lld is not a multiple of the %s block", name,
                       (long long)ne[0], tr->name);
    t->name = strdup(name);
    if (!t->name) return mu_fail(MUSER_ENOMEM, "gguf writer: out of memory");
    t->type = type;
    t->n_dims = n_dims;
    t->n_bytes = n_el / (uint64_t)tr->block_elems * (uint64_t)tr->block_bytes;
    return w->n_tensors++;
}

uint64_t gguf_writer_tensor_bytes(const gguf_writer *w, int index) { return w->tensors[index].n_bytes; }
uint64_t gguf_writer_total_bytes(const gguf_writer *w) { return w->total; }

static uint64_t align_up(uint64_t x, uint64_t a) { return (x + a - 1) / a * a; }

static int write_all(gguf_writer *w, const void *p, size_t n) {
    if (n && fwrite(p, 1, n, w->fp) != n) {
        w->failed = 1;
        return mu_fail(MUSER_EIO, "gguf writer: write failed (disk full?)");
    }
    return 0;
}

static int write_zeros(gguf_writer *w, uint64_t n) {
    static const uint8_t zeros[64];
    while (n) {
        size_t k = n < sizeof zeros ? (size_t)n : sizeof zeros;
        int rc = write_all(w, zeros, k);
        if (rc) return rc;
        n -= k;
    }
    return 0;
}

int gguf_writer_begin(gguf_writer *w, FILE *fp) {
    w->fp = fp;
    /* Tensor infos */
    uint8_t *saved = w->meta;
    size_t saved_len = w->meta_len, saved_cap = w->meta_cap;
    uint64_t offset = 0;
    for (int i = 0; i < w->n_tensors; i++) {
        wtensor *t = &w->tensors[i];
        t->offset = offset;
        offset = align_up(offset + t->n_bytes, w->alignment);
    }
    /* Header */
    uint32_t magic = 0x46554747u, version = 3;
    uint64_t n_tensors = (uint64_t)w->n_tensors;
    int rc = write_all(w, &magic, 4);
    if (!rc) rc = write_all(w, &version, 4);
    if (!rc) rc = write_all(w, &n_tensors, 8);
    if (!rc) rc = write_all(w, &w->n_kv, 8);
    if (!rc) rc = write_all(w, saved, saved_len);
    if (rc) return rc;
    /* Serialize tensor infos into a fresh buffer. */
    w->meta = NULL;
    w->meta_len = w->meta_cap = 0;
    for (int i = 0; !rc && i < w->n_tensors; i++) {
        wtensor *t = &w->tensors[i];
        rc = put_str(w, t->name, strlen(t->name));
        if (!rc) rc = put_u32(w, (uint32_t)t->n_dims);
        for (int d = 0; !rc && d < t->n_dims; d++) rc = put_u64(w, (uint64_t)t->ne[d]);
        if (!rc) rc = put_u32(w, t->type);
        if (!rc) rc = put_u64(w, t->offset);
    }
    if (!rc) rc = write_all(w, w->meta, w->meta_len);
    uint64_t header = 24 + saved_len + w->meta_len;
    free(w->meta);
    w->meta = saved;
    w->meta_len = saved_len;
    w->meta_cap = saved_cap;
    if (rc) return rc;
    uint64_t data_start = align_up(header, w->alignment);
    rc = write_zeros(w, data_start - header);
    w->total = data_start + offset;
    w->current = 0;
    w->written = 0;
    return rc;
}

int gguf_writer_write_data(gguf_writer *w, const void *data, uint64_t n) {
    if (w->current >= w->n_tensors || w->written + n > w->tensors[w->current].n_bytes)
        return mu_fail(MUSER_EINVAL, "gguf writer: more data than the tensor holds");
    w->written += n;
    return write_all(w, data, (size_t)n);
}

int gguf_writer_end_tensor(gguf_writer *w) {
    wtensor *t = &w->tensors[w->current];
    if (w->written != t->n_bytes)
        return mu_fail(MUSER_EINVAL, "gguf writer: tensor '%s' got %llu of %llu bytes", t->name,
                       (unsigned long long)w->written, (unsigned long long)t->n_bytes);
    int rc = write_zeros(w, align_up(t->n_bytes, w->alignment) - t->n_bytes);
    w->current++;
    w->written = 0;
    return rc;
}

int gguf_writer_write_tensor(gguf_writer *w, int index, const void *data) {
    if (index != w->current) return mu_fail(MUSER_EINVAL, "gguf writer: tensors must be written in order");
    int rc = gguf_writer_write_data(w, data, w->tensors[index].n_bytes);
    return rc ? rc : gguf_writer_end_tensor(w);
}

int gguf_writer_finish(gguf_writer *w) {
    if (w->current != w->n_tensors)
        return mu_fail(MUSER_EINVAL, "gguf writer: only %d of %d tensors written", w->current, w->n_tensors);
    if (fflush(w->fp) != 0 || ferror(w->fp)) return mu_fail(MUSER_EIO, "gguf writer: write failed");
    return w->failed ? MUSER_EIO : MUSER_OK;
}
