/* bench.c — matrix-vector GB/s per tensor type against a same-run memory-read bound. quant/ */
#include "quant/bench.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/util.h"
#include "quant/quant_int.h"

uint64_t quant_read_stream(const void *p, uint64_t bytes)
{
    const uint64_t *w = p;
    uint64_t s[8] = { 0 };
    for (uint64_t k = 0; k < bytes / 64; k++) {
        quant_prefetch(w + k * 8, 64);
        for (int j = 0; j < 8; j++)
            s[j] ^= w[k * 8 + j];
    }
    return s[0] ^ s[1] ^ s[2] ^ s[3] ^ s[4] ^ s[5] ^ s[6] ^ s[7];
}

typedef struct {
    const uint8_t *base;       /* one matrix */
    uint64_t bytes;
    uint64_t sink[QUANT_MAX_THREADS];
} s_read_job;

/* Share i of n reads a contiguous 64-byte-aligned slice, as the product's rows are split. */
static void s_read_task(void *p, int i, int n)
{
    s_read_job *j = p;
    uint64_t lines = j->bytes / 64;
    uint64_t l0 = lines * (uint64_t)i / (uint64_t)n, l1 = lines * (uint64_t)(i + 1) / (uint64_t)n;
    j->sink[i] ^= quant_read_stream(j->base + l0 * 64, (l1 - l0) * 64);
}

static int s_cmp(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

static double s_median(double *v, int n)
{
    qsort(v, (size_t)n, sizeof *v, s_cmp);
    return n % 2 ? v[n / 2] : 0.5 * (v[n / 2 - 1] + v[n / 2]);
}

int quant_bench_matvec(quant_type t, uint64_t rows, uint64_t cols, const int *threads, int nthr,
                       int reps, uint64_t pool_bytes, uint64_t batch, quant_bench_result *out,
                       char *err, size_t errlen)
{
    uint64_t mbytes, rb;
    uint8_t *W = NULL;
    float *x = NULL, *y = NULL, *f = NULL, *X = NULL, *Y = NULL;
    double *tm = NULL, *tr = NULL;
    s_read_job rj;
    int rc = -1;
    if (quant_tensor_bytes(t, rows, cols, &mbytes, err, errlen) ||
        quant_row_bytes(t, cols, &rb, err, errlen))
        return -1;
    if (!mbytes || reps < 1) {
        snprintf(err, errlen, "nothing to measure");
        return -1;
    }
    uint64_t copies = (pool_bytes + mbytes - 1) / mbytes;
    if (copies < 2)
        copies = 2;
    /* Each copy starts on a 4096-byte boundary (an O_DIRECT-read layer would). */
    uint64_t stride = (mbytes + 4095) / 4096 * 4096;
    if (posix_memalign((void **)&W, 4096, stride * copies) ||
        !(x = malloc(sizeof(float) * cols)) || !(y = malloc(sizeof(float) * rows)) ||
        !(f = malloc(sizeof(float) * cols)) || !(tm = malloc(sizeof(double) * (size_t)reps)) ||
        !(tr = malloc(sizeof(double) * (size_t)reps)) ||
        (batch && (!(X = malloc(sizeof(float) * cols * batch)) ||
                   !(Y = malloc(sizeof(float) * rows * batch))))) {
        snprintf(err, errlen, "out of memory for %llu copies of a %llu-byte matrix",
                 (unsigned long long)copies, (unsigned long long)mbytes);
        goto out;
    }
    uint64_t seed = 7;
    for (uint64_t r = 0; r < rows; r++) {
        util_step_input(seed, r, f, (int)cols);
        if (quant_quantize_row(t, f, W + r * rb, cols, err, errlen))
            goto out;
    }
    for (uint64_t c = 1; c < copies; c++)
        memcpy(W + c * stride, W, mbytes);
    util_step_input(seed, rows, x, (int)cols);
    for (uint64_t b = 0; b < batch; b++)
        util_step_input(seed + 1, b, X + b * cols, (int)cols);

    for (int k = 0; k < nthr; k++) {
        quant_bench_result *o = &out[k];
        memset(o, 0, sizeof *o);
        o->type = t;
        o->threads = threads[k];
        o->rows = rows;
        o->cols = cols;
        o->matrix_bytes = mbytes;
        o->copies = (uint32_t)copies;
        o->reps = reps;
        memset(&rj, 0, sizeof rj);
        rj.bytes = mbytes;
        /* Warm: touch every copy and start the pool's threads. */
        for (uint64_t c = 0; c < copies; c++) {
            rj.base = W + c * stride;
            if (quant_pool_run(threads[k], s_read_task, &rj, err, errlen) ||
                quant_matvec(t, rows, cols, W + c * stride, x, y, threads[k], err, errlen))
                goto out;
        }
        for (int r = 0; r < reps; r++) {
            uint64_t t0 = util_now_ns();
            for (uint64_t c = 0; c < copies; c++) {
                rj.base = W + c * stride;
                quant_pool_run(threads[k], s_read_task, &rj, err, errlen);
            }
            uint64_t t1 = util_now_ns();
            for (uint64_t c = 0; c < copies; c++)
                quant_matvec(t, rows, cols, W + c * stride, x, y, threads[k], err, errlen);
            uint64_t t2 = util_now_ns();
            tr[r] = (double)(t1 - t0) / 1e3 / (double)copies;
            tm[r] = (double)(t2 - t1) / 1e3 / (double)copies;
        }
        o->read_us = s_median(tr, reps);      /* sorts tr: tr[0] is then the fastest */
        o->matvec_us = s_median(tm, reps);
        o->ratio_best = tr[0] / tm[0];
        o->read_gbps = (double)mbytes / (o->read_us * 1e3);
        o->matvec_gbps = (double)mbytes / (o->matvec_us * 1e3);
        o->ratio = o->matvec_gbps / o->read_gbps;
        if (batch) {
            int br = reps < 5 ? reps : 5;
            for (int r = 0; r < br; r++) {
                uint64_t t0 = util_now_ns();
                if (quant_matmat(t, rows, cols, W + (uint64_t)r % copies * stride, batch, X, Y,
                                 threads[k], err, errlen))
                    goto out;
                tm[r] = (double)(util_now_ns() - t0) / 1e3 / (double)batch;
            }
            o->batch_us = s_median(tm, br);
        }
    }
    rc = 0;
out:
    free(W);
    free(x);
    free(y);
    free(f);
    free(X);
    free(Y);
    free(tm);
    free(tr);
    return rc;
}
