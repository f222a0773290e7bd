/* cmd_bench_llm.c — swarm bench-llm: a llama/qwen2 file's forward-pass speed in one process
 * (prompt and generation tokens/s) beside the same run's memory-bandwidth bound. coordinator/ */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "arch/llm.h"
#include "common/exitcode.h"
#include "common/util.h"
#include "coordinator/cmd.h"
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
             hi = lines * (uint64_t)(i + 1) / (uint64_t)n, s[8] = { 0 };
    const uint64_t *w = (const uint64_t *)(const void *)a->p;
    for (uint64_t k = lo; k < hi; k++)
        for (int j = 0; j < 8; j++)
            s[j] += w[k * 8 + j];
    a->sums[i] = s[0] + s[1] + s[2] + s[3] + s[4] + s[5] + s[6] + s[7];
}

static int s_cmp(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

int cmd_bench_llm(int argc, char **argv)
{
    const char *path = NULL;
    int threads[8] = { 1, 2 }, nthr = 2;
    uint32_t n_prompt = 512, n_gen = 32, n_batch = 64;
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
        } else if (argv[i][0] != '-' && !path) {
            path = argv[i];
        } else {
            printf("usage: swarm bench-llm MODEL.gguf [--threads 1,2] [--prompt 512] [--gen 32]\n"
                   "                       [--batch 64]\n"
                   "  The model resident in this process: a prompt of N tokens in batches, then\n"
                   "  greedy generation one token at a time. Prints prompt tokens/s, generation\n"
                   "  tokens/s (median per-token time) and the memory-bandwidth bound: weight\n"
                   "  bytes one token reads / the rate the same threads read the mapped weights\n"
                   "  (median of 5 passes, measured in the same run).\n");
            return strcmp(argv[i], "--help") && strcmp(argv[i], "-h") ? EXIT_USAGE : EXIT_OK;
        }
    }
    if (!path || !n_prompt || !n_gen || !n_batch || !nthr) {
        fprintf(stderr, "swarm bench-llm: need MODEL and positive --prompt, --gen, --batch\n");
        return EXIT_USAGE;
    }
    uint64_t t0 = util_now_ns();
    llm_model *m = llm_model_open(path, err, sizeof err);
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
        /* the read bound first, same threads, over the whole mapped file */
        double rd[5];
        s_read_arg ra = { .p = map, .n = maplen };
        for (int r = 0; r < 5; r++) {
            uint64_t a = util_now_ns();
            quant_pool_run(T, s_read_task, &ra, err, sizeof err);
            rd[r] = (util_now_ns() - a) / 1e9;
        }
        qsort(rd, 5, sizeof rd[0], s_cmp);
        double bw = maplen / rd[2];
        uint64_t a = util_now_ns();
        if (llm_eval(s, toks, n_prompt, lg, 0, err, sizeof err)) {
            fprintf(stderr, "swarm bench-llm: %s\n", err);
            llm_session_free(&s);
            rc = EXIT_FAIL;
            goto out;
        }
        double pt = (util_now_ns() - a) / 1e9;
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
