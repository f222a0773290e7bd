/* test_kernel.c — the layer kernel: BLAS vs a plain double loop, chunked rows bit-identical to the whole matrix. tests/ */
#include "arch/kernel.h"
#include "arch/model.h"
#include "base/util.h"
#include "tests/check.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

typedef struct {
    uint32_t d;
    float *W;                 /* (d, d) */
    float *g;                 /* (d,) */
    float *x0;                /* (d,) input */
    float *u, *y;             /* (d,) scratch */
} s_layer;

static int s_layer_new(s_layer *L, uint32_t d, uint64_t seed)
{
    memset(L, 0, sizeof *L);
    L->d = d;
    L->W = malloc((size_t)d * d * sizeof(float));
    L->g = malloc(d * sizeof(float));
    L->x0 = malloc(d * sizeof(float));
    L->u = malloc(d * sizeof(float));
    L->y = malloc(d * sizeof(float));
    if (!L->W || !L->g || !L->x0 || !L->u || !L->y)
        return -1;
    model_fill_layer(seed, 0, d, L->g, L->W);
    util_step_input(7, 0, L->x0, (int)d);
    return 0;
}

static void s_layer_free(s_layer *L)
{
    free(L->W);
    free(L->g);
    free(L->x0);
    free(L->u);
    free(L->y);
}

/* One layer through BLAS into out (d,). */
static void s_blas(const s_layer *L, float *out)
{
    memcpy(out, L->x0, L->d * sizeof(float));
    kernel_layer(L->W, L->g, out, L->u, L->y, L->d);
}

/* One layer as the SSD arm runs it: prepare, rows in chunks of `rows` (a multiple of 4), finish. */
static int s_chunked(const s_layer *L, uint32_t rows, float *out)
{
    uint32_t d = L->d;
    memcpy(out, L->x0, d * sizeof(float));
    kernel_prepare(L->g, out, L->u, d);
    for (uint32_t r0 = 0; r0 < d; r0 += rows) {
        uint32_t n = d - r0 < rows ? d - r0 : rows;
        if (kernel_rows(L->W + (uint64_t)r0 * d, L->u, L->y, r0, n, d))
            return -1;
    }
    kernel_finish(out, L->y, d);
    return 0;
}

static void s_vs_naive(uint32_t d)
{
    s_layer L;
    if (s_layer_new(&L, d, 11)) {
        CHECK(0, "out of memory for d=%u", d);
        s_layer_free(&L);
        return;
    }
    float *a = malloc(d * sizeof(float)), *b = malloc(d * sizeof(float));
    s_blas(&L, a);
    memcpy(b, L.x0, d * sizeof(float));
    kernel_layer_naive(L.W, L.g, b, d);
    double worst = 0, scale = 0;
    int finite = 1, moved = 0;
    for (uint32_t i = 0; i < d; i++) {
        if (!isfinite(a[i]) || !isfinite(b[i]))
            finite = 0;
        if (fabs((double)b[i]) > scale)
            scale = fabs((double)b[i]);
        if (a[i] != L.x0[i])
            moved = 1;
    }
    for (uint32_t i = 0; i < d; i++) {
        double rel = fabs((double)a[i] - b[i]) / fmax(fabs((double)b[i]), 1e-2 * scale);
        if (rel > worst)
            worst = rel;
    }
    CHECK(finite, "d=%u: non-finite output", d);
    CHECK(moved, "d=%u: the layer left x unchanged", d);
    CHECK(worst < 1e-4, "d=%u: BLAS vs naive relative difference %g >= 1e-4", d, worst);
    free(a);
    free(b);
    s_layer_free(&L);
}

static void s_chunks_bit_identical(uint32_t d, const uint32_t *rows, int nrows)
{
    s_layer L;
    if (s_layer_new(&L, d, 3)) {
        CHECK(0, "out of memory for d=%u", d);
        s_layer_free(&L);
        return;
    }
    float *whole = malloc(d * sizeof(float)), *part = malloc(d * sizeof(float));
    s_blas(&L, whole);
    for (int i = 0; i < nrows; i++) {
        int rc = s_chunked(&L, rows[i], part);
        CHECK(rc == 0, "d=%u chunk %u rows: kernel_rows refused an aligned start", d, rows[i]);
        CHECK(memcmp(whole, part, d * sizeof(float)) == 0,
              "d=%u: chunks of %u rows differ from the whole-matrix sgemv", d, rows[i]);
    }
    free(whole);
    free(part);
    s_layer_free(&L);
}

static void s_rejects_unaligned(void)
{
    s_layer L;
    uint32_t d = 64;
    if (s_layer_new(&L, d, 5)) {
        CHECK(0, "out of memory");
        s_layer_free(&L);
        return;
    }
    kernel_prepare(L.g, L.x0, L.u, d);
    for (uint32_t i = 0; i < d; i++)
        L.y[i] = -7.0f;
    for (uint32_t r0 = 1; r0 < 8; r0++) {
        if (r0 % KERNEL_ROW_ALIGN == 0)
            continue;
        CHECK(kernel_rows(L.W + (uint64_t)r0 * d, L.u, L.y, r0, 4, d) == -1,
              "kernel_rows accepted r0=%u (not a multiple of %d)", r0, KERNEL_ROW_ALIGN);
    }
    int untouched = 1;
    for (uint32_t i = 0; i < d; i++)
        untouched &= L.y[i] == -7.0f;
    CHECK(untouched, "a refused kernel_rows wrote to y");
    CHECK(kernel_rows(L.W + 4ull * d, L.u, L.y, 4, 4, d) == 0, "kernel_rows refused r0=4");
    CHECK(kernel_rows(L.W, L.u, L.y, 0, 3, d) == 0, "kernel_rows refused a 3-row tail at r0=0");
    s_layer_free(&L);
}

/* The BLAS thread count must not change a bit (workers use 1, the reference may use more).
 * OpenBLAS 0.3.21 splits one sgemv's rows evenly across threads, so with 2 threads a call's
 * row count must be a multiple of 8 for every thread's share to start on a 4-row block:
 * chunks of 4 mod 8 rows (12, 20, ..., 100) differ in the last bits with 2 threads (measured,
 * Debian 12 libopenblas0-pthread, 2 cores). Hence the chunked check uses 96 rows. */
static void s_threads(uint32_t d)
{
    s_layer L;
    if (s_layer_new(&L, d, 9)) {
        CHECK(0, "out of memory");
        s_layer_free(&L);
        return;
    }
    float *one = malloc(d * sizeof(float)), *two = malloc(d * sizeof(float));
    float *two_chunked = malloc(d * sizeof(float));
    kernel_set_threads(1);
    s_blas(&L, one);
    kernel_set_threads(2);
    s_blas(&L, two);
    CHECK(s_chunked(&L, 96, two_chunked) == 0, "kernel_rows refused");
    kernel_set_threads(1);
    CHECK(memcmp(one, two, d * sizeof(float)) == 0, "d=%u: 1 vs 2 BLAS threads differ", d);
    CHECK(memcmp(one, two_chunked, d * sizeof(float)) == 0,
          "d=%u: 2 threads in 96-row chunks vs 1 thread whole differ", d);
    free(one);
    free(two);
    free(two_chunked);
    s_layer_free(&L);
}

int main(void)
{
    kernel_set_threads(1);
    s_vs_naive(64);
    s_vs_naive(1000);
    s_vs_naive(4096);

    /* 1000 and 256: dividing and non-dividing chunk sizes, tiny and whole. */
    static const uint32_t r1000[] = { 4, 8, 12, 64, 100, 128, 248, 252, 500, 996, 1000, 1024 };
    static const uint32_t r256[] = { 4, 12, 16, 60, 64, 100, 128, 252, 256 };
    s_chunks_bit_identical(1000, r1000, (int)(sizeof r1000 / sizeof r1000[0]));
    s_chunks_bit_identical(256, r256, (int)(sizeof r256 / sizeof r256[0]));
    s_rejects_unaligned();
    s_threads(1000);
    s_threads(256);
    return CHECK_DONE("test_kernel");
}
