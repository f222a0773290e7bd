/* quant_int.h — private to quant/: the fixed accumulation order and each ISA's kernels. quant/
 *
 * quant.h states the order every implementation follows; the pieces shared by all of them
 * live here so there is one copy of the rules: the lane count, the reduction tree, and the
 * scalar tail a SIMD kernel finishes a row with (fmaf is correctly rounded, so a scalar fmaf
 * on a lane gives the bits vfmadd gives on the same lane).
 */
#ifndef SWARM_QUANT_INT_H
#define SWARM_QUANT_INT_H

#include <stdint.h>

#include "quant/quant.h"

#define QUANT_LANES 32      /* accumulator lanes of every dot product */
#define QUANT_QB_LANES 8    /* lanes per quantized block: one per quad of 4 elements */
#define QUANT_QB_GROUP 4    /* blocks b..b+3 fill the 32 lanes, (b % 4) * 8 + quad */
#define QUANT_QB_BLANES 16  /* Q8_0 and Q4_0: one lane per block, b % 16 (quant.h) */

/* Software prefetch for the row kernels: each pass over a group of blocks (or over 32 values of a
 * float type) asks for the bytes QUANT_PREFETCH ahead of it (past a row's end: the next row, which
 * matvec reads next). One core's hardware prefetchers alone leave a streamed product well short of
 * a plain read of the same bytes: bench-quant 5632 x 2048 from DRAM, 1 thread, alternating runs in
 * one process (2026-12-01, load average 0.3-0.7, read bound 8-10 GB/s): Q4_0 6.1-6.4 GB/s without,
 * 10.4-11.4 with 4096 bytes ahead (2048: 9.9-10.0, 8192 and 16384: 10.5-11.2, 512: 5.7-7.3); the
 * K-quants, which asked 2048 ahead, gain 5-7% more at 4096 (q4_K 10.1 -> 10.9 GB/s, q6_K 10.1 ->
 * 10.8); F16 and BF16 go from 0.85-0.88 of the read bound to 1.25-1.34 (alternating runs of the
 * builds before and after). In cache the prefetches are wasted loads (a few %): real models'
 * products stream. A prefetch never faults, so running past the matrix is harmless. */
#define QUANT_PREFETCH 4096

/* Prefetch the `bytes` bytes QUANT_PREFETCH past p, one request per 64-byte line. Unrolled:
 * the AVX2 K-quant loops' 336-544 bytes (6-9 lines) stayed a loop at -O2, an add, a compare
 * and a branch per line on ports the vector work needs (2026-12-03). */
static inline void quant_prefetch(const void *p, unsigned bytes)
{
#pragma GCC unroll 16
    for (unsigned o = 0; o < bytes; o += 64)
        __builtin_prefetch((const char *)p + QUANT_PREFETCH + o, 0, 3);
}

/* The one reduction tree (quant.h), and Q8_0/Q4_0's 16-lane one. */
float quant_reduce32(const float a[QUANT_LANES]);
float quant_reduce16(const float a[QUANT_QB_BLANES]);

/* Q8_0 / Q4_0: blocks [b0, nb) of a row into lanes b % 16 of a[] (quant.h's order, scalar):
 * the reference kernels, and the SIMD kernels' leftover blocks. */
void quant_tail_q8_0(const quant_block_q8_0 *x, const quant_act_q8 *y, uint64_t b0, uint64_t nb,
                     float *a);
void quant_tail_q4_0(const quant_block_q4_0 *x, const quant_act_q8 *y, uint64_t b0, uint64_t nb,
                     float *a);

/* Scalar tails of the float types: elements [i0, n) into lanes i % 32. */
void quant_tail_f32(const float *w, const float *x, uint64_t i0, uint64_t n, float *a);
void quant_tail_f16(const uint16_t *w, const float *x, uint64_t i0, uint64_t n, float *a);
void quant_tail_bf16(const uint16_t *w, const float *x, uint64_t i0, uint64_t n, float *a);

/* Scalar reference kernels (dot.c): the order above, written out plainly. */
float quant_dot_f32_scalar(uint64_t n, const void *w, const void *act);
float quant_dot_f16_scalar(uint64_t n, const void *w, const void *act);
float quant_dot_bf16_scalar(uint64_t n, const void *w, const void *act);
float quant_dot_q8_0_scalar(uint64_t n, const void *w, const void *act);
float quant_dot_q4_0_scalar(uint64_t n, const void *w, const void *act);

/* K-quants (kquant.c): ggml's reference quantizers and dequantizers over nb super-blocks,
 * the Q8_K activation quantizer, the 6-bit scales and mins of Q4_K/Q5_K unpacked, and the
 * scalar dot products (the lane order is written out in kquant.c). */
void quant_kquant_quantize(quant_type t, const float *x, void *out, uint64_t nb);
void quant_kquant_dequantize(quant_type t, const void *in, float *y, uint64_t nb);
void quant_q8_K_quantize(const float *x, quant_block_q8_K *y, uint64_t nb);
/* The same bytes on AVX-512 F+BW+VL (q8k_avx512.c); only called when the CPU has it. */
void quant_q8_K_quantize_avx512(const float *x, quant_block_q8_K *y, uint64_t nb);
void quant_k_scales(const uint8_t scales[12], uint8_t sc[8], uint8_t m[8]);
float quant_dot_k_scalar(quant_type t, uint64_t n, const void *w, const void *act);
float quant_dot_q4_K_scalar(uint64_t n, const void *w, const void *act);
float quant_dot_q5_K_scalar(uint64_t n, const void *w, const void *act);
float quant_dot_q6_K_scalar(uint64_t n, const void *w, const void *act);
float quant_dot_q4_K_avx2(uint64_t n, const void *w, const void *act);
float quant_dot_q5_K_avx2(uint64_t n, const void *w, const void *act);
float quant_dot_q6_K_avx2(uint64_t n, const void *w, const void *act);
float quant_dot_q4_K_avx512(uint64_t n, const void *w, const void *act);
float quant_dot_q5_K_avx512(uint64_t n, const void *w, const void *act);
float quant_dot_q6_K_avx512(uint64_t n, const void *w, const void *act);

/* AVX2 + FMA + F16C kernels (dot_avx2.c); only called when the CPU has them. */
float quant_dot_f32_avx2(uint64_t n, const void *w, const void *act);
float quant_dot_f16_avx2(uint64_t n, const void *w, const void *act);
float quant_dot_bf16_avx2(uint64_t n, const void *w, const void *act);
float quant_dot_q8_0_avx2(uint64_t n, const void *w, const void *act);
float quant_dot_q4_0_avx2(uint64_t n, const void *w, const void *act);

/* x (n floats, n a multiple of 32) into the Q8_0 activation form with AVX2: the same bytes
 * as the scalar quant_act_prepare. -1 (nothing promised about act) on a non-finite value. */
int quant_act_q8_avx2(const float *x, uint64_t n, void *act);

/* AVX-512 F+BW+VL+VNNI kernels (dot_avx512.c). */
float quant_dot_f32_avx512(uint64_t n, const void *w, const void *act);
float quant_dot_f16_avx512(uint64_t n, const void *w, const void *act);
float quant_dot_bf16_avx512(uint64_t n, const void *w, const void *act);
float quant_dot_q8_0_avx512(uint64_t n, const void *w, const void *act);
float quant_dot_q4_0_avx512(uint64_t n, const void *w, const void *act);
/* np (1..QUANT_Q8_DOTN) positions' Q8_0 dots with one row w: out[p] has exactly the bits of
 * quant_dot_q8_0_avx512(n, w, act[p]); the row is read once. */
#define QUANT_Q8_DOTN 4
void quant_dotn_q8_0_avx512(uint64_t n, const void *w, const void *const *act, int np,
                            float *out);

/* Tiles for batched products: QUANT_TILE_ROWS weight rows w[r] against QUANT_TILE_POS
 * activations act[p]; out[r * QUANT_TILE_POS + p] gets exactly the bits of the one-row dot
 * product of w[r] and act[p] (each pair keeps its own lanes and order). */
#define QUANT_TILE_ROWS 2
#define QUANT_TILE_POS 4
typedef void (*quant_tile_fn)(uint64_t n, const void *const *w, const void *const *act,
                              float *out);
void quant_tile_f32_avx512(uint64_t n, const void *const *w, const void *const *act, float *out);
void quant_tile_f16_avx512(uint64_t n, const void *const *w, const void *const *act, float *out);
void quant_tile_bf16_avx512(uint64_t n, const void *const *w, const void *const *act, float *out);
void quant_tile_q4_K_avx512(uint64_t n, const void *const *w, const void *const *act, float *out);
void quant_tile_q5_K_avx512(uint64_t n, const void *const *w, const void *const *act, float *out);
void quant_tile_q6_K_avx512(uint64_t n, const void *const *w, const void *const *act, float *out);
/* The tile for t on isa, or NULL (none: the product then uses one dot per pair). */
quant_tile_fn quant_tile_get(quant_type t, quant_isa isa);

#endif
