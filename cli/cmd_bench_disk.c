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

static void s_usage(void)
{
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
}

/* The command line, parsed. */
typedef struct {
    uint64_t chunk;               /* 0: the config's */
    uint32_t passes, depths[16], nd;
    long first;                   /* -1: what the SSD arm keeps resident */
    const char *config, *buffers;
} s_opts;

static int s_depths(s_opts *o, const char *arg)
{
    const char *p = arg;
    char *end;
    o->nd = 0;
    while (*p && o->nd < 16) {
        o->depths[o->nd] = (uint32_t)strtoul(p, &end, 10);
        if (end == p || !o->depths[o->nd] || o->depths[o->nd] > 256) {
            fprintf(stderr, "swarm bench-disk: bad --depths '%s'\n", arg);
            return -1;
        }
        o->nd++;
        p = *end == ',' ? end + 1 : end;
    }
    return 0;
}

/* EXIT_OK after --help, EXIT_USAGE (printed), or -1: parsed. */
static int s_parse(s_opts *o, int argc, char **argv)
{
    static const struct option opts[] = {
        { "chunk", required_argument, 0, 'c' }, { "passes", required_argument, 0, 'p' },
        { "depths", required_argument, 0, 'd' }, { "help", no_argument, 0, 'h' },
        { "config", required_argument, 0, 'C' }, { "first", required_argument, 0, 'f' },
        { "buffers", required_argument, 0, 'b' }, { 0, 0, 0, 0 }
    };
    int c;
    optind = 1;
    while ((c = getopt_long(argc, argv, "h", opts, NULL)) != -1) {
        switch (c) {
        case 'c':
            if (util_parse_size(optarg, &o->chunk)) {
                fprintf(stderr, "swarm bench-disk: bad --chunk '%s'\n", optarg);
                return EXIT_USAGE;
            }
            break;
        case 'p': o->passes = (uint32_t)strtoul(optarg, NULL, 10); break;
        case 'C': o->config = optarg; break;
        case 'b':
            if (strcmp(optarg, "huge") && strcmp(optarg, "4k")) {
                fprintf(stderr, "swarm bench-disk: bad --buffers '%s' (huge or 4k)\n", optarg);
                return EXIT_USAGE;
            }
            o->buffers = optarg;
            break;
        case 'f': o->first = strtol(optarg, NULL, 10); break;
        case 'd':
            if (s_depths(o, optarg))
                return EXIT_USAGE;
            break;
        case 'h': s_usage(); return EXIT_OK;
        default: return EXIT_USAGE;
        }
    }
    if (optind >= argc || !o->passes) {
        fprintf(stderr, "swarm bench-disk: need MODEL.gguf (see --help)\n");
        return EXIT_USAGE;
    }
    return -1;
}

/* One depth's row; the cache gate's verdict. 0 pass, 1 void, -1 failed (logged). */
static int s_row(model_t *m, const config_t *cfg, const s_opts *o, const exec_plan *pl,
                 int planned, uint32_t i)
{
    bench_disk_result b;
    char b1[32], b2[32], b3[32], err[1024];
    uint32_t depth = o->depths[i];
    /* At the config's depth, the arm's ring; at other depths, the minimum ring. */
    bench_disk_opts bo = { .first = (uint32_t)o->first, .chunk_bytes = o->chunk,
                           .queue_depth = depth, .passes = o->passes,
                           .buffers_4k = cfg->buffers_4k,
                           .ring_slots = planned && depth == cfg->queue_depth ? pl->ring_slots
                                                                              : 0 };
    if (bench_disk_run(m, &bo, &b, err, sizeof err)) {
        log_error("%s", err);
        return -1;
    }
    if (i == 0)
        printf("# io buffers: %s; device: %s\n", b.io_buffers,
               b.has_device ? b.device : b.device_error);
    if (planned && depth == cfg->queue_depth)
        printf("# depth %u is the config's: through the SSD arm's ring of %u slots\n", depth,
               b.ring_slots);
    if (b.has_device)
        snprintf(b2, sizeof b2, "%.0f", 100 * b.dev.util);
    printf("%-6u %10s %12llu %12llu %9.3f %10.3f %11s %7s  %s\n", b.queue_depth,
           util_fmt_size(b.chunk_bytes, b1, sizeof b1), (unsigned long long)b.bytes,
           (unsigned long long)b.read_bytes, b.seconds, b.gbps,
           b.has_device ? util_fmt_size(b.dev.avg_request_bytes, b3, sizeof b3) : "-",
           b.has_device ? b2 : "-", b.cache_pass ? "pass" : "VOID (page cache served reads)");
    /* Device-wide counters: say so when another process's reads were mixed in. */
    if (b.has_device && (double)b.dev.read_bytes > 1.01 * (double)b.bytes)
        printf("#   the device read %.1f%% more than this benchmark asked for: other "
               "readers shared it\n", 100.0 * ((double)b.dev.read_bytes / (double)b.bytes - 1));
    fflush(stdout);
    return !b.cache_pass;
}

int cmd_bench_disk(int argc, char **argv)
{
    static config_t cfg;
    s_opts o = { .passes = 3, .depths = { 1, 2, 4, 8 }, .nd = 4, .first = -1 };
    model_t m = { 0 };
    char err[1024];
    log_set_role("bench");
    int rc = s_parse(&o, argc, argv);
    if (rc >= 0)
        return rc;
    config_defaults(&cfg);
    if (o.config && config_load(&cfg, o.config, err, sizeof err)) {
        fprintf(stderr, "swarm bench-disk: %s\n", err);
        return EXIT_USAGE;
    }
    if (!o.chunk)
        o.chunk = cfg.chunk_bytes;
    model_source src;
    config_model_source(&cfg, argv[optind], &src); /* like --model: never generated */
    snprintf(src.named_by, sizeof src.named_by, "bench-disk's MODEL");
    if (model_check_source(&src, err, sizeof err) < 0) {
        fprintf(stderr, "swarm bench-disk: %s\n", err);
        return EXIT_USAGE;
    }
    if (o.buffers)
        cfg.buffers_4k = !strcmp(o.buffers, "4k");
    if (model_open(&m, argv[optind], err, sizeof err)) {
        log_error("%s", err);
        return EXIT_FAIL;
    }
    /* The SSD arm's plan under the config's cap: what it streams and through how big a ring. */
    exec_opts po = { .budget_bytes = cfg.cap_bytes, .queue_depth = cfg.queue_depth,
                     .chunk_bytes = o.chunk, .overhead_bytes = cfg.overhead_bytes };
    exec_plan pl;
    int planned = exec_plan_make(&m, 0, m.n_layers, &po, &pl, err, sizeof err) == 0 &&
                  pl.n_streamed;
    if (o.first < 0)
        o.first = planned ? pl.n_resident : 0;
    printf("streaming layers [%ld, %u) of %s, %u passes (the SSD arm's pattern under a %llu MiB "
           "cap)\n", o.first, m.n_layers, m.path, o.passes,
           (unsigned long long)(cfg.cap_bytes >> 20));
    printf("%-6s %10s %12s %12s %9s %10s %11s %7s  %s\n", "depth", "chunk", "bytes",
           "read_bytes", "seconds", "GB/s", "avg_req", "busy%", "cache gate");
    rc = EXIT_OK;
    for (uint32_t i = 0; i < o.nd; i++) {
        int r = s_row(&m, &cfg, &o, &pl, planned, i);
        if (r < 0) {
            rc = EXIT_FAIL;
            break;
        }
        if (r)
            rc = EXIT_VOID;
    }
    model_close(&m);
    return rc;
}
