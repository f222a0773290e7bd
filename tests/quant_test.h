/* quant_test.h — what the quant tests share: a seeded xorshift64 stream, a float's bits, the
 * FNV-1a hash the known-answer headers keep ggml's floats as, the first byte two buffers differ
 * at, and every ISA's dot product held to the scalar kernel's. Include after tests/check.h.
 * tests/ */
#ifndef SWARM_QUANT_TEST_H
#define SWARM_QUANT_TEST_H

#include <stddef.h>
#include <stdint.h>
#include <string.h>

#include "quant/quant.h"
#include "tests/check.h"

static uint64_t qtest_rng_ = 0x9e3779b97f4a7c15ull;

/* Each test seeds its own stream once, before its first draw. */
static inline void qtest_seed(uint64_t s)
{
    qtest_rng_ = s;
}

static inline uint64_t qtest_next(void)
{
    qtest_rng_ ^= qtest_rng_ << 13;
    qtest_rng_ ^= qtest_rng_ >> 7;
    qtest_rng_ ^= qtest_rng_ << 17;
    return qtest_rng_;
}

/* uniform in [lo, hi) from the stream's top 24 bits */
static inline float qtest_unif(float lo, float hi)
{
    return lo + (hi - lo) * (float)((qtest_next() >> 40) * (1.0 / (1ull << 24)));
}

static inline uint32_t qtest_bits(float f)
{
    uint32_t u;
    memcpy(&u, &f, sizeof u);
    return u;
}

/* 64-bit FNV-1a, as tests/kquant_kat.py's fnv1a64 */
static inline uint64_t qtest_fnv(const void *p, size_t n)
{
    const uint8_t *b = p;
    uint64_t h = 0xcbf29ce484222325ull;
    for (size_t i = 0; i < n; i++)
        h = (h ^ b[i]) * 0x100000001b3ull;
    return h;
}

/* the first index where a and b differ; n when they are the same */
static inline size_t qtest_first_diff(const void *a, const void *b, size_t n)
{
    const uint8_t *x = a, *y = b;
    for (size_t i = 0; i < n; i++)
        if (x[i] != y[i])
            return i;
    return n;
}

/* The scalar kernel's dot of (w, act) for type t, and every other ISA's this CPU runs held to
 * it bit for bit (what names the row in a failure: type, n, rep); *compared counts them. */
static inline float qtest_dot_isas(quant_type t, uint64_t n, const void *w, const void *act,
                                   const char *what, int *compared)
{
    const float r = quant_dot_get(t, QUANT_ISA_SCALAR)(n, w, act);
    for (int isa = 1; isa < QUANT_ISA_COUNT; isa++) {
        quant_dot_fn g = quant_dot_get(t, (quant_isa)isa);
        if (!g)
            continue;
        const float s = g(n, w, act);
        (*compared)++;
        CHECK(qtest_bits(s) == qtest_bits(r), "%s %s: %a vs scalar %a",
              quant_isa_name((quant_isa)isa), what, (double)s, (double)r);
    }
    return r;
}

#endif
