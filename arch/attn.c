/* attn.c — the attention steps every decoder family shares: RoPE on a position's heads and one
 * head's causal attention over a KV cache window (scores, softmax, weighted sum of V), with
 * AVX twins that give the scalar code's bits. arch/ (split out of llama.c when qwen3, gemma3
 * and phi3 came to share them)
 */
#include "arch/attn.h"

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

void arch_attn_head2(const float *q, const float *k, const float *v, uint32_t len,
                     const float *k2, const float *v2, uint32_t len2, size_t stride, uint32_t hd,
                     float scale, float softcap, float sink, float *w, float *out)
{
    int avx = s_have_avx();
    uint32_t all = len + len2;
    float mx = -INFINITY, inv_cap = softcap > 0 ? 1.0f / softcap : 0;
    if (avx) {
        s_scores_avx(q, k, stride, len, hd, scale, w);
        if (len2)
            s_scores_avx(q, k2, stride, len2, hd, scale, w + len);
    }
    for (uint32_t t = 0; t < all; t++) {
        if (!avx)
            w[t] = s_dot8(q, t < len ? k + (size_t)t * stride : k2 + (size_t)(t - len) * stride,
                          hd) * scale;
        if (softcap > 0)
            w[t] = tanhf(w[t] * inv_cap) * softcap;
        mx = w[t] > mx ? w[t] : mx;
    }
    /* a sink raises the max and adds its term to the sum after the scores' (ggml's soft_max
     * with sinks); -INFINITY changes neither */
    mx = sink > mx ? sink : mx;
    float sum = 0;
    for (uint32_t t = 0; t < all; t++) {
        w[t] = expf(w[t] - mx);
        sum += w[t];
    }
    if (sink != -INFINITY)
        sum += expf(sink - mx);
    float inv = 1.0f / sum;
    (avx ? s_wsum_avx : s_wsum)(out, w, inv, v, stride, len, hd, 0);
    if (len2)
        (avx ? s_wsum_avx : s_wsum)(out, w + len, inv, v2, stride, len2, hd, 1);
}
