/* quant_x.h — private to quant/: the types beyond the first eight (Q4_1, Q5_0, Q5_1, IQ4_NL;
 * Q2_K, Q3_K, IQ4_XS), their reference code and kernels. quant/
 *
 * Two families, each following the order of an existing one (quant.h):
 *   - blocks of 32 on the Q8_0 activation (qlegacy.c: Q4_1, Q5_0, Q5_1; iquant.c: IQ4_NL).
 *     Their quants keep block_q4_0's nibble layout, so they take Q4_0's lanes and the
 *     activation's grouped copy qs4: block b's quad q goes to lane 4 (b % 4) + q (q < 4) or
 *     16 + 4 (b % 4) + q - 4. Per quad the exact integer sum of value * y (value: Q5_0
 *     level - 16, IQ4_NL kvalues_iq4nl[nibble], Q4_1 / Q5_1 the unsigned level) goes in with
 *     one fma by d_w * d_x; Q4_1 and Q5_1 then add ggml's min term m_w * s_y (s_y = d_x
 *     sum y as block_q8_1 keeps it, an f16) to the lane of quad 0 with a second fma;
 *   - super-blocks of 256 on the Q8_K activation (kquant_lo.c: Q2_K, Q3_K; iquant.c:
 *     IQ4_XS). As kquant.c: 8 integer lanes per super-block, lane k the sum over the 32-value
 *     chunks c of quad k of chunk c times its scale (Q2_K / Q3_K: 16-value sub-blocks, so
 *     quads 0..3 take sub-block 2c's scale and 4..7 sub-block 2c + 1's); Q3_K stores levels
 *     0..7 for values -4..3 and lane k takes back 4 (sc[2k] bsums[2k] + sc[2k+1] bsums[2k+1])
 *     as Q6_K does; the lanes go into lanes (b % 4) * 8 + k with one fma by d_w * d_x, and
 *     Q2_K's mins (lane k: m[2k] bsums[2k] + m[2k+1] bsums[2k+1]) with one by -(dmin_w d_x).
 * Every integer is exact and every float operation is the same in every implementation, so
 * scalar, AVX2 and AVX-512 agree to the bit (tests/test_quant_x.c).
 */
#ifndef SWARM_QUANT_X_H
#define SWARM_QUANT_X_H

#include <stddef.h>
#include <stdint.h>

#include "quant/quant_int.h"

/* ggml-quants.c nearest_int: round to nearest even through the float adder (|fval| < 2^22). */
static inline int quant_nearest_int(float fval)
{
    float val = fval + 12582912.f;
    int32_t i;
    __builtin_memcpy(&i, &val, sizeof i);
    return (i & 0x007fffff) - 0x00400000;
}

/* ggml-quants.c make_qkx2_quants (kquant.c). */
float quant_make_qkx2_quants(int n, int nmax, const float *x, const float *weights, uint8_t *L,
                             float *the_min, uint8_t *Laux, float rmin, float rdelta, int nstep,
                             int use_mad);

/* Q4_1 / Q5_1's activation: the Q8_0 form, then per block block_q8_1's s as an f32
 * (quant.c s_q8_1_sums). */
static inline const float *quant_act_q8_sums(const void *act, uint64_t n)
{
    const uint64_t nb = n / QUANT_QK;
    return (const float *)((const uint8_t *)act + 2 * n + nb * (4 + 32) + (nb + 3) / 4 * 128);
}

/* Bytes of a block of 32 of Q4_1, Q5_0, Q5_1 or IQ4_NL, and where its qs (the nibbles) starts:
 * the SIMD kernels' group code reads four blocks by these. */
static inline size_t quant_x_bb32(quant_type t)
{
    return t == QUANT_Q4_1 ? sizeof(quant_block_q4_1) : t == QUANT_Q5_0 ? sizeof(quant_block_q5_0)
           : t == QUANT_Q5_1 ? sizeof(quant_block_q5_1) : sizeof(quant_block_iq4_nl);
}

static inline size_t quant_x_qs_off32(quant_type t)
{
    return t == QUANT_Q4_1 ? offsetof(quant_block_q4_1, qs)
           : t == QUANT_Q5_0 ? offsetof(quant_block_q5_0, qs)
           : t == QUANT_Q5_1 ? offsetof(quant_block_q5_1, qs) : offsetof(quant_block_iq4_nl, qs);
}

/* 1 if t is one of the types of this header. */
int quant_x_has(quant_type t);

/* ggml's quantizers for n elements (n a multiple of t's block, values finite): for Q4_1,
 * Q5_0, Q5_1, Q2_K, Q3_K the quantize_row_*_ref functions, which llama.cpp's quantize tool
 * uses when it has no importance matrix; for IQ4_NL and IQ4_XS what that tool writes
 * (quantize_iq4_nl / quantize_iq4_xs with no weights; quant_iq4_quantize below). */
void quant_x_quantize(quant_type t, const float *x, void *out, uint64_t n);
/* ggml's dequantize_row_* for n elements. */
void quant_x_dequantize(quant_type t, const void *in, float *y, uint64_t n);

/* ggml-quants.c quantize_row_iq4_nl_impl over n elements of IQ4_NL (t) or IQ4_XS with its
 * `ntry` (7: quantize_iq4_nl / quantize_iq4_xs / quantize_row_iq4_xs_ref; -1:
 * quantize_row_iq4_nl_ref, which only rounds against the largest value). */
void quant_iq4_quantize(quant_type t, const float *x, void *out, uint64_t n, int ntry);

/* The parts, by file: qlegacy.c (Q4_1, Q5_0, Q5_1; IQ4_NL's dequantization), kquant_lo.c
 * (Q2_K, Q3_K), iquant.c (IQ4_XS's dequantization). */
void quant_legacy_quantize(quant_type t, const float *x, void *out, uint64_t n);
void quant_legacy_dequantize(quant_type t, const void *in, float *y, uint64_t n);
void quant_kquant_lo_quantize(quant_type t, const float *x, void *out, uint64_t n);
void quant_kquant_lo_dequantize(quant_type t, const void *in, float *y, uint64_t n);
void quant_iq4_dequantize(quant_type t, const void *in, float *y, uint64_t n);
void quant_iq4_xs_lanes(const quant_block_iq4_xs *x, const quant_block_q8_K *y, int32_t s[8]);
/* Q3_K's 16 scales (ggml's kmask unpacking), stored value - 32. */
void quant_q3_K_scales(const uint8_t scales[12], int8_t sc[16]);

/* Blocks of 32: block b (weights blk) against the Q8_0 activation y into the lanes a[] (the
 * scalar kernel, one block at a time). */
void quant_x_block32(quant_type t, const void *blk, uint64_t b, const quant_act_q8 *y,
                     const float *sums, float a[QUANT_LANES]);

/* A row's last group of k < 4 blocks as a whole group, so the AVX2 kernels run it through
 * their group code (masked to the lanes of the k blocks) instead of the scalar block above
 * (the AVX-512 ones load it masked):
 * one scalar block cost as much as ~60 vector ones, and a 2880-wide row (gpt-oss's; 90
 * blocks) spent 2/3 of its time on its last two (IQ4_NL 15.5 -> 5.8 GB/s in cache,
 * 2026-12-02). Absent blocks are zero bytes (d = 0, levels 0), absent activations zero. */
typedef struct {
    uint8_t blk[4 * 24];       /* the k blocks, then zeros (24: the largest block of 32) */
    int8_t qs4[128];           /* the group's qs4: elements 0..15 at 16 p, 16..31 at 64 + 16 p */
    float d[4], s[4];          /* d_x and (Q4_1 / Q5_1) block_q8_1's s, zero past k */
} quant_x_pad;
/* Fill p with blocks b .. nb - 1 (nb - b < 4) of a row whose block b sits at blk. */
void quant_x_pad32(quant_type t, const void *blk, uint64_t b, uint64_t nb, const quant_act_q8 *y,
                   const float *sums, quant_x_pad *p);
/* Super-blocks: b's 8 integer lanes s and (Q2_K) min lanes m (kquant_lo.c, iquant.c). */
void quant_x_lanes256(quant_type t, const void *blk, const quant_block_q8_K *y, int32_t s[8],
                      int32_t m[8]);

float quant_dot_x_scalar(quant_type t, uint64_t n, const void *w, const void *act);
float quant_dot_q4_1_scalar(uint64_t n, const void *w, const void *act);
float quant_dot_q5_0_scalar(uint64_t n, const void *w, const void *act);
float quant_dot_q5_1_scalar(uint64_t n, const void *w, const void *act);
float quant_dot_iq4_nl_scalar(uint64_t n, const void *w, const void *act);
float quant_dot_q2_K_scalar(uint64_t n, const void *w, const void *act);
float quant_dot_q3_K_scalar(uint64_t n, const void *w, const void *act);
float quant_dot_iq4_xs_scalar(uint64_t n, const void *w, const void *act);

float quant_dot_q4_1_avx2(uint64_t n, const void *w, const void *act);
float quant_dot_q5_0_avx2(uint64_t n, const void *w, const void *act);
float quant_dot_q5_1_avx2(uint64_t n, const void *w, const void *act);
float quant_dot_iq4_nl_avx2(uint64_t n, const void *w, const void *act);
float quant_dot_q2_K_avx2(uint64_t n, const void *w, const void *act);
float quant_dot_q3_K_avx2(uint64_t n, const void *w, const void *act);
float quant_dot_iq4_xs_avx2(uint64_t n, const void *w, const void *act);

float quant_dot_q4_1_avx512(uint64_t n, const void *w, const void *act);
float quant_dot_q5_0_avx512(uint64_t n, const void *w, const void *act);
float quant_dot_q5_1_avx512(uint64_t n, const void *w, const void *act);
float quant_dot_iq4_nl_avx512(uint64_t n, const void *w, const void *act);
float quant_dot_q2_K_avx512(uint64_t n, const void *w, const void *act);
float quant_dot_q3_K_avx512(uint64_t n, const void *w, const void *act);
float quant_dot_iq4_xs_avx512(uint64_t n, const void *w, const void *act);
/* The same with GFNI too (dot_k23_gfni.c): the AVX-512 kernels quant_x_dots gives a CPU that
 * has it; the two above stay for AVX-512 CPUs without (tests check both). */
float quant_dot_q2_K_gfni(uint64_t n, const void *w, const void *act);
float quant_dot_q3_K_gfni(uint64_t n, const void *w, const void *act);

/* The kernels of t for each ISA (scalar, AVX2, AVX-512), or NULL if t is not one of these. */
const quant_dot_fn *quant_x_dots(quant_type t);

#endif
