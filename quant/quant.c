/* quant.c — ggml tensor types: the type table, rows, conversions, quantize / dequantize. quant/
 *
 * Everything here is the reference path: ggml-quants.c's quantize_row_q8_0_ref and
 * quantize_row_q4_0_ref (round to nearest exactly as they do, so the bytes we write are the
 * bytes ggml writes) and its dequantize_row_* functions, plus ggml-impl.h's f16 and bf16
 * conversions. Speed matters only in the dot products (dot*.c); these run once per file
 * written or once per activation vector.
 */
#include "quant/quant.h"
#include "quant/quant_int.h"
#include "quant/quant_x.h"
#include "quant/mxfp4.h"

#include <math.h>
#include <stdio.h>
#include <string.h>
#include <strings.h>

/* ggml-quants.c's MAX / MIN macros: the comparison order matters for the bits (which operand
 * wins a tie or a NaN), so it is kept exactly. */
#define S_MAX(a, b) ((a) > (b) ? (a) : (b))
#define S_MIN(a, b) ((a) < (b) ? (a) : (b))

static const quant_type_info s_types[] = {
    { QUANT_F32, "f32", 1, 4 },
    { QUANT_F16, "f16", 1, 2 },
    { QUANT_Q4_0, "q4_0", QUANT_QK, sizeof(quant_block_q4_0) },
    { QUANT_Q8_0, "q8_0", QUANT_QK, sizeof(quant_block_q8_0) },
    { QUANT_Q4_K, "q4_K", QUANT_QK_K, sizeof(quant_block_q4_K) },
    { QUANT_Q5_K, "q5_K", QUANT_QK_K, sizeof(quant_block_q5_K) },
    { QUANT_Q6_K, "q6_K", QUANT_QK_K, sizeof(quant_block_q6_K) },
    { QUANT_BF16, "bf16", 1, 2 },
    { QUANT_Q4_1, "q4_1", QUANT_QK, sizeof(quant_block_q4_1) },
    { QUANT_Q5_0, "q5_0", QUANT_QK, sizeof(quant_block_q5_0) },
    { QUANT_Q5_1, "q5_1", QUANT_QK, sizeof(quant_block_q5_1) },
    { QUANT_IQ4_NL, "iq4_nl", QUANT_QK, sizeof(quant_block_iq4_nl) },
    { QUANT_Q2_K, "q2_K", QUANT_QK_K, sizeof(quant_block_q2_K) },
    { QUANT_Q3_K, "q3_K", QUANT_QK_K, sizeof(quant_block_q3_K) },
    { QUANT_IQ4_XS, "iq4_xs", QUANT_QK_K, sizeof(quant_block_iq4_xs) },
    { QUANT_MXFP4, "mxfp4", QUANT_QK, sizeof(quant_block_mxfp4) },
};

/* The table's names in one line, for messages (kept beside the table it lists). */
static const char s_type_list[] =
    "f32, f16, bf16, q8_0, q4_0, q4_1, q5_0, q5_1, iq4_nl, q2_K, q3_K, q4_K, q5_K, q6_K, iq4_xs, mxfp4";

const char *quant_type_list(void)
{
    return s_type_list;
}

/* ggml's type names by id (ggml.c type_traits .type_name); ids ggml retired keep their old
 * names so an old file's error still says what it holds. */
static const char *const s_ggml_names[] = {
    "f32", "f16", "q4_0", "q4_1", "q4_2", "q4_3", "q5_0", "q5_1", "q8_0", "q8_1",
    "q2_K", "q3_K", "q4_K", "q5_K", "q6_K", "q8_K", "iq2_xxs", "iq2_xs", "iq3_xxs", "iq1_s",
    "iq4_nl", "iq3_s", "iq2_s", "iq4_xs", "i8", "i16", "i32", "i64", "f64", "iq1_m",
    "bf16", "q4_0_4_4", "q4_0_4_8", "q4_0_8_8", "tq1_0", "tq2_0", "iq4_nl_4_4", "iq4_nl_4_8",
    "iq4_nl_8_8", "mxfp4",
};

const quant_type_info *quant_type_get(uint32_t id)
{
    for (size_t i = 0; i < sizeof s_types / sizeof s_types[0]; i++)
        if ((uint32_t)s_types[i].type == id)
            return &s_types[i];
    return NULL;
}

const char *quant_type_name(uint32_t id)
{
    return id < sizeof s_ggml_names / sizeof s_ggml_names[0] ? s_ggml_names[id] : "unknown";
}

int quant_type_parse(const char *name, quant_type *out, char *err, size_t errlen)
{
    for (size_t i = 0; i < sizeof s_types / sizeof s_types[0]; i++) {
        if (!strcasecmp(name, s_types[i].name)) {
            *out = s_types[i].type;
            return 0;
        }
    }
    snprintf(err, errlen, "unknown tensor type '%s' (supported: %s)", name, s_type_list);
    return -1;
}

int quant_row_bytes(quant_type t, uint64_t n, uint64_t *bytes, char *err, size_t errlen)
{
    const quant_type_info *ti = quant_type_get((uint32_t)t);
    if (!ti) {
        snprintf(err, errlen, "tensor type %s (%u) is not supported", quant_type_name((uint32_t)t),
                 (unsigned)t);
        return -1;
    }
    if (n % ti->block) {
        snprintf(err, errlen,
                 "a %s row of %llu elements is not a multiple of its %u-element block",
                 ti->name, (unsigned long long)n, ti->block);
        return -1;
    }
    uint64_t nb = n / ti->block;
    if (nb > UINT64_MAX / ti->block_bytes || nb * ti->block_bytes > SIZE_MAX) {
        snprintf(err, errlen, "a %s row of %llu elements is too large to address", ti->name,
                 (unsigned long long)n);
        return -1;
    }
    *bytes = nb * ti->block_bytes;
    return 0;
}

int quant_tensor_bytes(quant_type t, uint64_t rows, uint64_t cols, uint64_t *bytes, char *err,
                       size_t errlen)
{
    uint64_t rb;
    if (quant_row_bytes(t, cols, &rb, err, errlen))
        return -1;
    if (rb && (rows > UINT64_MAX / rb || rows * rb > SIZE_MAX)) {
        snprintf(err, errlen, "a %s tensor of %llu x %llu elements is too large to address",
                 quant_type_name((uint32_t)t), (unsigned long long)rows,
                 (unsigned long long)cols);
        return -1;
    }
    *bytes = rows * rb;
    return 0;
}

/* ---------------------------------------------------------------- conversions */

/* The compiler's _Float16 (GCC 12, x86-64) converts with IEEE round-to-nearest-even, in
 * hardware with F16C and in libgcc otherwise: the same bits as ggml's GGML_FP32_TO_FP16. */
float quant_f16_to_f32(uint16_t h)
{
    _Float16 v;
    memcpy(&v, &h, sizeof v);
    return (float)v;
}

uint16_t quant_f32_to_f16(float f)
{
    _Float16 v = (_Float16)f;
    uint16_t h;
    memcpy(&h, &v, sizeof h);
    return h;
}

float quant_bf16_to_f32(uint16_t h)
{
    uint32_t u = (uint32_t)h << 16;
    float f;
    memcpy(&f, &u, sizeof f);
    return f;
}

/* ggml-impl.h ggml_compute_fp32_to_bf16: NaN stays a (quiet) NaN; everything else rounds to
 * nearest even by adding 0x7fff plus the bit that becomes the last kept one. Current ggml
 * keeps subnormals (an older version flushed them to zero). */
uint16_t quant_f32_to_bf16(float f)
{
    uint32_t u;
    memcpy(&u, &f, sizeof u);
    if ((u & 0x7fffffffu) > 0x7f800000u)
        return (uint16_t)((u >> 16) | 64);
    return (uint16_t)((u + (0x7fffu + ((u >> 16) & 1u))) >> 16);
}

/* ---------------------------------------------------------------- quantize / dequantize */

/* ggml-quants.c quantize_row_q8_0_ref: d = amax / 127 (f32), id = 1/d, q = roundf(x * id)
 * (halves away from zero); d is stored rounded to f16 but id comes from the unrounded d. */
static void s_quantize_q8_0(const float *x, quant_block_q8_0 *y, uint64_t nb)
{
    for (uint64_t i = 0; i < nb; i++) {
        float amax = 0.0f;
        for (int j = 0; j < QUANT_QK; j++)
            amax = S_MAX(amax, fabsf(x[i * QUANT_QK + j]));
        const float d = amax / ((1 << 7) - 1);
        const float id = d ? 1.0f / d : 0.0f;
        y[i].d = quant_f32_to_f16(d);
        for (int j = 0; j < QUANT_QK; j++)
            y[i].qs[j] = (int8_t)roundf(x[i * QUANT_QK + j] * id);
    }
}

/* ggml-quants.c quantize_row_q4_0_ref: d = max / -8 where max is the signed value of largest
 * magnitude (the first one on a tie), q = min(15, (int8_t)(x * id + 8.5)): truncation of a
 * value >= 0.5, so round half up. Element j goes to byte j's low nibble, j + 16 to its high. */
static void s_quantize_q4_0(const float *x, quant_block_q4_0 *y, uint64_t nb)
{
    const int qk = QUANT_QK;
    for (uint64_t i = 0; i < nb; i++) {
        float amax = 0.0f, max = 0.0f;
        for (int j = 0; j < qk; j++) {
            const float v = x[i * qk + j];
            if (amax < fabsf(v)) {
                amax = fabsf(v);
                max = v;
            }
        }
        const float d = max / -8;
        const float id = d ? 1.0f / d : 0.0f;
        y[i].d = quant_f32_to_f16(d);
        for (int j = 0; j < qk / 2; j++) {
            const float x0 = x[i * qk + 0 + j] * id;
            const float x1 = x[i * qk + qk / 2 + j] * id;
            const uint8_t xi0 = (uint8_t)S_MIN(15, (int8_t)(x0 + 8.5f));
            const uint8_t xi1 = (uint8_t)S_MIN(15, (int8_t)(x1 + 8.5f));
            y[i].qs[j] = (uint8_t)(xi0 | (xi1 << 4));
        }
    }
}

/* A non-finite input would make the float-to-int8 conversions above undefined: say where. */
static int s_check_finite(const float *x, uint64_t n, char *err, size_t errlen)
{
    /* 64 at a time, exponent bits only (a loop the compiler vectorizes): the element at a
     * time isfinite was ~1-2% of a 1-thread Q4_K_M prompt (perf, 2026-12-03), every
     * product's activations checked; the first bad chunk goes to the loop that names it */
    uint64_t i = 0;
    for (; i + 64 <= n; i += 64) {
        uint32_t bad = 0;
        for (int k = 0; k < 64; k++) {
            uint32_t u;
            memcpy(&u, x + i + k, 4);
            bad |= (u & 0x7f800000u) == 0x7f800000u;
        }
        if (bad)
            break;
    }
    for (; i < n; i++) {
        if (!isfinite(x[i])) {
            snprintf(err, errlen, "cannot quantize a non-finite value (%g at element %llu)",
                     (double)x[i], (unsigned long long)i);
            return -1;
        }
    }
    return 0;
}

int quant_quantize_row(quant_type t, const float *x, void *out, uint64_t n, char *err,
                       size_t errlen)
{
    uint64_t bytes;
    if (quant_row_bytes(t, n, &bytes, err, errlen))
        return -1;
    switch (t) {
    case QUANT_F32:
        memcpy(out, x, bytes);
        return 0;
    case QUANT_F16: {
        uint16_t *o = out;
        for (uint64_t i = 0; i < n; i++)
            o[i] = quant_f32_to_f16(x[i]);
        return 0;
    }
    case QUANT_BF16: {
        uint16_t *o = out;
        for (uint64_t i = 0; i < n; i++)
            o[i] = quant_f32_to_bf16(x[i]);
        return 0;
    }
    case QUANT_Q8_0:
        if (s_check_finite(x, n, err, errlen))
            return -1;
        s_quantize_q8_0(x, out, n / QUANT_QK);
        return 0;
    case QUANT_Q4_0:
        if (s_check_finite(x, n, err, errlen))
            return -1;
        s_quantize_q4_0(x, out, n / QUANT_QK);
        return 0;
    case QUANT_Q4_K:
    case QUANT_Q5_K:
    case QUANT_Q6_K:
        if (s_check_finite(x, n, err, errlen))
            return -1;
        quant_kquant_quantize(t, x, out, n / QUANT_QK_K);
        return 0;
    case QUANT_Q4_1:
    case QUANT_Q5_0:
    case QUANT_Q5_1:
    case QUANT_IQ4_NL:
    case QUANT_Q2_K:
    case QUANT_Q3_K:
    case QUANT_IQ4_XS:
        if (s_check_finite(x, n, err, errlen))
            return -1;
        quant_x_quantize(t, x, out, n);
        return 0;
    case QUANT_MXFP4:
        if (s_check_finite(x, n, err, errlen))
            return -1;
        quant_mxfp4_quantize(x, out, n);
        return 0;
    case QUANT_Q8_K:
        break;
    }
    return -1; /* unreachable: quant_row_bytes rejected the type */
}

int quant_dequantize_row(quant_type t, const void *in, float *y, uint64_t n, char *err,
                         size_t errlen)
{
    uint64_t bytes;
    if (quant_row_bytes(t, n, &bytes, err, errlen))
        return -1;
    switch (t) {
    case QUANT_F32:
        memcpy(y, in, bytes);
        return 0;
    case QUANT_F16: {
        const uint16_t *h = in;
        for (uint64_t i = 0; i < n; i++)
            y[i] = quant_f16_to_f32(h[i]);
        return 0;
    }
    case QUANT_BF16: {
        const uint16_t *h = in;
        for (uint64_t i = 0; i < n; i++)
            y[i] = quant_bf16_to_f32(h[i]);
        return 0;
    }
    case QUANT_Q8_0: { /* ggml-quants.c dequantize_row_q8_0: qs[j] * d */
        const quant_block_q8_0 *b = in;
        for (uint64_t i = 0; i < n / QUANT_QK; i++) {
            const float d = quant_f16_to_f32(b[i].d);
            for (int j = 0; j < QUANT_QK; j++)
                y[i * QUANT_QK + j] = b[i].qs[j] * d;
        }
        return 0;
    }
    case QUANT_Q4_0: { /* ggml-quants.c dequantize_row_q4_0: (nibble - 8) * d */
        const quant_block_q4_0 *b = in;
        for (uint64_t i = 0; i < n / QUANT_QK; i++) {
            const float d = quant_f16_to_f32(b[i].d);
            for (int j = 0; j < QUANT_QK / 2; j++) {
                const int x0 = (b[i].qs[j] & 0x0F) - 8;
                const int x1 = (b[i].qs[j] >> 4) - 8;
                y[i * QUANT_QK + j] = x0 * d;
                y[i * QUANT_QK + j + QUANT_QK / 2] = x1 * d;
            }
        }
        return 0;
    }
    case QUANT_Q4_K:
    case QUANT_Q5_K:
    case QUANT_Q6_K:
        quant_kquant_dequantize(t, in, y, n / QUANT_QK_K);
        return 0;
    case QUANT_Q4_1:
    case QUANT_Q5_0:
    case QUANT_Q5_1:
    case QUANT_IQ4_NL:
    case QUANT_Q2_K:
    case QUANT_Q3_K:
    case QUANT_IQ4_XS:
        quant_x_dequantize(t, in, y, n);
        return 0;
    case QUANT_MXFP4:
        quant_mxfp4_dequantize(in, y, n);
        return 0;
    case QUANT_Q8_K:
        break;
    }
    return -1;
}

/* ---------------------------------------------------------------- activations */

/* ggml-cpu's type traits give Q8_0 and Q4_0 the vec_dot_type Q8_0: the activation is rounded
 * to 8 bits per block of 32 so every block's dot product is integer. What that costs,
 * measured by test_quant (2048-element rows, activations with a few 20x channels): an error
 * of ~1.6e-4 of |w| |x| at the median, <1e-3 at worst — ~3x what rounding the weights to Q8_0
 * costs, ~6x less than rounding them to Q4_0. For F16 and BF16 llama.cpp rounds the
 * activation to the weight's own type (vec_dot_type F16 / BF16); swarm keeps it in f32, which
 * costs nothing in bandwidth (the activation is a few KiB in cache) and drops one rounding of
 * every activation element. */
quant_type quant_act_type(quant_type w)
{
    switch (w) {
    case QUANT_Q4_K:
    case QUANT_Q5_K:
    case QUANT_Q6_K:
    case QUANT_Q2_K:
    case QUANT_Q3_K:
    case QUANT_IQ4_XS: /* ggml-cpu's vec_dot_type for all six */
        return QUANT_Q8_K;
    case QUANT_Q8_0:
    case QUANT_Q4_0:
    case QUANT_Q5_0:
    case QUANT_IQ4_NL: /* vec_dot_type Q8_0 */
    case QUANT_MXFP4:
    case QUANT_Q4_1:
    case QUANT_Q5_1:   /* vec_dot_type Q8_1: Q8_0's quants and d, plus their sum (quant.h) */
        return QUANT_Q8_0;
    default:
        return QUANT_F32;
    }
}

quant_act_q8 quant_act_view(const void *act, uint64_t n)
{
    const uint64_t nb = n / QUANT_QK;
    quant_act_q8 v;
    v.qs = act;
    v.d = (const float *)(v.qs + n);
    v.bias128 = (const int32_t *)(v.d + nb);
    v.qs4 = (const int8_t *)(v.bias128 + nb * 8);
    v.bias8 = (const int32_t *)(v.qs4 + n);
    return v;
}

int quant_act_bytes(quant_type w, uint64_t n, uint64_t *bytes, char *err, size_t errlen)
{
    uint64_t wb;
    if (quant_row_bytes(w, n, &wb, err, errlen))
        return -1;
    if (quant_act_type(w) == QUANT_F32) {
        if (n > UINT64_MAX / 4) {
            snprintf(err, errlen, "an activation of %llu elements is too large",
                     (unsigned long long)n);
            return -1;
        }
        *bytes = n * 4;
    } else if (quant_act_type(w) == QUANT_Q8_K) {
        /* ggml's blocks, then each super-block's quants in pair order (quant.h) */
        *bytes = n / QUANT_QK_K * (sizeof(quant_block_q8_K) + QUANT_QK_K);
    } else {
        /* 2 n quants, per block 4 (scale) + 32 (bias128), per group of 4 blocks 128 (bias8).
         * Fits: n is a row ggml could address as 34-byte blocks. */
        const uint64_t nb = n / QUANT_QK;
        *bytes = 2 * n + nb * (4 + 32) + (nb + 3) / 4 * 128;
        if (w == QUANT_Q4_1 || w == QUANT_Q5_1)
            *bytes += nb * 4; /* block_q8_1's s per block (quant_x.h) */
    }
    return 0;
}

/* Where block b's element k (0..31) sits in the grouped arrangement qs4 of nb blocks. */
static uint64_t s_qs4_index(uint64_t b, int k, uint64_t nb)
{
    const uint64_t g = b / 4, p = b % 4, kg = nb - 4 * g < 4 ? nb - 4 * g : 4;
    return g * 128 + (k < 16 ? p * 16 + (uint64_t)k : kg * 16 + p * 16 + (uint64_t)k - 16);
}

/* Q4_0's lane (0..31) for block b's quad q (quant.h). */
static int s_q4_lane(uint64_t b, int q)
{
    return q < 4 ? 4 * (int)(b % 4) + q : 16 + 4 * (int)(b % 4) + q - 4;
}

/* block_q8_1's s for Q4_1 / Q5_1 (ggml-cpu's vec_dot_type Q8_1): per block the quants' sum
 * times the block's unrounded scale amax / 127, rounded to f16 (quantize_row_q8_1_ref; the
 * quants are the Q8_0 form's), kept widened after the Q8_0 form. Their dot products add
 * m_w * s per block as ggml's vec_dot_q4_1_q8_1 does, so the min terms carry ggml's rounding
 * rather than an exact sum: against llama.cpp the logits then differ by f32 roundoff only
 * (with the exact sum they were 2-3e-3 of the largest logit off, tests/test_arch.c). */
static void s_q8_1_sums(const float *x, uint64_t n, void *act)
{
    const quant_act_q8 v = quant_act_view(act, n);
    float *sums = (float *)quant_act_q8_sums(act, n);
    for (uint64_t b = 0; b < n / QUANT_QK; b++) {
        float amax = 0.0f;
        int sum = 0;
        for (int j = 0; j < QUANT_QK; j++) {
            amax = S_MAX(amax, fabsf(x[b * QUANT_QK + j]));
            sum += v.qs[b * QUANT_QK + j];
        }
        const float d = amax / ((1 << 7) - 1);
        sums[b] = quant_f16_to_f32(quant_f32_to_f16(sum * d));
    }
}

int quant_act_prepare(quant_type w, const float *x, uint64_t n, void *act, char *err,
                      size_t errlen)
{
    return quant_act_prepare_isa(quant_isa_current(), w, x, n, act, err, errlen);
}

int quant_act_prepare_isa(quant_isa isa, quant_type w, const float *x, uint64_t n, void *act,
                          char *err, size_t errlen)
{
    uint64_t bytes;
    if (quant_act_bytes(w, n, &bytes, err, errlen))
        return -1;
    if (quant_act_type(w) == QUANT_F32) {
        memcpy(act, x, bytes);
        return 0;
    }
    if (quant_act_type(w) == QUANT_Q8_K) {
        /* ggml's quantize_row_q8_K_ref: once per product, not per row (AVX-512: the same
         * bytes, tests/test_kquant.c). */
        if (s_check_finite(x, n, err, errlen))
            return -1;
        const uint64_t nb = n / QUANT_QK_K;
        if (isa == QUANT_ISA_AVX512 && quant_dot_get(w, QUANT_ISA_AVX512))
            quant_q8_K_quantize_avx512(x, act, nb);
        else
            quant_q8_K_quantize(x, act, nb);
        const quant_block_q8_K *blk = act;
        int8_t *pairs = (int8_t *)(blk + nb);
        static const int order[8] = { 0, 2, 1, 3, 4, 6, 5, 7 };
        for (uint64_t b = 0; b < nb; b++)
            for (int i = 0; i < 8; i++)
                memcpy(pairs + b * QUANT_QK_K + 32 * i, blk[b].qs + 32 * order[i], 32);
        return 0;
    }
    /* The SIMD quantizer writes the same bytes (tests/test_quant.c); it is worth having
     * because libm's roundf is a call per element: the scalar path took ~12 us of a ~70 us
     * 1024 x 2048 Q4_0 product here (2026-12-01), serial ahead of every thread's share. */
    if (isa != QUANT_ISA_SCALAR && quant_dot_get(w, QUANT_ISA_AVX2) &&
        quant_act_q8_avx2(x, n, act) == 0) {
        if (w == QUANT_Q4_1 || w == QUANT_Q5_1)
            s_q8_1_sums(x, n, act);
        return 0;
    }
    if (s_check_finite(x, n, err, errlen))
        return -1;
    quant_act_q8 v = quant_act_view(act, n);
    const uint64_t nb = n / QUANT_QK;
    int8_t *qs = (int8_t *)v.qs, *qs4 = (int8_t *)v.qs4;
    float *d = (float *)v.d;
    int32_t *b128 = (int32_t *)v.bias128, *b8 = (int32_t *)v.bias8;
    memset(b8, 0, (nb + 3) / 4 * 128);
    for (uint64_t b = 0; b < nb; b++) {
        quant_block_q8_0 blk;
        s_quantize_q8_0(x + b * QUANT_QK, &blk, 1);
        memcpy(qs + b * QUANT_QK, blk.qs, QUANT_QK);
        for (int k = 0; k < QUANT_QK; k++)
            qs4[s_qs4_index(b, k, nb)] = blk.qs[k];
        d[b] = quant_f16_to_f32(blk.d);
        for (int q = 0; q < 8; q++) {
            int32_t s = 0;
            for (int k = 4 * q; k < 4 * q + 4; k++)
                s += blk.qs[k];
            b128[b * 8 + q] = -128 * s;
            b8[b / 4 * 32 + (uint64_t)s_q4_lane(b, q)] = -8 * s;
        }
    }
    if (w == QUANT_Q4_1 || w == QUANT_Q5_1)
        s_q8_1_sums(x, n, act);
    return 0;
}
