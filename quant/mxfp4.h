/* mxfp4.h — private to quant/: MXFP4 (OCP microscaling FP4, gpt-oss's expert tensors), its
 * reference code and its row kernels. quant/
 *
 * ggml-common.h block_mxfp4: 32 elements in 17 bytes, an E8M0 exponent e and 16 bytes of
 * nibbles in block_q4_0's layout (byte j: element j low, j + 16 high); value =
 * kvalues_mxfp4[nibble] * 2^(e - 128) (ggml-impl.h GGML_E8M0_TO_FP32_HALF: the table holds
 * twice the E2M1 values, so the scale is halved; e 0 and 1 are the subnormals 2^-128,
 * 2^-127). ggml-cpu pairs it with the Q8_0 activation (vec_dot_type Q8_0), as IQ4_NL, whose
 * lane order it takes (quant_x.h): per quad the exact integer sum of value * y, in with one
 * fma by d_w * d_x (d_w the scale above, exact in f32). Every integer is exact and every float
 * operation is the same in each implementation, so scalar, AVX2 and AVX-512 agree to the bit
 * (tests/test_mxfp4.c).
 */
#ifndef SWARM_QUANT_MXFP4_H
#define SWARM_QUANT_MXFP4_H

#include <stdint.h>

#include "quant/quant_int.h"

typedef struct {
    uint8_t e;                 /* E8M0 exponent */
    uint8_t qs[QUANT_QK / 2];  /* nibbles, indices into quant_mxfp4_values */
} quant_block_mxfp4;
_Static_assert(sizeof(quant_block_mxfp4) == 17, "ggml block_mxfp4 is 1 + 16 bytes");

/* ggml-common.h kvalues_mxfp4 (kvalues_fp4): twice the E2M1 values. */
extern const int8_t quant_mxfp4_values[16];

/* ggml-impl.h ggml_e8m0_to_fp32_half: 2^(e - 128) as f32 bits. */
static inline float quant_e8m0_half(uint8_t e)
{
    uint32_t bits = e < 2 ? 0x00200000u << e : (uint32_t)(e - 1) << 23;
    float f;
    __builtin_memcpy(&f, &bits, sizeof f);
    return f;
}

/* ggml-quants.c quantize_row_mxfp4_ref (what quantize_mxfp4, llama.cpp's quantize tool's
 * path, calls: it takes no importance matrix) over n finite values, n a multiple of 32. */
void quant_mxfp4_quantize(const float *x, void *out, uint64_t n);
/* ggml-quants.c dequantize_row_mxfp4. */
void quant_mxfp4_dequantize(const void *in, float *y, uint64_t n);
/* Block b against the Q8_0 activation y into the lanes a[] (the SIMD kernels' tail). */
void quant_mxfp4_block(const quant_block_mxfp4 *blk, uint64_t b, const quant_act_q8 *y,
                       float a[QUANT_LANES]);

float quant_dot_mxfp4_scalar(uint64_t n, const void *w, const void *act);
float quant_dot_mxfp4_avx2(uint64_t n, const void *w, const void *act);
float quant_dot_mxfp4_avx512(uint64_t n, const void *w, const void *act);

/* [scalar, AVX2, AVX-512] (dot.c's quant_dot_get picks one once per type). */
const quant_dot_fn *quant_mxfp4_dots(void);

#endif
