/* attn.c — the attention steps every decoder family shares: RoPE on a position's heads and one
 * head's causal attention over a KV cache window (scores, softmax, weighted sum of V), with
 * AVX twins that give the scalar code's bits. arch/ (split out of llama.c when qwen3, gemma3
 * and phi3 came to share them)
 */
#include "arch/attn.h"

#include "quant/quant.h"

#include <immintrin.h>
#include <math.h>
#include <string.h>

void arch_rope_yarn_corr(uint32_t rope_dim, uint32_t n_ctx_orig, float base, float beta_fast,
                         float beta_slow, float dims[2])
{
    /* ggml_rope_yarn_corr_dim, in its float operations */
    const float pi = 3.14159265358979323846f;
    float start = floorf((float)rope_dim *
                         logf((float)n_ctx_orig / (beta_fast * 2 * pi)) / (2 * logf(base)));
    float end = ceilf((float)rope_dim *
                      logf((float)n_ctx_orig / (beta_slow * 2 * pi)) / (2 * logf(base)));
    dims[0] = start > 0 ? start : 0;
    dims[1] = end < (float)rope_dim - 1 ? end : (float)rope_dim - 1;
}

void arch_rope(float *v, uint32_t n_heads, uint32_t hd, const arch_rope_args *a, uint32_t pos)
{
    uint32_t npair = a->rope_dim / 2;
    float theta_scale = powf(a->base, -2.0f / (float)a->rope_dim);
    float theta = (float)pos;
    float mscale = a->mscale;
    if (a->ext_factor != 0.0f)
        mscale *= 1.0f + 0.1f * logf(1.0f / a->freq_scale);
    for (uint32_t i = 0; i < npair; i++) {
        float ff = a->factors ? a->factors[i] : 1.0f;
        float t = a->freq_scale * (theta / ff);
        if (a->ext_factor != 0.0f) { /* ggml's rope_yarn_ramp and mix */
            float lo = a->corr[0], span = a->corr[1] - a->corr[0];
            float y = ((float)i - lo) / (span > 0.001f ? span : 0.001f);
            float ramp = (1 - (y < 0 ? 0 : y > 1 ? 1 : y)) * a->ext_factor;
            t = t * (1 - ramp) + (theta / ff) * ramp;
        }
        /* ggml's rope_yarn: cos and sin times the attention factor */
        float c = cosf(t) * mscale, s = sinf(t) * mscale;
        theta *= theta_scale;
        uint32_t i0 = a->neox ? i : 2 * i, i1 = a->neox ? i + npair : 2 * i + 1;
        for (uint32_t h = 0; h < n_heads; h++) {
            float *x = v + (size_t)h * hd;
            float x0 = x[i0], x1 = x[i1];
            x[i0] = x0 * c - x1 * s;
            x[i1] = x0 * s + x1 * c;
        }
    }
}

/* q . k in one fixed order: 8 interleaved partial sums (lane j takes i = j mod 8), then a fixed
 * tree, then the tail. One running sum made this a chain of dependent adds, ~4 cycles each:
 * after a 512-token prompt it cost ~26 ms of a q8_0 TinyLlama token (86 against 60 ms, 1
 * thread, 2026-12-01); independent lanes let the compiler keep 8 in flight or vectorize. */
static float s_dot8(const float *a, const float *b, uint32_t n)
{
    float l[8] = { 0 };
    uint32_t i = 0;
    for (; i + 8 <= n; i += 8)
        for (uint32_t j = 0; j < 8; j++)
            l[j] += a[i + j] * b[i + j];
    float s = ((l[0] + l[4]) + (l[2] + l[6])) + ((l[1] + l[5]) + (l[3] + l[7]));
    for (; i < n; i++)
        s += a[i] * b[i];
    return s;
}

/* AVX twins of s_dot8 and of the weighted sum of V rows: the same 8 lanes, the same tree,
 * each element's multiply then add in the same order (no fma in the target, and -std=c11
 * contracts nothing), so the bits are the scalar code's on any machine; picked once by cpuid.
 * The baseline x86-64 build ran both one float at a time: attention was 32% of a q8_0
 * TinyLlama run with a 512-token prompt and 24 generated (perf, 2 threads, 2026-12-01). */

/* s_dot8's tree on the 8 lanes of v: ((l0 + l4) + (l2 + l6)) + ((l1 + l5) + (l3 + l7)). */
__attribute__((target("avx"))) static inline float s_tree8(__m256 v)
{
    __m128 a = _mm_add_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
    __m128 b = _mm_add_ps(a, _mm_movehl_ps(a, a)); /* (l0+l4)+(l2+l6), (l1+l5)+(l3+l7) */
    return _mm_cvtss_f32(_mm_add_ss(b, _mm_shuffle_ps(b, b, 1)));
}

/* w[t] = s_dot8(q, k_t, hd) * scale for t < len, k_t = k + t * stride. Four keys at a time:
 * each key's sum is still one chain in s_dot8's order, but four chains run side by side (one
 * chain waited 4 cycles an add: 32 a 64-wide head, 360k heads x keys a TinyLlama token at
 * 512 positions). */
__attribute__((target("avx"))) static void s_scores_avx(const float *q, const float *k,
                                                        size_t stride, uint32_t len,
                                                        uint32_t hd, float scale, float *w)
{
    uint32_t t = 0, h8 = hd / 8 * 8;
    for (; t + 4 <= len; t += 4) {
        const float *k0 = k + (size_t)t * stride, *k1 = k0 + stride, *k2 = k1 + stride,
                    *k3 = k2 + stride;
        __m256 a0 = _mm256_setzero_ps(), a1 = a0, a2 = a0, a3 = a0;
        for (uint32_t i = 0; i < h8; i += 8) {
            __m256 qv = _mm256_loadu_ps(q + i);
            a0 = _mm256_add_ps(a0, _mm256_mul_ps(qv, _mm256_loadu_ps(k0 + i)));
            a1 = _mm256_add_ps(a1, _mm256_mul_ps(qv, _mm256_loadu_ps(k1 + i)));
            a2 = _mm256_add_ps(a2, _mm256_mul_ps(qv, _mm256_loadu_ps(k2 + i)));
            a3 = _mm256_add_ps(a3, _mm256_mul_ps(qv, _mm256_loadu_ps(k3 + i)));
        }
        float s0 = s_tree8(a0), s1 = s_tree8(a1), s2 = s_tree8(a2), s3 = s_tree8(a3);
        for (uint32_t i = h8; i < hd; i++) {
            s0 += q[i] * k0[i];
            s1 += q[i] * k1[i];
            s2 += q[i] * k2[i];
            s3 += q[i] * k3[i];
        }
        w[t] = s0 * scale;
        w[t + 1] = s1 * scale;
        w[t + 2] = s2 * scale;
        w[t + 3] = s3 * scale;
    }
    for (; t < len; t++) {
        const float *kt = k + (size_t)t * stride;
        __m256 a = _mm256_setzero_ps();
        for (uint32_t i = 0; i < h8; i += 8)
            a = _mm256_add_ps(a, _mm256_mul_ps(_mm256_loadu_ps(q + i), _mm256_loadu_ps(kt + i)));
        float s0 = s_tree8(a);
        for (uint32_t i = h8; i < hd; i++)
            s0 += q[i] * kt[i];
        w[t] = s0 * scale;
    }
}

/* out[0..hd) = sum over t of (w[t] * inv) * v_t, t in order, each element starting from 0, or
 * from out's value when acc (a second run of cache rows continues the first's sums: the same
 * adds in the same order as one run over both). v_t = v + t * stride. */
static void s_wsum(float *out, const float *w, float inv, const float *v, size_t stride,
                   uint32_t len, uint32_t hd, int acc)
{
    if (!acc)
        memset(out, 0, hd * sizeof(float));
    for (uint32_t t = 0; t < len; t++) {
        const float *vt = v + (size_t)t * stride;
        float a = w[t] * inv;
        for (uint32_t i = 0; i < hd; i++)
            out[i] += a * vt[i];
    }
}

/* Blocks of 64 elements in 8 registers over every t: 8 independent chains keep the adder
 * busy (4 chains waited on its latency; the scalar loop stored every element back after
 * every t). */
__attribute__((target("avx"))) static void s_wsum_avx(float *out, const float *w, float inv,
                                                      const float *v, size_t stride,
                                                      uint32_t len, uint32_t hd, int acc)
{
    uint32_t i0 = 0;
    for (; i0 + 64 <= hd; i0 += 64) {
        __m256 o[8];
        for (int j = 0; j < 8; j++)
            o[j] = acc ? _mm256_loadu_ps(out + i0 + 8 * j) : _mm256_setzero_ps();
        for (uint32_t t = 0; t < len; t++) {
            const float *vt = v + (size_t)t * stride + i0;
            __m256 a = _mm256_set1_ps(w[t] * inv);
            for (int j = 0; j < 8; j++)
                o[j] = _mm256_add_ps(o[j], _mm256_mul_ps(a, _mm256_loadu_ps(vt + 8 * j)));
        }
        for (int j = 0; j < 8; j++)
            _mm256_storeu_ps(out + i0 + 8 * j, o[j]);
    }
    for (; i0 + 32 <= hd; i0 += 32) {
        __m256 o0 = _mm256_setzero_ps(), o1 = o0, o2 = o0, o3 = o0;
        if (acc) {
            o0 = _mm256_loadu_ps(out + i0);
            o1 = _mm256_loadu_ps(out + i0 + 8);
            o2 = _mm256_loadu_ps(out + i0 + 16);
            o3 = _mm256_loadu_ps(out + i0 + 24);
        }
        for (uint32_t t = 0; t < len; t++) {
            const float *vt = v + (size_t)t * stride + i0;
            __m256 a = _mm256_set1_ps(w[t] * inv);
            o0 = _mm256_add_ps(o0, _mm256_mul_ps(a, _mm256_loadu_ps(vt)));
            o1 = _mm256_add_ps(o1, _mm256_mul_ps(a, _mm256_loadu_ps(vt + 8)));
            o2 = _mm256_add_ps(o2, _mm256_mul_ps(a, _mm256_loadu_ps(vt + 16)));
            o3 = _mm256_add_ps(o3, _mm256_mul_ps(a, _mm256_loadu_ps(vt + 24)));
        }
        _mm256_storeu_ps(out + i0, o0);
        _mm256_storeu_ps(out + i0 + 8, o1);
        _mm256_storeu_ps(out + i0 + 16, o2);
        _mm256_storeu_ps(out + i0 + 24, o3);
    }
    if (i0 < hd)
        s_wsum(out + i0, w, inv, v + i0, stride, len, hd - i0, acc);
}

static int s_have_avx(void)
{
    static int have = -1;
    if (have < 0)
        have = __builtin_cpu_supports("avx") ? 1 : 0;
    return have;
}


void arch_attn_head(const float *q, const float *k, const float *v, size_t stride, uint32_t len,
                    uint32_t hd, float scale, float softcap, float sink, float *w, float *out)
{
    arch_attn_head2(q, k, v, len, NULL, NULL, 0, stride, hd, scale, softcap, sink, w, out);
}

/* The softmax of w[0..all) in place, as every path runs it: soft-capped (gemma2), max (with
 * the sink), e^(w - max) summed in t's order (then the sink's term); returns 1 / the sum. */
static float s_softmax(float *w, uint32_t all, float softcap, float sink)
{
    float mx = -INFINITY, inv_cap = softcap > 0 ? 1.0f / softcap : 0;
    for (uint32_t t = 0; t < all; t++) {
        if (softcap > 0)
            w[t] = tanhf(w[t] * inv_cap) * softcap;
        mx = w[t] > mx ? w[t] : mx;
    }
    /* a sink raises the max and adds its term to the sum after the scores' (ggml's soft_max
     * with sinks); -INFINITY changes neither */
    mx = sink > mx ? sink : mx;
    float sum = 0;
    quant_expf_sub(w, all, mx); /* expf(w[t] - mx), 16 at a time: the same bits */
    for (uint32_t t = 0; t < all; t++)
        sum += w[t];
    if (sink != -INFINITY)
        sum += expf(sink - mx);
    return 1.0f / sum;
}

void arch_attn_head2(const float *q, const float *k, const float *v, uint32_t len,
                     const float *k2, const float *v2, uint32_t len2, size_t stride, uint32_t hd,
                     float scale, float softcap, float sink, float *w, float *out)
{
    int avx = s_have_avx();
    uint32_t all = len + len2;
    if (avx) {
        s_scores_avx(q, k, stride, len, hd, scale, w);
        if (len2)
            s_scores_avx(q, k2, stride, len2, hd, scale, w + len);
    } else {
        for (uint32_t t = 0; t < all; t++)
            w[t] = s_dot8(q, t < len ? k + (size_t)t * stride : k2 + (size_t)(t - len) * stride,
                          hd) * scale;
    }
    float inv = s_softmax(w, all, softcap, sink);
    (avx ? s_wsum_avx : s_wsum)(out, w, inv, v, stride, len, hd, 0);
    if (len2)
        (avx ? s_wsum_avx : s_wsum)(out, w + len, inv, v2, stride, len2, hd, 1);
}

/* ---------------------------------------------------------------- a KV group's heads at once
 * A prompt pass runs every query head of a KV group (8 in a TinyLlama) at one position over the
 * same keys and values. Each score stays one chain in s_dot8's order, but with the keys in
 * the vector lanes (the transposed block of arch_attn_kt): lane j of accumulator l_i holds key
 * j's partial sum i, so s_dot8's 8 partial sums and its tree are vertical adds and no lane ever
 * crosses another; a key block loaded once serves every head of the group. The weighted sum
 * keeps each output element's chain over t in order with the dimensions in the lanes. */

#define S_KB 16 /* keys in a transposed block: one 512-bit vector, two 256-bit ones */

size_t arch_attn_kt_floats(uint32_t n, uint32_t hd)
{
    return (size_t)(n + S_KB - 1) / S_KB * S_KB * hd;
}

void arch_attn_kt(float *kt, const float *k, size_t stride, uint32_t rows, uint32_t lo,
                  uint32_t n, uint32_t hd)
{
    uint32_t nb = (n + S_KB - 1) / S_KB;
    for (uint32_t b = 0; b < nb; b++) {
        float *dst = kt + (size_t)b * hd * S_KB;
        for (uint32_t j = 0; j < S_KB; j++) {
            uint32_t e = b * S_KB + j;
            if (e >= n) { /* past the last key: zeros, scored and never used */
                for (uint32_t i = 0; i < hd; i++)
                    dst[(size_t)i * S_KB + j] = 0;
                continue;
            }
            const float *src = k + (size_t)((lo + e) % rows) * stride;
            for (uint32_t i = 0; i < hd; i++)
                dst[(size_t)i * S_KB + j] = src[i];
        }
    }
}

size_t arch_attn_group_scratch(uint32_t nq, uint32_t len)
{
    nq = nq < ARCH_ATTN_GROUP_MAX ? nq : ARCH_ATTN_GROUP_MAX;
    return (size_t)nq * ((len + 2 * S_KB - 1) / S_KB * S_KB);
}

/* Scores of NQ heads (q + u hd; the last repeated when fewer) against nb key blocks of kt,
 * W lanes a vector: w + u wrow gets block b's keys at b S_KB. NQ and W are constants at each
 * use, so the accumulators (8 NQ vectors) stay in registers. */
/* the loops over heads, partial sums and vectors unrolled, so their arrays live in registers */
#define S_UNROLL _Pragma("GCC unroll 16")

#define S_SCORES_BODY(VT, W, NQ)                                                              \
    uint32_t h8 = hd / 8 * 8;                                                                  \
    for (uint32_t u0 = 0; u0 < nq; u0 += NQ) {                                                 \
        const float *qs[NQ];                                                                   \
        float *ws[NQ];                                                                         \
        S_UNROLL for (uint32_t u = 0; u < NQ; u++) {                                                    \
            uint32_t uu = u0 + u < nq ? u0 + u : nq - 1;                                       \
            qs[u] = q + (size_t)uu * hd;                                                       \
            ws[u] = w + (size_t)uu * wrow;                                                     \
        }                                                                                      \
        for (uint32_t b = 0; b < nb; b++)                                                      \
            for (uint32_t h = 0; h < S_KB; h += W) {                                           \
                const float *kb = kt + (size_t)b * hd * S_KB + h;                              \
                VT l[NQ][8];                                                                   \
                S_UNROLL for (uint32_t u = 0; u < NQ; u++)                                              \
                    S_UNROLL for (uint32_t j = 0; j < 8; j++)                                           \
                        l[u][j] = (VT){ 0 };                                                   \
                for (uint32_t i = 0; i < h8; i += 8)                                           \
                    S_UNROLL for (uint32_t j = 0; j < 8; j++) {                                         \
                        VT kv;                                                                 \
                        memcpy(&kv, kb + (size_t)(i + j) * S_KB, sizeof kv);                   \
                        S_UNROLL for (uint32_t u = 0; u < NQ; u++)                                      \
                            l[u][j] = l[u][j] + qs[u][i + j] * kv;                             \
                    }                                                                          \
                S_UNROLL for (uint32_t u = 0; u < NQ; u++) {                                            \
                    VT sv = ((l[u][0] + l[u][4]) + (l[u][2] + l[u][6])) +                      \
                            ((l[u][1] + l[u][5]) + (l[u][3] + l[u][7]));                       \
                    for (uint32_t i = h8; i < hd; i++) {                                       \
                        VT kv;                                                                 \
                        memcpy(&kv, kb + (size_t)i * S_KB, sizeof kv);                         \
                        sv = sv + qs[u][i] * kv;                                               \
                    }                                                                          \
                    sv = sv * scale;                                                           \
                    memcpy(ws[u] + (size_t)b * S_KB + h, &sv, sizeof sv);                      \
                }                                                                              \
            }                                                                                  \
    }

/* out + u hd = sum over t < len of a[u][t] v_t for NQ heads (the last repeated when fewer),
 * a = w + u wrow, v_t at v + ((t0 + t) % rows) stride: 4 vectors of W dimensions a pass over
 * t, then one, then single floats; every element's sum starts at 0 and adds in t's order. */
#define S_WSUM_BODY(VT, W, NQ)                                                                 \
    for (uint32_t u0 = 0; u0 < nq; u0 += NQ) {                                                 \
        const float *as[NQ];                                                                   \
        float *os[NQ];                                                                         \
        S_UNROLL for (uint32_t u = 0; u < NQ; u++) {                                                    \
            uint32_t uu = u0 + u < nq ? u0 + u : nq - 1;                                       \
            as[u] = w + (size_t)uu * wrow;                                                     \
            os[u] = out + (size_t)uu * hd;                                                     \
        }                                                                                      \
        uint32_t i0 = 0;                                                                       \
        for (; i0 + 4 * W <= hd; i0 += 4 * W) {                                                \
            VT o[NQ][4];                                                                       \
            S_UNROLL for (uint32_t u = 0; u < NQ; u++)                                                  \
                S_UNROLL for (uint32_t c = 0; c < 4; c++)                                               \
                    o[u][c] = (VT){ 0 };                                                       \
            uint32_t row = t0 % rows;                                                          \
            for (uint32_t t = 0; t < len; t++) {                                               \
                const float *vt = v + (size_t)row * stride + i0;                               \
                row = row + 1 == rows ? 0 : row + 1;                                           \
                VT x[4];                                                                       \
                memcpy(x, vt, sizeof x);                                                       \
                S_UNROLL for (uint32_t u = 0; u < NQ; u++) {                                            \
                    float a = as[u][t];                                                        \
                    S_UNROLL for (uint32_t c = 0; c < 4; c++)                                           \
                        o[u][c] = o[u][c] + a * x[c];                                          \
                }                                                                              \
            }                                                                                  \
            S_UNROLL for (uint32_t u = 0; u < NQ; u++)                                         \
                S_UNROLL for (uint32_t c = 0; c < 4; c++)                                      \
                    memcpy(os[u] + i0 + c * W, &o[u][c], sizeof o[u][c]);                      \
        }                                                                                      \
        for (; i0 + W <= hd; i0 += W) {                                                        \
            VT o[NQ];                                                                          \
            S_UNROLL for (uint32_t u = 0; u < NQ; u++)                                                  \
                o[u] = (VT){ 0 };                                                              \
            uint32_t row = t0 % rows;                                                          \
            for (uint32_t t = 0; t < len; t++) {                                               \
                VT x;                                                                          \
                memcpy(&x, v + (size_t)row * stride + i0, sizeof x);                           \
                row = row + 1 == rows ? 0 : row + 1;                                           \
                S_UNROLL for (uint32_t u = 0; u < NQ; u++)                                              \
                    o[u] = o[u] + as[u][t] * x;                                                \
            }                                                                                  \
            S_UNROLL for (uint32_t u = 0; u < NQ; u++)                                                  \
                memcpy(os[u] + i0, &o[u], sizeof o[u]);                                        \
        }                                                                                      \
        for (; i0 < hd; i0++)                                                                  \
            S_UNROLL for (uint32_t u = 0; u < NQ; u++) {                                                \
                float o = 0;                                                                   \
                uint32_t row = t0 % rows;                                                      \
                for (uint32_t t = 0; t < len; t++) {                                           \
                    o += as[u][t] * v[(size_t)row * stride + i0];                              \
                    row = row + 1 == rows ? 0 : row + 1;                                       \
                }                                                                              \
                os[u][i0] = o;                                                                 \
            }                                                                                  \
    }

typedef float s_v16 __attribute__((vector_size(64)));
typedef float s_v8 __attribute__((vector_size(32)));

/* AVX-512: two heads a key block (16 accumulators), four heads a value pass (16 of 32
 * registers); AVX2: one and two (8 and 8 of 16). */
__attribute__((target("avx512f"))) static void
s_scores512(const float *q, uint32_t nq, const float *kt, uint32_t nb, uint32_t hd, float scale,
            float *w, size_t wrow)
{
    S_SCORES_BODY(s_v16, 16, 2)
}

__attribute__((target("avx2"))) static void
s_scores256(const float *q, uint32_t nq, const float *kt, uint32_t nb, uint32_t hd, float scale,
            float *w, size_t wrow)
{
    S_SCORES_BODY(s_v8, 8, 1)
}

__attribute__((target("avx512f"))) static void
s_wsum512(const float *w, size_t wrow, uint32_t nq, const float *v, size_t stride, uint32_t rows,
          uint32_t t0, uint32_t len, uint32_t hd, float *out)
{
    S_WSUM_BODY(s_v16, 16, 4)
}

__attribute__((target("avx2"))) static void
s_wsum256(const float *w, size_t wrow, uint32_t nq, const float *v, size_t stride, uint32_t rows,
          uint32_t t0, uint32_t len, uint32_t hd, float *out)
{
    S_WSUM_BODY(s_v8, 8, 2)
}

/* The largest of w[0..n) and m, as s_softmax's loop finds it (w[t] > m ? w[t] : m, a NaN never
 * taken): max_ps(w, m) is that choice lane by lane. Only a tie of +0 and -0 can end on the
 * other zero, and then every w[t] - m and sink - m (so every e^) is the same. */
__attribute__((target("avx512f"))) static float s_max512(const float *w, uint32_t n, float m)
{
    __m512 a = _mm512_set1_ps(m);
    uint32_t t = 0;
    for (; t + 16 <= n; t += 16)
        a = _mm512_max_ps(_mm512_loadu_ps(w + t), a);
    float l[16];
    _mm512_storeu_ps(l, a);
    for (uint32_t j = 0; j < 16; j++)
        m = l[j] > m ? l[j] : m;
    for (; t < n; t++)
        m = w[t] > m ? w[t] : m;
    return m;
}

__attribute__((target("avx2"))) static float s_max256(const float *w, uint32_t n, float m)
{
    __m256 a = _mm256_set1_ps(m);
    uint32_t t = 0;
    for (; t + 8 <= n; t += 8)
        a = _mm256_max_ps(_mm256_loadu_ps(w + t), a);
    float l[8];
    _mm256_storeu_ps(l, a);
    for (uint32_t j = 0; j < 8; j++)
        m = l[j] > m ? l[j] : m;
    for (; t < n; t++)
        m = w[t] > m ? w[t] : m;
    return m;
}

/* s_softmax on nq rows (w + u wrow, len each), then each weight times its row's 1 / sum (s_wsum's
 * w[t] * inv, once). Every row's sum still adds its e^ in t's order, but the rows take turns at
 * each t: nq independent chains, where one row's chain waited an add's latency after each expf
 * (s_softmax was 5.1% of a Q4_K_M 512-token prompt, 1 thread, after the group kernels). */
static void s_group_softmax(float *w, size_t wrow, uint32_t nq, uint32_t len, float softcap,
                            const float *sinks, quant_isa isa)
{
    float mx[ARCH_ATTN_GROUP_MAX], sum[ARCH_ATTN_GROUP_MAX];
    for (uint32_t u = 0; u < nq; u++) {
        float *wu = w + (size_t)u * wrow, sink = sinks ? sinks[u] : -INFINITY;
        if (softcap > 0) {
            float inv_cap = 1.0f / softcap;
            for (uint32_t t = 0; t < len; t++)
                wu[t] = tanhf(wu[t] * inv_cap) * softcap;
        }
        float m = isa == QUANT_ISA_AVX512 ? s_max512(wu, len, -INFINITY)
                                          : s_max256(wu, len, -INFINITY);
        mx[u] = sink > m ? sink : m;
        sum[u] = 0;
    }
    /* the e^ a row at a time in 16 lanes (quant_expf_sub, glibc's bits: the scalar expf was
     * 3.6% of a 1-thread Q4_K_M prompt), then the sums */
    for (uint32_t u = 0; u < nq; u++)
        quant_expf_sub(w + (size_t)u * wrow, len, mx[u]);
    for (uint32_t t = 0; t < len; t++)
        for (uint32_t u = 0; u < nq; u++)
            sum[u] += w[(size_t)u * wrow + t];
    for (uint32_t u = 0; u < nq; u++) {
        float *wu = w + (size_t)u * wrow;
        if (sinks && sinks[u] != -INFINITY)
            sum[u] += expf(sinks[u] - mx[u]);
        float inv = 1.0f / sum[u];
        for (uint32_t t = 0; t < len; t++)
            wu[t] *= inv;
    }
}

void arch_attn_group(const arch_attn_keys *kv, const float *q, uint32_t nq, uint32_t t0,
                     uint32_t len, const float *sinks, float *w, float *out)
{
    uint32_t hd = kv->hd, rows = kv->rows;
    for (; nq > ARCH_ATTN_GROUP_MAX; nq -= ARCH_ATTN_GROUP_MAX) { /* the scratch's rows at a time */
        arch_attn_group(kv, q, ARCH_ATTN_GROUP_MAX, t0, len, sinks, w, out);
        q += (size_t)ARCH_ATTN_GROUP_MAX * hd;
        out += (size_t)ARCH_ATTN_GROUP_MAX * hd;
        sinks = sinks ? sinks + ARCH_ATTN_GROUP_MAX : NULL;
    }
    quant_isa isa = quant_isa_current();
    if (isa == QUANT_ISA_SCALAR) { /* the one-position path, head by head */
        uint32_t r0 = t0 % rows, len1 = len < rows - r0 ? len : rows - r0;
        for (uint32_t u = 0; u < nq; u++)
            arch_attn_head2(q + (size_t)u * hd, kv->k + (size_t)r0 * kv->stride,
                            kv->v + (size_t)r0 * kv->stride, len1, kv->k, kv->v, len - len1,
                            kv->stride, hd, kv->scale, kv->softcap,
                            sinks ? sinks[u] : -INFINITY, w, out + (size_t)u * hd);
        return;
    }
    /* the key blocks that hold t0 .. t0 + len - 1; the scores of head u at w + u wrow, key
     * t0's at skip */
    uint32_t b0 = (t0 - kv->kt_lo) / S_KB, b1 = (t0 + len - 1 - kv->kt_lo) / S_KB;
    uint32_t nb = b1 - b0 + 1, skip = t0 - kv->kt_lo - b0 * S_KB;
    size_t wrow = (size_t)nb * S_KB;
    const float *kt = kv->kt + (size_t)b0 * hd * S_KB;
    if (isa == QUANT_ISA_AVX512)
        s_scores512(q, nq, kt, nb, hd, kv->scale, w, wrow);
    else
        s_scores256(q, nq, kt, nb, hd, kv->scale, w, wrow);
    s_group_softmax(w + skip, wrow, nq, len, kv->softcap, sinks, isa);
    if (isa == QUANT_ISA_AVX512)
        s_wsum512(w + skip, wrow, nq, kv->v, kv->stride, rows, t0, len, hd, out);
    else
        s_wsum256(w + skip, wrow, nq, kv->v, kv->stride, rows, t0, len, hd, out);
}
