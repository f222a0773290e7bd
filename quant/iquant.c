/* iquant.c — IQ4_NL and IQ4_XS: ggml's quantizer (quantize_row_iq4_nl_impl), IQ4_XS's
 * dequantization and integer lanes. quant/
 *
 * Both types store 4-bit indices into the 16 non-linear levels kvalues_iq4nl, with one f16
 * scale per 32 values (IQ4_NL) or a 6-bit scale per 32 under an f16 scale per 256 (IQ4_XS).
 * llama.cpp's quantize tool writes them with quantize_iq4_nl / quantize_iq4_xs, which call
 * quantize_row_iq4_nl_impl with ntry 7 and, without an importance matrix, weights x^2: no
 * importance matrix is needed (the IQ types below 4 bits need one; swarm has none of them).
 * quantize_row_iq4_nl_ref, ggml's "reference" for IQ4_NL, is the same function with ntry -1
 * (one rounding against the largest value, no search); swarm writes what the tool writes.
 * Expression for expression ggml's code, so the bytes are ggml's (tests/quant_x_kat.py).
 */
#include "quant/quant_x.h"

#include <math.h>
#include <string.h>

#define S_MAX(a, b) ((a) > (b) ? (a) : (b))
#define S_MIN(a, b) ((a) < (b) ? (a) : (b))
#define S_GROUP_MAX_EPS 1e-15f /* ggml-quants.c GROUP_MAX_EPS */

const int8_t quant_iq4nl_values[16] = { -127, -104, -83, -65, -49, -35, -22, -10,
                                        1,    13,   25,  38,  53,  69,  89,  113 };

/* ggml-quants.c best_index_int8: the index of the level nearest x (the lower on a tie). */
static int s_best_index(int n, const int8_t *val, float x)
{
    if (x <= val[0])
        return 0;
    if (x >= val[n - 1])
        return n - 1;
    int ml = 0, mu = n - 1;
    while (mu - ml > 1) {
        int mav = (ml + mu) / 2;
        if (x < val[mav])
            mu = mav;
        else
            ml = mav;
    }
    return x - val[mu - 1] < val[mu] - x ? mu - 1 : mu;
}

/* ggml-quants.c quantize_row_iq4_nl_impl without importance weights (weight = x^2), over
 * one super-block of `sbs` values (32: IQ4_NL, 256: IQ4_XS) in sub-blocks of 32. */
static void s_iq4_impl(int sbs, const float *x, uint16_t *dh, uint8_t *q4, uint16_t *scales_h,
                       uint8_t *scales_l, int ntry)
{
    const int8_t *values = quant_iq4nl_values;
    const int block_size = 32;
    float scales[QUANT_QK_K / 32], weight[32];
    uint8_t L[QUANT_QK_K];
    memset(q4, 0, (size_t)sbs / 2);
    dh[0] = quant_f32_to_f16(0.f);
    float max_scale = 0, amax_scale = 0;
    for (int ib = 0; ib < sbs / block_size; ++ib) {
        const float *xb = x + ib * block_size;
        uint8_t *Lb = L + ib * block_size;
        for (int j = 0; j < block_size; ++j)
            weight[j] = xb[j] * xb[j];
        float amax = 0, max = 0;
        for (int j = 0; j < block_size; ++j) {
            float ax = fabsf(xb[j]);
            if (ax > amax) {
                amax = ax;
                max = xb[j];
            }
        }
        if (amax < S_GROUP_MAX_EPS) {
            scales[ib] = 0;
            continue;
        }
        float d = ntry > 0 ? -max / values[0] : max / values[0];
        float id = 1 / d;
        float sumqx = 0, sumq2 = 0;
        for (int j = 0; j < block_size; ++j) {
            float al = id * xb[j];
            int l = s_best_index(16, values, al);
            Lb[j] = (uint8_t)l;
            float q = values[l];
            float w = weight[j];
            sumqx += w * q * xb[j];
            sumq2 += w * q * q;
        }
        d = sumq2 > 0 ? sumqx / sumq2 : 0.f;
        float best = d * sumqx;
        for (int itry = -ntry; itry <= ntry; ++itry) {
            id = (itry + values[0]) / max;
            sumqx = sumq2 = 0;
            for (int j = 0; j < block_size; ++j) {
                float al = id * xb[j];
                int l = s_best_index(16, values, al);
                float q = values[l];
                float w = weight[j];
                sumqx += w * q * xb[j];
                sumq2 += w * q * q;
            }
            if (sumq2 > 0 && sumqx * sumqx > best * sumq2) {
                d = sumqx / sumq2;
                best = d * sumqx;
            }
        }
        scales[ib] = d;
        float abs_d = fabsf(d);
        if (abs_d > amax_scale) {
            amax_scale = abs_d;
            max_scale = d;
        }
    }
    if (sbs / block_size > 1) {
        int nb = sbs / block_size;
        memset(scales_h, 0, (size_t)((nb + 7) / 8) * sizeof(uint16_t));
        float d = -max_scale / 32;
        dh[0] = quant_f32_to_f16(d);
        float id = d ? 1 / d : 0.f;
        for (int ib = 0; ib < sbs / block_size; ++ib) {
            int l = quant_nearest_int(id * scales[ib]);
            l = S_MAX(-32, S_MIN(31, l));
            float dl = d * l;
            float idl = dl ? 1 / dl : 0.f;
            uint8_t *Lb = L + ib * block_size;
            const float *xb = x + ib * block_size;
            for (int j = 0; j < block_size; ++j)
                Lb[j] = (uint8_t)s_best_index(16, values, idl * xb[j]);
            l += 32;
            uint8_t l_l = (uint8_t)(l & 0xf);
            uint8_t l_h = (uint8_t)(l >> 4);
            if (ib % 2 == 0)
                scales_l[ib / 2] = l_l;
            else
                scales_l[ib / 2] |= (uint8_t)(l_l << 4);
            scales_h[ib / 8] |= (uint16_t)(l_h << 2 * (ib % 8));
        }
    } else {
        dh[0] = quant_f32_to_f16(scales[0]);
        if (ntry > 0) {
            float id = scales[0] ? 1 / scales[0] : 0;
            for (int j = 0; j < sbs; ++j)
                L[j] = (uint8_t)s_best_index(16, values, id * x[j]);
        }
    }
    for (int i = 0; i < sbs / 32; ++i)
        for (int j = 0; j < 16; ++j)
            q4[16 * i + j] = (uint8_t)(L[32 * i + j] | (L[32 * i + 16 + j] << 4));
}

void quant_iq4_quantize(quant_type t, const float *x, void *out, uint64_t n, int ntry)
{
    if (t == QUANT_IQ4_NL) {
        quant_block_iq4_nl *y = out;
        for (uint64_t i = 0; i < n / QUANT_QK; i++)
            s_iq4_impl(QUANT_QK, x + i * QUANT_QK, &y[i].d, y[i].qs, NULL, NULL, ntry);
        return;
    }
    quant_block_iq4_xs *y = out;
    for (uint64_t i = 0; i < n / QUANT_QK_K; i++)
        s_iq4_impl(QUANT_QK_K, x + i * QUANT_QK_K, &y[i].d, y[i].qs, &y[i].scales_h,
                   y[i].scales_l, ntry);
}

/* Sub-block ib's scale ls - 32 (ggml's dequantize_row_iq4_xs). */
static int s_xs_scale(const quant_block_iq4_xs *x, int ib)
{
    const int ls = ((x->scales_l[ib / 2] >> 4 * (ib % 2)) & 0xf) |
                   (((x->scales_h >> 2 * ib) & 3) << 4);
    return ls - 32;
}

/* dequantize_row_iq4_xs: dl = d * (ls - 32), value dl * kvalues_iq4nl[nibble]. (IQ4_NL's
 * dequantization is qlegacy.c's.) */
void quant_iq4_dequantize(quant_type t, const void *in, float *y, uint64_t n)
{
    (void)t;
    const quant_block_iq4_xs *x = in;
    for (uint64_t i = 0; i < n / QUANT_QK_K; i++) {
        const float d = quant_f16_to_f32(x[i].d);
        const uint8_t *qs = x[i].qs;
        for (int ib = 0; ib < QUANT_QK_K / 32; ++ib, y += 32, qs += 16) {
            const float dl = d * s_xs_scale(&x[i], ib);
            for (int j = 0; j < 16; ++j) {
                y[j + 0] = dl * quant_iq4nl_values[qs[j] & 0xf];
                y[j + 16] = dl * quant_iq4nl_values[qs[j] >> 4];
            }
        }
    }
}

/* IQ4_XS's 8 integer lanes (quant_x.h): sub-block c's quads r and r + 4 (elements 4r..4r+3
 * from the low nibbles, 16+4r.. from the high) times (ls_c - 32) go to lane 4 (c % 2) + r:
 * two sub-blocks side by side are one 256-bit vector's halves, four one 512-bit vector's
 * quarters (dot_x_avx2.c, dot_x_avx512.c). */
void quant_iq4_xs_lanes(const quant_block_iq4_xs *x, const quant_block_q8_K *y, int32_t s[8])
{
    for (int k = 0; k < 8; k++)
        s[k] = 0;
    for (int c = 0; c < 8; c++) {
        const int sc = s_xs_scale(x, c);
        for (int r = 0; r < 4; r++) {
            int32_t q = 0;
            for (int e = 4 * r; e < 4 * r + 4; e++) {
                const uint8_t b = x->qs[16 * c + e];
                q += quant_iq4nl_values[b & 0xf] * y->qs[32 * c + e] +
                     quant_iq4nl_values[b >> 4] * y->qs[32 * c + 16 + e];
            }
            s[4 * (c % 2) + r] += q * sc;
        }
    }
}
