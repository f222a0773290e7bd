/* cmd_bench_llm.c — swarm bench-llm: a llama/qwen2 file's forward-pass speed in one process
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

int cmd_bench_llm(int argc, char **argv)
{
    const char *path = NULL;
    int threads[8] = { 1, 2 }, nthr = 2;
    uint32_t n_prompt = 512, n_gen = 32, n_batch = 64;
    llm_opts lo = { .arm = LLM_ARM_REFERENCE, .cap_bytes = 600ull << 20, .queue_depth = 4,
                    .chunk_bytes = 4u << 20 };
    char err[512];
    for (int i = 1; i < argc; i++) {
        if (!strcmp(argv[i], "--threads") && i + 1 < argc) {
            nthr = 0;
            for (char *t = strtok(argv[++i], ","); t && nthr < 8; t = strtok(NULL, ","))
                threads[nthr++] = atoi(t);
        } else if (!strcmp(argv[i], "--prompt") && i + 1 < argc) {
            n_prompt = (uint32_t)strtoul(argv[++i], NULL, 10);
        } else if (!strcmp(argv[i], "--gen") && i + 1 < argc) {
            n_gen = (uint32_t)strtoul(argv[++i], NULL, 10);
        } else if (!strcmp(argv[i], "--batch") && i + 1 < argc) {
            n_batch = (uint32_t)strtoul(argv[++i], NULL, 10);
        } else if (!strcmp(argv[i], "--arm") && i + 1 < argc) {
            const char *a = argv[++i];
            if (strcmp(a, "reference") && strcmp(a, "ssd")) {
                fprintf(stderr, "swarm bench-llm: unknown arm '%s' (arms: reference, ssd)\n", a);
                return EXIT_USAGE;
            }
            lo.arm = strcmp(a, "ssd") ? LLM_ARM_REFERENCE : LLM_ARM_SSD;
        } else if ((!strcmp(argv[i], "--cap") || !strcmp(argv[i], "--chunk")) && i + 1 < argc) {
            uint64_t v;
            const char *k = argv[i], *a = argv[++i];
            if (util_parse_size(a, &v) || !v) {
                fprintf(stderr, "swarm bench-llm: %s '%s': not a size (600M, 4M, ...)\n", k, a);
                return EXIT_USAGE;
            }
            *(strcmp(k, "--cap") ? &lo.chunk_bytes : &lo.cap_bytes) = v;
        } else if (!strcmp(argv[i], "--queue-depth") && i + 1 < argc) {
            lo.queue_depth = (uint32_t)strtoul(argv[++i], NULL, 10);
        } else if (argv[i][0] != '-' && !path) {
            path = argv[i];
        } else {
            printf("usage: swarm bench-llm MODEL.gguf [--threads 1,2] [--prompt 512] [--gen 32]\n"
                   "                       [--batch 64] [--arm reference|ssd] [--cap 600M]\n"
                   "                       [--chunk 4M] [--queue-depth 4]\n"
                   "  The model resident in this process: a prompt of N tokens in batches, then\n"
                   "  greedy generation one token at a time. Prints prompt tokens/s, generation\n"
                   "  tokens/s (median per-token time) and the memory-bandwidth bound: weight\n"
                   "  bytes one token reads / the rate the same threads read the mapped weights\n"
                   "  (median of 5 passes, measured in the same run).\n"
                   "  --arm ssd: the layers that do not fit --cap are streamed from the file\n"
                   "  every pass (O_DIRECT); the bound is then the disk's: bytes streamed per\n"
                   "  token / the rate the same reads run at with nothing computed (measured\n"
                   "  right after, same ring and depth). Cache and content gates are judged.\n");
            return strcmp(argv[i], "--help") && strcmp(argv[i], "-h") ? EXIT_USAGE : EXIT_OK;
        }
    }
    if (!path || !n_prompt || !n_gen || !n_batch || !nthr) {
        fprintf(stderr, "swarm bench-llm: need MODEL and positive --prompt, --gen, --batch\n");
        return EXIT_USAGE;
    }
    uint64_t t0 = util_now_ns();
    lo.n_ctx = n_prompt + n_gen;
    lo.n_batch = n_batch;
    llm_model *m = llm_model_open_opts(path, &lo, err, sizeof err);
    if (!m) {
        fprintf(stderr, "swarm bench-llm: %s\n", err);
        return EXIT_FAIL;
    }
    const arch_model *am = llm_model_arch(m);
    uint64_t pass = llm_model_pass_bytes(m), maplen = 0;
    const uint8_t *map = llm_model_map(m, &maplen);
    printf("%s: %s, %u layers x %u, %u heads (%u kv), ff %u, vocab %u, %s, %s head; "
           "loaded in %.1f s\n", path, am->hp.name, am->hp.n_layers, am->hp.dim, am->hp.n_head,
           am->hp.n_head_kv, am->hp.n_ff, am->hp.n_vocab,
           quant_type_name(am->layers[0].t[am->layers[0].n_vectors].type),
           am->hp.tied_output ? "tied" : "own", (util_now_ns() - t0) / 1e9);
    printf("weights read per token: %.1f MiB; dot products: %s\n", pass / 1048576.0,
           quant_isa_name(quant_isa_current()));
    if (lo.arm == LLM_ARM_SSD) {
        const exec_plan *p = llm_model_plan(m);
        char b1[32], b2[32], b3[32];
        printf("ssd arm: cap %s, %u layers resident, %u streamed (%.1f MiB per pass), ring %u "
               "x %s, working set %s, checksums: %s\n",
               util_fmt_size(lo.cap_bytes, b1, sizeof b1), p->n_resident, p->n_streamed,
               p->streamed_per_step / 1048576.0, p->ring_slots,
               util_fmt_size(p->slot_bytes, b2, sizeof b2),
               util_fmt_size(p->working_set, b3, sizeof b3), llm_model_sums_source(m));
    }
    int32_t *toks = malloc((n_prompt + n_gen) * sizeof(int32_t));
    float *lg = malloc((size_t)am->hp.n_vocab * sizeof(float));
    double *gt = malloc(n_gen * sizeof(double));
    int rc = EXIT_OK;
    if (!toks || !lg || !gt) {
        rc = EXIT_FAIL;
        goto out;
    }
    uint64_t st = 12345;
    for (uint32_t i = 0; i < n_prompt; i++)
        toks[i] = (int32_t)(util_splitmix64(&st) % am->hp.n_vocab);
    for (int ti = 0; ti < nthr; ti++) {
        int T = threads[ti];
        llm_session *s = llm_session_new(m, n_prompt + n_gen, n_batch, err, sizeof err);
        if (!s) {
            fprintf(stderr, "swarm bench-llm: %s\n", err);
            rc = EXIT_FAIL;
            goto out;
        }
        llm_session_set_threads(s, T);
        /* restart the peak-RSS mark (Linux >= 4.0), so each row's peak is its own run's and
         * not the previous row's disk-bound ring */
        FILE *cr = lo.arm == LLM_ARM_SSD ? fopen("/proc/self/clear_refs", "w") : NULL;
        if (cr) {
            fputs("5", cr);
            fclose(cr);
        }
        /* the read bound first, same threads, over the whole mapped file */
        double rd[5], bw = 0;
        s_read_arg ra = { .p = map, .n = maplen };
        for (int r = 0; map && r < 5; r++) {
            uint64_t a = util_now_ns();
            quant_pool_run(T, s_read_task, &ra, err, sizeof err);
            rd[r] = (util_now_ns() - a) / 1e9;
        }
        if (map) {
            qsort(rd, 5, sizeof rd[0], s_cmp);
            bw = maplen / rd[2];
        }
        exec_stats s0 = { 0 }, s1 = { 0 }, s2 = { 0 };
        llm_model_drain(m);
        llm_model_stats(m, &s0);
        uint64_t io0 = util_io_read_bytes();
        uint64_t a = util_now_ns();
        if (llm_eval(s, toks, n_prompt, lg, 0, err, sizeof err)) {
            fprintf(stderr, "swarm bench-llm: %s\n", err);
            llm_session_free(&s);
            rc = EXIT_FAIL;
            goto out;
        }
        double pt = (util_now_ns() - a) / 1e9;
        llm_model_stats(m, &s1);
        for (uint32_t g = 0; g < n_gen; g++) {
            int32_t best = 0;
            for (uint32_t i = 1; i < am->hp.n_vocab; i++)
                best = lg[i] > lg[best] ? (int32_t)i : best;
            a = util_now_ns();
            if (llm_eval(s, &best, 1, lg, 0, err, sizeof err)) {
                fprintf(stderr, "swarm bench-llm: %s\n", err);
                rc = EXIT_FAIL;
                break;
            }
            gt[g] = (util_now_ns() - a) / 1e9;
        }
        llm_session_free(&s);
        if (rc)
            goto out;
        if (lo.arm == LLM_ARM_SSD) {
            llm_model_drain(m);
            llm_model_stats(m, &s2);
            uint64_t io = util_io_read_bytes() - io0, sb = s2.streamed_bytes - s0.streamed_bytes;
            run_result rr = { 0 };
            exec_stats d = { .content_fail = s2.content_fail - s0.content_fail,
                             .layers_streamed = s2.layers_streamed - s0.layers_streamed,
                             .layers_due = s2.layers_due - s0.layers_due };
            gate_cache_judge(&rr, io, sb, 0);
            gate_content_judge(&rr, &d);
            double per_tok = (double)(s2.streamed_bytes - s1.streamed_bytes) / n_gen, rate = 0;
            qsort(gt, n_gen, sizeof gt[0], s_cmp);
            if (!llm_model_plan(m)->n_streamed) {
                printf("threads %d: prompt %.2f tok/s | generation %.2f tok/s | nothing "
                       "streamed under this cap: no disk bound\n", T, n_prompt / pt,
                       1.0 / gt[n_gen / 2]);
                continue;
            }
            double rss = util_vmhwm_bytes(0) / 1048576.0; /* before the bound's own ring */
            if (s_disk_rate(m, path, &lo, 8, &rate, err, sizeof err)) {
                fprintf(stderr, "swarm bench-llm: disk bound: %s\n", err);
                rc = EXIT_FAIL;
                goto out;
            }
            double disk_tok = per_tok / rate, gen_tok = gt[n_gen / 2];
            printf("threads %d: prompt %u tokens (batches of %u) %.2f tok/s | generation %.2f "
                   "tok/s (median of %u; p90 %.1f ms) | streamed %.1f MiB/token, disk %.2f GB/s "
                   "-> bound %.1f ms/token (%.2f tok/s) | ratio %.3f | per token: read wait "
                   "%.1f ms, layers %.1f ms, hash wait %.1f ms | gates: "
                   "cache %s (storage %.1f MiB for %.1f MiB streamed), content %s%s%s | "
                   "peak rss %.0f MiB (the cap is planned, not enforced here)\n",
                   T, n_prompt, n_batch, n_prompt / pt, 1.0 / gen_tok, n_gen,
                   gt[(n_gen * 9) / 10] * 1e3, per_tok / 1048576.0, rate / 1e9, disk_tok * 1e3,
                   1.0 / disk_tok, gen_tok / disk_tok,
                   (s2.wait_ns - s1.wait_ns) / 1e6 / n_gen,
                   (s2.compute_ns - s1.compute_ns) / 1e6 / n_gen,
                   (s2.verify_wait_ns - s1.verify_wait_ns) / 1e6 / n_gen,
                   result_gate_name(rr.gate_cache), io / 1048576.0, sb / 1048576.0,
                   result_gate_name(rr.gate_content), rr.void_reason[0] ? ": " : "", rr.void_reason,
                   rss);
            if (rr.gate_cache == GATE_VOID || rr.gate_content == GATE_VOID)
                rc = EXIT_VOID;
            continue;
        }
        qsort(gt, n_gen, sizeof gt[0], s_cmp);
        double gen_s = gt[n_gen / 2], bound = bw / (double)pass;
        printf("threads %d: prompt %u tokens (batches of %u) %.2f tok/s | generation %.2f tok/s "
               "(median of %u; p90 %.1f ms) | read bound %.2f GB/s -> %.2f tok/s | ratio %.3f\n",
               T, n_prompt, n_batch, n_prompt / pt, 1.0 / gen_s, n_gen,
               gt[(n_gen * 9) / 10] * 1e3, bw / 1e9, bound, (1.0 / gen_s) / bound);
    }
out:
    free(toks);
    free(lg);
    free(gt);
    llm_model_free(&m);
    return rc;
}
