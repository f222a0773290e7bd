/* gemm_time.c — batched product timing, with and without the batched kernels, alternating in
 * one process (the machine is shared: compare within a run). tests/tools/
 *   build/tests/tools/gemm_time [TYPES=q4_0,q8_0] [ROWS=5632] [COLS=2048] [B=64] [THREADS=1]
 *                               [REPS=7] [KIND=auto|avx512|avx-vnni|avx2]
 * Prints per type: CPU microseconds (all threads: the machine is shared, so CPU time, not wall
 * time, is what a busy neighbour disturbs least) per position of one rows x cols product
 * (median over reps), for the tiles (no batched kernel) and the batched kernel, and their
 * ratio. Weights stay in cache (a prompt's product is compute-bound); only speed is measured
 * here: tests/test_gemm.c holds the bits. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "quant/gemm.h"
#include "quant/quant.h"

static double s_now(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

static int s_cmp(const void *a, const void *b)
{
    const double x = *(const double *)a, y = *(const double *)b;
    return x < y ? -1 : x > y;
}

int main(int argc, char **argv)
{
    const char *types = argc > 1 ? argv[1] : "q4_0,q8_0";
    const uint64_t rows = argc > 2 ? strtoull(argv[2], NULL, 10) : 5632;
    const uint64_t cols = argc > 3 ? strtoull(argv[3], NULL, 10) : 2048;
    const uint64_t B = argc > 4 ? strtoull(argv[4], NULL, 10) : 64;
    const int threads = argc > 5 ? atoi(argv[5]) : 1;
    const int reps = argc > 6 ? atoi(argv[6]) : 7;
    /* a kernel family and the row kernels' ISA it goes with (the tiles are timed on that ISA) */
    const char *kname = argc > 7 ? argv[7] : "auto";
    int kind = QUANT_GEMM_AUTO;
    if (!strcmp(kname, "avx512"))
        kind = QUANT_GEMM_AVX512;
    else if (!strcmp(kname, "avx-vnni"))
        kind = QUANT_GEMM_AVXVNNI;
    else if (!strcmp(kname, "avx2"))
        kind = QUANT_GEMM_AVX2;
    if (kind != QUANT_GEMM_AUTO &&
        (quant_gemm_force(kind) ||
         quant_isa_set(kind == QUANT_GEMM_AVX512 ? QUANT_ISA_AVX512 : QUANT_ISA_AVX2))) {
        fprintf(stderr, "gemm_time: this CPU cannot run %s\n", kname);
        return 1;
    }
    char err[256], buf[256];
    snprintf(buf, sizeof buf, "%s", types);
    for (char *tok = strtok(buf, ","); tok; tok = strtok(NULL, ",")) {
        quant_type t;
        uint64_t rb;
        if (quant_type_parse(tok, &t, err, sizeof err) ||
            quant_row_bytes(t, cols, &rb, err, sizeof err)) {
            fprintf(stderr, "gemm_time: %s\n", err);
            return 1;
        }
        uint8_t *W = malloc(rows * rb);
        float *f = malloc(sizeof(float) * cols), *X = malloc(sizeof(float) * B * cols);
        float *Y = malloc(sizeof(float) * B * rows);
        for (uint64_t r = 0; r < rows; r++) {
            for (uint64_t i = 0; i < cols; i++)
                f[i] = (float)((r * 31 + i * 17) % 101) / 50.0f - 1.0f;
            quant_quantize_row(t, f, W + r * rb, cols, err, sizeof err);
        }
        for (uint64_t i = 0; i < B * cols; i++)
            X[i] = (float)((i * 13) % 97) / 48.0f - 1.0f;
        double tm[2][64];
        const int n = reps < 64 ? reps : 64;
        for (int k = 0; k < n; k++)
            for (int arm = 0; arm < 2; arm++) {
                quant_gemm_force(arm ? kind : QUANT_GEMM_NONE);
                const double t0 = s_now();
                if (quant_matmat(t, rows, cols, W, B, X, Y, threads, err, sizeof err)) {
                    fprintf(stderr, "gemm_time: %s\n", err);
                    return 1;
                }
                tm[arm][k] = (s_now() - t0) / (double)B * 1e6;
            }
        qsort(tm[0], (size_t)n, sizeof(double), s_cmp);
        qsort(tm[1], (size_t)n, sizeof(double), s_cmp);
        quant_gemm_force(kind);
        const quant_gemm *g = quant_gemm_get(t);
        printf("%-5s %llu x %llu, batch %llu, %d thread(s): tiles %.1f us/position, %s %.1f "
               "(x%.2f)\n", tok, (unsigned long long)rows, (unsigned long long)cols,
               (unsigned long long)B, threads, tm[0][n / 2], g ? g->name : "none", tm[1][n / 2],
               tm[0][n / 2] / tm[1][n / 2]);
        free(W);
        free(f);
        free(X);
        free(Y);
    }
    quant_pool_shutdown();
    return 0;
}
