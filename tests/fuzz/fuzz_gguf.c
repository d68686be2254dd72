/* fuzz_gguf.c — libFuzzer target for the GGUF reader: any input must be
 * accepted or rejected cleanly; accepted files must have every tensor
 * inside the buffer (touched here so ASan would see an overread). */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "gguf/gguf.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    /* Copy to an exact-size heap buffer so overreads are caught. */
    uint8_t *copy = malloc(size ? size : 1);
    if (!copy) return 0;
    memcpy(copy, data, size);
    gguf_file *f = NULL;
    if (gguf_open_memory(copy, size, "fuzz", &f) == 0) {
        volatile uint8_t sink = 0;
        for (uint64_t i = 0; i < f->n_tensors; i++) {
            const gguf_tensor *t = &f->tensors[i];
            if (t->n_bytes) sink ^= ((const uint8_t *)t->data)[0] ^ ((const uint8_t *)t->data)[t->n_bytes - 1];
        }
        for (uint64_t i = 0; i < f->n_kv; i++) {
            const gguf_kv *kv = &f->kv[i];
            if (kv->type == GGUF_TYPE_ARRAY && kv->arr_type == GGUF_TYPE_STRING)
                for (uint64_t j = 0; j < kv->arr_count; j++)
                    if (kv->arr_strs[j].len) sink ^= (uint8_t)kv->arr_strs[j].ptr[kv->arr_strs[j].len - 1];
        }
        (void)sink;
        gguf_close(f);
    }
    free(copy);
    return 0;
}
