/* qlegacy.c — Q4_1, Q5_0, Q5_1 (and the scalar kernel IQ4_NL shares with them): ggml's
 * reference quantizers, dequantization, scalar dot products. quant/
 *
 * The quantizers are ggml-quants.c's quantize_row_q4_1_ref, quantize_row_q5_0_ref and
 * quantize_row_q5_1_ref expression for expression (the truncating (int8_t) / (uint8_t)
 * casts included: they are what makes a level round half up), so the bytes are ggml's;
 * llama.cpp's quantize tool calls them when it has no importance matrix. The dot products
 * follow quant_x.h's order for blocks of 32 (Q4_0's lanes).
 */
#include "quant/quant_x.h"

#include <float.h>
#include <math.h>
#include <string.h>

#define S_MIN(a, b) ((a) < (b) ? (a) : (b))

/* quantize_row_q4_1_ref (bits 4) and quantize_row_q5_1_ref (bits 5): d = (max - min) /
 * (2^bits - 1), level = (x - min) / d + 0.5 truncated (Q4_1 clamps to 15 through int8_t). */
static void s_quantize_q41_51(int bits, const float *x, void *out, uint64_t nb)
{
    for (uint64_t i = 0; i < nb; i++, x += QUANT_QK) {
        float min = FLT_MAX;
        float max = -FLT_MAX;
        for (int j = 0; j < QUANT_QK; j++) {
            const float v = x[j];
            if (v < min)
                min = v;
            if (v > max)
                max = v;
        }
        const float d = (max - min) / ((1 << bits) - 1);
        const float id = d ? 1.0f / d : 0.0f;
        uint8_t *qs;
        if (bits == 4) {
            quant_block_q4_1 *y = (quant_block_q4_1 *)out + i;
            y->d = quant_f32_to_f16(d);
            y->m = quant_f32_to_f16(min);
            qs = y->qs;
        } else {
            quant_block_q5_1 *y = (quant_block_q5_1 *)out + i;
            y->d = quant_f32_to_f16(d);
            y->m = quant_f32_to_f16(min);
            qs = y->qs;
        }
        uint32_t qh = 0;
        for (int j = 0; j < QUANT_QK / 2; ++j) {
            const float x0 = (x[0 + j] - min) * id;
            const float x1 = (x[QUANT_QK / 2 + j] - min) * id;
            uint8_t xi0, xi1;
            if (bits == 4) {
                xi0 = (uint8_t)S_MIN(15, (int8_t)(x0 + 0.5f));
                xi1 = (uint8_t)S_MIN(15, (int8_t)(x1 + 0.5f));
                qs[j] = (uint8_t)(xi0 | (xi1 << 4));
            } else {
                xi0 = (uint8_t)(x0 + 0.5f);
                xi1 = (uint8_t)(x1 + 0.5f);
                qs[j] = (uint8_t)((xi0 & 0x0F) | ((xi1 & 0x0F) << 4));
                qh |= ((xi0 & 0x10u) >> 4) << (j + 0);
                qh |= ((xi1 & 0x10u) >> 4) << (j + QUANT_QK / 2);
            }
        }
        if (bits == 5)
            memcpy(((quant_block_q5_1 *)out)[i].qh, &qh, sizeof qh);
    }
}

/* quantize_row_q5_0_ref: d = max / -16 (max the signed value of largest magnitude, the
 * first on a tie), level = min(31, (int8_t)(x / d + 16.5)). */
static void s_quantize_q5_0(const float *x, quant_block_q5_0 *y, uint64_t nb)
{
    for (uint64_t i = 0; i < nb; i++, x += QUANT_QK) {
        float amax = 0.0f, max = 0.0f;
        for (int j = 0; j < QUANT_QK; j++) {
            const float v = x[j];
            if (amax < fabsf(v)) {
                amax = fabsf(v);
                max = v;
            }
        }
        const float d = max / -16;
        const float id = d ? 1.0f / d : 0.0f;
        y[i].d = quant_f32_to_f16(d);
        uint32_t qh = 0;
        for (int j = 0; j < QUANT_QK / 2; ++j) {
            const float x0 = x[0 + j] * id;
            const float x1 = x[QUANT_QK / 2 + j] * id;
            const uint8_t xi0 = (uint8_t)S_MIN(31, (int8_t)(x0 + 16.5f));
            const uint8_t xi1 = (uint8_t)S_MIN(31, (int8_t)(x1 + 16.5f));
            y[i].qs[j] = (uint8_t)((xi0 & 0x0F) | ((xi1 & 0x0F) << 4));
            qh |= ((xi0 & 0x10u) >> 4) << (j + 0);
            qh |= ((xi1 & 0x10u) >> 4) << (j + QUANT_QK / 2);
        }
        memcpy(y[i].qh, &qh, sizeof qh);
    }
}

/* Element k (0..31) of a block of 32 as the integer its dot product multiplies: Q4_1 / Q5_1
 * the level (unsigned), Q5_0 level - 16, IQ4_NL the non-linear value. The layouts of quant.h,
 * one element at a time: the definition the dequantizers and the scalar dots share. */
static int s_value(quant_type t, const void *blk, int k)
{
    const uint8_t *qs;
    const uint8_t *qh = NULL;
    switch (t) {
    case QUANT_Q4_1: qs = ((const quant_block_q4_1 *)blk)->qs; break;
    case QUANT_Q5_0: qs = ((const quant_block_q5_0 *)blk)->qs, qh = ((const quant_block_q5_0 *)blk)->qh; break;
    case QUANT_Q5_1: qs = ((const quant_block_q5_1 *)blk)->qs, qh = ((const quant_block_q5_1 *)blk)->qh; break;
    default: qs = ((const quant_block_iq4_nl *)blk)->qs; break;
    }
    int q = k < 16 ? qs[k] & 0x0F : qs[k - 16] >> 4;
    if (qh)
        q |= ((qh[k / 8] >> (k % 8)) & 1) << 4;
    if (t == QUANT_IQ4_NL)
        return quant_iq4nl_values[q];
    return t == QUANT_Q5_0 ? q - 16 : q;
}

static size_t s_bytes(quant_type t)
{
    switch (t) {
    case QUANT_Q4_1: return sizeof(quant_block_q4_1);
    case QUANT_Q5_0: return sizeof(quant_block_q5_0);
    case QUANT_Q5_1: return sizeof(quant_block_q5_1);
    default: return sizeof(quant_block_iq4_nl);
    }
}

/* Every block of 32 starts with its f16 d; Q4_1 and Q5_1 follow it with m. */
static uint16_t s_d(const void *blk)
{
    uint16_t d;
    memcpy(&d, blk, 2);
    return d;
}

static int s_has_min(quant_type t)
{
    return t == QUANT_Q4_1 || t == QUANT_Q5_1;
}

static float s_m(const void *blk)
{
    uint16_t m;
    memcpy(&m, (const uint8_t *)blk + 2, 2);
    return quant_f16_to_f32(m);
}

void quant_legacy_quantize(quant_type t, const float *x, void *out, uint64_t n)
{
    if (t == QUANT_Q5_0)
        s_quantize_q5_0(x, out, n / QUANT_QK);
    else
        s_quantize_q41_51(t == QUANT_Q4_1 ? 4 : 5, x, out, n / QUANT_QK);
}

/* ggml-quants.c dequantize_row_q4_1 / _q5_1: level * d + m; _q5_0: (level - 16) * d;
 * dequantize_row_iq4_nl: d * value. */
void quant_legacy_dequantize(quant_type t, const void *in, float *y, uint64_t n)
{
    const uint8_t *p = in;
    for (uint64_t i = 0; i < n / QUANT_QK; i++, p += s_bytes(t), y += QUANT_QK) {
        const float d = quant_f16_to_f32(s_d(p));
        if (s_has_min(t)) {
            const float m = s_m(p);
            for (int k = 0; k < QUANT_QK; k++)
                y[k] = s_value(t, p, k) * d + m;
        } else if (t == QUANT_IQ4_NL) {
            for (int k = 0; k < QUANT_QK; k++)
                y[k] = d * s_value(t, p, k);
        } else {
            for (int k = 0; k < QUANT_QK; k++)
                y[k] = s_value(t, p, k) * d;
        }
    }
}

void quant_x_block32(quant_type t, const void *blk, uint64_t b, const quant_act_q8 *y,
                     const float *sums, float a[QUANT_LANES])
{
    const float d = quant_f16_to_f32(s_d(blk)) * y->d[b];
    const int8_t *yq = y->qs + b * QUANT_QK;
    for (int q = 0; q < QUANT_QB_LANES; q++) {
        int s = 0;
        for (int k = 4 * q; k < 4 * q + 4; k++)
            s += s_value(t, blk, k) * yq[k];
        const uint64_t l = q < 4 ? 4 * (b % 4) + (uint64_t)q : 12 + 4 * (b % 4) + (uint64_t)q;
        a[l] = fmaf((float)s, d, a[l]);
    }
    if (s_has_min(t)) /* ggml's m_w * s_y, in the lane of quad 0 */
        a[4 * (b % 4)] = fmaf(sums[b], s_m(blk), a[4 * (b % 4)]);
}

_Static_assert(sizeof(quant_block_q5_1) <= 24, "quant_x_pad.blk holds four of the largest block");

void quant_x_pad32(quant_type t, const void *blk, uint64_t b, uint64_t nb, const quant_act_q8 *y,
                   const float *sums, quant_x_pad *p)
{
    const uint64_t k = nb - b;
    memset(p, 0, sizeof *p);
    memcpy(p->blk, blk, k * s_bytes(t));
    /* the partial group's qs4 has its k blocks' low halves, then their high halves (quant.h) */
    memcpy(p->qs4, y->qs4 + b * QUANT_QK, k * 16);
    memcpy(p->qs4 + 64, y->qs4 + b * QUANT_QK + k * 16, k * 16);
    memcpy(p->d, y->d + b, k * sizeof(float));
    if (sums)
        memcpy(p->s, sums + b, k * sizeof(float));
}

float quant_dot_x_scalar(quant_type t, uint64_t n, const void *w, const void *act)
{
    float a[QUANT_LANES] = { 0 };
    if (t == QUANT_Q2_K || t == QUANT_Q3_K || t == QUANT_IQ4_XS) {
        const quant_block_q8_K *y = act;
        const uint8_t *p = w;
        const size_t bb = t == QUANT_Q2_K   ? sizeof(quant_block_q2_K)
                          : t == QUANT_Q3_K ? sizeof(quant_block_q3_K)
                                            : sizeof(quant_block_iq4_xs);
        for (uint64_t b = 0; b < n / QUANT_QK_K; b++, p += bb) {
            int32_t s[8], m[8];
            quant_x_lanes256(t, p, &y[b], s, m);
            uint16_t dw;
            memcpy(&dw, t == QUANT_Q2_K ? p + offsetof(quant_block_q2_K, d)
                        : t == QUANT_Q3_K ? p + offsetof(quant_block_q3_K, d) : p, 2);
            const float d = quant_f16_to_f32(dw) * y[b].d;
            float *lane = a + (b % QUANT_QB_GROUP) * QUANT_QB_LANES;
            for (int k = 0; k < 8; k++)
                lane[k] = fmaf((float)s[k], d, lane[k]);
            if (t == QUANT_Q2_K) {
                const float dm = quant_f16_to_f32(((const quant_block_q2_K *)p)->dmin) * y[b].d;
                for (int k = 0; k < 8; k++)
                    lane[k] = fmaf((float)m[k], -dm, lane[k]);
            }
        }
        return quant_reduce32(a);
    }
    const quant_act_q8 y = quant_act_view(act, n);
    const float *sums = s_has_min(t) ? quant_act_q8_sums(act, n) : NULL;
    const uint8_t *p = w;
    for (uint64_t b = 0; b < n / QUANT_QK; b++, p += s_bytes(t))
        quant_x_block32(t, p, b, &y, sums, a);
    return quant_reduce32(a);
}

float quant_dot_q4_1_scalar(uint64_t n, const void *w, const void *act)
{
    return quant_dot_x_scalar(QUANT_Q4_1, n, w, act);
}

float quant_dot_q5_0_scalar(uint64_t n, const void *w, const void *act)
{
    return quant_dot_x_scalar(QUANT_Q5_0, n, w, act);
}

float quant_dot_q5_1_scalar(uint64_t n, const void *w, const void *act)
{
    return quant_dot_x_scalar(QUANT_Q5_1, n, w, act);
}

float quant_dot_iq4_nl_scalar(uint64_t n, const void *w, const void *act)
{
    return quant_dot_x_scalar(QUANT_IQ4_NL, n, w, act);
}

float quant_dot_q2_K_scalar(uint64_t n, const void *w, const void *act)
{
    return quant_dot_x_scalar(QUANT_Q2_K, n, w, act);
}

float quant_dot_q3_K_scalar(uint64_t n, const void *w, const void *act)
{
    return quant_dot_x_scalar(QUANT_Q3_K, n, w, act);
}

float quant_dot_iq4_xs_scalar(uint64_t n, const void *w, const void *act)
{
    return quant_dot_x_scalar(QUANT_IQ4_XS, n, w, act);
}

/* ---------------------------------------------------------------- the family's table */

int quant_x_has(quant_type t)
{
    return quant_x_dots(t) != NULL;
}

void quant_x_quantize(quant_type t, const float *x, void *out, uint64_t n)
{
    if (t == QUANT_IQ4_NL || t == QUANT_IQ4_XS)
        quant_iq4_quantize(t, x, out, n, 7);
    else if (t == QUANT_Q2_K || t == QUANT_Q3_K)
        quant_kquant_lo_quantize(t, x, out, n);
    else
        quant_legacy_quantize(t, x, out, n);
}

void quant_x_dequantize(quant_type t, const void *in, float *y, uint64_t n)
{
    if (t == QUANT_IQ4_XS)
        quant_iq4_dequantize(t, in, y, n);
    else if (t == QUANT_Q2_K || t == QUANT_Q3_K)
        quant_kquant_lo_dequantize(t, in, y, n);
    else
        quant_legacy_dequantize(t, in, y, n);
}

/* One row of kernels per type, [scalar, AVX2, AVX-512]: chosen once per type by the caller
 * (dot.c's quant_dot_get), never per call. */
const quant_dot_fn *quant_x_dots(quant_type t)
{
    static const quant_dot_fn q4_1[3] = { quant_dot_q4_1_scalar, quant_dot_q4_1_avx2,
                                          quant_dot_q4_1_avx512 };
    static const quant_dot_fn q5_0[3] = { quant_dot_q5_0_scalar, quant_dot_q5_0_avx2,
                                          quant_dot_q5_0_avx512 };
    static const quant_dot_fn q5_1[3] = { quant_dot_q5_1_scalar, quant_dot_q5_1_avx2,
                                          quant_dot_q5_1_avx512 };
    static const quant_dot_fn iq4_nl[3] = { quant_dot_iq4_nl_scalar, quant_dot_iq4_nl_avx2,
                                            quant_dot_iq4_nl_avx512 };
    static const quant_dot_fn q2_K[3] = { quant_dot_q2_K_scalar, quant_dot_q2_K_avx2,
                                          quant_dot_q2_K_avx512 };
    static const quant_dot_fn q3_K[3] = { quant_dot_q3_K_scalar, quant_dot_q3_K_avx2,
                                          quant_dot_q3_K_avx512 };
    static const quant_dot_fn iq4_xs[3] = { quant_dot_iq4_xs_scalar, quant_dot_iq4_xs_avx2,
                                            quant_dot_iq4_xs_avx512 };
    /* with GFNI (dot_k23_gfni.c): q2_K 1.26x, q3_K 1.48x in cache on the Xeon VM, 2026-12-02
     * (docs/measurements/2026-12-02-row-kernels-2.md) */
    static const quant_dot_fn q2_K_g[3] = { quant_dot_q2_K_scalar, quant_dot_q2_K_avx2,
                                            quant_dot_q2_K_gfni };
    static const quant_dot_fn q3_K_g[3] = { quant_dot_q3_K_scalar, quant_dot_q3_K_avx2,
                                            quant_dot_q3_K_gfni };
    const int gfni = __builtin_cpu_supports("gfni");
    switch (t) {
    case QUANT_Q4_1: return q4_1;
    case QUANT_Q5_0: return q5_0;
    case QUANT_Q5_1: return q5_1;
    case QUANT_IQ4_NL: return iq4_nl;
    case QUANT_Q2_K: return gfni ? q2_K_g : q2_K;
    case QUANT_Q3_K: return gfni ? q3_K_g : q3_K;
    case QUANT_IQ4_XS: return iq4_xs;
    default: return NULL;
    }
}
