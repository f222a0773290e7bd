/* kernel.c — the layer function on OpenBLAS; the only BLAS caller in swarm. arch/ */
#include "arch/kernel.h"

#include <cblas.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>

const char *kernel_blas_info(void)
{
    static char buf[256];
    snprintf(buf, sizeof buf, "%s; core %s", openblas_get_config(), openblas_get_corename());
    return buf;
}

/* openblas_set_num_threads is OpenBLAS-specific (declared in its cblas.h). */
void kernel_set_threads(int n)
{
    if (n < 1)
        n = 1;
    openblas_set_num_threads(n);
}

void kernel_prepare(const float *g, const float *x, float *u, uint32_t d)
{
    /* Sum of squares in f32, left to right: every arm runs this same loop, so the bits agree. */
    float ss = 0.0f;
    for (uint32_t i = 0; i < d; i++)
        ss += x[i] * x[i];
    float inv = 1.0f / sqrtf(ss / (float)d + KERNEL_EPS);
    for (uint32_t i = 0; i < d; i++)
        u[i] = x[i] * inv * g[i];
}

int kernel_rows(const float *W, const float *u, float *y, uint32_t r0, uint32_t n, uint32_t d)
{
    if (r0 % KERNEL_ROW_ALIGN)
        return -1;
    cblas_sgemv(CblasRowMajor, CblasNoTrans, (int)n, (int)d, 1.0f, W, (int)d, u, 1, 0.0f, y + r0,
                1);
    return 0;
}

void kernel_finish(float *x, const float *y, uint32_t d)
{
    for (uint32_t i = 0; i < d; i++)
        x[i] += y[i] / (1.0f + expf(-y[i]));
}

void kernel_layer(const float *W, const float *g, float *x, float *u, float *y, uint32_t d)
{
    kernel_prepare(g, x, u, d);
    kernel_rows(W, u, y, 0, d, d);
    kernel_finish(x, y, d);
}

void kernel_layer_naive(const float *W, const float *g, float *x, uint32_t d)
{
    double ss = 0;
    float *u = malloc(sizeof(float) * d);
    if (!u)
        return;
    for (uint32_t i = 0; i < d; i++)
        ss += (double)x[i] * x[i];
    double inv = 1.0 / sqrt(ss / d + KERNEL_EPS);
    for (uint32_t i = 0; i < d; i++)
        u[i] = (float)(x[i] * inv * g[i]);
    float *y = malloc(sizeof(float) * d);
    if (!y) {
        free(u);
        return;
    }
    for (uint32_t r = 0; r < d; r++) {
        double acc = 0;
        for (uint32_t c = 0; c < d; c++)
            acc += (double)W[(uint64_t)r * d + c] * u[c];
        y[r] = (float)acc;
    }
    for (uint32_t i = 0; i < d; i++)
        x[i] += (float)(y[i] / (1.0 + exp(-(double)y[i])));
    free(u);
    free(y);
}
