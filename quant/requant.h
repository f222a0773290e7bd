/* requant.h — a GGUF file's weights rewritten in another tensor type (swarm quantize). quant/
 *
 * Which tensor gets which type follows llama.cpp's llama_tensor_get_type (src/llama-quant.cpp)
 * for the named mixes, without an importance matrix: see requant.c for the rules kept.
 */
#ifndef SWARM_REQUANT_H
#define SWARM_REQUANT_H

#include <stddef.h>
#include <stdint.h>

typedef struct {
    uint64_t tensors, quantized, fallbacks; /* fallbacks: rows that did not fit the block */
    uint64_t bytes_in, bytes_out;            /* tensor data */
} requant_stats;

/* Names TYPE accepts, for usage and errors. */
#define REQUANT_NAMES                                                                        \
    "Q8_0, Q4_0, Q4_1, Q5_0, Q5_1, IQ4_NL, IQ4_XS, Q2_K, Q3_K, Q4_K, Q5_K, Q6_K, Q3_K_S, Q3_K_M, " \
    "Q3_K_L, Q4_K_S, Q4_K_M, Q5_K_M, MXFP4_MOE"

/* Quantize in_path into out_path as `type` (one of REQUANT_NAMES, any case), tensor by
 * tensor (one chunk of rows in memory at a time, its rows shared by nthreads threads of
 * quant's pool; the output does not depend on nthreads). out_path is written under a temporary
 * name and renamed when complete. 0 / -1 with err naming the file, tensor or type. If
 * verbose, one line per tensor goes to stdout. */
int requant_file(const char *in_path, const char *out_path, const char *type, int nthreads,
                 int verbose, requant_stats *st, char *err, size_t errlen);

#endif
