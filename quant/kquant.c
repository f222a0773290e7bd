/* kquant.c — K-quants (Q4_K, Q5_K, Q6_K): reference quantizers, dequantization, the Q8_K
 * activation and the scalar dot products. quant/
 *
 * The quantizers are ggml-quants.c's quantize_row_q4_K_ref, quantize_row_q5_K_ref and
 * quantize_row_q6_K_ref with their helpers nearest_int, make_qkx2_quants and make_qx_quants,
 * expression for expression: each float operation is the same IEEE operation in the same
 * order, so the bytes are ggml's (the build is -std=c11, which keeps GCC from fusing a
 * multiply and an add that ggml's source writes apart). llama.cpp's quantize tool uses these
 * very functions for a tensor when no importance matrix is given (quantize_q4_K etc. fall
 * back to the _ref row functions), which is what `swarm quantize` does.
 *
 * Dot products (quant.h states the order): within a super-block everything is an exact
 * integer, gathered in 8 lanes k = 0..7, lane k holding quad k (elements 4k..4k+3) of every
 * 32-element chunk times that chunk's scale; the lanes go into the row's 32 f32 lanes with
 * one fma each, then (Q4_K, Q5_K) chunk k's min term into lane k with a second fma.
 */
#include "quant/quant_int.h"
#include "quant/quant_x.h"

#include <math.h>
#include <string.h>

#define S_MAX(a, b) ((a) > (b) ? (a) : (b))
#define S_MIN(a, b) ((a) < (b) ? (a) : (b))
#define S_GROUP_MAX_EPS 1e-15f /* ggml-quants.c GROUP_MAX_EPS */

/* ggml-quants.c nearest_int: round to nearest even through the float adder (|fval| < 2^22;
 * the callers' values are bounded by their clamps long before that). */
static inline int s_nearest_int(float fval)
{
    float val = fval + 12582912.f;
    int i;
    memcpy(&i, &val, sizeof i);
    return (i & 0x007fffff) - 0x00400000;
}

/* ggml-quants.c make_qkx2_quants: the scale and (negated) min of a group of n values over
 * levels 0..nmax, searched over nstep+1 candidate scales, minimising the weighted squared
 * error (use_mad 0: Q4_K, Q5_K) or absolute error (use_mad 1: Q2_K, kquant_lo.c). */
float quant_make_qkx2_quants(int n, int nmax, const float *x, const float *weights, uint8_t *L,
                             float *the_min, uint8_t *Laux, float rmin, float rdelta, int nstep,
                             int use_mad)
{
    float min = x[0];
    float max = x[0];
    float sum_w = weights[0];
    float sum_x = sum_w * x[0];
    for (int i = 1; i < n; ++i) {
        if (x[i] < min)
            min = x[i];
        if (x[i] > max)
            max = x[i];
        float w = weights[i];
        sum_w += w;
        sum_x += w * x[i];
    }
    if (min > 0)
        min = 0;
    if (max == min) {
        for (int i = 0; i < n; ++i)
            L[i] = 0;
        *the_min = -min;
        return 0.f;
    }
    float iscale = nmax / (max - min);
    float scale = 1 / iscale;
    float best_error = 0;
    for (int i = 0; i < n; ++i) {
        int l = s_nearest_int(iscale * (x[i] - min));
        L[i] = (uint8_t)S_MAX(0, S_MIN(nmax, l));
        float diff = scale * L[i] + min - x[i];
        diff = use_mad ? fabsf(diff) : diff * diff;
        float w = weights[i];
        best_error += w * diff;
    }
    if (nstep < 1) {
        *the_min = -min;
        return scale;
    }
    for (int is = 0; is <= nstep; ++is) {
        iscale = (rmin + rdelta * is + nmax) / (max - min);
        float sum_l = 0, sum_l2 = 0, sum_xl = 0;
        for (int i = 0; i < n; ++i) {
            int l = s_nearest_int(iscale * (x[i] - min));
            l = S_MAX(0, S_MIN(nmax, l));
            Laux[i] = (uint8_t)l;
            float w = weights[i];
            sum_l += w * l;
            sum_l2 += w * l * l;
            sum_xl += w * l * x[i];
        }
        float D = sum_w * sum_l2 - sum_l * sum_l;
        if (D > 0) {
            float this_scale = (sum_w * sum_xl - sum_x * sum_l) / D;
            float this_min = (sum_l2 * sum_x - sum_l * sum_xl) / D;
            if (this_min > 0) {
                this_min = 0;
                this_scale = sum_xl / sum_l2;
            }
            float cur_error = 0;
            for (int i = 0; i < n; ++i) {
                float diff = this_scale * Laux[i] + this_min - x[i];
                diff = use_mad ? fabsf(diff) : diff * diff;
                float w = weights[i];
                cur_error += w * diff;
            }
            if (cur_error < best_error) {
                for (int i = 0; i < n; ++i)
                    L[i] = Laux[i];
                best_error = cur_error;
                scale = this_scale;
                min = this_min;
            }
        }
    }
    *the_min = -min;
    return scale;
}

/* ggml-quants.c make_qx_quants as quantize_row_q6_K_ref calls it: rmse_type 1 and no
 * importance weights, so each value weighs x^2; 19 candidate scales around nmax / max. */
static float s_make_qx_quants(int n, int nmax, const float *x, int8_t *L)
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
        int l = s_nearest_int(iscale * x[i]);
        l = S_MAX(-nmax, S_MIN(nmax - 1, l));
        L[i] = (int8_t)(l + nmax);
        float w = x[i] * x[i];
        sumlx += w * x[i] * l;
        suml2 += w * l * l;
    }
    float scale = suml2 ? sumlx / suml2 : 0.0f;
    float best = scale * sumlx;
    for (int is = -9; is <= 9; ++is) {
        if (is == 0)
            continue;
        iscale = -(nmax + 0.1f * is) / max;
        sumlx = suml2 = 0;
        for (int i = 0; i < n; ++i) {
            int l = s_nearest_int(iscale * x[i]);
            l = S_MAX(-nmax, S_MIN(nmax - 1, l));
            float w = x[i] * x[i];
            sumlx += w * x[i] * l;
            suml2 += w * l * l;
        }
        if (suml2 > 0 && sumlx * sumlx > best * suml2) {
            for (int i = 0; i < n; ++i) {
                int l = s_nearest_int(iscale * x[i]);
                L[i] = (int8_t)(nmax + S_MAX(-nmax, S_MIN(nmax - 1, l)));
            }
            scale = sumlx / suml2;
            best = scale * sumlx;
        }
    }
    return scale;
}

/* ggml-quants.c get_scale_min_k4: sub-block j's 6-bit scale and min. */
static void s_scale_min_k4(int j, const uint8_t *q, uint8_t *d, uint8_t *m)
{
    if (j < 4) {
        *d = q[j] & 63;
        *m = q[j + 4] & 63;
    } else {
        *d = (uint8_t)((q[j + 4] & 0xF) | ((q[j - 4] >> 6) << 4));
        *m = (uint8_t)((q[j + 4] >> 4) | ((q[j - 0] >> 6) << 4));
    }
}

void quant_k_scales(const uint8_t scales[12], uint8_t sc[8], uint8_t m[8])
{
    for (int j = 0; j < 8; j++)
        s_scale_min_k4(j, scales, &sc[j], &m[j]);
}

/* The shared first half of quantize_row_q4_K_ref / quantize_row_q5_K_ref: per 32-element
 * sub-block a scale and min by make_qkx2_quants (weights av_x + |x|), both quantized to 6
 * bits against the largest, packed; then every element requantized against its packed
 * scale and min into L (0..nmax). */
static void s_quantize_k_scales(const float *x, int nmax, float rmin, int nstep, uint16_t *dd,
                                uint16_t *dmin, uint8_t scales_out[12], uint8_t L[QUANT_QK_K])
{
    uint8_t Laux[32];
    float weights[32], mins[QUANT_QK_K / 32], scales[QUANT_QK_K / 32];
    float max_scale = 0, max_min = 0;
    for (int j = 0; j < QUANT_QK_K / 32; ++j) {
        float sum_x2 = 0;
        for (int l = 0; l < 32; ++l)
            sum_x2 += x[32 * j + l] * x[32 * j + l];
        float av_x = sqrtf(sum_x2 / 32);
        for (int l = 0; l < 32; ++l)
            weights[l] = av_x + fabsf(x[32 * j + l]);
        scales[j] = quant_make_qkx2_quants(32, nmax, x + 32 * j, weights, L + 32 * j, &mins[j],
                                           Laux, rmin, 0.1f, nstep, 0);
        if (scales[j] > max_scale)
            max_scale = scales[j];
        if (mins[j] > max_min)
            max_min = mins[j];
    }
    float inv_scale = max_scale > 0 ? 63.f / max_scale : 0.f;
    float inv_min = max_min > 0 ? 63.f / max_min : 0.f;
    uint8_t *y = scales_out;
    for (int j = 0; j < QUANT_QK_K / 32; ++j) {
        uint8_t ls = (uint8_t)s_nearest_int(inv_scale * scales[j]);
        uint8_t lm = (uint8_t)s_nearest_int(inv_min * mins[j]);
        ls = S_MIN(63, ls);
        lm = S_MIN(63, lm);
        if (j < 4) {
            y[j] = ls;
            y[j + 4] = lm;
        } else {
            y[j + 4] = (uint8_t)((ls & 0xF) | ((lm & 0xF) << 4));
            y[j - 4] |= (uint8_t)((ls >> 4) << 6);
            y[j - 0] |= (uint8_t)((lm >> 4) << 6);
        }
    }
    *dd = quant_f32_to_f16(max_scale / 63.f);
    *dmin = quant_f32_to_f16(max_min / 63.f);
    for (int j = 0; j < QUANT_QK_K / 32; ++j) {
        uint8_t sc, m;
        s_scale_min_k4(j, y, &sc, &m);
        const float d = quant_f16_to_f32(*dd) * sc;
        if (!d)
            continue;
        const float dm = quant_f16_to_f32(*dmin) * m;
        for (int ii = 0; ii < 32; ++ii) {
            int l = s_nearest_int((x[32 * j + ii] + dm) / d);
            L[32 * j + ii] = (uint8_t)S_MAX(0, S_MIN(nmax, l));
        }
    }
}

/* quantize_row_q4_K_ref: make_qkx2_quants(32, 15, ..., -1.f, 0.1f, 20). */
static void s_quantize_q4_K(const float *x, quant_block_q4_K *y, uint64_t nb)
{
    uint8_t L[QUANT_QK_K];
    for (uint64_t i = 0; i < nb; i++, x += QUANT_QK_K) {
        s_quantize_k_scales(x, 15, -1.f, 20, &y[i].d, &y[i].dmin, y[i].scales, L);
        uint8_t *q = y[i].qs;
        for (int j = 0; j < QUANT_QK_K; j += 64) {
            for (int l = 0; l < 32; ++l)
                q[l] = (uint8_t)(L[j + l] | (L[j + l + 32] << 4));
            q += 32;
        }
    }
}

/* quantize_row_q5_K_ref: make_qkx2_quants(32, 31, ..., -0.5f, 0.1f, 15). */
static void s_quantize_q5_K(const float *x, quant_block_q5_K *y, uint64_t nb)
{
    uint8_t L[QUANT_QK_K];
    for (uint64_t i = 0; i < nb; i++, x += QUANT_QK_K) {
        s_quantize_k_scales(x, 31, -0.5f, 15, &y[i].d, &y[i].dmin, y[i].scales, L);
        uint8_t *qh = y[i].qh, *ql = y[i].qs;
        memset(qh, 0, QUANT_QK_K / 8);
        uint8_t m1 = 1, m2 = 2;
        for (int n = 0; n < QUANT_QK_K; n += 64) {
            for (int j = 0; j < 32; ++j) {
                int l1 = L[n + j];
                if (l1 > 15) {
                    l1 -= 16;
                    qh[j] |= m1;
                }
                int l2 = L[n + j + 32];
                if (l2 > 15) {
                    l2 -= 16;
                    qh[j] |= m2;
                }
                ql[j] = (uint8_t)(l1 | (l2 << 4));
            }
            m1 = (uint8_t)(m1 << 2);
            m2 = (uint8_t)(m2 << 2);
            ql += 32;
        }
    }
}

/* quantize_row_q6_K_ref: per 16 elements make_qx_quants(16, 32, ...), the scales to int8
 * against the one of largest magnitude (-128 / max), then every element requantized. */
static void s_quantize_q6_K(const float *x, quant_block_q6_K *y, uint64_t nb)
{
    int8_t L[QUANT_QK_K];
    float scales[QUANT_QK_K / 16];
    for (uint64_t i = 0; i < nb; i++, x += QUANT_QK_K) {
        float max_scale = 0, max_abs_scale = 0;
        for (int ib = 0; ib < QUANT_QK_K / 16; ++ib) {
            const float scale = s_make_qx_quants(16, 32, x + 16 * ib, L + 16 * ib);
            scales[ib] = scale;
            const float abs_scale = fabsf(scale);
            if (abs_scale > max_abs_scale) {
                max_abs_scale = abs_scale;
                max_scale = scale;
            }
        }
        if (max_abs_scale < S_GROUP_MAX_EPS) {
            memset(&y[i], 0, sizeof y[i]);
            y[i].d = quant_f32_to_f16(0.f);
            continue;
        }
        float iscale = -128.f / max_scale;
        y[i].d = quant_f32_to_f16(1 / iscale);
        for (int ib = 0; ib < QUANT_QK_K / 16; ++ib)
            y[i].scales[ib] = (int8_t)S_MIN(127, s_nearest_int(iscale * scales[ib]));
        for (int j = 0; j < QUANT_QK_K / 16; ++j) {
            float d = quant_f16_to_f32(y[i].d) * y[i].scales[j];
            if (!d)
                continue;
            for (int ii = 0; ii < 16; ++ii) {
                int l = s_nearest_int(x[16 * j + ii] / d);
                l = S_MAX(-32, S_MIN(31, l));
                L[16 * j + ii] = (int8_t)(l + 32);
            }
        }
        uint8_t *ql = y[i].ql, *qh = y[i].qh;
        for (int j = 0; j < QUANT_QK_K; j += 128) {
            for (int l = 0; l < 32; ++l) {
                const uint8_t q1 = L[j + l + 0] & 0xF;
                const uint8_t q2 = L[j + l + 32] & 0xF;
                const uint8_t q3 = L[j + l + 64] & 0xF;
                const uint8_t q4 = L[j + l + 96] & 0xF;
                ql[l + 0] = (uint8_t)(q1 | (q3 << 4));
                ql[l + 32] = (uint8_t)(q2 | (q4 << 4));
                qh[l] = (uint8_t)((L[j + l] >> 4) | ((L[j + l + 32] >> 4) << 2) |
                                  ((L[j + l + 64] >> 4) << 4) | ((L[j + l + 96] >> 4) << 6));
            }
            ql += 64;
            qh += 32;
        }
    }
}

void quant_kquant_quantize(quant_type t, const float *x, void *out, uint64_t nb)
{
    if (t == QUANT_Q4_K)
        s_quantize_q4_K(x, out, nb);
    else if (t == QUANT_Q5_K)
        s_quantize_q5_K(x, out, nb);
    else if (t == QUANT_Q6_K)
        s_quantize_q6_K(x, out, nb);
}

/* Element e (0..255) of a super-block as its integer level: q (Q4_K 0..15, Q5_K 0..31) or
 * q - 32 (Q6_K). The layouts of quant.h, one element at a time: the definition the
 * dequantizers and the scalar dots share. */
static int s_level(quant_type t, const void *blk, int e)
{
    if (t == QUANT_Q6_K) {
        const quant_block_q6_K *b = blk;
        const int n = e / 128, w = (e % 128) / 32, l = e % 32;
        const uint8_t lo = b->ql[64 * n + l + 32 * (w & 1)];
        const int q = (w < 2 ? lo & 0xF : lo >> 4) | (((b->qh[32 * n + l] >> (2 * w)) & 3) << 4);
        return q - 32;
    }
    const int c = e / 32, l = e % 32;
    const uint8_t *qs = t == QUANT_Q4_K ? ((const quant_block_q4_K *)blk)->qs
                                        : ((const quant_block_q5_K *)blk)->qs;
    int q = (c & 1) ? qs[32 * (c / 2) + l] >> 4 : qs[32 * (c / 2) + l] & 0xF;
    if (t == QUANT_Q5_K)
        q |= ((((const quant_block_q5_K *)blk)->qh[l] >> c) & 1) << 4;
    return q;
}

static size_t s_block_bytes(quant_type t)
{
    return t == QUANT_Q4_K ? sizeof(quant_block_q4_K)
           : t == QUANT_Q5_K ? sizeof(quant_block_q5_K) : sizeof(quant_block_q6_K);
}

/* ggml-quants.c dequantize_row_q4_K / _q5_K: d1 * q - m1 with d1 = d * sc, m1 = dmin * m;
 * dequantize_row_q6_K: d * sc * q, left to right. */
void quant_kquant_dequantize(quant_type t, const void *in, float *y, uint64_t nb)
{
    const uint8_t *p = in;
    for (uint64_t i = 0; i < nb; i++, p += s_block_bytes(t), y += QUANT_QK_K) {
        if (t == QUANT_Q6_K) {
            const quant_block_q6_K *b = (const quant_block_q6_K *)p;
            const float d = quant_f16_to_f32(b->d);
            for (int e = 0; e < QUANT_QK_K; e++)
                y[e] = d * b->scales[e / 16] * (int8_t)s_level(t, b, e);
            continue;
        }
        const quant_block_q4_K *b = (const quant_block_q4_K *)p; /* q5_K starts the same */
        uint8_t sc[8], m[8];
        quant_k_scales(b->scales, sc, m);
        const float d = quant_f16_to_f32(b->d), min = quant_f16_to_f32(b->dmin);
        for (int e = 0; e < QUANT_QK_K; e++) {
            const float d1 = d * sc[e / 32], m1 = min * m[e / 32];
            y[e] = d1 * s_level(t, b, e) - m1;
        }
    }
}

/* ---------------------------------------------------------------- Q8_K activation */

/* ggml-quants.c quantize_row_q8_K_ref: iscale = -127 / (the value of largest magnitude),
 * q = min(127, nearest_int(iscale x)), d = 1 / iscale, bsums the 16-quant sums. ggml leaves
 * bsums unwritten for an all-zero block; they are 0 here. */
void quant_q8_K_quantize(const float *x, quant_block_q8_K *y, uint64_t nb)
{
    for (uint64_t i = 0; i < nb; i++, x += QUANT_QK_K) {
        float max = 0, amax = 0;
        for (int j = 0; j < QUANT_QK_K; ++j) {
            float ax = fabsf(x[j]);
            if (ax > amax) {
                amax = ax;
                max = x[j];
            }
        }
        if (!amax) {
            memset(&y[i], 0, sizeof y[i]);
            continue;
        }
        const float iscale = -127.f / max;
        for (int j = 0; j < QUANT_QK_K; ++j) {
            int v = s_nearest_int(iscale * x[j]);
            y[i].qs[j] = (int8_t)S_MIN(127, v);
        }
        for (int j = 0; j < QUANT_QK_K / 16; ++j) {
            int sum = 0;
            for (int ii = 0; ii < 16; ++ii)
                sum += y[i].qs[j * 16 + ii];
            y[i].bsums[j] = (int16_t)sum;
        }
        y[i].d = 1 / iscale;
    }
}

/* ---------------------------------------------------------------- scalar dot products */

/* One super-block's 8 integer lanes (quant.h): lane k = sum over chunks c of chunk c's scale
 * times the exact sum of level * activation over elements 32c + 4k .. 32c + 4k + 3. For
 * Q6_K a chunk's elements 0..15 take scale 2c, 16..31 scale 2c + 1 (16-element sub-blocks),
 * and its stored levels (q + 32) are used, the offset taken back per lane below.
 * mins[c] (Q4_K, Q5_K): chunk c's min times the chunk's activation sum (ggml's bsums). */
static void s_lanes(quant_type t, const void *blk, const quant_block_q8_K *y, int32_t s[8],
                    int32_t mins[8])
{
    uint8_t sc[8] = { 0 }, m[8] = { 0 };
    const int8_t *sc6 = NULL;
    if (t == QUANT_Q6_K)
        sc6 = ((const quant_block_q6_K *)blk)->scales;
    else
        quant_k_scales(((const quant_block_q4_K *)blk)->scales, sc, m);
    for (int k = 0; k < 8; k++)
        s[k] = 0;
    for (int c = 0; c < 8; c++) {
        for (int k = 0; k < 8; k++) {
            int32_t q = 0;
            for (int e = 32 * c + 4 * k; e < 32 * c + 4 * k + 4; e++)
                q += (s_level(t, blk, e) + (sc6 ? 32 : 0)) * y->qs[e];
            s[k] += q * (sc6 ? sc6[2 * c + (k >= 4)] : sc[c]);
        }
        mins[c] = m[c] * (y->bsums[2 * c] + y->bsums[2 * c + 1]);
    }
    /* Q6_K's offset: levels above were q + 32 (0..63, as stored); lane k takes back 32 times
     * the 16-value sub-blocks 2k and 2k + 1 (scale times activation sum, ggml's bsums), one
     * vpmaddwd for all 8 lanes where subtracting per chunk would cost a multiply per chunk. */
    for (int k = 0; sc6 && k < 8; k++)
        s[k] -= 32 * (sc6[2 * k] * y->bsums[2 * k] + sc6[2 * k + 1] * y->bsums[2 * k + 1]);
}

/* Super-block b's lanes go into lanes (b % 4) * 8 + k with one fma by d_w * d_x (f32, as
 * ggml's ggml_vec_dot_q4_K_q8_K forms it); for Q4_K / Q5_K lane k then takes chunk k's min
 * term with a second fma by -(dmin_w * d_x). Keeping the mins in lanes spares the SIMD kernels
 * a horizontal sum per super-block. */
float quant_dot_k_scalar(quant_type t, uint64_t n, const void *w, const void *act)
{
    const uint8_t *p = w;
    const quant_block_q8_K *y = act;
    const size_t bb = s_block_bytes(t);
    float a[QUANT_LANES] = { 0 };
    for (uint64_t b = 0; b < n / QUANT_QK_K; b++, p += bb) {
        int32_t s[8], mi[8];
        s_lanes(t, p, &y[b], s, mi);
        const uint16_t dw = t == QUANT_Q6_K ? ((const quant_block_q6_K *)p)->d
                                            : ((const quant_block_q4_K *)p)->d;
        const float d = quant_f16_to_f32(dw) * y[b].d;
        float *lane = a + (b % QUANT_QB_GROUP) * QUANT_QB_LANES;
        for (int k = 0; k < 8; k++)
            lane[k] = fmaf((float)s[k], d, lane[k]);
        if (t != QUANT_Q6_K) {
            const float dm = quant_f16_to_f32(((const quant_block_q4_K *)p)->dmin) * y[b].d;
            for (int k = 0; k < 8; k++)
                lane[k] = fmaf((float)mi[k], -dm, lane[k]);
        }
    }
    return quant_reduce32(a);
}

float quant_dot_q4_K_scalar(uint64_t n, const void *w, const void *act)
{
    return quant_dot_k_scalar(QUANT_Q4_K, n, w, act);
}

float quant_dot_q5_K_scalar(uint64_t n, const void *w, const void *act)
{
    return quant_dot_k_scalar(QUANT_Q5_K, n, w, act);
}

float quant_dot_q6_K_scalar(uint64_t n, const void *w, const void *act)
{
    return quant_dot_k_scalar(QUANT_Q6_K, n, w, act);
}
