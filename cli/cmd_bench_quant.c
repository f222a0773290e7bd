/* cmd_bench_quant.c — `swarm bench-quant`: matvec GB/s per type vs a read bound. cli/ */
#include <getopt.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "base/exitcode.h"
#include "base/log.h"
#include "base/util.h"
#include "cli/cmd.h"
#include "quant/bench.h"

/* Parse "1,2" into v (at most max entries, each 1..QUANT_MAX_THREADS). Count, or -1. */
static int s_parse_threads(const char *s, int *v, int max)
{
    int n = 0;
    while (*s) {
        char *end;
        long t = strtol(s, &end, 10);
        if (end == s || t < 1 || t > QUANT_MAX_THREADS || n == max || (*end && *end != ','))
            return -1;
        v[n++] = (int)t;
        s = *end ? end + 1 : end;
    }
    return n ? n : -1;
}

static void s_usage(FILE *f)
{
    fprintf(f,
            "usage: swarm bench-quant [--dim 2048] [--rows 5632] [--threads 1,2]\n"
            "                         [--types f16,bf16,q8_0,q4_0] [--reps 15] [--pool SIZE]\n"
            "                         [--isa scalar|avx2|avx512] [--batch B]\n"
            "  Times y = W x for a rows x dim matrix of each tensor type and prints the weight\n"
            "  bytes streamed per second beside a memory-read bound measured in the same run\n"
            "  (the same bytes read by the same threads with a plain load loop, rep by rep in\n"
            "  turn with the products), and their ratio. Weights are copies of the matrix\n"
            "  adding up to --pool bytes, read in turn, so each product streams its matrix from\n"
            "  DRAM rather than from cache. --batch B also times the batched product (prompt\n"
            "  processing) per position. 'ratio' compares medians; 'best' the fastest pass of\n"
            "  each (on a shared machine, the least disturbed). Defaults: TinyLlama's FFN\n"
            "  shape, the best ISA here, a pool of 256M or twice the last-level cache.\n");
}

/* The default pool: 256 MiB, or twice the last-level cache where that is larger, so the
 * copies cannot stay in cache between passes (this machine's VM reports a 260 MiB L3,
 * 2026-12-02: a 256 MiB pool could have been served from it). */
static uint64_t s_default_pool(void)
{
    long l3 = sysconf(_SC_LEVEL3_CACHE_SIZE);
    uint64_t pool = 256ull << 20;
    if (l3 > 0 && 2 * (uint64_t)l3 > pool)
        pool = 2 * (uint64_t)l3;
    return pool;
}

int cmd_bench_quant(int argc, char **argv)
{
    static const struct option opts[] = {
        { "dim", required_argument, 0, 'd' },   { "rows", required_argument, 0, 'r' },
        { "threads", required_argument, 0, 't' }, { "types", required_argument, 0, 'T' },
        { "reps", required_argument, 0, 'n' },  { "pool", required_argument, 0, 'p' },
        { "isa", required_argument, 0, 'i' },   { "batch", required_argument, 0, 'b' },
        { "help", no_argument, 0, 'h' },        { 0, 0, 0, 0 }
    };
    uint64_t dim = 2048, rows = 5632, pool = s_default_pool(), batch = 0;
    int threads[8] = { 1, 2 }, nthr = 2, reps = 15, c;
    char types[128] = "f16,bf16,q8_0,q4_0", err[512];
    quant_isa isa = quant_isa_best();
    log_set_role("bench");
    optind = 1;
    while ((c = getopt_long(argc, argv, "h", opts, NULL)) != -1) {
        switch (c) {
        case 'd': dim = strtoull(optarg, NULL, 10); break;
        case 'r': rows = strtoull(optarg, NULL, 10); break;
        case 'n': reps = atoi(optarg); break;
        case 'b': batch = strtoull(optarg, NULL, 10); break;
        case 'T': snprintf(types, sizeof types, "%s", optarg); break;
        case 't':
            if ((nthr = s_parse_threads(optarg, threads, 8)) < 0) {
                fprintf(stderr, "swarm bench-quant: bad --threads '%s' (1..%d, comma-separated)\n",
                        optarg, QUANT_MAX_THREADS);
                return EXIT_USAGE;
            }
            break;
        case 'p':
            if (util_parse_size(optarg, &pool)) {
                fprintf(stderr, "swarm bench-quant: bad --pool '%s'\n", optarg);
                return EXIT_USAGE;
            }
            break;
        case 'i':
            if (quant_isa_parse(optarg, &isa) || quant_isa_set(isa)) {
                fprintf(stderr, "swarm bench-quant: --isa '%s' is unknown or this CPU lacks it "
                        "(best here: %s)\n", optarg, quant_isa_name(quant_isa_best()));
                return EXIT_USAGE;
            }
            break;
        case 'h': s_usage(stdout); return EXIT_OK;
        default: s_usage(stderr); return EXIT_USAGE;
        }
    }
    if (!dim || dim > (1u << 20) || !rows || rows > (1u << 24) || reps < 1 || reps > 10000 ||
        batch > 4096) {
        fprintf(stderr, "swarm bench-quant: bad --dim, --rows, --reps or --batch\n");
        return EXIT_USAGE;
    }
    /* Every type and the shape first, so a bad flag is refused before anything runs. */
    char check[128];
    snprintf(check, sizeof check, "%s", types);
    for (char *save = NULL, *name = strtok_r(check, ",", &save); name;
         name = strtok_r(NULL, ",", &save)) {
        quant_type t;
        uint64_t bytes;
        if (quant_type_parse(name, &t, err, sizeof err) ||
            quant_tensor_bytes(t, rows, dim, &bytes, err, sizeof err)) {
            fprintf(stderr, "swarm bench-quant: %s\n", err);
            return EXIT_USAGE;
        }
    }
    printf("bench-quant: y = W x, W %llu rows x %llu, isa %s, median of %d passes over "
           ">= %llu MiB of weight copies\n", (unsigned long long)rows, (unsigned long long)dim,
           quant_isa_name(quant_isa_current()), reps, (unsigned long long)(pool >> 20));
    printf("%-5s %3s %9s %6s %11s %9s %10s %9s %7s %6s%s\n", "type", "thr", "MiB", "copies",
           "matvec_us", "GB/s", "read_us", "read GB/s", "ratio", "best",
           batch ? "  batch_us/pos" : "");
    int rc = EXIT_OK;
    for (char *save = NULL, *name = strtok_r(types, ",", &save); name;
         name = strtok_r(NULL, ",", &save)) {
        quant_type t;
        quant_bench_result res[8];
        quant_type_parse(name, &t, err, sizeof err); /* checked above */
        if (quant_bench_matvec(t, rows, dim, threads, nthr, reps, pool, batch, res, err,
                               sizeof err)) {
            log_error("%s: %s", name, err);
            rc = EXIT_FAIL;
            continue;
        }
        for (int k = 0; k < nthr; k++) {
            const quant_bench_result *o = &res[k];
            printf("%-5s %3d %9.2f %6u %11.1f %9.2f %10.1f %9.2f %7.3f %6.3f", quant_type_name(t),
                   o->threads, o->matrix_bytes / 1048576.0, o->copies, o->matvec_us,
                   o->matvec_gbps, o->read_us, o->read_gbps, o->ratio, o->ratio_best);
            if (batch)
                printf("  %12.1f", o->batch_us);
            printf("\n");
            fflush(stdout);
        }
    }
    quant_pool_shutdown();
    return rc;
}
