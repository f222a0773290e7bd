/* bench.h — matrix-vector speed per tensor type beside a same-run memory-read bound. quant/
 *
 * A matrix-vector product streams its weights once and does a few operations per byte, so on
 * these machines its limit is memory bandwidth. The bound is measured, not quoted: the same
 * bytes, read by the same number of threads with a plain load loop (the project's bench-mem
 * read, split like the product's rows), interleaved rep by rep with the products so both
 * see the same machine. Weights are laid out as several copies of the matrix adding up to at
 * least `pool_bytes`, each product taking the next copy, so every product reads its matrix
 * from DRAM (a 2048 x 5632 f16 matrix is 22 MiB, less than the 32 MiB L3 of the development
 * machines: reread, it would be served by the cache) — as the layers of a real model are.
 */
#ifndef SWARM_QUANT_BENCH_H
#define SWARM_QUANT_BENCH_H

#include <stddef.h>
#include <stdint.h>

#include "quant/quant.h"

typedef struct {
    quant_type type;
    int threads;
    uint64_t rows, cols;
    uint64_t matrix_bytes;     /* weight bytes of one matrix */
    uint32_t copies;           /* matrices cycled through */
    int reps;
    double matvec_us;          /* median time of one product */
    double read_us;            /* median time to read one matrix's bytes, same threads */
    double matvec_gbps;        /* matrix_bytes / matvec time, 1e9 bytes/s */
    double read_gbps;
    double ratio;              /* matvec_gbps / read_gbps */
    double ratio_best;         /* the same from each one's fastest pass: on a shared machine
                                * the least disturbed sample of both */
    double batch_us;           /* quant_matmat over `batch` positions, per position (0: none) */
} quant_bench_result;

/* Measure type t at rows x cols for each of the nthr thread counts in threads[] (results in
 * out[0..nthr-1]); reps passes over the copies each; batch > 0 also times quant_matmat.
 * 0 / -1 with err. */
int quant_bench_matvec(quant_type t, uint64_t rows, uint64_t cols, const int *threads, int nthr,
                       int reps, uint64_t pool_bytes, uint64_t batch, quant_bench_result *out,
                       char *err, size_t errlen);

#endif
