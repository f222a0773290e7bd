/* mxfp4.c — MXFP4: ggml's reference quantizer and dequantizer and the scalar dot product
 * (quant/mxfp4.h says the layout and the order). quant/ */
#include "quant/mxfp4.h"

#include <math.h>

const int8_t quant_mxfp4_values[16] = { 0, 1, 2, 3, 4, 6, 8, 12, 0, -1, -2, -3, -4, -6, -8, -12 };

/* ggml-quants.c best_index_mxfp4: the first index of least |value * d - x| (a tie keeps the
 * lower index, so +0 wins over -0 and a half-way value goes to the smaller magnitude's
 * index when it comes first). */
static uint8_t s_best(float x, float d)
{
    int best = 0;
    float be = fabsf(quant_mxfp4_values[0] * d - x);
    for (int i = 1; i < 16; i++) {
        float err = fabsf(quant_mxfp4_values[i] * d - x);
        if (err < be) {
            best = i;
            be = err;
        }
    }
    return (uint8_t)best;
}

void quant_mxfp4_quantize(const float *x, void *out, uint64_t n)
{
    quant_block_mxfp4 *y = out;
    for (uint64_t i = 0; i < n / QUANT_QK; i++) {
        const float *xb = x + i * QUANT_QK;
        float amax = 0.0f;
        for (int j = 0; j < QUANT_QK; j++)
            if (amax < fabsf(xb[j]))
                amax = fabsf(xb[j]);
        /* ggml: (uint8_t)(floorf(log2f(amax)) - 2 + 127), a float to uint8_t conversion,
         * which x86-64 compilers do through a 32-bit integer: kept that way so amax below
         * 2^-125 (a negative exponent) wraps as it does in ggml, not undefined here */
        const uint8_t e = amax > 0.0f ? (uint8_t)(int32_t)(floorf(log2f(amax)) - 2 + 127) : 0;
        const float d = quant_e8m0_half(e);
        y[i].e = e;
        for (int j = 0; j < QUANT_QK / 2; j++)
            y[i].qs[j] = (uint8_t)(s_best(xb[j], d) | s_best(xb[j + QUANT_QK / 2], d) << 4);
    }
}

void quant_mxfp4_dequantize(const void *in, float *y, uint64_t n)
{
    const quant_block_mxfp4 *x = in;
    for (uint64_t i = 0; i < n / QUANT_QK; i++) {
        const float d = quant_e8m0_half(x[i].e);
        for (int j = 0; j < QUANT_QK / 2; j++) {
            y[i * QUANT_QK + j] = quant_mxfp4_values[x[i].qs[j] & 0x0F] * d;
            y[i * QUANT_QK + j + QUANT_QK / 2] = quant_mxfp4_values[x[i].qs[j] >> 4] * d;
        }
    }
}

/* Quad q of block b in Q4_0's lane order: low nibbles (quads 0..3) in lanes 4 (b % 4) + q,
 * high nibbles in 16 + 4 (b % 4) + q - 4; each quad's exact sum of value * y, one fmaf. */
void quant_mxfp4_block(const quant_block_mxfp4 *blk, uint64_t b, const quant_act_q8 *y,
                       float a[QUANT_LANES])
{
    const float d = quant_e8m0_half(blk->e) * y->d[b];
    const int8_t *yq = y->qs + b * QUANT_QK;
    for (int q = 0; q < QUANT_QB_LANES; q++) {
        int s = 0;
        for (int k = 4 * q; k < 4 * q + 4; k++) {
            const int nib = k < 16 ? blk->qs[k] & 0x0F : blk->qs[k - 16] >> 4;
            s += quant_mxfp4_values[nib] * yq[k];
        }
        const uint64_t l = q < 4 ? 4 * (b % 4) + (uint64_t)q : 12 + 4 * (b % 4) + (uint64_t)q;
        a[l] = fmaf((float)s, d, a[l]);
    }
}

float quant_dot_mxfp4_scalar(uint64_t n, const void *w, const void *act)
{
    float a[QUANT_LANES] = { 0 };
    const quant_act_q8 y = quant_act_view(act, n);
    const quant_block_mxfp4 *x = w;
    for (uint64_t b = 0; b < n / QUANT_QK; b++)
        quant_mxfp4_block(&x[b], b, &y, a);
    return quant_reduce32(a);
}

const quant_dot_fn *quant_mxfp4_dots(void)
{
    static const quant_dot_fn dots[QUANT_ISA_COUNT] = { quant_dot_mxfp4_scalar,
                                                        quant_dot_mxfp4_avx2,
                                                        quant_dot_mxfp4_avx512 };
    return dots;
}
