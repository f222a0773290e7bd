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
} arch_rope_args;

/* RoPE on n_heads heads of hd floats (in place) at absolute position pos. */
void arch_rope(float *v, uint32_t n_heads, uint32_t hd, const arch_rope_args *a, uint32_t pos);

/* out[0..hd) = softmax_t(s_t) weighted sum of v_t for t < len, s_t = q . k_t * scale, or
 * softcap tanh(s_t / softcap) when softcap > 0 (Gemma 2's scores, as llama.cpp's graph caps
 * them: scale by 1/softcap, tanh, scale by softcap); k_t = k + t * stride (v likewise).
 * w: len floats of scratch. */
void arch_attn_head(const float *q, const float *k, const float *v, size_t stride, uint32_t len,
                    uint32_t hd, float scale, float softcap, float *w, float *out);

/* arch_attn_head over two runs of cache rows, len then len2 (k2, v2; len2 may be 0): a
 * sliding-window layer's ring (arch_kv) holds the window's oldest positions at its end and the
 * newest at its start. The bits are one run's over the rows in that order. */
void arch_attn_head2(const float *q, const float *k, const float *v, uint32_t len,
                     const float *k2, const float *v2, uint32_t len2, size_t stride, uint32_t hd,
                     float scale, float softcap, float *w, float *out);

#endif
