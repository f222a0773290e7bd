/* test_attn.c — arch_attn_group (a KV group's heads at once, on each ISA this CPU runs) against
 * arch_attn_head2 (one head at one position), bit for bit, over odd shapes; and
 * arch_rmsnorm_rows (8 rows in lanes) against arch_rmsnorm row by row. tests/ */
#include "arch/arch.h"
#include "arch/attn.h"
#include "quant/quant.h"
#include "tests/check.h"

#include <math.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

static uint64_t s_rng = 0x9e3779b97f4a7c15ull;

static float s_rand(float mag)
{
    s_rng ^= s_rng << 13;
    s_rng ^= s_rng >> 7;
    s_rng ^= s_rng << 17;
    return ((float)(s_rng >> 40) / (float)(1u << 24) * 2 - 1) * mag;
}

typedef struct {
    uint32_t group, hd, nkv;      /* heads sharing a KV head, head size, KV heads */
    uint32_t rows;                /* cache rows (a ring when < pos + 1) */
    uint32_t pos, window;         /* the query's position; 0 = no window */
    uint32_t kt_back;             /* keys transposed before the first attended (a pass's) */
    float softcap;
    int sinks;
    float mag;                    /* scale of q and k (large: a peaked softmax) */
} s_case;

/* every ISA this CPU runs: the group's bits must be the one-head path's on each */
static void s_run_case(const s_case *c)
{
    uint32_t kvd = c->nkv * c->hd, nq = c->group * c->nkv;
    uint32_t t0 = c->window && c->pos >= c->window ? c->pos - c->window + 1 : 0;
    uint32_t len = c->pos + 1 - t0, lo = t0 >= c->kt_back ? t0 - c->kt_back : 0;
    uint32_t nkt = c->pos + 1 - lo;
    float *k = malloc((size_t)c->rows * kvd * sizeof(float));
    float *v = malloc((size_t)c->rows * kvd * sizeof(float));
    float *q = malloc((size_t)nq * c->hd * sizeof(float));
    float *sinks = malloc(nq * sizeof(float));
    float *ref = malloc((size_t)nq * c->hd * sizeof(float));
    float *got = malloc((size_t)nq * c->hd * sizeof(float));
    float *w = malloc((len + 64) * sizeof(float));
    float *gw = malloc(arch_attn_group_scratch(c->group, len) * sizeof(float));
    size_t one = arch_attn_kt_floats(nkt, c->hd);
    float *kt = malloc(one * c->nkv * sizeof(float));
    for (size_t i = 0; i < (size_t)c->rows * kvd; i++) {
        k[i] = s_rand(c->mag);
        v[i] = s_rand(1);
    }
    for (size_t i = 0; i < (size_t)nq * c->hd; i++)
        q[i] = s_rand(c->mag);
    for (uint32_t i = 0; i < nq; i++)
        sinks[i] = s_rand(3);
    float scale = 1.0f / sqrtf((float)c->hd);
    uint32_t r0 = t0 % c->rows, len1 = len < c->rows - r0 ? len : c->rows - r0;
    for (uint32_t h = 0; h < nq; h++) {
        size_t off = (size_t)(h / c->group) * c->hd;
        arch_attn_head2(q + (size_t)h * c->hd, k + (size_t)r0 * kvd + off,
                        v + (size_t)r0 * kvd + off, len1, k + off, v + off, len - len1, kvd,
                        c->hd, scale, c->softcap, c->sinks ? sinks[h] : -INFINITY, w,
                        ref + (size_t)h * c->hd);
    }
    for (uint32_t kh = 0; kh < c->nkv; kh++)
        arch_attn_kt(kt + kh * one, k + (size_t)kh * c->hd, kvd, c->rows, lo, nkt, c->hd);
    quant_isa keep = quant_isa_current();
    for (int isa = 0; isa < QUANT_ISA_COUNT; isa++) {
        if (quant_isa_set((quant_isa)isa))
            continue;
        memset(got, 0xff, (size_t)nq * c->hd * sizeof(float));
        for (uint32_t kh = 0; kh < c->nkv; kh++) {
            arch_attn_keys keys = { .k = k + (size_t)kh * c->hd, .v = v + (size_t)kh * c->hd,
                                    .stride = kvd, .rows = c->rows, .kt = kt + kh * one,
                                    .kt_lo = lo, .hd = c->hd, .scale = scale,
                                    .softcap = c->softcap };
            uint32_t h = kh * c->group;
            arch_attn_group(&keys, q + (size_t)h * c->hd, c->group, t0, len,
                            c->sinks ? sinks + h : NULL, gw, got + (size_t)h * c->hd);
        }
        uint32_t bad = 0;
        for (size_t i = 0; i < (size_t)nq * c->hd; i++)
            bad += memcmp(&ref[i], &got[i], sizeof(float)) != 0;
        CHECK(bad == 0, "%s: group %u hd %u rows %u pos %u window %u back %u cap %g sinks %d: "
              "%u of %u outputs differ", quant_isa_name((quant_isa)isa), c->group, c->hd,
              c->rows, c->pos, c->window, c->kt_back, c->softcap, c->sinks, bad, nq * c->hd);
    }
    quant_isa_set(keep);
    free(k), free(v), free(q), free(sinks), free(ref), free(got), free(w), free(gw), free(kt);
}

/* n rows of dim, in place and not, magnitudes 1e-3 .. 1e3 so the double sums round */
static void s_norm_case(uint32_t n, uint32_t dim)
{
    float *x = malloc((size_t)n * dim * 4), *w = malloc((size_t)dim * 4);
    float *a = malloc((size_t)n * dim * 4), *b = malloc((size_t)n * dim * 4);
    for (uint32_t i = 0; i < dim; i++)
        w[i] = s_rand(2);
    for (size_t i = 0; i < (size_t)n * dim; i++)
        x[i] = s_rand(1) * powf(10.0f, (float)(i % 7) - 3);
    for (uint32_t p = 0; p < n; p++)
        arch_rmsnorm(x + (size_t)p * dim, w, a + (size_t)p * dim, dim, 1e-5f);
    arch_rmsnorm_rows(x, w, b, dim, 1e-5f, n);
    CHECK(!memcmp(a, b, (size_t)n * dim * 4), "rmsnorm rows %u x %u", n, dim);
    memcpy(b, x, (size_t)n * dim * 4);
    arch_rmsnorm_rows(b, w, b, dim, 1e-5f, n);
    CHECK(!memcmp(a, b, (size_t)n * dim * 4), "rmsnorm rows %u x %u in place", n, dim);
    free(x), free(w), free(a), free(b);
}

int main(void)
{
    static const uint32_t norm_n[] = { 0, 1, 7, 8, 9, 16, 23, 64 };
    static const uint32_t norm_dim[] = { 1, 12, 2048, 2049 };
    for (size_t i = 0; i < sizeof norm_n / sizeof norm_n[0]; i++)
        for (size_t j = 0; j < sizeof norm_dim / sizeof norm_dim[0]; j++)
            s_norm_case(norm_n[i], norm_dim[j]);
    static const uint32_t groups[] = { 1, 2, 3, 8, 17 };
    static const uint32_t hds[] = { 64, 128, 256, 80, 12 };
    static const uint32_t poss[] = { 0, 1, 15, 16, 17, 100, 200, 300 };
    for (size_t g = 0; g < sizeof groups / sizeof groups[0]; g++)
        for (size_t d = 0; d < sizeof hds / sizeof hds[0]; d++)
            for (size_t p = 0; p < sizeof poss / sizeof poss[0]; p++) {
                s_case c = { .group = groups[g], .hd = hds[d], .nkv = 2, .rows = 512,
                             .pos = poss[p], .kt_back = (uint32_t)(p * 5 % 19), .mag = 1 };
                s_run_case(&c);
                /* gpt-oss: sinks and a window of 128 in a ring of 128 + a pass's rows */
                c.window = 128, c.rows = 128 + 40, c.sinks = 1;
                s_run_case(&c);
                /* gemma2: soft-capped scores, large ones; gemma's local window of 64 */
                c.window = 64, c.rows = 512, c.sinks = 0, c.softcap = 50, c.mag = 6;
                s_run_case(&c);
            }
    return CHECK_DONE("test_attn");
}
