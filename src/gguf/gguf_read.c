/* gguf_read.c — GGUF v3 reader. The file is hostile input: every read goes
 * through a cursor that checks the remaining bytes, every count is bounded
 * by what the file could hold, and every tensor must lie inside the data
 * section. Errors name the file, the field and its byte offset. */
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include "gguf/gguf.h"
#include "quant/quant.h"
#include "util/error.h"

#define GGUF_MAGIC 0x46554747u /* "GGUF" little-endian */
#define GGUF_MAX_ALIGNMENT (1u << 20)

typedef struct cursor {
    const gguf_file *f;
    uint64_t pos;
} cursor;

static const char *const value_type_names[GGUF_TYPE_COUNT] = {
    "u8", "i8", "u16", "i16", "u32", "i32", "f32", "bool", "string", "array", "u64", "i64", "f64",
};

const char *gguf_type_name(uint32_t type) {
    return type < GGUF_TYPE_COUNT ? value_type_names[type] : "invalid";
}

size_t gguf_value_type_size(uint32_t type) {
    switch (type) {
    case GGUF_TYPE_UINT8: case GGUF_TYPE_INT8: case GGUF_TYPE_BOOL: return 1;
    case GGUF_TYPE_UINT16: case GGUF_TYPE_INT16: return 2;
    case GGUF_TYPE_UINT32: case GGUF_TYPE_INT32: case GGUF_TYPE_FLOAT32: return 4;
    case GGUF_TYPE_UINT64: case GGUF_TYPE_INT64: case GGUF_TYPE_FLOAT64: return 8;
    default: return 0; /* strings, arrays, invalid */
    }
}

static int fail_at(const cursor *c, uint64_t at, const char *field, const char *what) {
    return mu_fail(MUSER_EFORMAT, "%s: invalid GGUF: %s at byte offset %llu: %s", c->f->path, field,
                   (unsigned long long)at, what);
}

static int need(const cursor *c, uint64_t n, const char *field) {
    if (n > c->f->size - c->pos) {
        char what[128];
        snprintf(what, sizeof what, "needs %llu bytes but the file ends after %llu: the file is truncated",
                 (unsigned long long)n, (unsigned long long)(c->f->size - c->pos));
        return fail_at(c, c->pos, field, what);
    }
    return 0;
}

static int read_bytes(cursor *c, void *dst, uint64_t n, const char *field) {
    int rc = need(c, n, field);
    if (rc) return rc;
    memcpy(dst, c->f->base + c->pos, n);
    c->pos += n;
    return 0;
}

static int read_u32(cursor *c, uint32_t *v, const char *field) { return read_bytes(c, v, 4, field); }
static int read_u64(cursor *c, uint64_t *v, const char *field) { return read_bytes(c, v, 8, field); }

static int read_str(cursor *c, gguf_str *s, const char *field) {
    uint64_t at = c->pos, len;
    int rc = read_u64(c, &len, field);
    if (rc) return rc;
    if (len > c->f->size - c->pos) {
        char what[128];
        snprintf(what, sizeof what, "string length %llu exceeds the %llu bytes left: truncated or corrupt",
                 (unsigned long long)len, (unsigned long long)(c->f->size - c->pos));
        return fail_at(c, at, field, what);
    }
    s->ptr = (const char *)c->f->base + c->pos;
    s->len = len;
    c->pos += len;
    return 0;
}

bool gguf_str_eq(gguf_str s, const char *cs) {
    size_t n = strlen(cs);
    return s.len == n && memcmp(s.ptr, cs, n) == 0;
}

const char *gguf_str_copy(gguf_str s, char *buf, size_t cap) {
    if (cap == 0) return buf;
    size_t n = s.len < cap - 1 ? (size_t)s.len : cap - 1;
    memcpy(buf, s.ptr, n);
    buf[n] = 0;
    return buf;
}

/* A printable, bounded copy of a key for messages. */
static const char *key_for_msg(gguf_str key, char *buf, size_t cap) {
    gguf_str_copy(key, buf, cap);
    for (char *p = buf; *p; p++)
        if ((unsigned char)*p < 32 || (unsigned char)*p > 126) *p = '?';
    return buf;
}

static int read_scalar(cursor *c, gguf_kv *kv, uint32_t type, const char *field) {
    uint8_t raw[8] = {0};
    size_t n = gguf_value_type_size(type);
    int rc = read_bytes(c, raw, n, field);
    if (rc) return rc;
    switch (type) {
    case GGUF_TYPE_UINT8: kv->v.u64 = raw[0]; break;
    case GGUF_TYPE_INT8: kv->v.i64 = (int8_t)raw[0]; break;
    case GGUF_TYPE_UINT16: { uint16_t x; memcpy(&x, raw, 2); kv->v.u64 = x; break; }
    case GGUF_TYPE_INT16: { int16_t x; memcpy(&x, raw, 2); kv->v.i64 = x; break; }
    case GGUF_TYPE_UINT32: { uint32_t x; memcpy(&x, raw, 4); kv->v.u64 = x; break; }
    case GGUF_TYPE_INT32: { int32_t x; memcpy(&x, raw, 4); kv->v.i64 = x; break; }
    case GGUF_TYPE_FLOAT32: { float x; memcpy(&x, raw, 4); kv->v.f64 = x; break; }
    case GGUF_TYPE_UINT64: { uint64_t x; memcpy(&x, raw, 8); kv->v.u64 = x; break; }
    case GGUF_TYPE_INT64: { int64_t x; memcpy(&x, raw, 8); kv->v.i64 = x; break; }
    case GGUF_TYPE_FLOAT64: { double x; memcpy(&x, raw, 8); kv->v.f64 = x; break; }
    case GGUF_TYPE_BOOL:
        if (raw[0] > 1) return fail_at(c, c->pos - 1, field, "bool value is neither 0 nor 1");
        kv->v.b = raw[0] != 0;
        break;
    }
    return 0;
}

static int read_kv(cursor *c, gguf_kv *kv, uint64_t index) {
    char field[160], keybuf[96];
    kv->offset = c->pos;
    snprintf(field, sizeof field, "key of metadata entry %llu", (unsigned long long)index);
    int rc = read_str(c, &kv->key, field);
    if (rc) return rc;
    if (kv->key.len == 0) return fail_at(c, kv->offset, field, "empty key");
    snprintf(field, sizeof field, "type of metadata '%s'", key_for_msg(kv->key, keybuf, sizeof keybuf));
    uint64_t type_at = c->pos;
    if ((rc = read_u32(c, &kv->type, field))) return rc;
    if (kv->type >= GGUF_TYPE_COUNT) {
        char what[64];
        snprintf(what, sizeof what, "unknown value type %u", kv->type);
        return fail_at(c, type_at, field, what);
    }
    snprintf(field, sizeof field, "value of metadata '%s'", keybuf);
    if (kv->type == GGUF_TYPE_STRING) return read_str(c, &kv->v.str, field);
    if (kv->type != GGUF_TYPE_ARRAY) return read_scalar(c, kv, kv->type, field);

    uint64_t arr_at = c->pos;
    if ((rc = read_u32(c, &kv->arr_type, field))) return rc;
    if ((rc = read_u64(c, &kv->arr_count, field))) return rc;
    if (kv->arr_type >= GGUF_TYPE_COUNT || kv->arr_type == GGUF_TYPE_ARRAY) {
        char what[96];
        snprintf(what, sizeof what, "array element type %u is not allowed", kv->arr_type);
        return fail_at(c, arr_at, field, what);
    }
    if (kv->arr_type == GGUF_TYPE_STRING) {
        /* Each element takes at least 8 bytes: bound the count before allocating. */
        if (kv->arr_count > (c->f->size - c->pos) / 8) {
            return fail_at(c, arr_at, field,
                           "string array count exceeds what the file could hold: truncated or corrupt");
        }
        kv->arr_strs = calloc(kv->arr_count ? kv->arr_count : 1, sizeof(gguf_str));
        if (!kv->arr_strs) return mu_fail(MUSER_ENOMEM, "%s: out of memory reading '%s'", c->f->path, keybuf);
        for (uint64_t i = 0; i < kv->arr_count; i++) {
            if ((rc = read_str(c, &kv->arr_strs[i], field))) return rc;
        }
        return 0;
    }
    size_t es = gguf_value_type_size(kv->arr_type);
    if (kv->arr_count > (c->f->size - c->pos) / es) {
        return fail_at(c, arr_at, field, "array count exceeds what the file could hold: truncated or corrupt");
    }
    kv->arr_data = c->f->base + c->pos;
    if (kv->arr_type == GGUF_TYPE_BOOL) {
        for (uint64_t i = 0; i < kv->arr_count; i++)
            if (kv->arr_data[i] > 1) return fail_at(c, c->pos + i, field, "bool element is neither 0 nor 1");
    }
    c->pos += kv->arr_count * es;
    return 0;
}

static int read_tensor_info(cursor *c, gguf_tensor *t, uint64_t index) {
    char field[160], name[96];
    gguf_str s;
    t->info_offset = c->pos;
    snprintf(field, sizeof field, "name of tensor %llu", (unsigned long long)index);
    int rc = read_str(c, &s, field);
    if (rc) return rc;
    if (s.len == 0 || s.len > 255) return fail_at(c, t->info_offset, field, "tensor name must be 1..255 bytes");
    if (memchr(s.ptr, 0, s.len)) return fail_at(c, t->info_offset, field, "tensor name contains a NUL byte");
    t->name = malloc(s.len + 1);
    if (!t->name) return mu_fail(MUSER_ENOMEM, "%s: out of memory", c->f->path);
    gguf_str_copy(s, t->name, s.len + 1);
    key_for_msg(s, name, sizeof name);

    snprintf(field, sizeof field, "n_dims of tensor '%s'", name);
    uint64_t at = c->pos;
    if ((rc = read_u32(c, &t->n_dims, field))) return rc;
    if (t->n_dims < 1 || t->n_dims > GGUF_MAX_DIMS) {
        char what[64];
        snprintf(what, sizeof what, "%u dimensions (allowed: 1..%d)", t->n_dims, GGUF_MAX_DIMS);
        return fail_at(c, at, field, what);
    }
    snprintf(field, sizeof field, "shape of tensor '%s'", name);
    uint64_t n_el = 1;
    for (int d = 0; d < GGUF_MAX_DIMS; d++) t->ne[d] = 1;
    for (uint32_t d = 0; d < t->n_dims; d++) {
        uint64_t ne;
        at = c->pos;
        if ((rc = read_u64(c, &ne, field))) return rc;
        if (ne == 0 || ne > (uint64_t)INT64_MAX) return fail_at(c, at, field, "dimension is zero or too large");
        if (n_el > (uint64_t)INT64_MAX / ne) return fail_at(c, at, field, "element count overflows");
        n_el *= ne;
        t->ne[d] = (int64_t)ne;
    }
    t->n_elements = n_el;

    snprintf(field, sizeof field, "type of tensor '%s'", name);
    at = c->pos;
    if ((rc = read_u32(c, &t->type, field))) return rc;
    const mu_type_traits *tr = mu_type_get(t->type);
    if (!tr) {
        char what[64];
        snprintf(what, sizeof what, "unknown tensor type %u", t->type);
        return fail_at(c, at, field, what);
    }
    if (t->ne[0] % tr->block_elems != 0) {
        char what[128];
        snprintf(what, sizeof what, "row length %lld is not a multiple of the %s block (%d)",
                 (long long)t->ne[0], tr->name, tr->block_elems);
        return fail_at(c, at, field, what);
    }
    uint64_t blocks = n_el / (uint64_t)tr->block_elems;
    if (blocks > UINT64_MAX / (uint64_t)tr->block_bytes) return fail_at(c, at, field, "byte size overflows");
    t->n_bytes = blocks * (uint64_t)tr->block_bytes;

    snprintf(field, sizeof field, "data offset of tensor '%s'", name);
    if ((rc = read_u64(c, &t->offset, field))) return rc;
    return 0;
}

static void free_contents(gguf_file *f) {
    if (f->kv) {
        for (uint64_t i = 0; i < f->n_kv; i++) free(f->kv[i].arr_strs);
        free(f->kv);
    }
    if (f->tensors) {
        for (uint64_t i = 0; i < f->n_tensors; i++) free(f->tensors[i].name);
        free(f->tensors);
    }
}

static int parse(gguf_file *f) {
    cursor c = {f, 0};
    uint32_t magic;
    int rc = read_u32(&c, &magic, "magic");
    if (rc) return rc;
    if (magic != GGUF_MAGIC) return fail_at(&c, 0, "magic", "not a GGUF file (expected \"GGUF\")");
    if ((rc = read_u32(&c, &f->version, "version"))) return rc;
    if (f->version != 3) {
        char what[96];
        snprintf(what, sizeof what, "version %u is not supported (only GGUF v3)", f->version);
        return fail_at(&c, 4, "version", what);
    }
    uint64_t n_tensors, n_kv;
    if ((rc = read_u64(&c, &n_tensors, "tensor count"))) return rc;
    if ((rc = read_u64(&c, &n_kv, "metadata count"))) return rc;
    /* A kv takes >= 12 bytes and a tensor info >= 24: bound counts by size. */
    static const char *const too_large = "larger than the file could hold: truncated or corrupt";
    if (n_kv > f->size / 12) return fail_at(&c, 16, "metadata count", too_large);
    if (n_tensors > f->size / 24) return fail_at(&c, 8, "tensor count", too_large);

    f->kv = calloc(n_kv ? n_kv : 1, sizeof(gguf_kv));
    f->tensors = calloc(n_tensors ? n_tensors : 1, sizeof(gguf_tensor));
    if (!f->kv || !f->tensors) return mu_fail(MUSER_ENOMEM, "%s: out of memory", f->path);
    f->n_kv = n_kv;
    f->n_tensors = n_tensors;

    for (uint64_t i = 0; i < n_kv; i++) {
        if ((rc = read_kv(&c, &f->kv[i], i))) return rc;
        for (uint64_t j = 0; j < i; j++) {
            if (f->kv[j].key.len == f->kv[i].key.len &&
                memcmp(f->kv[j].key.ptr, f->kv[i].key.ptr, f->kv[i].key.len) == 0) {
                char kb[96];
                key_for_msg(f->kv[i].key, kb, sizeof kb);
                char what[160];
                snprintf(what, sizeof what, "duplicate metadata key '%s'", kb);
                return fail_at(&c, f->kv[i].offset, "metadata key", what);
            }
        }
    }

    f->alignment = GGUF_DEFAULT_ALIGNMENT;
    const gguf_kv *al = gguf_find(f, "general.alignment");
    if (al) {
        if (al->type != GGUF_TYPE_UINT32 && al->type != GGUF_TYPE_UINT64)
            return fail_at(&c, al->offset, "general.alignment", "must be an unsigned integer");
        /* The spec asks for a multiple of 8; with it every tensor's blocks
         * are aligned for their fields (2- and 4-byte scales). */
        if (al->v.u64 < 8 || al->v.u64 > GGUF_MAX_ALIGNMENT || (al->v.u64 & (al->v.u64 - 1)))
            return fail_at(&c, al->offset, "general.alignment", "must be a power of two from 8 to 1 MiB");
        f->alignment = al->v.u64;
    }

    for (uint64_t i = 0; i < n_tensors; i++) {
        if ((rc = read_tensor_info(&c, &f->tensors[i], i))) return rc;
    }
    /* Duplicate names: sort-free O(n^2) is fine for ~1000 tensors, but keep
     * hostile files with millions of tiny infos bounded with a hash. */
    {
        uint64_t cap = 1;
        while (cap < n_tensors * 2 + 2) cap <<= 1;
        uint64_t *slots = calloc(cap, sizeof(uint64_t));
        if (!slots) return mu_fail(MUSER_ENOMEM, "%s: out of memory", f->path);
        for (uint64_t i = 0; i < n_tensors; i++) {
            uint64_t h = 1469598103934665603ull;
            for (const char *p = f->tensors[i].name; *p; p++) h = (h ^ (uint8_t)*p) * 1099511628211ull;
            for (uint64_t s = h & (cap - 1);; s = (s + 1) & (cap - 1)) {
                if (!slots[s]) {
                    slots[s] = i + 1;
                    break;
                }
                if (!strcmp(f->tensors[slots[s] - 1].name, f->tensors[i].name)) {
                    char what[320];
                    snprintf(what, sizeof what, "duplicate tensor name '%.255s'", f->tensors[i].name);
                    free(slots);
                    return fail_at(&c, f->tensors[i].info_offset, "tensor info", what);
                }
            }
        }
        free(slots);
    }

    uint64_t data = c.pos;
    if (data % f->alignment) data += f->alignment - data % f->alignment;
    if (n_tensors > 0 && data > f->size)
        return fail_at(&c, c.pos, "data section", "the file ends before its data section: truncated");
    f->data_offset = data;
    uint64_t data_size = f->size > data ? f->size - data : 0;

    for (uint64_t i = 0; i < n_tensors; i++) {
        gguf_tensor *t = &f->tensors[i];
        char field[320];
        snprintf(field, sizeof field, "data offset of tensor '%.255s'", t->name);
        uint64_t off_at = t->info_offset + 8 + strlen(t->name) + 4 + 8ull * t->n_dims + 4;
        if (t->offset % f->alignment) return fail_at(&c, off_at, field, "not aligned to general.alignment");
        if (t->offset > data_size || t->n_bytes > data_size - t->offset) {
            char what[200];
            snprintf(what, sizeof what,
                     "tensor bytes [%llu, +%llu) lie outside the %llu-byte data section: truncated or corrupt",
                     (unsigned long long)t->offset, (unsigned long long)t->n_bytes,
                     (unsigned long long)data_size);
            return fail_at(&c, off_at, field, what);
        }
        t->data = f->base + data + t->offset;
    }
    return 0;
}

static int finish_open(gguf_file *f, gguf_file **out) {
    int rc = parse(f);
    if (rc) {
        gguf_close(f);
        *out = NULL;
        return rc;
    }
    *out = f;
    return MUSER_OK;
}

int gguf_open_memory(const void *data, size_t size, const char *label, gguf_file **out) {
    *out = NULL;
    if (size && (uintptr_t)data % 8)
        return mu_fail(MUSER_EINVAL, "%s: the GGUF buffer must be 8-byte aligned", label ? label : "<memory>");
    gguf_file *f = calloc(1, sizeof *f);
    if (!f) return mu_fail(MUSER_ENOMEM, "out of memory");
    f->path = strdup(label ? label : "<memory>");
    f->base = data;
    f->size = size;
    if (!f->path) {
        free(f);
        return mu_fail(MUSER_ENOMEM, "out of memory");
    }
    return finish_open(f, out);
}

int gguf_open(const char *path, gguf_file **out) {
    *out = NULL;
    int fd = open(path, O_RDONLY | O_CLOEXEC);
    if (fd < 0) return mu_fail(MUSER_EIO, "%s: cannot open: %s", path, strerror(errno));
    struct stat st;
    if (fstat(fd, &st) != 0 || !S_ISREG(st.st_mode)) {
        const int e = errno;
        const bool known = fstat(fd, &st) == 0;
        close(fd);
        return mu_fail(MUSER_EIO, "%s: %s", path,
                       !known                 ? strerror(e)
                       : S_ISDIR(st.st_mode) ? "is a directory, not a GGUF file"
                                              : "not a regular file");
    }
    gguf_file *f = calloc(1, sizeof *f);
    if (!f) {
        close(fd);
        return mu_fail(MUSER_ENOMEM, "out of memory");
    }
    f->path = strdup(path);
    f->size = (uint64_t)st.st_size;
    if (f->size > 0) {
        void *m = mmap(NULL, f->size, PROT_READ, MAP_PRIVATE, fd, 0);
        if (m == MAP_FAILED) {
            int e = errno;
            close(fd);
            free(f->path);
            free(f);
            return mu_fail(MUSER_EIO, "%s: mmap failed: %s", path, strerror(e));
        }
        f->base = m;
        f->mapped = true;
    } else {
        static const uint8_t empty[1];
        f->base = empty;
    }
    close(fd);
    return finish_open(f, out);
}

void gguf_close(gguf_file *f) {
    if (!f) return;
    free_contents(f);
    if (f->mapped) munmap((void *)f->base, f->size);
    free(f->path);
    free(f);
}

const gguf_kv *gguf_find(const gguf_file *f, const char *key) {
    for (uint64_t i = 0; i < f->n_kv; i++)
        if (gguf_str_eq(f->kv[i].key, key)) return &f->kv[i];
    return NULL;
}

const gguf_tensor *gguf_find_tensor(const gguf_file *f, const char *name) {
    for (uint64_t i = 0; i < f->n_tensors; i++)
        if (!strcmp(f->tensors[i].name, name)) return &f->tensors[i];
    return NULL;
}

/* ---- typed getters ------------------------------------------------------ */

static int type_error(const gguf_file *f, const gguf_kv *kv, const char *key, const char *want) {
    return mu_fail(MUSER_EFORMAT, "%s: metadata '%s' (byte offset %llu) has type %s, expected %s", f->path, key,
                   (unsigned long long)kv->offset, gguf_type_name(kv->type), want);
}

static bool is_unsigned(uint32_t t) {
    return t == GGUF_TYPE_UINT8 || t == GGUF_TYPE_UINT16 || t == GGUF_TYPE_UINT32 || t == GGUF_TYPE_UINT64;
}
static bool is_signed(uint32_t t) {
    return t == GGUF_TYPE_INT8 || t == GGUF_TYPE_INT16 || t == GGUF_TYPE_INT32 || t == GGUF_TYPE_INT64;
}

/* Integer value of a scalar kv as a signed/unsigned pair; false if not an integer. */
static bool kv_int(const gguf_kv *kv, bool *neg, uint64_t *mag) {
    if (is_unsigned(kv->type)) {
        *neg = false;
        *mag = kv->v.u64;
        return true;
    }
    if (is_signed(kv->type)) {
        *neg = kv->v.i64 < 0;
        *mag = *neg ? (uint64_t)(-(kv->v.i64 + 1)) + 1 : (uint64_t)kv->v.i64;
        return true;
    }
    return false;
}

static int get_uint(const gguf_file *f, const char *key, uint64_t max, uint64_t *out) {
    const gguf_kv *kv = gguf_find(f, key);
    if (!kv) return 0;
    bool neg;
    uint64_t mag;
    if (!kv_int(kv, &neg, &mag)) return type_error(f, kv, key, "an unsigned integer");
    if (neg || mag > max)
        return mu_fail(MUSER_EFORMAT, "%s: metadata '%s' (byte offset %llu) is out of range", f->path, key,
                       (unsigned long long)kv->offset);
    *out = mag;
    return 1;
}

int gguf_get_u32(const gguf_file *f, const char *key, uint32_t *out) {
    uint64_t v = 0;
    int rc = get_uint(f, key, UINT32_MAX, &v);
    if (rc == 1) *out = (uint32_t)v;
    return rc;
}

int gguf_get_u64(const gguf_file *f, const char *key, uint64_t *out) { return get_uint(f, key, UINT64_MAX, out); }

int gguf_get_i32(const gguf_file *f, const char *key, int32_t *out) {
    const gguf_kv *kv = gguf_find(f, key);
    if (!kv) return 0;
    bool neg;
    uint64_t mag;
    if (!kv_int(kv, &neg, &mag)) return type_error(f, kv, key, "an integer");
    if ((!neg && mag > INT32_MAX) || (neg && mag > (uint64_t)INT32_MAX + 1))
        return mu_fail(MUSER_EFORMAT, "%s: metadata '%s' (byte offset %llu) is out of range", f->path, key,
                       (unsigned long long)kv->offset);
    *out = neg ? (int32_t)(-(int64_t)mag) : (int32_t)mag;
    return 1;
}

int gguf_get_f32(const gguf_file *f, const char *key, float *out) {
    const gguf_kv *kv = gguf_find(f, key);
    if (!kv) return 0;
    if (kv->type == GGUF_TYPE_FLOAT32 || kv->type == GGUF_TYPE_FLOAT64) {
        *out = (float)kv->v.f64;
        return 1;
    }
    bool neg;
    uint64_t mag;
    if (kv_int(kv, &neg, &mag)) {
        *out = neg ? -(float)mag : (float)mag;
        return 1;
    }
    return type_error(f, kv, key, "a number");
}

int gguf_get_bool(const gguf_file *f, const char *key, bool *out) {
    const gguf_kv *kv = gguf_find(f, key);
    if (!kv) return 0;
    if (kv->type != GGUF_TYPE_BOOL) return type_error(f, kv, key, "bool");
    *out = kv->v.b;
    return 1;
}

int gguf_get_str(const gguf_file *f, const char *key, gguf_str *out) {
    const gguf_kv *kv = gguf_find(f, key);
    if (!kv) return 0;
    if (kv->type != GGUF_TYPE_STRING) return type_error(f, kv, key, "string");
    *out = kv->v.str;
    return 1;
}

/* Saturating conversion: hostile files may hold NaN or huge floats. */
static int64_t float_to_i64(double x) {
    if (!(x == x)) return 0;
    if (x >= 9.2e18) return INT64_MAX;
    if (x <= -9.2e18) return INT64_MIN;
    return (int64_t)x;
}

int64_t gguf_arr_int(const gguf_kv *kv, uint64_t i) {
    const uint8_t *p = kv->arr_data + i * gguf_value_type_size(kv->arr_type);
    switch (kv->arr_type) {
    case GGUF_TYPE_UINT8: case GGUF_TYPE_BOOL: return *p;
    case GGUF_TYPE_INT8: return (int8_t)*p;
    case GGUF_TYPE_UINT16: { uint16_t x; memcpy(&x, p, 2); return x; }
    case GGUF_TYPE_INT16: { int16_t x; memcpy(&x, p, 2); return x; }
    case GGUF_TYPE_UINT32: { uint32_t x; memcpy(&x, p, 4); return x; }
    case GGUF_TYPE_INT32: { int32_t x; memcpy(&x, p, 4); return x; }
    case GGUF_TYPE_UINT64: { uint64_t x; memcpy(&x, p, 8); return x > INT64_MAX ? INT64_MAX : (int64_t)x; }
    case GGUF_TYPE_INT64: { int64_t x; memcpy(&x, p, 8); return x; }
    case GGUF_TYPE_FLOAT32: { float x; memcpy(&x, p, 4); return float_to_i64(x); }
    case GGUF_TYPE_FLOAT64: { double x; memcpy(&x, p, 8); return float_to_i64(x); }
    default: return 0;
    }
}

double gguf_arr_float(const gguf_kv *kv, uint64_t i) {
    const uint8_t *p = kv->arr_data + i * gguf_value_type_size(kv->arr_type);
    if (kv->arr_type == GGUF_TYPE_FLOAT32) {
        float x;
        memcpy(&x, p, 4);
        return x;
    }
    if (kv->arr_type == GGUF_TYPE_FLOAT64) {
        double x;
        memcpy(&x, p, 8);
        return x;
    }
    return (double)gguf_arr_int(kv, i);
}
