/* row_cpu.c — in-cache speed of the Q4_0 / Q8_0 / MXFP4 row kernels by the thread's CPU time:
 * 256 rows of width 2048 (no leftover blocks) and 2880 (gpt-oss's: 10 of 90 blocks left over
 * for Q4_0 / Q8_0, 2 for MXFP4), best of 200 passes, GB/s of weight bytes. An experiment, not
 * part of swarm (docs/measurements/2026-12-02-row-tails.md). Build against a built tree:
 *   cc -O2 -I. experiments/row_cpu.c build/libswarm.a $(LIBS of the Makefile) -o row_cpu
 * then `row_cpu [avx512|avx2]`. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include "quant/quant.h"

static double cpu_s(void)
{
    struct timespec t;
    clock_gettime(CLOCK_THREAD_CPUTIME_ID, &t);
    return (double)t.tv_sec + (double)t.tv_nsec * 1e-9;
}

int main(int argc, char **argv)
{
    const char *names[] = { "q4_0", "q8_0", "mxfp4" };
    const quant_type ts[] = { QUANT_Q4_0, QUANT_Q8_0, QUANT_MXFP4 };
    const quant_isa isa = argc > 1 && !strcmp(argv[1], "avx2") ? QUANT_ISA_AVX2 : QUANT_ISA_AVX512;
    const uint64_t dims[] = { 2048, 2880 };
    char err[256];
    srand(1);
    for (int d = 0; d < 2; d++)
        for (int k = 0; k < 3; k++) {
            const uint64_t n = dims[d], R = 256;
            uint64_t rb = 0, ab = 0;
            quant_row_bytes(ts[k], n, &rb, err, sizeof err);
            quant_act_bytes(ts[k], n, &ab, err, sizeof err);
            float *x = malloc(n * 4);
            uint8_t *w = malloc(rb * R), *act = aligned_alloc(64, (ab + 63) / 64 * 64);
            for (uint64_t r = 0; r < R; r++) {
                for (uint64_t i = 0; i < n; i++)
                    x[i] = (float)rand() / RAND_MAX - 0.5f;
                quant_quantize_row(ts[k], x, w + r * rb, n, err, sizeof err);
            }
            quant_act_prepare(ts[k], x, n, act, err, sizeof err);
            quant_dot_fn f = quant_dot_get(ts[k], isa);
            double best = 1e9;
            volatile float sink = 0;
            for (int p = 0; p < 200; p++) {
                const double t0 = cpu_s();
                float s = 0;
                for (uint64_t r = 0; r < R; r++)
                    s += f(n, w + r * rb, act);
                const double t = cpu_s() - t0;
                sink += s;
                if (t < best)
                    best = t;
            }
            printf("%-6s %-6s n %4llu  %7.2f GB/s  %6.1f ns/row\n", names[k],
                   isa == QUANT_ISA_AVX2 ? "avx2" : "avx512", (unsigned long long)n,
                   rb * R / best / 1e9, best / R * 1e9);
            free(x), free(w), free(act);
        }
    return 0;
}
