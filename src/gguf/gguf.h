/* gguf.h — GGUF v3 reader (mmap, fully validated, zero-copy) and writer.
 *
 * File layout (little-endian):
 *
 *   +--------+---------+-----------+--------+
 *   | "GGUF" | u32 ver | u64 n_tns | u64 kv |   header (24 bytes)
 *   +--------+---------+-----------+--------+
 *   | kv[i]: str key | u32 type | value      |   n_kv pairs
 *   | ti[i]: str name | u32 n_dims | u64 ne[n_dims] | u32 type | u64 off |
 *   | padding to general.alignment (default 32)                        |
 *   | tensor data: tensor i at data_start + off[i]                      |
 *
 *   str = u64 len + bytes (no NUL); array = u32 elem type + u64 count + elems.
 *
 * The reader treats the file as hostile: every length, count, type, shape
 * and offset is checked before use, and any violation fails with a message
 * naming the file, the field and its byte offset.
 */
#ifndef MU_GGUF_H
#define MU_GGUF_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

enum gguf_value_type {
    GGUF_TYPE_UINT8 = 0,
    GGUF_TYPE_INT8 = 1,
    GGUF_TYPE_UINT16 = 2,
    GGUF_TYPE_INT16 = 3,
    GGUF_TYPE_UINT32 = 4,
    GGUF_TYPE_INT32 = 5,
    GGUF_TYPE_FLOAT32 = 6,
    GGUF_TYPE_BOOL = 7,
    GGUF_TYPE_STRING = 8,
    GGUF_TYPE_ARRAY = 9,
    GGUF_TYPE_UINT64 = 10,
    GGUF_TYPE_INT64 = 11,
    GGUF_TYPE_FLOAT64 = 12,
    GGUF_TYPE_COUNT = 13,
};

#define GGUF_MAX_DIMS 4
#define GGUF_DEFAULT_ALIGNMENT 32

/* A string inside the mapped file (not NUL-terminated). */
typedef struct gguf_str {
    const char *ptr;
    uint64_t len;
} gguf_str;

typedef struct gguf_kv {
    gguf_str key;
    uint32_t type;           /* enum gguf_value_type                     */
    uint64_t offset;         /* byte offset of the key in the file       */
    union {
        uint64_t u64;        /* any unsigned integer, widened            */
        int64_t i64;         /* any signed integer, widened              */
        double f64;          /* FLOAT32 / FLOAT64, widened               */
        bool b;
        gguf_str str;
    } v;
    /* arrays */
    uint32_t arr_type;
    uint64_t arr_count;
    const uint8_t *arr_data; /* raw elements (not for string arrays)     */
    gguf_str *arr_strs;      /* string arrays: one view per element      */
} gguf_kv;

typedef struct gguf_tensor {
    char *name;              /* NUL-terminated copy                      */
    uint32_t n_dims;
    int64_t ne[GGUF_MAX_DIMS]; /* unused dims are 1                      */
    uint32_t type;           /* ggml type id (enum mu_type)              */
    uint64_t offset;         /* relative to the data section             */
    uint64_t n_elements;
    uint64_t n_bytes;
    const void *data;        /* into the mapping                         */
    uint64_t info_offset;    /* byte offset of the tensor info           */
} gguf_tensor;

typedef struct gguf_file {
    char *path;
    const uint8_t *base;     /* mapping (or caller's buffer)             */
    uint64_t size;
    bool mapped;
    uint32_t version;
    uint64_t n_kv, n_tensors;
    gguf_kv *kv;
    gguf_tensor *tensors;
    uint64_t alignment;
    uint64_t data_offset;    /* start of the data section                */
} gguf_file;

/* Maps and validates a file. On failure *out is NULL and the message says
 * what is wrong and where. */
int gguf_open(const char *path, gguf_file **out);
/* Validates a buffer the caller owns (fuzzing, tests); label names it in
 * messages. The buffer must be 8-byte aligned (as malloc's are) and
 * outlive the gguf_file. */
int gguf_open_memory(const void *data, size_t size, const char *label, gguf_file **out);
void gguf_close(gguf_file *f);

const gguf_kv *gguf_find(const gguf_file *f, const char *key);
const gguf_tensor *gguf_find_tensor(const gguf_file *f, const char *name);
bool gguf_str_eq(gguf_str s, const char *c);
/* Copies into buf (NUL-terminated, truncated to cap-1). */
const char *gguf_str_copy(gguf_str s, char *buf, size_t cap);
const char *gguf_type_name(uint32_t type);
/* Bytes of one value of a fixed-size type; 0 for strings, arrays and
 * invalid types. */
size_t gguf_value_type_size(uint32_t type);

/* Typed getters. Return 1 if found and converted, 0 if absent, and a
 * negative status (with a message naming the key) if present with a type
 * that cannot be converted or a value out of range. Integer getters accept
 * any integer type whose value fits. */
int gguf_get_u32(const gguf_file *f, const char *key, uint32_t *out);
int gguf_get_u64(const gguf_file *f, const char *key, uint64_t *out);
int gguf_get_i32(const gguf_file *f, const char *key, int32_t *out);
int gguf_get_f32(const gguf_file *f, const char *key, float *out);
int gguf_get_bool(const gguf_file *f, const char *key, bool *out);
int gguf_get_str(const gguf_file *f, const char *key, gguf_str *out);
/* Array element accessors (index checked by the caller against arr_count). */
int64_t gguf_arr_int(const gguf_kv *kv, uint64_t i); /* integer/bool arrays */
double gguf_arr_float(const gguf_kv *kv, uint64_t i); /* float/integer arrays */

/* ---- writer ------------------------------------------------------------
 * Usage: gguf_writer_new; add kvs and tensor infos (sizes known up front);
 * gguf_writer_begin(w, FILE*) writes the header; then
 * gguf_writer_write_tensor(w, i, data) for i = 0..n-1 in order (each may
 * also be written in pieces with gguf_writer_write_data, then
 * gguf_writer_end_tensor); gguf_writer_finish. */
typedef struct gguf_writer gguf_writer;

gguf_writer *gguf_writer_new(void);
void gguf_writer_free(gguf_writer *w);
void gguf_writer_set_alignment(gguf_writer *w, uint32_t alignment);
int gguf_writer_add_u32(gguf_writer *w, const char *key, uint32_t v);
int gguf_writer_add_i32(gguf_writer *w, const char *key, int32_t v);
int gguf_writer_add_u64(gguf_writer *w, const char *key, uint64_t v);
int gguf_writer_add_f32(gguf_writer *w, const char *key, float v);
int gguf_writer_add_bool(gguf_writer *w, const char *key, bool v);
int gguf_writer_add_str(gguf_writer *w, const char *key, const char *v);
/* Arrays of fixed-size elements (elem_type not STRING/ARRAY). */
int gguf_writer_add_arr(gguf_writer *w, const char *key, uint32_t elem_type, const void *data,
                        uint64_t count);
int gguf_writer_add_arr_str(gguf_writer *w, const char *key, const char *const *strs,
                            const uint64_t *lens, uint64_t count);
/* Copies a kv (any type, arrays included) from an open file. */
int gguf_writer_copy_kv(gguf_writer *w, const gguf_kv *kv);
/* Returns the tensor's index, or a negative status. */
int gguf_writer_add_tensor(gguf_writer *w, const char *name, uint32_t type, int n_dims,
                           const int64_t *ne);
int gguf_writer_begin(gguf_writer *w, FILE *fp);
int gguf_writer_write_data(gguf_writer *w, const void *data, uint64_t n);
int gguf_writer_end_tensor(gguf_writer *w);
int gguf_writer_write_tensor(gguf_writer *w, int index, const void *data);
int gguf_writer_finish(gguf_writer *w);
uint64_t gguf_writer_tensor_bytes(const gguf_writer *w, int index);
uint64_t gguf_writer_total_bytes(const gguf_writer *w); /* whole file, after begin */

#endif
