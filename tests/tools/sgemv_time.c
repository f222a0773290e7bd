/* sgemv_time.c — the dense lab's f32 layer product two ways, alternating in one process:
 * OpenBLAS sgemv (what arch/kernel.c called) and quant_matvec's prefetching F32 rows, per
 * shape, beside the prefetching read of the same bytes (the bound). tests/tools/
 *   build/tests/tools/sgemv_time [DIMS=256,1024,2048,4096] [THREADS=1] [REPS=21]
 * Weights: copies of the d x d layer adding up to >= 256 MiB, read in turn, so every product
 * streams from DRAM as a real layer does. Prints median ms per layer and GB/s. */
#include <cblas.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "quant/quant.h"

static double s_now(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

static int s_cmp(const void *a, const void *b)
{
    const double x = *(const double *)a, y = *(const double *)b;
    return x < y ? -1 : x > y;
}

int main(int argc, char **argv)
{
    char dims[256], err[256];
    snprintf(dims, sizeof dims, "%s", argc > 1 ? argv[1] : "256,1024,2048,4096");
    const int threads = argc > 2 ? atoi(argv[2]) : 1;
    int reps = argc > 3 ? atoi(argv[3]) : 21;
    if (reps > 256)
        reps = 256;
    openblas_set_num_threads(threads);
    for (char *tok = strtok(dims, ","); tok; tok = strtok(NULL, ",")) {
        const uint64_t d = strtoull(tok, NULL, 10), bytes = d * d * 4;
        const uint64_t copies = (256ull << 20) / bytes + 1;
        float *W = NULL, *u = malloc(d * 4), *y = malloc(d * 4);
        if (posix_memalign((void **)&W, 4096, copies * bytes))
            return 1;
        for (uint64_t i = 0; i < copies * d * d; i++)
            W[i] = (float)(i % 1000) * 1e-3f;
        for (uint64_t i = 0; i < d; i++)
            u[i] = 1e-3f * (float)i;
        double t[3][256];
        volatile uint64_t sink = 0;
        for (int r = 0; r < reps; r++) {
            const float *w = W + (uint64_t)r % copies * d * d;
            double t0 = s_now();
            sink ^= quant_read_stream(w, bytes);
            t[0][r] = s_now() - t0;
            w = W + (uint64_t)(r + 1) % copies * d * d;
            t0 = s_now();
            cblas_sgemv(CblasRowMajor, CblasNoTrans, (int)d, (int)d, 1.0f, w, (int)d, u, 1, 0.0f,
                        y, 1);
            t[1][r] = s_now() - t0;
            w = W + (uint64_t)(r + 2) % copies * d * d;
            t0 = s_now();
            if (quant_matvec(QUANT_F32, d, d, w, u, y, threads, err, sizeof err)) {
                fprintf(stderr, "sgemv_time: %s\n", err);
                return 1;
            }
            t[2][r] = s_now() - t0;
        }
        for (int k = 0; k < 3; k++)
            qsort(t[k], (size_t)reps, sizeof(double), s_cmp);
        const double m[3] = { t[0][reps / 2], t[1][reps / 2], t[2][reps / 2] };
        printf("d %5llu, %d thread(s): read %.3f ms (%.1f GB/s) | sgemv %.3f ms (%.2f of read) | "
               "quant f32 rows %.3f ms (%.2f of read)\n", (unsigned long long)d, threads,
               m[0] * 1e3, (double)bytes / m[0] / 1e9, m[1] * 1e3, m[0] / m[1], m[2] * 1e3,
               m[0] / m[2]);
        (void)sink;
        free(W);
        free(u);
        free(y);
    }
    quant_pool_shutdown();
    return 0;
}
