/* attn.h — RoPE and one head's attention, shared by the decoder families (arch/decoder.c). arch/
 *
 * Determinism: each function runs one fixed order of operations whatever the machine (the AVX
 * paths give the scalar bits), so a head's result does not depend on threads or batching. */
#ifndef SWARM_ARCH_ATTN_H
#define SWARM_ARCH_ATTN_H

#include <stddef.h>
#include <stdint.h>

/* How one layer rotates: the angles as ggml's rope cache makes them (theta_scale =
 * base^(-2/rope_dim), multiplied in pair by pair from theta = pos, divided by the pair's
 * factor, times freq_scale; cos and sin times mscale). */
typedef struct {
    uint32_t rope_dim;            /* dimensions rotated (even, <= head size) */
    int neox;                     /* pairs (i, i + rope_dim/2), else (2i, 2i+1) */
    float base, freq_scale, mscale;
    const float *factors;         /* rope_dim/2 divisors (llama3, longrope), or NULL */
    float ext_factor;             /* YaRN (gpt-oss): 0 = none; else pair i's angle mixes the
                                   * scaled and unscaled ones by ramp(i) ext_factor (ggml's
                                   * rope_yarn: ramp 1 below corr[0], 0 above corr[1]) and
                                   * mscale grows by 1 + 0.1 ln(1 / freq_scale) */
    float corr[2];                /* ggml_rope_yarn_corr_dims */
} arch_rope_args;

/* ggml_rope_yarn_corr_dims: the pairs YaRN leaves unscaled (below dims[0]) or fully scaled
 * (above dims[1]), from the rotated dimensions, the original context and beta fast / slow. */
void arch_rope_yarn_corr(uint32_t rope_dim, uint32_t n_ctx_orig, float base, float beta_fast,
                         float beta_slow, float dims[2]);

/* RoPE on n_heads heads of hd floats (in place) at absolute position pos. */
void arch_rope(float *v, uint32_t n_heads, uint32_t hd, const arch_rope_args *a, uint32_t pos);

/* out[0..hd) = softmax_t(s_t) weighted sum of v_t for t < len, s_t = q . k_t * scale, or
 * softcap tanh(s_t / softcap) when softcap > 0 (Gemma 2's scores, as llama.cpp's graph caps
 * them: scale by 1/softcap, tanh, scale by softcap); k_t = k + t * stride (v likewise).
 * sink: gpt-oss's learned logit of the head, in the softmax's max and sum but weighing no
 * value (ggml_soft_max_add_sinks); -INFINITY for none (adds exactly nothing).
 * w: len floats of scratch. */
void arch_attn_head(const float *q, const float *k, const float *v, size_t stride, uint32_t len,
                    uint32_t hd, float scale, float softcap, float sink, float *w, float *out);

/* arch_attn_head over two runs of cache rows, len then len2 (k2, v2; len2 may be 0): a
 * sliding-window layer's ring (arch_kv) holds the window's oldest positions at its end and the
 * newest at its start. The bits are one run's over the rows in that order. */
void arch_attn_head2(const float *q, const float *k, const float *v, uint32_t len,
                     const float *k2, const float *v2, uint32_t len2, size_t stride, uint32_t hd,
                     float scale, float softcap, float sink, float *w, float *out);

#endif
