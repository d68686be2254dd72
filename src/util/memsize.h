/* memsize.h — the GPU options' values as people write them on a command
 * line: sizes of memory (--gpu-mem) and counts of layers (--gpu-layers). */
#ifndef MU_MEMSIZE_H
#define MU_MEMSIZE_H

#include <stdbool.h>
#include <stdint.h>

/* "24G", "24GiB", "24GB", "20480M", "1.5T", "123456" (bytes): binary
 * units (K = 1024, G = 1024^3), as GPU memory is sized. false for anything
 * else, zero or negative. */
bool mu_parse_mem_size(const char *s, uint64_t *out);

/* --gpu-layers (llama.cpp's -ngl): a count of layers from 0 (every layer
 * on the CPU; larger than the model's: all), "all" (MUSER_GPU_LAYERS_ALL)
 * or "auto" (MUSER_GPU_LAYERS_AUTO: the most that fit under --gpu-mem).
 * false for anything else: a sign, a fraction, spaces, an empty string. */
bool mu_parse_gpu_layers(const char *s, int *out);

#endif
