/* kquant_lo.c — Q2_K and Q3_K: ggml's reference quantizers, dequantization and integer
 * lanes. quant/
 *
 * The quantizers are ggml-quants.c's quantize_row_q2_K_ref (make_qkx2_quants on 16 values,
 * levels 0..3, weights |x|, absolute error) and quantize_row_q3_K_ref (make_q3_quants with
 * its rmse refinement, levels -4..3) expression for expression, so the bytes are ggml's;
 * llama.cpp's quantize tool uses them for a tensor when it has no importance matrix
 * (quantize_q2_K / quantize_q3_K fall back to the _ref rows), though it warns that Q2_K
 * without one is poor. The lanes follow quant_x.h.
 */
#include "quant/quant_x.h"

#include <math.h>
#include <string.h>

#define S_MAX(a, b) ((a) > (b) ? (a) : (b))
#define S_MIN(a, b) ((a) < (b) ? (a) : (b))
#define S_GROUP_MAX_EPS 1e-15f

/* quantize_row_q2_K_ref. */
static void s_quantize_q2_K(const float *x, quant_block_q2_K *y, uint64_t nb)
{
    uint8_t L[QUANT_QK_K], Laux[16];
    float weights[16], mins[QUANT_QK_K / 16], scales[QUANT_QK_K / 16];
    const float q4scale = 15.f;
    for (uint64_t i = 0; i < nb; i++, x += QUANT_QK_K) {
        float max_scale = 0, max_min = 0;
        for (int j = 0; j < QUANT_QK_K / 16; ++j) {
            for (int l = 0; l < 16; ++l)
                weights[l] = fabsf(x[16 * j + l]);
            scales[j] = quant_make_qkx2_quants(16, 3, x + 16 * j, weights, L + 16 * j, &mins[j],
                                               Laux, -0.5f, 0.1f, 15, 1);
            if (scales[j] > max_scale)
                max_scale = scales[j];
            if (mins[j] > max_min)
                max_min = mins[j];
        }
        if (max_scale > 0) {
            float iscale = q4scale / max_scale;
            for (int j = 0; j < QUANT_QK_K / 16; ++j)
                y[i].scales[j] = (uint8_t)quant_nearest_int(iscale * scales[j]);
            y[i].d = quant_f32_to_f16(max_scale / q4scale);
        } else {
            for (int j = 0; j < QUANT_QK_K / 16; ++j)
                y[i].scales[j] = 0;
            y[i].d = quant_f32_to_f16(0.f);
        }
        if (max_min > 0) {
            float iscale = q4scale / max_min;
            for (int j = 0; j < QUANT_QK_K / 16; ++j)
                y[i].scales[j] |= (uint8_t)(quant_nearest_int(iscale * mins[j]) << 4);
            y[i].dmin = quant_f32_to_f16(max_min / q4scale);
        } else {
            y[i].dmin = quant_f32_to_f16(0.f);
        }
        for (int j = 0; j < QUANT_QK_K / 16; ++j) {
            const float d = quant_f16_to_f32(y[i].d) * (y[i].scales[j] & 0xF);
            if (!d)
                continue;
            const float dm = quant_f16_to_f32(y[i].dmin) * (y[i].scales[j] >> 4);
            for (int ii = 0; ii < 16; ++ii) {
                int l = quant_nearest_int((x[16 * j + ii] + dm) / d);
                L[16 * j + ii] = (uint8_t)S_MAX(0, S_MIN(3, l));
            }
        }
        for (int j = 0; j < QUANT_QK_K; j += 128)
            for (int l = 0; l < 32; ++l)
                y[i].qs[j / 4 + l] = (uint8_t)(L[j + l] | (L[j + l + 32] << 2) |
                                               (L[j + l + 64] << 4) | (L[j + l + 96] << 6));
    }
}

/* ggml-quants.c make_q3_quants with do_rmse: levels -nmax..nmax-1 against the largest value,
 * then up to 5 passes moving single levels while the weighted (x^2) fit improves. */
static float s_make_q3_quants(int n, int nmax, const float *x, int8_t *L)
{
    float max = 0;
    float amax = 0;
    for (int i = 0; i < n; ++i) {
        float ax = fabsf(x[i]);
        if (ax > amax) {
            amax = ax;
            max = x[i];
        }
    }
    if (amax < S_GROUP_MAX_EPS) {
        for (int i = 0; i < n; ++i)
            L[i] = 0;
        return 0.f;
    }
    float iscale = -nmax / max;
    float sumlx = 0;
    float suml2 = 0;
    for (int i = 0; i < n; ++i) {
        int l = quant_nearest_int(iscale * x[i]);
        l = S_MAX(-nmax, S_MIN(nmax - 1, l));
        L[i] = (int8_t)l;
        float w = x[i] * x[i];
        sumlx += w * x[i] * l;
        suml2 += w * l * l;
    }
    for (int itry = 0; itry < 5; ++itry) {
        int n_changed = 0;
        for (int i = 0; i < n; ++i) {
            float w = x[i] * x[i];
            float slx = sumlx - w * x[i] * L[i];
            if (slx > 0) {
                float sl2 = suml2 - w * L[i] * L[i];
                int new_l = quant_nearest_int(x[i] * sl2 / slx);
                new_l = S_MAX(-nmax, S_MIN(nmax - 1, new_l));
                if (new_l != L[i]) {
                    slx += w * x[i] * new_l;
                    sl2 += w * new_l * new_l;
                    if (sl2 > 0 && slx * slx * suml2 > sumlx * sumlx * sl2) {
                        L[i] = (int8_t)new_l;
                        sumlx = slx;
                        suml2 = sl2;
                        ++n_changed;
                    }
                }
            }
        }
        if (!n_changed)
            break;
    }
    for (int i = 0; i < n; ++i)
        L[i] = (int8_t)(L[i] + nmax);
    return suml2 > 0.0f ? sumlx / suml2 : 0.0f;
}

void quant_q3_K_scales(const uint8_t scales[12], int8_t sc[16])
{
    for (int j = 0; j < 16; ++j) {
        const int lo = j < 8 ? scales[j] & 0xF : scales[j - 8] >> 4;
        sc[j] = (int8_t)((lo | (((scales[8 + j % 4] >> (2 * (j / 4))) & 3) << 4)) - 32);
    }
}

/* quantize_row_q3_K_ref. */
static void s_quantize_q3_K(const float *x, quant_block_q3_K *y, uint64_t nb)
{
    int8_t L[QUANT_QK_K];
    float scales[QUANT_QK_K / 16];
    for (uint64_t i = 0; i < nb; i++, x += QUANT_QK_K) {
        float max_scale = 0;
        float amax = 0;
        for (int j = 0; j < QUANT_QK_K / 16; ++j) {
            scales[j] = s_make_q3_quants(16, 4, x + 16 * j, L + 16 * j);
            float scale = fabsf(scales[j]);
            if (scale > amax) {
                amax = scale;
                max_scale = scales[j];
            }
        }
        memset(y[i].scales, 0, 12);
        if (max_scale) {
            float iscale = -32.f / max_scale;
            for (int j = 0; j < QUANT_QK_K / 16; ++j) {
                int8_t l = (int8_t)quant_nearest_int(iscale * scales[j]);
                l = (int8_t)(S_MAX(-32, S_MIN(31, l)) + 32);
                if (j < 8)
                    y[i].scales[j] = (uint8_t)(l & 0xF);
                else
                    y[i].scales[j - 8] |= (uint8_t)((l & 0xF) << 4);
                l >>= 4;
                y[i].scales[j % 4 + 8] |= (uint8_t)(l << (2 * (j / 4)));
            }
            y[i].d = quant_f32_to_f16(1 / iscale);
        } else {
            y[i].d = quant_f32_to_f16(0.f);
        }
        int8_t sc[16];
        quant_q3_K_scales(y[i].scales, sc);
        for (int j = 0; j < QUANT_QK_K / 16; ++j) {
            float d = quant_f16_to_f32(y[i].d) * sc[j];
            if (!d)
                continue;
            for (int ii = 0; ii < 16; ++ii) {
                int l = quant_nearest_int(x[16 * j + ii] / d);
                l = S_MAX(-4, S_MIN(3, l));
                L[16 * j + ii] = (int8_t)(l + 4);
            }
        }
        memset(y[i].hmask, 0, QUANT_QK_K / 8);
        int m = 0;
        uint8_t hm = 1;
        for (int j = 0; j < QUANT_QK_K; ++j) {
            if (L[j] > 3) {
                y[i].hmask[m] |= hm;
                L[j] -= 4;
            }
            if (++m == QUANT_QK_K / 8) {
                m = 0;
                hm = (uint8_t)(hm << 1);
            }
        }
        for (int j = 0; j < QUANT_QK_K; j += 128)
            for (int l = 0; l < 32; ++l)
                y[i].qs[j / 4 + l] = (uint8_t)(L[j + l] | (L[j + l + 32] << 2) |
                                               (L[j + l + 64] << 4) | (L[j + l + 96] << 6));
    }
}

void quant_kquant_lo_quantize(quant_type t, const float *x, void *out, uint64_t n)
{
    if (t == QUANT_Q2_K)
        s_quantize_q2_K(x, out, n / QUANT_QK_K);
    else
        s_quantize_q3_K(x, out, n / QUANT_QK_K);
}

/* Element e (0..255) of a super-block: its 2-bit level (Q2_K, 0..3) or 3-bit stored level
 * (Q3_K, 0..7: the value + 4), and its 16-value sub-block 8 n + 2 j + l / 16. */
static int s_level(quant_type t, const void *blk, int e)
{
    const int n = e / 128, j = (e % 128) / 32, l = e % 32;
    const uint8_t *qs = t == QUANT_Q2_K ? ((const quant_block_q2_K *)blk)->qs
                                        : ((const quant_block_q3_K *)blk)->qs;
    int q = (qs[32 * n + l] >> (2 * j)) & 3;
    if (t == QUANT_Q3_K)
        q |= ((((const quant_block_q3_K *)blk)->hmask[l] >> (4 * n + j)) & 1) << 2;
    return q;
}

/* ggml-quants.c dequantize_row_q2_K: d (sc & 15) q - dmin (sc >> 4); dequantize_row_q3_K:
 * d (sc - 32) (q - 4 unless the high bit is set). */
void quant_kquant_lo_dequantize(quant_type t, const void *in, float *y, uint64_t n)
{
    for (uint64_t i = 0; i < n / QUANT_QK_K; i++, y += QUANT_QK_K) {
        if (t == QUANT_Q2_K) {
            const quant_block_q2_K *x = (const quant_block_q2_K *)in + i;
            const float d = quant_f16_to_f32(x->d), min = quant_f16_to_f32(x->dmin);
            for (int e = 0; e < QUANT_QK_K; e++) {
                const uint8_t sc = x->scales[e / 16];
                const float dl = d * (sc & 0xF), ml = min * (sc >> 4);
                y[e] = dl * s_level(t, x, e) - ml;
            }
        } else {
            const quant_block_q3_K *x = (const quant_block_q3_K *)in + i;
            const float d = quant_f16_to_f32(x->d);
            int8_t sc[16];
            quant_q3_K_scales(x->scales, sc);
            for (int e = 0; e < QUANT_QK_K; e++) {
                const float dl = d * sc[e / 16];
                y[e] = dl * (s_level(t, x, e) - 4);
            }
        }
    }
}

void quant_x_lanes256(quant_type t, const void *blk, const quant_block_q8_K *y, int32_t s[8],
                      int32_t m[8])
{
    if (t == QUANT_IQ4_XS) {
        quant_iq4_xs_lanes(blk, y, s);
        return;
    }
    int sc[16], mn[16] = { 0 };
    if (t == QUANT_Q2_K) {
        const quant_block_q2_K *x = blk;
        for (int j = 0; j < 16; j++) {
            sc[j] = x->scales[j] & 0xF;
            mn[j] = x->scales[j] >> 4;
        }
    } else {
        int8_t s8[16];
        quant_q3_K_scales(((const quant_block_q3_K *)blk)->scales, s8);
        for (int j = 0; j < 16; j++)
            sc[j] = s8[j];
    }
    for (int k = 0; k < 8; k++)
        s[k] = 0;
    for (int c = 0; c < 8; c++) {
        for (int k = 0; k < 8; k++) {
            int32_t q = 0;
            for (int e = 32 * c + 4 * k; e < 32 * c + 4 * k + 4; e++)
                q += s_level(t, blk, e) * y->qs[e];
            s[k] += q * sc[2 * c + (k >= 4)];
        }
    }
    for (int k = 0; k < 8; k++) {
        const int32_t b = sc[2 * k] * y->bsums[2 * k] + sc[2 * k + 1] * y->bsums[2 * k + 1];
        m[k] = mn[2 * k] * y->bsums[2 * k] + mn[2 * k + 1] * y->bsums[2 * k + 1];
        if (t == QUANT_Q3_K)
            s[k] -= 4 * b;
    }
}
