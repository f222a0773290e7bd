/* moe.h — a Mixture-of-Experts feed-forward (Mixtral's `llama` with experts, qwen3moe): the
 * router's top-k, the routed experts' products from their rows, and the weighted sum, for the
 * decoder layer (arch/decoder.c) when a layer has experts. arch/ (internal)
 *
 * As llama.cpp's build_moe_ffn (src/llama-graph.cpp) with the softmax gating both families
 * use: probs = softmax(router logits) over all experts; the top k by probability (ties: the
 * lower index); weights = their probs, divided by their sum (clamped below at 2^-14) when
 * normalised (both families: norm_w true), times expert_weights_scale when it is neither 0 nor
 * 1; each routed expert's SwiGLU, silu(gate) . up, through its down rows; the output the sum
 * over the k slots in order of down_j * w_j (ggml_mul then k - 1 ggml_add).
 *
 * An expert tensor is one matrix of n_expert x per rows (arch_tensor.n_expert); its rows may
 * arrive in any row ranges (a streamed layer): each range computes only the rows of experts
 * that some position routes to, every output row one quant dot product in a fixed order, so
 * the bits do not depend on the ranges, the threads or the batch.
 */
#ifndef SWARM_ARCH_MOE_H
#define SWARM_ARCH_MOE_H

#include <stddef.h>
#include <stdint.h>

#include "arch/arch.h"

#define ARCH_MOE_MAX_EXPERTS 512
#define ARCH_MOE_MAX_USED 64

typedef struct arch_moe arch_moe;

/* Scratch for max_pos positions of a model with hp->n_expert > 0; NULL when out of memory. */
arch_moe *arch_moe_new(const arch_hparams *hp, uint32_t max_pos);
void arch_moe_free(arch_moe *m);
uint64_t arch_moe_bytes(const arch_hparams *hp, uint32_t max_pos);

/* One position's routing from its n_expert router logits: sel[0..k) the chosen experts by
 * decreasing probability, w[0..k) their weights (see the top of the file). */
void arch_moe_route(const float *logits, uint32_t n_expert, uint32_t k, int norm_w, float scale,
                    uint32_t *sel, float *w);

/* gpt-oss's gating (ARCH_GATING_SOFTMAX_WEIGHT): sel[0..k) the k largest logits, largest
 * first (ties: the lower index), w[0..k) the softmax of those k logits (not normalised
 * again), times scale when it is neither 0 nor 1. */
void arch_moe_route_weight(const float *logits, uint32_t n_expert, uint32_t k, float scale,
                           uint32_t *sel, float *w);

/* (max_pos, n_expert): where the router's products go. */
float *arch_moe_logits(arch_moe *m);
/* Route n positions from arch_moe_logits, each plus the router's bias (n_expert; NULL:
 * none), by the model's gating. */
void arch_moe_route_all(arch_moe *m, uint32_t n, const float *bias);
/* Positions 0..n's chosen experts: sel[p * k + j] (k = n_expert_used). */
const uint32_t *arch_moe_selected(const arch_moe *m);
/* The experts positions 0..n route to: used[e] = 1; their count. */
uint32_t arch_moe_used(const arch_moe *m, uint32_t n, uint8_t *used);
/* Rows r0..r0+nr of expert tensor t (which: 0 gate, 1 up, 2 down) for n positions: gate and up
 * read x (n x dim, the normed input), down the activations. rows NULL: the range was not read
 * (the SSD arm reads only routed experts), refused when a position routes to an expert in it.
 * 0 / -1 with why. */
int arch_moe_rows(arch_moe *m, int which, const arch_tensor *t, uint64_t r0, uint64_t nr,
                  const void *rows, const float *x, uint32_t n, int nthreads, char *why,
                  size_t whylen);
/* After every gate and up row: gate and up plus their routed expert's bias rows (n_expert x
 * n_ff_exp each, NULL: none), then act = silu(gate) . up, or gpt-oss's clamped SwiGLU, for
 * n positions. */
void arch_moe_act(arch_moe *m, uint32_t n, const float *gate_b, const float *up_b);
/* After every down row: out (n x dim) = the weighted sum of the routed experts' outputs, each
 * plus its expert's down bias row (n_expert x dim; NULL: none). */
void arch_moe_out(arch_moe *m, uint32_t n, float *out, const float *down_b);

#endif
