/* few_pass.c — wall time of a decode pass of B positions over TinyLlama-shaped F16 (or BF16,
 * F32) layers streamed from DRAM: per layer q, o (2048 x 2048), k, v (256 x 2048), gate, up
 * (5632 x 2048), down (2048 x 5632), each quant_matmat(B) as llm_batch runs them; the passes
 * of the listed B alternate round by round in one process, median per B. An experiment, not
 * part of swarm (docs/measurements/2026-12-02-f16few.md). Build against a built tree:
 *   cc -std=c11 -D_GNU_SOURCE -O2 -I. experiments/few_pass.c build/libswarm.a \
 *      $(LIBS of the Makefile) -o few_pass
 * then `few_pass [LAYERS=12] [THREADS=2] [ROUNDS=7] [BS=1,2,4,5,8] [TYPE=f16]`. 12 layers are
 * 1.06 GB of F16, 4x this machine's 260 MiB L3, so every pass reads its weights from DRAM. */
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

static const uint64_t s_shape[7][2] = { { 2048, 2048 }, { 256, 2048 }, { 256, 2048 },
                                        { 2048, 2048 }, { 5632, 2048 }, { 5632, 2048 },
                                        { 2048, 5632 } };

int main(int argc, char **argv)
{
    const int layers = argc > 1 ? atoi(argv[1]) : 12;
    const int threads = argc > 2 ? atoi(argv[2]) : 2;
    const int rounds = argc > 3 ? atoi(argv[3]) : 7;
    const char *bs = argc > 4 ? argv[4] : "1,2,4,5,8";
    const char *tname = argc > 5 ? argv[5] : "f16";
    char err[256], buf[128];
    quant_type t;
    if (quant_type_parse(tname, &t, err, sizeof err)) {
        fprintf(stderr, "%s\n", err);
        return 1;
    }
    int B[16], nb = 0;
    snprintf(buf, sizeof buf, "%s", bs);
    for (char *tok = strtok(buf, ","); tok && nb < 16; tok = strtok(NULL, ","))
        B[nb++] = atoi(tok);
    uint8_t *W[64][7];
    uint64_t total = 0;
    float *row = malloc(5632 * sizeof(float));
    unsigned s = 12345;
    for (int l = 0; l < layers && l < 64; l++)
        for (int m = 0; m < 7; m++) {
            uint64_t bytes, rb;
            quant_tensor_bytes(t, s_shape[m][0], s_shape[m][1], &bytes, err, sizeof err);
            quant_row_bytes(t, s_shape[m][1], &rb, err, sizeof err);
            if (posix_memalign((void **)&W[l][m], 4096, bytes))
                return 1;
            for (uint64_t r = 0; r < s_shape[m][0]; r++) {
                for (uint64_t i = 0; i < s_shape[m][1]; i++) {
                    s = s * 1103515245u + 12345u;
                    row[i] = (float)(s >> 8) / 16777216.0f - 0.5f;
                }
                quant_quantize_row(t, row, W[l][m] + r * rb, s_shape[m][1], err, sizeof err);
            }
            total += bytes;
        }
    float *X = malloc(16 * 5632 * sizeof(float)), *Y = malloc(16 * 5632 * sizeof(float));
    for (int i = 0; i < 16 * 5632; i++) {
        s = s * 1103515245u + 12345u;
        X[i] = (float)(s >> 8) / 16777216.0f - 0.5f;
    }
    double *tm = calloc((size_t)(nb * rounds), sizeof(double));
    for (int r = -1; r < rounds; r++)          /* round -1: warm-up */
        for (int k = 0; k < nb; k++) {
            const double t0 = s_now();
            for (int l = 0; l < layers; l++)
                for (int m = 0; m < 7; m++)
                    if (quant_matmat(t, s_shape[m][0], s_shape[m][1], W[l][m], (uint64_t)B[k],
                                     X, Y, threads, err, sizeof err)) {
                        fprintf(stderr, "%s\n", err);
                        return 1;
                    }
            if (r >= 0)
                tm[k * rounds + r] = s_now() - t0;
        }
    printf("%s, %d layers (%.2f GB), %d threads, %d rounds: ms a pass (median; min), "
           "/ B=%d's median, GB/s\n",
           tname, layers, (double)total / 1e9, threads, rounds, B[0]);
    double base = 0;
    for (int k = 0; k < nb; k++) {
        double *v = tm + k * rounds;
        qsort(v, (size_t)rounds, sizeof *v, s_cmp);
        const double med = v[rounds / 2];
        if (k == 0)
            base = med;
        printf("B=%2d  %8.2f ms (min %8.2f)  %.3fx  %5.2f GB/s\n", B[k], med * 1e3, v[0] * 1e3,
               med / base, (double)total / med / 1e9);
    }
    return 0;
}
