/* gen.h — small random-weight llama / qwen2 / qwen3 / qwen3moe / gemma3 / phi3 GGUF files for tests and benchmarks. arch/ */
#ifndef SWARM_ARCH_GEN_H
#define SWARM_ARCH_GEN_H

#include <stddef.h>
#include <stdint.h>

#include "arch/arch.h"

typedef struct {
    const char *arch;             /* general.architecture: llama, qwen2, qwen3, gemma3, phi3 */
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
    uint32_t head_dim;            /* attention.key_length (0: dim / n_head; qwen3 and gemma3
                                   * files always carry the key) */
    uint32_t swa;                 /* gemma2/3: attention.sliding_window (0: none written;
                                   * gemma2: its 4096) */
    float softcap;                /* gemma2/3: final_logit_softcapping (0: not written;
                                   * gemma2: its 30) */
    float attn_softcap;           /* gemma2: attn_logit_softcapping (0: its 50) */
    uint32_t rope_dim;            /* rope.dimension_count (0: the head size; less rotates
                                   * part of each head, as Phi-4-mini) */
    uint32_t longrope;            /* phi3: > 0 writes the 128k variants' longrope with this
                                   * original context (rope_factors_long/short.weight,
                                   * rope.scaling.attn_factor); 0: none */
    uint32_t n_expert;            /* > 0: a Mixture-of-Experts feed-forward of this many experts
                                   * (llama: Mixtral's; qwen3moe needs it) */
    uint32_t n_expert_used;       /* the top k a position routes to (0: 2) */
    uint32_t n_ff_exp;            /* qwen3moe: expert_feed_forward_length (0: ff); llama's
                                   * experts are ff wide */
    const char *chat_template;    /* tokenizer.chat_template to write (replacing the
                                     vocabulary's), or NULL */
    float confident;              /* 0: off (every weight random, as above). G > 0: a
                                   * confident next-token distribution, as a trained model's,
                                   * for measurements that depend on it (speculative decoding's
                                   * acceptance): token_embd's rows times G, so the current
                                   * token's embedding stays a large part of the residual
                                   * stream, and output.weight's row j its random row plus the
                                   * unscaled embedding of token s(j) = (7919 j + 1) mod
                                   * n_vocab, so the head favours the token j with s(j) the
                                   * current one, by a margin that grows with G (a bigram the
                                   * layers' context shifts). Needs output.weight (not tied). */
} arch_gen_opts;

/* Write the model to path (via path.tmp, renamed when complete): metadata as llama.cpp's
 * converter writes it, weights uniform with standard deviation 0.02 (norm weights in
 * 1 +- 0.1), deterministic from the seed, matrices quantized with quant's reference
 * quantizers. Streams one row at a time. 0 / -1 with err. */
int arch_gen(const char *path, const arch_gen_opts *o, char *err, size_t errlen);

#endif
