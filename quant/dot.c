/* dot.c — the scalar reference dot products, the reduction tree, and run-time ISA choice. quant/
 *
 * The scalar kernels are the definition the SIMD ones are held to (tests/test_quant.c checks
 * them bit for bit): they spell out the lane order of quant.h one element or one quad at a
 * time. fmaf is one correctly rounded fused multiply-add, the operation vfmadd performs per
 * lane, so a lane's value does not depend on which implementation computed it.
 */
#include "quant/quant_int.h"
#include "quant/quant_x.h"
#include "quant/mxfp4.h"

#include <math.h>
#include <stdatomic.h>
#include <string.h>

float quant_reduce32(const float a[QUANT_LANES])
{
    float t[8], u[4], v[2];
    for (int j = 0; j < 8; j++)
        t[j] = (a[j] + a[j + 8]) + (a[j + 16] + a[j + 24]);
    for (int j = 0; j < 4; j++)
        u[j] = t[j] + t[j + 4];
    for (int j = 0; j < 2; j++)
        v[j] = u[j] + u[j + 2];
    return v[0] + v[1];
}

void quant_tail_f32(const float *w, const float *x, uint64_t i0, uint64_t n, float *a)
{
    for (uint64_t i = i0; i < n; i++)
        a[i % QUANT_LANES] = fmaf(w[i], x[i], a[i % QUANT_LANES]);
}

void quant_tail_f16(const uint16_t *w, const float *x, uint64_t i0, uint64_t n, float *a)
{
    for (uint64_t i = i0; i < n; i++)
        a[i % QUANT_LANES] = fmaf(quant_f16_to_f32(w[i]), x[i], a[i % QUANT_LANES]);
}

void quant_tail_bf16(const uint16_t *w, const float *x, uint64_t i0, uint64_t n, float *a)
{
    for (uint64_t i = i0; i < n; i++)
        a[i % QUANT_LANES] = fmaf(quant_bf16_to_f32(w[i]), x[i], a[i % QUANT_LANES]);
}

float quant_dot_f32_scalar(uint64_t n, const void *w, const void *act)
{
    float a[QUANT_LANES] = { 0 };
    quant_tail_f32(w, act, 0, n, a);
    return quant_reduce32(a);
}

float quant_dot_f16_scalar(uint64_t n, const void *w, const void *act)
{
    float a[QUANT_LANES] = { 0 };
    quant_tail_f16(w, act, 0, n, a);
    return quant_reduce32(a);
}

float quant_dot_bf16_scalar(uint64_t n, const void *w, const void *act)
{
    float a[QUANT_LANES] = { 0 };
    quant_tail_bf16(w, act, 0, n, a);
    return quant_reduce32(a);
}

float quant_reduce16(const float a[QUANT_QB_BLANES])
{
    float t[8], u[4], v[2];
    for (int j = 0; j < 8; j++)
        t[j] = a[j] + a[j + 8];
    for (int j = 0; j < 4; j++)
        u[j] = t[j] + t[j + 4];
    for (int j = 0; j < 2; j++)
        v[j] = u[j] + u[j + 2];
    return v[0] + v[1];
}

/* Block b's 32 products summed exactly (|sum| <= 32 * 128 * 127 < 2^24, so (float)s is exact
 * too), then one fma with the block's scale product (f32 d_w * d_x, as ggml's
 * ggml_vec_dot_q8_0_q8_0 forms it) into lane b % 16. */
void quant_tail_q8_0(const quant_block_q8_0 *x, const quant_act_q8 *y, uint64_t b0, uint64_t nb,
                     float *a)
{
    for (uint64_t b = b0; b < nb; b++) {
        const int8_t *yq = y->qs + b * QUANT_QK;
        int s = 0;
        for (int k = 0; k < QUANT_QK; k++)
            s += x[b].qs[k] * yq[k];
        const float d = quant_f16_to_f32(x[b].d) * y->d[b];
        a[b % QUANT_QB_BLANES] = fmaf((float)s, d, a[b % QUANT_QB_BLANES]);
    }
}

/* As Q8_0, with element k of the block = (nibble - 8): low nibbles are elements 0..15, high
 * nibbles 16..31 (ggml-common.h block_q4_0). The activation is read in element order (qs). */
void quant_tail_q4_0(const quant_block_q4_0 *x, const quant_act_q8 *y, uint64_t b0, uint64_t nb,
                     float *a)
{
    for (uint64_t b = b0; b < nb; b++) {
        const int8_t *yq = y->qs + b * QUANT_QK;
        int s = 0;
        for (int k = 0; k < 16; k++)
            s += ((x[b].qs[k] & 0x0F) - 8) * yq[k] + ((x[b].qs[k] >> 4) - 8) * yq[k + 16];
        const float d = quant_f16_to_f32(x[b].d) * y->d[b];
        a[b % QUANT_QB_BLANES] = fmaf((float)s, d, a[b % QUANT_QB_BLANES]);
    }
}

float quant_dot_q8_0_scalar(uint64_t n, const void *w, const void *act)
{
    const quant_act_q8 y = quant_act_view(act, n);
    float a[QUANT_QB_BLANES] = { 0 };
    quant_tail_q8_0(w, &y, 0, n / QUANT_QK, a);
    return quant_reduce16(a);
}

float quant_dot_q4_0_scalar(uint64_t n, const void *w, const void *act)
{
    const quant_act_q8 y = quant_act_view(act, n);
    float a[QUANT_QB_BLANES] = { 0 };
    quant_tail_q4_0(w, &y, 0, n / QUANT_QK, a);
    return quant_reduce16(a);
}

/* ---------------------------------------------------------------- dispatch */

/* Indexed [isa][slot]; slot = position of the type in s_slot_types. */
static const quant_type s_slot_types[] = { QUANT_F32,  QUANT_F16,  QUANT_BF16,
                                           QUANT_Q8_0, QUANT_Q4_0, QUANT_Q4_K,
                                           QUANT_Q5_K, QUANT_Q6_K };
#define S_NSLOT (sizeof s_slot_types / sizeof s_slot_types[0])
static const quant_dot_fn s_dots[QUANT_ISA_COUNT][S_NSLOT] = {
    { quant_dot_f32_scalar, quant_dot_f16_scalar, quant_dot_bf16_scalar, quant_dot_q8_0_scalar,
      quant_dot_q4_0_scalar, quant_dot_q4_K_scalar, quant_dot_q5_K_scalar,
      quant_dot_q6_K_scalar },
    { quant_dot_f32_avx2, quant_dot_f16_avx2, quant_dot_bf16_avx2, quant_dot_q8_0_avx2,
      quant_dot_q4_0_avx2, quant_dot_q4_K_avx2, quant_dot_q5_K_avx2, quant_dot_q6_K_avx2 },
    { quant_dot_f32_avx512, quant_dot_f16_avx512, quant_dot_bf16_avx512, quant_dot_q8_0_avx512,
      quant_dot_q4_0_avx512, quant_dot_q4_K_avx512, quant_dot_q5_K_avx512,
      quant_dot_q6_K_avx512 },
};

static int s_isa_runs(quant_isa isa)
{
    switch (isa) {
    case QUANT_ISA_SCALAR:
        return 1;
    case QUANT_ISA_AVX2:
        return __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma") &&
               __builtin_cpu_supports("f16c");
    case QUANT_ISA_AVX512:
        /* The AVX-512 kernels also use AVX2/F16C instructions on their 256-bit halves. */
        return s_isa_runs(QUANT_ISA_AVX2) && __builtin_cpu_supports("avx512f") &&
               __builtin_cpu_supports("avx512bw") && __builtin_cpu_supports("avx512vl") &&
               __builtin_cpu_supports("avx512vnni");
    }
    return 0;
}

quant_isa quant_isa_best(void)
{
    if (s_isa_runs(QUANT_ISA_AVX512))
        return QUANT_ISA_AVX512;
    return s_isa_runs(QUANT_ISA_AVX2) ? QUANT_ISA_AVX2 : QUANT_ISA_SCALAR;
}

const char *quant_isa_name(quant_isa isa)
{
    static const char *const names[] = { "scalar", "avx2", "avx512" };
    return (unsigned)isa < QUANT_ISA_COUNT ? names[isa] : "?";
}

int quant_isa_parse(const char *s, quant_isa *out)
{
    for (int i = 0; i < QUANT_ISA_COUNT; i++) {
        if (!strcmp(s, quant_isa_name((quant_isa)i))) {
            *out = (quant_isa)i;
            return 0;
        }
    }
    return -1;
}

quant_dot_fn quant_dot_get(quant_type t, quant_isa isa)
{
    if ((unsigned)isa >= QUANT_ISA_COUNT || !s_isa_runs(isa))
        return NULL;
    for (size_t i = 0; i < S_NSLOT; i++)
        if (s_slot_types[i] == t)
            return s_dots[isa][i];
    const quant_dot_fn *x = t == QUANT_MXFP4 ? quant_mxfp4_dots() /* quant/mxfp4.h */
                            : quant_x_dots(t); /* the later types' table (quant_x.h) */
    return x ? x[isa] : NULL;
}

quant_tile_fn quant_tile_get(quant_type t, quant_isa isa)
{
    /* Q8_0 and Q4_0 have none: batches go through their batched kernel (gemm_avx512.c), or
     * one dot per pair (the 2-row tiles kept the old per-quad order). */
    static const quant_tile_fn tiles[S_NSLOT] = { quant_tile_f32_avx512, quant_tile_f16_avx512,
                                                  quant_tile_bf16_avx512, NULL,
                                                  NULL, quant_tile_q4_K_avx512,
                                                  quant_tile_q5_K_avx512, quant_tile_q6_K_avx512 };
    if (isa != QUANT_ISA_AVX512 || !s_isa_runs(isa))
        return NULL;
    for (size_t i = 0; i < S_NSLOT; i++)
        if (s_slot_types[i] == t)
            return tiles[i];
    return NULL;
}

/* -1 until first asked: then quant_isa_best(). Atomic so concurrent first calls agree. */
static _Atomic int s_isa = -1;

quant_isa quant_isa_current(void)
{
    int v = atomic_load(&s_isa);
    if (v < 0) {
        v = (int)quant_isa_best();
        atomic_store(&s_isa, v);
    }
    return (quant_isa)v;
}

int quant_isa_set(quant_isa isa)
{
    if ((unsigned)isa >= QUANT_ISA_COUNT || !s_isa_runs(isa))
        return -1;
    atomic_store(&s_isa, (int)isa);
    return 0;
}

float quant_vec_dot(quant_type t, uint64_t n, const void *w_row, const void *act)
{
    quant_dot_fn f = quant_dot_get(t, quant_isa_current());
    return f ? f(n, w_row, act) : NAN;
}
