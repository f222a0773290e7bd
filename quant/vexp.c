/* vexp.c — glibc's expf, 16 at a time on AVX-512, bit for bit: the softmax of a prompt's
 * attention (92.6 M calls a 512-token TinyLlama prompt) and SwiGLU's silu (63 M) called the
 * scalar one per element, ~5% of a 1-thread Q4_K_M prompt (perf, 2026-12-02-attn.md). quant/
 *
 * glibc 2.28+'s expf (sysdeps/ieee754/flt-32/e_expf.c, the Arm optimized-routines one) works
 * in double: z = x * 32/ln2, k = round(z), r = z - k, 2^(k/32) from a 32-entry table and the
 * exponent bits, a degree-3 polynomial in r, one product, one rounding to float. Its x86-64
 * ifunc takes __expf_fma on every CPU with FMA, whose contractions are read from the
 * instructions of Debian 12's libm (objdump, 2026-12-03): kd = fma(z0, x, shift), r =
 * fma(z0, x, -(kd - shift)), p = fma(r, c0, c1), q = fma(r, c2, 1), y = fma(p, r * r, q) * s.
 * The lanes below do those same IEEE double operations; a lane with |x| >= 88 or a NaN takes
 * the scalar expf (overflow, underflow, errno). Another libm (another variant, another
 * library) may round elsewhere, so the first call checks the vector against expf on inputs
 * across the whole range and uses the scalar loop for good if one differs.
 */
#pragma GCC target("avx2,fma,avx512f,avx512dq")
#include <immintrin.h>
#include <math.h>
#include <stdatomic.h>
#include <string.h>

#include "quant/quant.h"

/* __exp2f_data of glibc: 2^(i/32)'s bits less i << 47, and the scaled constants */
static const uint64_t s_tab[32] = {
    0x3ff0000000000000ull, 0x3fefd9b0d3158574ull, 0x3fefb5586cf9890full, 0x3fef9301d0125b51ull,
    0x3fef72b83c7d517bull, 0x3fef54873168b9aaull, 0x3fef387a6e756238ull, 0x3fef1e9df51fdee1ull,
    0x3fef06fe0a31b715ull, 0x3feef1a7373aa9cbull, 0x3feedea64c123422ull, 0x3feece086061892dull,
    0x3feebfdad5362a27ull, 0x3feeb42b569d4f82ull, 0x3feeab07dd485429ull, 0x3feea47eb03a5585ull,
    0x3feea09e667f3bcdull, 0x3fee9f75e8ec5f74ull, 0x3feea11473eb0187ull, 0x3feea589994cce13ull,
    0x3feeace5422aa0dbull, 0x3feeb737b0cdc5e5ull, 0x3feec49182a3f090ull, 0x3feed503b23e255dull,
    0x3feee89f995ad3adull, 0x3feeff76f2fb5e47ull, 0x3fef199bdd85529cull, 0x3fef3720dcef9069ull,
    0x3fef5818dcfba487ull, 0x3fef7c97337b9b5full, 0x3fefa4afa2a490daull, 0x3fefd0765b6e4540ull,
};
#define S_INVLN2N 0x1.71547652b82fep+5
#define S_SHIFT 0x1.8p+52
#define S_C0 0x1.c6af84b912394p-20
#define S_C1 0x1.ebfce50fac4f3p-13
#define S_C2 0x1.62e42ff0c52d6p-6

/* 8 lanes of expf, x as doubles (exact widening) */
static inline __m256 s_exp8(__m512d xd, const __m512i t[4])
{
    const __m512d shift = _mm512_set1_pd(S_SHIFT), inv = _mm512_set1_pd(S_INVLN2N);
    const __m512d kr = _mm512_fmadd_pd(inv, xd, shift);
    const __m512i ki = _mm512_castpd_si512(kr);
    const __m512d kd = _mm512_sub_pd(kr, shift);
    const __m512d r = _mm512_fmsub_pd(inv, xd, kd);
    /* T[ki % 32]: the low 4 bits pick within a half (of two vectors), bit 4 the half */
    const __m512i tv = _mm512_mask_blend_epi64(
        _mm512_test_epi64_mask(ki, _mm512_set1_epi64(16)),
        _mm512_permutex2var_epi64(t[0], ki, t[1]), _mm512_permutex2var_epi64(t[2], ki, t[3]));
    const __m512d s = _mm512_castsi512_pd(_mm512_add_epi64(tv, _mm512_slli_epi64(ki, 47)));
    const __m512d p = _mm512_fmadd_pd(r, _mm512_set1_pd(S_C0), _mm512_set1_pd(S_C1));
    const __m512d r2 = _mm512_mul_pd(r, r);
    const __m512d q = _mm512_fmadd_pd(r, _mm512_set1_pd(S_C2), _mm512_set1_pd(1.0));
    return _mm512_cvtpd_ps(_mm512_mul_pd(_mm512_fmadd_pd(p, r2, q), s));
}

/* 16 lanes; lanes with |x| >= 88 (top 12 bits of |x| >= 0x42b, NaN and infinities included)
 * through the scalar expf */
static inline __m512 s_exp16(__m512 x)
{
    const __m512i t[4] = { _mm512_loadu_si512(s_tab), _mm512_loadu_si512(s_tab + 8),
                           _mm512_loadu_si512(s_tab + 16), _mm512_loadu_si512(s_tab + 24) };
    __m256 lo = s_exp8(_mm512_cvtps_pd(_mm512_castps512_ps256(x)), t);
    __m256 hi = s_exp8(_mm512_cvtps_pd(_mm256_castpd_ps(_mm512_extractf64x4_pd(
                           _mm512_castps_pd(x), 1))), t);
    __m512 y = _mm512_insertf32x8(_mm512_castps256_ps512(lo), hi, 1);
    const __m512i top = _mm512_and_si512(_mm512_srli_epi32(_mm512_castps_si512(x), 20),
                                         _mm512_set1_epi32(0x7ff));
    const __mmask16 big = _mm512_cmpge_epi32_mask(top, _mm512_set1_epi32(0x42b));
    if (big) {
        float xs[16], ys[16];
        _mm512_storeu_ps(xs, x);
        _mm512_storeu_ps(ys, y);
        for (int i = 0; i < 16; i++)
            if (big >> i & 1)
                ys[i] = expf(xs[i]);
        y = _mm512_loadu_ps(ys);
    }
    return y;
}

static void s_expf_sub512(float *w, uint64_t n, float sub)
{
    const __m512 m = _mm512_set1_ps(sub);
    uint64_t i = 0;
    for (; i + 16 <= n; i += 16)
        _mm512_storeu_ps(w + i, s_exp16(_mm512_sub_ps(_mm512_loadu_ps(w + i), m)));
    if (i < n) {
        const __mmask16 k = (__mmask16)((1u << (n - i)) - 1);
        _mm512_mask_storeu_ps(w + i, k, s_exp16(_mm512_sub_ps(_mm512_maskz_loadu_ps(k, w + i), m)));
    }
}

/* g / (1 + e^-g) * up: the scalar loop's float operations in its order (no contraction: the
 * scalar code is built -std=c11, which turns it off) */
static inline __m512 s_silu16(__m512 g, __m512 u)
{
    const __m512 e = s_exp16(_mm512_xor_ps(g, _mm512_set1_ps(-0.0f))); /* -g, a sign flip */
    return _mm512_mul_ps(_mm512_div_ps(g, _mm512_add_ps(_mm512_set1_ps(1.0f), e)), u);
}

static void s_silu_mul512(float *gate, const float *up, uint64_t n)
{
    uint64_t i = 0;
    for (; i + 16 <= n; i += 16)
        _mm512_storeu_ps(gate + i, s_silu16(_mm512_loadu_ps(gate + i), _mm512_loadu_ps(up + i)));
    if (i < n) {
        const __mmask16 k = (__mmask16)((1u << (n - i)) - 1);
        _mm512_mask_storeu_ps(gate + i, k, s_silu16(_mm512_maskz_loadu_ps(k, gate + i),
                                                    _mm512_maskz_loadu_ps(k, up + i)));
    }
}

#pragma GCC reset_options

/* Whether the vector gives this process's expf's bits: 65,536 float bit patterns 65,521 apart
 * (the whole range, both signs, NaNs and infinities; ~0.5 ms once a process). */
static int s_check(void)
{
    float x[64] __attribute__((aligned(64))), y[64];
    uint32_t bits = 0;
    for (uint32_t round = 0; round < 1024; round++) {
        for (int i = 0; i < 64; i++, bits += 65521u) {
            memcpy(&x[i], &bits, 4);
            y[i] = x[i];
        }
        s_expf_sub512(y, 64, 0.0f);
        for (int i = 0; i < 64; i++) {
            float e = expf(x[i] - 0.0f);
            if (memcmp(&e, &y[i], 4) && !(isnan(e) && isnan(y[i])))
                return 0;
        }
    }
    return 1;
}

/* 0 unknown, 1 the vector matches, 2 it does not */
static _Atomic int s_ok;

static int s_vector(void)
{
    if (quant_isa_current() != QUANT_ISA_AVX512)
        return 0;
    int ok = atomic_load_explicit(&s_ok, memory_order_acquire);
    if (!ok) {
        ok = s_check() ? 1 : 2; /* two threads may both check: the same answer */
        atomic_store_explicit(&s_ok, ok, memory_order_release);
    }
    return ok == 1;
}

void quant_expf_sub(float *w, uint64_t n, float sub)
{
    if (s_vector()) {
        s_expf_sub512(w, n, sub);
        return;
    }
    for (uint64_t i = 0; i < n; i++)
        w[i] = expf(w[i] - sub);
}

void quant_silu_mul(float *gate, const float *up, uint64_t n)
{
    if (s_vector()) {
        s_silu_mul512(gate, up, n);
        return;
    }
    for (uint64_t i = 0; i < n; i++) {
        float g = gate[i];
        gate[i] = g / (1.0f + expf(-g)) * up[i];
    }
}

int quant_expf_vector(void)
{
    return s_vector();
}
