/* gen.h — small random-weight llama / qwen2 GGUF files for tests and benchmarks. arch/ */
#ifndef SWARM_ARCH_GEN_H
#define SWARM_ARCH_GEN_H

#include <stddef.h>
#include <stdint.h>

#include "arch/arch.h"

typedef struct {
    const char *arch;             /* general.architecture: "llama" or "qwen2" */
    uint32_t dim, n_layers, n_head, n_head_kv, n_ff;
    uint32_t n_vocab;             /* used when vocab_from is NULL */
    const char *vocab_from;       /* a GGUF whose tokenizer.* keys are copied (n_vocab from it) */
    uint32_t type;                /* the matrices' ggml type (quant.h); vectors are f32 */
    int tied;                     /* no output.weight */
    uint32_t n_ctx;               /* context_length written (default 2048) */
    uint64_t seed;
    uint32_t alignment;           /* general.alignment (default 32, as published files) */
    float rope_linear;            /* > 1: rope.scaling.type "linear" with this factor */
    int rope_llama3;              /* write rope_freqs.weight as Llama 3.1's files carry it */
    const char *chat_template;    /* tokenizer.chat_template to write (replacing the
                                     vocabulary's), or NULL */
} arch_gen_opts;

/* Write the model to path (via path.tmp, renamed when complete): metadata as llama.cpp's
 * converter writes it, weights uniform with standard deviation 0.02 (norm weights in
 * 1 +- 0.1), deterministic from the seed, matrices quantized with quant's reference
 * quantizers. Streams one row at a time. 0 / -1 with err. */
int arch_gen(const char *path, const arch_gen_opts *o, char *err, size_t errlen);

#endif
