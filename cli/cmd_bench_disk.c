/* cmd_bench_disk.c — `swarm bench-disk MODEL`: O_DIRECT read bandwidth in the SSD arm's
 * pattern at several queue depths, with the cache gate. cli/ */
#include <getopt.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "arch/model.h"
#include "base/exitcode.h"
#include "base/log.h"
#include "base/util.h"
#include "cli/cmd.h"
#include "dist/config.h"
#include "lab/bench.h"
#include "runtime/exec.h"

int cmd_bench_disk(int argc, char **argv)
{
    static const struct option opts[] = {
        { "chunk", required_argument, 0, 'c' }, { "passes", required_argument, 0, 'p' },
        { "depths", required_argument, 0, 'd' }, { "help", no_argument, 0, 'h' },
        { "config", required_argument, 0, 'C' }, { "first", required_argument, 0, 'f' },
        { "buffers", required_argument, 0, 'b' }, { 0, 0, 0, 0 }
    };
    static config_t cfg;
    uint64_t chunk = 0;
    uint32_t passes = 3, depths[16] = { 1, 2, 4, 8 }, nd = 4;
    long first = -1;
    const char *config = NULL, *buffers = NULL;
    model_t m = { 0 };
    char err[1024];
    int c, rc = EXIT_OK;
    log_set_role("bench");
    optind = 1;
    while ((c = getopt_long(argc, argv, "h", opts, NULL)) != -1) {
        switch (c) {
        case 'c':
            if (util_parse_size(optarg, &chunk)) {
                fprintf(stderr, "swarm bench-disk: bad --chunk '%s'\n", optarg);
                return EXIT_USAGE;
            }
            break;
        case 'p': passes = (uint32_t)strtoul(optarg, NULL, 10); break;
        case 'C': config = optarg; break;
        case 'b':
            if (strcmp(optarg, "huge") && strcmp(optarg, "4k")) {
                fprintf(stderr, "swarm bench-disk: bad --buffers '%s' (huge or 4k)\n", optarg);
                return EXIT_USAGE;
            }
            buffers = optarg;
            break;
        case 'f': first = strtol(optarg, NULL, 10); break;
        case 'd': {
            char *s = optarg, *end;
            nd = 0;
            while (*s && nd < 16) {
                depths[nd] = (uint32_t)strtoul(s, &end, 10);
                if (end == s || !depths[nd] || depths[nd] > 256) {
                    fprintf(stderr, "swarm bench-disk: bad --depths '%s'\n", optarg);
                    return EXIT_USAGE;
                }
                nd++;
                s = *end == ',' ? end + 1 : end;
            }
            break;
        }
        case 'h':
            printf("usage: swarm bench-disk MODEL.gguf [--config C] [--first N] [--chunk 4M]\n"
                   "                       [--depths 1,2,4,8] [--passes 3] [--buffers huge|4k]\n"
                   "  Streams exactly what the SSD arm streams — layers [N, L), where N is the\n"
                   "  number it keeps resident under the config's cap (built-in defaults: the\n"
                   "  lab's 600 MiB), over and over — with its own reader (O_DIRECT, io_uring,\n"
                   "  its chunk), without computing, at each queue depth, and checks the cache\n"
                   "  gate (storage bytes = requested bytes within 1%%). The read buffers are\n"
                   "  the arm's kind: huge pages, or 4 KiB pages with --buffers 4k (the config's\n"
                   "  [ssd] buffers otherwise). Beside each figure, the block device's own view\n"
                   "  (/sys/block/DEV/stat, device-wide): average request size and busy time.\n");
            return EXIT_OK;
        default: return EXIT_USAGE;
        }
    }
    if (optind >= argc || !passes) {
        fprintf(stderr, "swarm bench-disk: need MODEL.gguf (see --help)\n");
        return EXIT_USAGE;
    }
    config_defaults(&cfg);
    if (config && config_load(&cfg, config, err, sizeof err)) {
        fprintf(stderr, "swarm bench-disk: %s\n", err);
        return EXIT_USAGE;
    }
    if (!chunk)
        chunk = cfg.chunk_bytes;
    model_source src;
    config_model_source(&cfg, argv[optind], &src); /* like --model: never generated */
    snprintf(src.named_by, sizeof src.named_by, "bench-disk's MODEL");
    if (model_check_source(&src, err, sizeof err) < 0) {
        fprintf(stderr, "swarm bench-disk: %s\n", err);
        return EXIT_USAGE;
    }
    if (buffers)
        cfg.buffers_4k = !strcmp(buffers, "4k");
    if (model_open(&m, argv[optind], err, sizeof err)) {
        log_error("%s", err);
        return EXIT_FAIL;
    }
    /* The SSD arm's plan under the config's cap: what it streams and through how big a ring. */
    exec_opts po = { .budget_bytes = cfg.cap_bytes, .queue_depth = cfg.queue_depth,
                     .chunk_bytes = chunk, .overhead_bytes = cfg.overhead_bytes };
    exec_plan pl;
    int planned = exec_plan_make(&m, 0, m.n_layers, &po, &pl, err, sizeof err) == 0 &&
                  pl.n_streamed;
    if (first < 0)
        first = planned ? pl.n_resident : 0;
    printf("streaming layers [%ld, %u) of %s, %u passes (the SSD arm's pattern under a %llu MiB "
           "cap)\n", first, m.n_layers, m.path, passes, (unsigned long long)(cfg.cap_bytes >> 20));
    printf("%-6s %10s %12s %12s %9s %10s %11s %7s  %s\n", "depth", "chunk", "bytes",
           "read_bytes", "seconds", "GB/s", "avg_req", "busy%", "cache gate");
    for (uint32_t i = 0; i < nd; i++) {
        bench_disk_result b;
        char b1[32], b2[32], b3[32];
        /* At the config's depth, the arm's ring; at other depths, the minimum ring. */
        bench_disk_opts bo = { .first = (uint32_t)first, .chunk_bytes = chunk,
                               .queue_depth = depths[i], .passes = passes,
                               .buffers_4k = cfg.buffers_4k,
                               .ring_slots = planned && depths[i] == cfg.queue_depth ?
                                             pl.ring_slots : 0 };
        if (bench_disk_run(&m, &bo, &b, err, sizeof err)) {
            log_error("%s", err);
            rc = EXIT_FAIL;
            break;
        }
        if (i == 0)
            printf("# io buffers: %s; device: %s\n", b.io_buffers,
                   b.has_device ? b.device : b.device_error);
        if (planned && depths[i] == cfg.queue_depth)
            printf("# depth %u is the config's: through the SSD arm's ring of %u slots\n",
                   depths[i], b.ring_slots);
        if (b.has_device)
            snprintf(b2, sizeof b2, "%.0f", 100 * b.dev.util);
        printf("%-6u %10s %12llu %12llu %9.3f %10.3f %11s %7s  %s\n", b.queue_depth,
               util_fmt_size(b.chunk_bytes, b1, sizeof b1), (unsigned long long)b.bytes,
               (unsigned long long)b.read_bytes, b.seconds, b.gbps,
               b.has_device ? util_fmt_size(b.dev.avg_request_bytes, b3, sizeof b3) : "-",
               b.has_device ? b2 : "-",
               b.cache_pass ? "pass" : "VOID (page cache served reads)");
        /* Device-wide counters: say so when another process's reads were mixed in. */
        if (b.has_device && (double)b.dev.read_bytes > 1.01 * (double)b.bytes)
            printf("#   the device read %.1f%% more than this benchmark asked for: other "
                   "readers shared it\n", 100.0 * ((double)b.dev.read_bytes / (double)b.bytes - 1));
        fflush(stdout);
        if (!b.cache_pass)
            rc = EXIT_VOID;
    }
    model_close(&m);
    return rc;
}
