/* cmd_bench_llm.c — swarm bench-llm: a token family's file's forward-pass speed in one process
 * (prompt and generation tokens/s) beside the same run's memory-bandwidth bound, or, with
 * --arm ssd, beside the disk bound of the bytes the SSD arm streams per token. cli/ */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "runtime/llm.h"
#include "base/exitcode.h"
#include "base/util.h"
#include "cli/cmd.h"
#include "runtime/gate.h"
#include "quant/quant.h"

typedef struct {
    const uint8_t *p;
    uint64_t n;
    uint64_t sums[QUANT_MAX_THREADS];
} s_read_arg;

/* Thread i reads its contiguous share of the bytes, 64 at a time into 8 independent sums (one
 * sum would be an add-latency chain, not a memory bound). */
static void s_read_task(void *arg, int i, int n)
{
    s_read_arg *a = arg;
    uint64_t lines = a->n / 64, lo = lines * (uint64_t)i / (uint64_t)n,
             hi = lines * (uint64_t)(i + 1) / (uint64_t)n;
    a->sums[i] = quant_read_stream((const uint8_t *)a->p + lo * 64, (hi - lo) * 64);
}

static int s_cmp(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

/* The disk bound of the SSD arm: the same reads (its streamed layers, its chunks, its ring and
 * depth) with nothing computed or hashed, `passes` times; bytes/s of the requests. */
static int s_disk_rate(const llm_model *m, const char *path, const llm_opts *lo, uint32_t passes,
                       double *bps, char *err, size_t errlen)
{
    const exec_plan *p = llm_model_plan(m);
    const arch_model *am = llm_model_arch(m);
    exec_opts o = { .queue_depth = lo->queue_depth, .chunk_bytes = lo->chunk_bytes,
                    .stream_all = 1, .io_only = 1, .buffered = lo->buffered,
                    .ring_slots = p->ring_slots, .total_steps = passes, .max_pos = 1 };
    exec_stats st = { 0 };
    exec_t *e = exec_new_arch(am, path, llm_model_layer_sums(m), p->n_resident,
                              am->hp.n_layers, &o, err, errlen);
    if (!e)
        return -1;
    float dummy[1];
    uint64_t t = util_now_ns();
    for (uint32_t i = 0; i < passes; i++)
        if (exec_step(e, dummy, &st, err, errlen)) {
            exec_free(&e);
            return -1;
        }
    *bps = (double)st.streamed_bytes / ((util_now_ns() - t) / 1e9);
    exec_free(&e);
    return 0;
}

/* One run of the command: the model, its buffers, the options. */
typedef struct {
    const char *path;
    int threads[8], nthr;
    uint32_t n_prompt, n_gen, n_batch;
    llm_opts lo;
    llm_model *m;
    const arch_model *am;
    uint64_t pass, maplen;        /* weight bytes one token reads; the mapping's length */
    const uint8_t *map;
    int32_t *toks;                /* the prompt (random ids) */
    float *lg;                    /* (n_vocab,) */
    double *gt;                   /* (n_gen,) seconds per generated token */
    char err[512];
} s_bench;

static void s_usage(FILE *f)
{
    fprintf(f, "usage: swarm bench-llm MODEL.gguf [--threads 1,2] [--prompt 512] [--gen 32]\n"
               "                       [--batch 64] [--arm reference|ssd] [--cap 600M]\n"
               "                       [--chunk 4M] [--queue-depth 4] [--isa NAME]\n"
               "  The model resident in this process: a prompt of N tokens in batches, then\n"
               "  greedy generation one token at a time. Prints prompt tokens/s, generation\n"
               "  tokens/s (median per-token time) and the memory-bandwidth bound: weight\n"
               "  bytes one token reads / the rate the same threads read the mapped weights\n"
               "  (median of 5 passes, measured in the same run).\n"
               "  --arm ssd: the layers that do not fit --cap are streamed from the file\n"
               "  every pass (O_DIRECT); the bound is then the disk's: bytes streamed per\n"
               "  token / the rate the same reads run at with nothing computed (measured\n"
               "  right after, same ring and depth). Cache and content gates are judged.\n"
               "  --isa scalar|avx2|avx512: the kernels of that instruction set (default:\n"
               "  the best this CPU runs), to measure a fallback on a CPU that has more.\n");
}

/* k with its value v? 1, 0 (not one), -1 a bad value (printed). */
static int s_flag(s_bench *b, const char *k, char *v)
{
    if (!strcmp(k, "--threads")) {
        b->nthr = 0;
        for (char *t = strtok(v, ","); t && b->nthr < 8; t = strtok(NULL, ","))
            b->threads[b->nthr++] = atoi(t);
    } else if (!strcmp(k, "--prompt") || !strcmp(k, "--gen") || !strcmp(k, "--batch") ||
               !strcmp(k, "--queue-depth")) {
        uint32_t x = (uint32_t)strtoul(v, NULL, 10);
        *(!strcmp(k, "--prompt") ? &b->n_prompt : !strcmp(k, "--gen") ? &b->n_gen
          : !strcmp(k, "--batch") ? &b->n_batch : &b->lo.queue_depth) = x;
    } else if (!strcmp(k, "--isa")) {
        quant_isa isa;
        if (quant_isa_parse(v, &isa) || quant_isa_set(isa)) {
            fprintf(stderr, "swarm bench-llm: --isa '%s' is unknown or this CPU lacks it (best "
                    "here: %s)\n", v, quant_isa_name(quant_isa_best()));
            return -1;
        }
    } else if (!strcmp(k, "--arm")) {
        if (strcmp(v, "reference") && strcmp(v, "ssd")) {
            fprintf(stderr, "swarm bench-llm: unknown arm '%s' (arms: reference, ssd)\n", v);
            return -1;
        }
        b->lo.arm = strcmp(v, "ssd") ? LLM_ARM_REFERENCE : LLM_ARM_SSD;
    } else if (!strcmp(k, "--cap") || !strcmp(k, "--chunk")) {
        uint64_t x;
        if (util_parse_size(v, &x) || !x) {
            fprintf(stderr, "swarm bench-llm: %s '%s': not a size (600M, 4M, ...)\n", k, v);
            return -1;
        }
        *(strcmp(k, "--cap") ? &b->lo.chunk_bytes : &b->lo.cap_bytes) = x;
    } else {
        return 0;
    }
    return 1;
}

/* EXIT_OK after --help, EXIT_USAGE (printed), or -1: parsed. */
static int s_parse(s_bench *b, int argc, char **argv)
{
    for (int i = 1; i < argc; i++) {
        int r = i + 1 < argc ? s_flag(b, argv[i], argv[i + 1]) : 0;
        if (r < 0)
            return EXIT_USAGE;
        if (r) {
            i++;
        } else if (argv[i][0] != '-' && !b->path) {
            b->path = argv[i];
        } else {
            s_usage(stdout);
            return strcmp(argv[i], "--help") && strcmp(argv[i], "-h") ? EXIT_USAGE : EXIT_OK;
        }
    }
    if (!b->path || !b->n_prompt || !b->n_gen || !b->n_batch || !b->nthr) {
        fprintf(stderr, "swarm bench-llm: need MODEL and positive --prompt, --gen, --batch\n");
        return EXIT_USAGE;
    }
    return -1;
}

/* The model and its description; the buffers. 0 / -1 with b->err ("" when printed). */
static int s_open(s_bench *b)
{
    uint64_t t0 = util_now_ns();
    b->lo.n_ctx = b->n_prompt + b->n_gen;
    b->lo.n_batch = b->n_batch;
    if (!(b->m = llm_model_open_opts(b->path, &b->lo, b->err, sizeof b->err)))
        return -1;
    const arch_model *am = b->am = llm_model_arch(b->m);
    b->pass = llm_model_pass_bytes(b->m);
    b->map = llm_model_map(b->m, &b->maplen);
    printf("%s: %s, %u layers x %u, %u heads (%u kv), ff %u, vocab %u, %s, %s head; "
           "loaded in %.1f s\n", b->path, am->hp.name, am->hp.n_layers, am->hp.dim,
           am->hp.n_head, am->hp.n_head_kv, am->hp.n_ff, am->hp.n_vocab,
           quant_type_name(am->layers[0].t[am->layers[0].n_vectors].type),
           am->hp.tied_output ? "tied" : "own", (util_now_ns() - t0) / 1e9);
    printf("weights read per token: %.1f MiB; dot products: %s\n", b->pass / 1048576.0,
           quant_isa_name(quant_isa_current()));
    if (b->lo.arm == LLM_ARM_SSD) {
        const exec_plan *p = llm_model_plan(b->m);
        char b1[32], b2[32], b3[32];
        printf("ssd arm: cap %s, %u layers resident, %u streamed (%.1f MiB per pass), ring %u "
               "x %s, working set %s, checksums: %s\n",
               util_fmt_size(b->lo.cap_bytes, b1, sizeof b1), p->n_resident, p->n_streamed,
               p->streamed_per_step / 1048576.0, p->ring_slots,
               util_fmt_size(p->slot_bytes, b2, sizeof b2),
               util_fmt_size(p->working_set, b3, sizeof b3), llm_model_sums_source(b->m));
    }
    b->toks = malloc((b->n_prompt + b->n_gen) * sizeof(int32_t));
    b->lg = malloc((size_t)am->hp.n_vocab * sizeof(float));
    b->gt = malloc(b->n_gen * sizeof(double));
    if (!b->toks || !b->lg || !b->gt) {
        b->err[0] = 0;
        return -1;
    }
    uint64_t st = 12345;
    for (uint32_t i = 0; i < b->n_prompt; i++)
        b->toks[i] = (int32_t)(util_splitmix64(&st) % am->hp.n_vocab);
    return 0;
}

/* The read bound: T threads over the whole mapped file, median of 5; bytes/s (0 unmapped). */
static double s_read_bound(const s_bench *b, int T)
{
    double rd[5];
    char err[256];
    s_read_arg ra = { .p = b->map, .n = b->maplen };
    if (!b->map)
        return 0;
    for (int r = 0; r < 5; r++) {
        uint64_t a = util_now_ns();
        quant_pool_run(T, s_read_task, &ra, err, sizeof err);
        rd[r] = (util_now_ns() - a) / 1e9;
    }
    qsort(rd, 5, sizeof rd[0], s_cmp);
    return b->maplen / rd[2];
}

/* The prompt, then n_gen greedy tokens (b->gt their times) on T threads; *pt the prompt's
 * seconds, s0 / s1 the counters before and after the prompt. 0 / -1 with b->err. */
static int s_pass(s_bench *b, int T, double *pt, exec_stats *s0, exec_stats *s1,
                  uint64_t *io0)
{
    llm_session *s = llm_session_new(b->m, b->n_prompt + b->n_gen, b->n_batch, b->err,
                                     sizeof b->err);
    int rc = -1;
    if (!s)
        return -1;
    llm_session_set_threads(s, T);
    llm_model_drain(b->m);
    llm_model_stats(b->m, s0);
    *io0 = util_io_read_bytes();
    uint64_t a = util_now_ns();
    if (llm_eval(s, b->toks, b->n_prompt, b->lg, 0, b->err, sizeof b->err))
        goto out;
    *pt = (util_now_ns() - a) / 1e9;
    llm_model_stats(b->m, s1);
    for (uint32_t g = 0; g < b->n_gen; g++) {
        int32_t best = 0;
        for (uint32_t i = 1; i < b->am->hp.n_vocab; i++)
            best = b->lg[i] > b->lg[best] ? (int32_t)i : best;
        a = util_now_ns();
        if (llm_eval(s, &best, 1, b->lg, 0, b->err, sizeof b->err))
            goto out;
        b->gt[g] = (util_now_ns() - a) / 1e9;
    }
    rc = 0;
out:
    llm_session_free(&s);
    return rc;
}

/* The SSD arm's row: its gates over the pass, beside the disk bound of the same reads.
 * EXIT_OK, EXIT_VOID, or -1 with b->err. */
static int s_ssd_row(s_bench *b, int T, double pt, const exec_stats *s0, const exec_stats *s1,
                     uint64_t io0)
{
    exec_stats s2 = { 0 };
    llm_model_drain(b->m);
    llm_model_stats(b->m, &s2);
    uint64_t io = util_io_read_bytes() - io0, sb = s2.streamed_bytes - s0->streamed_bytes;
    run_result rr = { 0 };
    exec_stats d = { .content_fail = s2.content_fail - s0->content_fail,
                     .layers_streamed = s2.layers_streamed - s0->layers_streamed,
                     .layers_due = s2.layers_due - s0->layers_due };
    gate_cache_judge(&rr, io, sb, 0);
    gate_content_judge(&rr, &d);
    uint32_t n_gen = b->n_gen;
    double per_tok = (double)(s2.streamed_bytes - s1->streamed_bytes) / n_gen, rate = 0;
    qsort(b->gt, n_gen, sizeof b->gt[0], s_cmp);
    if (!llm_model_plan(b->m)->n_streamed) {
        printf("threads %d: prompt %.2f tok/s | generation %.2f tok/s | nothing "
               "streamed under this cap: no disk bound\n", T, b->n_prompt / pt,
               1.0 / b->gt[n_gen / 2]);
        return EXIT_OK;
    }
    double rss = util_vmhwm_bytes(0) / 1048576.0; /* before the bound's own ring */
    if (s_disk_rate(b->m, b->path, &b->lo, 8, &rate, b->err, sizeof b->err))
        return -1;
    double disk_tok = per_tok / rate, gen_tok = b->gt[n_gen / 2];
    printf("threads %d: prompt %u tokens (batches of %u) %.2f tok/s | generation %.2f "
           "tok/s (median of %u; p90 %.1f ms) | streamed %.1f MiB/token, disk %.2f GB/s "
           "-> bound %.1f ms/token (%.2f tok/s) | ratio %.3f | per token: read wait "
           "%.1f ms, layers %.1f ms, hash wait %.1f ms | gates: "
           "cache %s (storage %.1f MiB for %.1f MiB streamed), content %s%s%s | "
           "peak rss %.0f MiB (the cap is planned, not enforced here)\n",
           T, b->n_prompt, b->n_batch, b->n_prompt / pt, 1.0 / gen_tok, n_gen,
           b->gt[(n_gen * 9) / 10] * 1e3, per_tok / 1048576.0, rate / 1e9, disk_tok * 1e3,
           1.0 / disk_tok, gen_tok / disk_tok, (s2.wait_ns - s1->wait_ns) / 1e6 / n_gen,
           (s2.compute_ns - s1->compute_ns) / 1e6 / n_gen,
           (s2.verify_wait_ns - s1->verify_wait_ns) / 1e6 / n_gen,
           result_gate_name(rr.gate_cache), io / 1048576.0, sb / 1048576.0,
           result_gate_name(rr.gate_content), rr.void_reason[0] ? ": " : "", rr.void_reason,
           rss);
    return rr.gate_cache == GATE_VOID || rr.gate_content == GATE_VOID ? EXIT_VOID : EXIT_OK;
}

/* One row: T threads. EXIT_OK, EXIT_VOID, or -1 with b->err. */
static int s_row(s_bench *b, int T)
{
    /* restart the peak-RSS mark (Linux >= 4.0), so each row's peak is its own run's and not
     * the previous row's disk-bound ring */
    FILE *cr = b->lo.arm == LLM_ARM_SSD ? fopen("/proc/self/clear_refs", "w") : NULL;
    if (cr) {
        fputs("5", cr);
        fclose(cr);
    }
    /* the read bound first, same threads, over the whole mapped file */
    double bw = s_read_bound(b, T), pt = 0;
    exec_stats s0 = { 0 }, s1 = { 0 };
    uint64_t io0 = 0;
    if (s_pass(b, T, &pt, &s0, &s1, &io0))
        return -1;
    if (b->lo.arm == LLM_ARM_SSD)
        return s_ssd_row(b, T, pt, &s0, &s1, io0);
    uint32_t n_gen = b->n_gen;
    qsort(b->gt, n_gen, sizeof b->gt[0], s_cmp);
    double gen_s = b->gt[n_gen / 2], bound = bw / (double)b->pass;
    printf("threads %d: prompt %u tokens (batches of %u) %.2f tok/s | generation %.2f tok/s "
           "(median of %u; p90 %.1f ms) | read bound %.2f GB/s -> %.2f tok/s | ratio %.3f\n",
           T, b->n_prompt, b->n_batch, b->n_prompt / pt, 1.0 / gen_s, n_gen,
           b->gt[(n_gen * 9) / 10] * 1e3, bw / 1e9, bound, (1.0 / gen_s) / bound);
    return EXIT_OK;
}

int cmd_bench_llm(int argc, char **argv)
{
    s_bench b = { .threads = { 1, 2 }, .nthr = 2, .n_prompt = 512, .n_gen = 32, .n_batch = 64,
                  .lo = { .arm = LLM_ARM_REFERENCE, .cap_bytes = 600ull << 20,
                          .queue_depth = 4, .chunk_bytes = 4u << 20 } };
    int rc = s_parse(&b, argc, argv);
    if (rc >= 0)
        return rc;
    rc = EXIT_FAIL;
    if (s_open(&b)) {
        if (b.err[0])
            fprintf(stderr, "swarm bench-llm: %s\n", b.err);
        goto out;
    }
    rc = EXIT_OK;
    for (int ti = 0; ti < b.nthr; ti++) {
        int r = s_row(&b, b.threads[ti]);
        if (r < 0) {
            fprintf(stderr, "swarm bench-llm: %s\n", b.err);
            rc = EXIT_FAIL;
            break;
        }
        if (r == EXIT_VOID)
            rc = EXIT_VOID;
    }
out:
    free(b.toks);
    free(b.lg);
    free(b.gt);
    llm_model_free(&b.m);
    return rc;
}
