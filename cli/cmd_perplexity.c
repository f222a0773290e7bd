/* cmd_perplexity.c — `swarm perplexity MODEL --file TEXT`: llama.cpp's perplexity of a text,
 * and with --kl-base the KL divergence and top-1 agreement against another file. cli/ */
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/exitcode.h"
#include "cli/cmd.h"
#include "dist/llm_cli.h"
#include "text/ppl.h"
#include "quant/quant.h"

static void s_usage(FILE *f)
{
    fprintf(f,
            "usage: swarm perplexity MODEL.gguf|CONFIG --file TEXT [--ctx N] [--batch N]\n"
            "                        [--threads T] [--kl-base OTHER.gguf] [--arm reference|ssd]\n"
            "                        [--cap SIZE] [--queue-depth N] [--chunk SIZE] [--buffered]\n"
            "  Perplexity as llama.cpp's perplexity tool computes it: the text tokenized (BOS\n"
            "  as the file says), cut into chunks of --ctx tokens (default 512; at least two\n"
            "  chunks), each chunk from an empty cache starting with BOS, only its second half\n"
            "  scored. --kl-base: the same tokens through OTHER too; KL(OTHER || MODEL) mean,\n"
            "  p99 and max, and how often both rank the same token first.\n"
            "  --arm ssd: the model under the SSD arm (leading layers resident under --cap, the\n"
            "  rest streamed every pass); cache and content gates judged, a void gate exits 3.\n"
            LLM_CLI_SSD_USAGE);
}

int cmd_perplexity(int argc, char **argv)
{
    const char *model = NULL, *file = NULL, *kl_base = NULL, *arm = "reference";
    llm_cli_ssd_flags sf;
    int ssd_flag = 0;
    llm_cli_ssd_init(&sf);
    uint32_t n_ctx = 512, n_batch = 64, threads = 1;
    char err[768];
    for (int i = 1; i < argc; i++) {
        const char *f = argv[i];
        int rc = llm_cli_ssd_flag(&sf, argc, argv, &i, err, sizeof err);
        if (rc) {
            if (rc < 0) {
                fprintf(stderr, "swarm perplexity: %s\n", err);
                return EXIT_USAGE;
            }
            ssd_flag = 1;
            continue;
        }
        if (!strcmp(f, "--help") || !strcmp(f, "-h")) {
            s_usage(stdout);
            return EXIT_OK;
        } else if (!strcmp(f, "--file") && i + 1 < argc) {
            file = argv[++i];
        } else if (!strcmp(f, "--arm") && i + 1 < argc) {
            arm = argv[++i];
        } else if (!strcmp(f, "--kl-base") && i + 1 < argc) {
            kl_base = argv[++i];
        } else if (!strcmp(f, "--ctx") && i + 1 < argc) {
            rc = llm_cli_u32(f, argv[++i], 4, 1u << 20, &n_ctx, err, sizeof err);
        } else if (!strcmp(f, "--batch") && i + 1 < argc) {
            rc = llm_cli_u32(f, argv[++i], 1, 4096, &n_batch, err, sizeof err);
        } else if (!strcmp(f, "--threads") && i + 1 < argc) {
            rc = llm_cli_u32(f, argv[++i], 1, QUANT_MAX_THREADS, &threads, err, sizeof err);
        } else if (f[0] == '-') {
            fprintf(stderr, "swarm perplexity: unknown option or missing value '%s'\n", f);
            s_usage(stderr);
            return EXIT_USAGE;
        } else if (!model) {
            model = f;
        } else {
            fprintf(stderr, "swarm perplexity: unexpected argument '%s'\n", f);
            return EXIT_USAGE;
        }
        if (rc) {
            fprintf(stderr, "swarm perplexity: %s\n", err);
            return EXIT_USAGE;
        }
    }
    if (!model || !file) {
        fprintf(stderr, "swarm perplexity: need MODEL and --file TEXT\n");
        s_usage(stderr);
        return EXIT_USAGE;
    }
    if (strcmp(arm, "reference") && strcmp(arm, "ssd")) {
        fprintf(stderr, "swarm perplexity: unknown arm '%s' (arms: reference, ssd)\n", arm);
        return EXIT_USAGE;
    }
    llm_ssd *x = calloc(1, sizeof *x); /* a run_result and paths: not for the stack */
    if (!x) {
        fprintf(stderr, "swarm perplexity: out of memory\n");
        return EXIT_FAIL;
    }
    x->on = !strcmp(arm, "ssd");
    x->tag = "perplexity";
    if ((!x->on && ssd_flag) || (x->on && kl_base)) {
        /* --kl-base runs a second model beside the first: under the cap only one may run */
        fprintf(stderr, "swarm perplexity: %s\n", ssd_flag && !x->on
                ? "--cap, --queue-depth, --chunk and --buffered are the SSD arm's (add --arm ssd)"
                : "--kl-base runs with --arm reference only");
        free(x);
        return EXIT_USAGE;
    }
    if (x->on && llm_cli_ssd_opts(&sf, model, &x->lo, x->from, sizeof x->from, err,
                                  sizeof err)) {
        fprintf(stderr, "swarm perplexity: %s\n", err);
        free(x);
        return EXIT_USAGE;
    }
    int rc = EXIT_FAIL;
    llm_cli_model lm = { 0 }, base = { 0 };
    size_t len = 0, n = 0, n0 = 0;
    int32_t *ids = NULL, *probe = NULL;
    char *text = llm_cli_read_file(file, &len, err, sizeof err);
    if (!text || (x->on ? llm_cli_open_tok(&lm, model, err, sizeof err)
                        : llm_cli_open(&lm, model, err, sizeof err)) ||
        (kl_base && llm_cli_open(&base, kl_base, err, sizeof err)))
        goto fail;
    uint32_t train = x->on ? lm.n_ctx_train : llm_model_arch(lm.m)->hp.n_ctx_train;
    if (n_ctx > train) {
        snprintf(err, sizeof err, "--ctx %u: %s was trained for %u positions at most", n_ctx,
                 lm.path, train);
        goto fail;
    }
    if (x->on && llm_ssd_open(x, &lm, n_ctx, n_batch, err, sizeof err))
        goto fail;
    /* Whether the vocabulary adds BOS: the tokenizer's own answer for an empty text. */
    if (tokenizer_encode(lm.t, "", 0, TOKENIZER_ADD_SPECIAL, &probe, &n0, err, sizeof err) ||
        tokenizer_encode(lm.t, text, len, TOKENIZER_ADD_SPECIAL, &ids, &n, err, sizeof err))
        goto fail;
    int32_t bos = n0 >= 1 && probe[0] == tokenizer_bos(lm.t) ? tokenizer_bos(lm.t) : -1;
    fprintf(stderr, "%s: %zu bytes -> %zu tokens; %zu chunks of %u, BOS %s\n", file, len, n,
            n / n_ctx, n_ctx, bos >= 0 ? "at each chunk start" : "not added (the file says so)");
    ppl_result r;
    if (ppl_compute(lm.m, base.m, ids, n, n_ctx, n_batch, (int)threads, bos, &r, err,
                    sizeof err))
        goto fail;
    if (x->on) {
        llm_ssd_judge(x, lm.m);
        llm_ssd_leave(x);
    }
    printf("%s: perplexity %.6f (mean NLL %.6f nats over %" PRIu64 " tokens, %u chunks of "
           "%u, %.1f ms)\n", lm.path, r.ppl, r.nll_mean, r.n_scored, r.n_chunk, r.n_ctx, r.ms);
    if (kl_base)
        printf("against %s (perplexity %.6f): KL mean %.6g, p99 %.6g, max %.6g; top-1 "
               "agreement %.4f\n", base.path, r.ppl_base, r.kl_mean, r.kl_p99, r.kl_max,
               r.top1_agree);
    rc = x->rr.gate_cache == GATE_VOID || x->rr.gate_content == GATE_VOID ? EXIT_VOID : EXIT_OK;
    if (rc == EXIT_VOID)
        fprintf(stderr, "swarm perplexity: the run is void: %s\n", x->rr.void_reason);
    goto out;
fail:
    fprintf(stderr, "swarm perplexity: %s\n", err);
out:
    llm_ssd_leave(x);
    free(x);
    free(text);
    free(ids);
    free(probe);
    llm_cli_close(&base);
    llm_cli_close(&lm);
    quant_pool_shutdown();
    return rc;
}
