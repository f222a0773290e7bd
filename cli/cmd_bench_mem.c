/* cmd_bench_mem.c — `swarm bench-mem`: a layer's memory-bandwidth bound beside the kernel's
 * sgemv. cli/ */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "arch/kernel.h"
#include "arch/model.h"
#include "base/exitcode.h"
#include "cli/cmd.h"
#include "lab/bench.h"

int cmd_bench_mem(int argc, char **argv)
{
    uint32_t dim = 4096;
    int reps = 50;
    double rd, sg;
    char err[256];
    for (int i = 1; i < argc; i++) {
        if (!strcmp(argv[i], "--dim") && i + 1 < argc)
            dim = (uint32_t)strtoul(argv[++i], NULL, 10);
        else if (!strcmp(argv[i], "--reps") && i + 1 < argc)
            reps = atoi(argv[++i]);
        else {
            printf("usage: swarm bench-mem [--dim 4096] [--reps 50]\n"
                   "  One thread: the median time to stream a d x d f32 layer from memory (the\n"
                   "  bound a memory-bound GEMV cannot beat) beside the layer kernel's sgemv\n"
                   "  over the same bytes, and their ratio.\n");
            return strcmp(argv[i], "--help") ? EXIT_USAGE : EXIT_OK;
        }
    }
    if (!dim || dim > MODEL_MAX_DIM || reps < 1 || reps > 10000) {
        fprintf(stderr, "swarm bench-mem: bad --dim or --reps\n");
        return EXIT_USAGE;
    }
    if (bench_mem(dim, reps, &rd, &sg, err, sizeof err)) {
        fprintf(stderr, "swarm bench-mem: %s\n", err);
        return EXIT_FAIL;
    }
    double mb = (double)dim * dim * 4;
    printf("layer %u x %u f32 (%.1f MiB), one thread, median of %d (%s):\n", dim, dim,
           mb / 1048576.0, reps, kernel_blas_info());
    printf("  read bound  %8.3f ms  (%.1f GB/s)\n", rd, mb / (rd / 1e3) / 1e9);
    printf("  sgemv       %8.3f ms  (%.1f GB/s)\n", sg, mb / (sg / 1e3) / 1e9);
    printf("  ratio       %8.3f  (sgemv / read bound)\n", sg / rd);
    return EXIT_OK;
}
