/* cmd_perplexity.c — `swarm perplexity MODEL --file TEXT`: llama.cpp's perplexity of a text,
 * and with --kl-base the KL divergence and top-1 agreement against another file. cli/ */
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/exitcode.h"
#include "cli/args.h"
#include "cli/cmd.h"
#include "dist/arm_open.h"
#include "text/ppl.h"
#include "quant/quant.h"

static void s_usage(FILE *f);
static const cli_cmd s_cmd = { "perplexity", s_usage, NULL };

static void s_usage(FILE *f)
{
    fprintf(f,
            "usage: swarm perplexity MODEL.gguf|CONFIG --file TEXT [--ctx N] [--batch N]\n"
            "                        [--threads T] [--kl-base OTHER.gguf] [--arm ARM] ...\n"
            "  Perplexity as llama.cpp's perplexity tool computes it: the text tokenized (BOS\n"
            "  as the file says), cut into chunks of --ctx tokens (default 512; at least two\n"
            "  chunks), each chunk from an empty cache starting with BOS, only its second half\n"
            "  scored. --kl-base: the same tokens through OTHER too; KL(OTHER || MODEL) mean,\n"
            "  p99 and max, and how often both rank the same token first (reference arm).\n"
            "  --arm ssd: the model under the SSD arm (leading layers resident under --cap, the\n"
            "  rest streamed every pass); cache and content gates judged, a void gate exits 3.\n"
            "  --file TEXT           the text\n"
            "  --ctx N               positions per chunk (default 512)\n"
            "  --batch N             positions per forward pass (default 64)\n"
            "  --kl-base OTHER.gguf  the base file to compare against\n"
            ARM_FLAGS_USAGE);
}

/* One run of the command: parse -> open -> compute -> report. */
typedef struct {
    const char *model, *file, *kl_base;
    uint32_t n_ctx, n_batch;
    arm_flags af;
    arm_handle h;
    llm_cli_model base;
    char err[768];
} s_ppl;

/* argv[*i] one of perplexity's own flags with its value? 1 / 0 / -1 with p->err. */
static int s_own_flag(s_ppl *p, int argc, char **argv, int *i)
{
    const char *f = argv[*i];
    if (*i + 1 >= argc)
        return 0;
    const char *v = argv[*i + 1];
    int rc = 0;
    if (!strcmp(f, "--file"))
        p->file = v;
    else if (!strcmp(f, "--kl-base"))
        p->kl_base = v;
    else if (!strcmp(f, "--ctx"))
        rc = llm_cli_u32(f, v, 4, 1u << 20, &p->n_ctx, p->err, sizeof p->err);
    else if (!strcmp(f, "--batch"))
        rc = llm_cli_u32(f, v, 1, 4096, &p->n_batch, p->err, sizeof p->err);
    else
        return 0;
    ++*i;
    return rc ? -1 : 1;
}

/* EXIT_OK after --help, EXIT_USAGE (printed), or -1: parsed, go on. */
static int s_parse(s_ppl *p, int argc, char **argv)
{
    int rc;
    for (int i = 1; i < argc; i++) {
        int r = arm_flags_parse(&p->af, argc, argv, &i, p->err, sizeof p->err);
        if (!r)
            r = s_own_flag(p, argc, argv, &i);
        if (r < 0) {
            fprintf(stderr, "swarm perplexity: %s\n", p->err);
            return EXIT_USAGE;
        }
        if (r)
            continue;
        rc = cli_arg_rest(&s_cmd, argv[i], &p->model);
        if (rc != CLI_ARG_NEXT)
            return rc;
    }
    if ((rc = cli_need(&s_cmd, p->model && p->file, "MODEL and --file TEXT")) != CLI_ARG_NEXT)
        return rc;
    /* faults are placed by generated token: generate's alone */
    if (arm_flags_check(&p->af, ARM_F_ALL & ~ARM_F_FAULTS, ARM_ARMS_ALL, "perplexity", p->err,
                        sizeof p->err)) {
        fprintf(stderr, "swarm perplexity: %s\n", p->err);
        return EXIT_USAGE;
    }
    if (p->kl_base && p->af.arm != LLM_ARM_REFERENCE) {
        /* --kl-base runs a second model beside the first: under the cap only one may run */
        fprintf(stderr, "swarm perplexity: --kl-base runs with --arm reference only\n");
        return EXIT_USAGE;
    }
    return -1;
}

/* Tokenize, compute, judge the arm, print. EXIT_OK / EXIT_VOID, or -1 with p->err. */
static int s_compute(s_ppl *p, const char *text, size_t len)
{
    size_t n = 0, n0 = 0;
    int32_t *ids = NULL, *probe = NULL;
    ppl_result r;
    int rc = -1;
    tokenizer *t = p->h.lm.t;
    /* Whether the vocabulary adds BOS: the tokenizer's own answer for an empty text. */
    if (tokenizer_encode(t, "", 0, TOKENIZER_ADD_SPECIAL, &probe, &n0, p->err, sizeof p->err) ||
        tokenizer_encode(t, text, len, TOKENIZER_ADD_SPECIAL, &ids, &n, p->err, sizeof p->err))
        goto out;
    int32_t bos = n0 >= 1 && probe[0] == tokenizer_bos(t) ? tokenizer_bos(t) : -1;
    fprintf(stderr, "%s: %zu bytes -> %zu tokens; %zu chunks of %u, BOS %s\n", p->file, len, n,
            n / p->n_ctx, p->n_ctx, bos >= 0 ? "at each chunk start"
                                             : "not added (the file says so)");
    if (ppl_compute(p->h.lm.m, p->base.m, ids, n, p->n_ctx, p->n_batch, p->h.threads, bos, &r,
                    p->err, sizeof p->err))
        goto out;
    arm_open_judge(&p->h);
    printf("%s: perplexity %.6f (mean NLL %.6f nats over %" PRIu64 " tokens, %u chunks of "
           "%u, %.1f ms)\n", p->h.lm.path, r.ppl, r.nll_mean, r.n_scored, r.n_chunk, r.n_ctx,
           r.ms);
    if (p->kl_base)
        printf("against %s (perplexity %.6f): KL mean %.6g, p99 %.6g, max %.6g; top-1 "
               "agreement %.4f\n", p->base.path, r.ppl_base, r.kl_mean, r.kl_p99, r.kl_max,
               r.top1_agree);
    const run_result *rr = p->h.ssd ? &p->h.ssd->rr : NULL;
    rc = rr && (rr->gate_cache == GATE_VOID || rr->gate_content == GATE_VOID) ? EXIT_VOID
                                                                              : EXIT_OK;
    if (rc == EXIT_VOID)
        fprintf(stderr, "swarm perplexity: the run is void: %s\n", rr->void_reason);
out:
    free(ids);
    free(probe);
    return rc;
}

int cmd_perplexity(int argc, char **argv)
{
    s_ppl *p = calloc(1, sizeof *p); /* an arm_handle holds paths: not for the stack */
    char *text = NULL;
    size_t len = 0;
    if (!p) {
        fprintf(stderr, "swarm perplexity: out of memory\n");
        return EXIT_FAIL;
    }
    p->n_ctx = 512;
    p->n_batch = 64;
    arm_flags_init(&p->af);
    int rc = s_parse(p, argc, argv);
    if (rc >= 0)
        goto out;
    rc = EXIT_FAIL;
    /* --ctx is checked against the file's trained context as given (512 by default) */
    arm_open_opts ao = { .cmd = "perplexity", .log_prefix = "", .model = p->model,
                         .flags = &p->af, .n_ctx = p->n_ctx, .ctx_max = p->n_ctx,
                         .n_batch = p->n_batch, .sessions = 1, .respawn = 0 };
    if (!(text = llm_cli_read_file(p->file, &len, p->err, sizeof p->err)) ||
        arm_open(&ao, &p->h, p->err, sizeof p->err) ||
        (p->kl_base && llm_cli_open(&p->base, p->kl_base, p->err, sizeof p->err)))
        goto fail;
    if ((rc = s_compute(p, text, len)) >= 0)
        goto out;
fail:
    /* the arm refusing its options (a config's [ssd], the workers' plan) is a usage error; a
     * layer failing its checksum (at load, or the content gate mid-run) voids the run */
    rc = arm_open_exit_code(&p->h, p->err);
    fprintf(stderr, "swarm perplexity: %s\n", p->err);
out:
    free(text);
    llm_cli_close(&p->base);
    arm_open_close(&p->h);
    free(p);
    quant_pool_shutdown();
    return rc;
}
