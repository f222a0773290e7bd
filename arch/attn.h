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

/* ---------------------------------------------------------------- a KV group's heads at once */

/* Keys lo .. lo + n - 1 of one KV head transposed into blocks of 16 (key lo + 16 b + j's
 * element i at kt[(b hd + i) 16 + j], zeros past n): key t is row t % rows of k (rows apart
 * by stride floats). kt holds arch_attn_kt_floats(n, hd) floats, owned by the caller. */
size_t arch_attn_kt_floats(uint32_t n, uint32_t hd);
void arch_attn_kt(float *kt, const float *k, size_t stride, uint32_t rows, uint32_t lo,
                  uint32_t n, uint32_t hd);

/* One KV head's cache for arch_attn_group: position t's key at k + (t % rows) stride (value
 * likewise), and arch_attn_kt of keys kt_lo .. (every key a group attends). */
typedef struct {
    const float *k, *v;
    size_t stride;
    uint32_t rows;
    const float *kt;
    uint32_t kt_lo;
    uint32_t hd;
    float scale, softcap;         /* as arch_attn_head's */
} arch_attn_keys;

/* nq query heads (head u at q + u hd) that share kv attend the positions t0 .. t0 + len - 1:
 * out + u hd gets head u's output, with the bits arch_attn_head2 gives that head over the same
 * rows (whatever the ISA: quant_isa_current picks 512-bit vectors, 256-bit or, for scalar,
 * arch_attn_head2 itself). sinks: nq logits or NULL. w: arch_attn_group_scratch(nq, len)
 * floats of scratch. */
#define ARCH_ATTN_GROUP_MAX 16 /* heads the scratch holds: more are taken that many at a time */
size_t arch_attn_group_scratch(uint32_t nq, uint32_t len);
void arch_attn_group(const arch_attn_keys *kv, const float *q, uint32_t nq, uint32_t t0,
                     uint32_t len, const float *sinks, float *w, float *out);

#endif
