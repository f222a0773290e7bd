/* cmd_generate.c — `swarm generate MODEL --prompt TEXT`: text streamed to stdout, speed to
 * stderr, a result line (JSONL) with digests, gates and an optional KL against a base file.
 * Parse, open the arm (dist/arm_open.h), run the sessions, check parity, report. cli/ */
#include <inttypes.h>
#include <math.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "arch/sums.h"
#include "base/exitcode.h"
#include "cli/args.h"
#include "base/util.h"
#include "cli/cmd.h"
#include "dist/arm.h"
#include "dist/arm_open.h"
#include "quant/quant.h"
#include "runtime/result.h"
#include "text/engine.h"
#include "text/ppl.h"

/* Where the generated ids go: session 0's are printed as they come. */
typedef struct {
    int print;
    int32_t *ids;                 /* generated ids (n_predict of room) */
    uint32_t n_ids, cap;
} s_sink;

typedef struct s_extra s_extra;

/* One run of the command: parse -> open -> run -> report. */
typedef struct {
    const char *model, *prompt, *out, *kl_base;
    int parity;
    int batched;                  /* the sessions ran in shared passes (llm_model_batching) */
    uint64_t passes, pass_rows;   /* those passes, and the positions they carried */
    uint32_t n_sess;              /* --sessions */
    llm_cli_gen_opts o;
    arm_flags af;
    arm_handle h;                 /* the arm, opened by dist/arm_open.c */
    int32_t *ids;                 /* the prompt's tokens */
    size_t n_ids;
    s_sink sink, sink2;           /* session 0's ids; the parity run's */
    s_extra *extra;               /* sessions 1.. of --sessions */
    engine_stats st, st2;         /* session 0's; the parity run's */
    double gen_wall_ms, agg_tok_s;
    uint64_t coord_rss, io_gen;   /* the coordinator's peak and storage reads at the end of
                                   * the generation (before the parity run) */
    gate_state gate_parity;
    char void_reason[768];
    int voided;
    int corrupt;                  /* a layer failed its checksum: the run stopped (EXIT_VOID) */
    llm_cli_model ref, base;      /* the parity reference (tokenizer borrowed), --kl-base */
    llm_cli_draft draft;          /* --draft / --draft-lookup, --draft-max */
    const draft_opts *spec;       /* &draft.o when speculation is on, else NULL */
    ppl_result kl;
    int have_kl;
} gen_run;

static void s_usage(FILE *f);
static const cli_cmd s_cmd = { "generate", s_usage, " (quote the prompt)" };

static void s_usage(FILE *f)
{
    fprintf(f,
            "usage: swarm generate MODEL.gguf|CONFIG --prompt TEXT [options]\n"
            "  Streams the generated text to stdout; prompt tokens/s, generation tokens/s, time\n"
            "  to first token and inter-token latency p50/p95/p99 go to stderr.\n"
            "  --prompt TEXT         the prompt (tokenized with the file's tokenizer)\n"
            "  The resident arm is checked against the reference arm on every run.\n"
            ARM_FLAGS_USAGE
            "  --kill-worker wI@TOKEN, --stop-worker wI@TOKEN:SECONDS,\n"
            "  --cut-link wI@TOKEN:SECONDS\n"
            "                        resident: kill worker I, stop it, or cut its link to the\n"
            "                        coordinator (both ways, both planes)\n"
            "                        while the pass that draws generated token TOKEN (1 = the\n"
            "                        first) is in flight; it is fenced, its layers move here,\n"
            "                        every live session's caches are rebuilt, and the tokens\n"
            "                        stay the reference arm's (the parity gate)\n"
            "  --drop-result wI@TOKEN\n"
            "                        resident: discard worker I's first result to the\n"
            "                        coordinator from that pass on (I: the chain's last\n"
            "                        worker), as if lost on the link: the pass deadline finds\n"
            "                        it and replays (deadline_replays in --out)\n"
            "  --sessions K          K generations at once, each on its own thread and KV\n"
            "                        cache, session k seeded seed + k (every arm:\n"
            "                        their steps batched into shared passes);\n"
            "                        the text shown is session 0's; per-session latency and\n"
            "                        the aggregate tokens/s are reported, every session's\n"
            "                        tokens checked by the parity gate\n"
            LLM_CLI_GEN_USAGE
            "  --ctx under --arm ssd defaults to the prompt's tokens + -n (the plan counts the\n"
            "                        KV cache against the cap)\n"
            LLM_CLI_DRAFT_USAGE
            "                        (with a drafter --parity is on: the tokens must be those\n"
            "                        of plain generation; with sampled drafts, their logits\n"
            "                        those of plain passes over the same tokens)\n"
            "  --parity              run the reference arm again (1 thread, one position per\n"
            "                        pass) and require identical token ids and logits digest\n"
            "  --kl-base OTHER.gguf  KL divergence and top-1 agreement of MODEL against OTHER\n"
            "                        at the generated positions (same tokens through both)\n"
            "  --out FILE.jsonl      append a result object (fields: docs/results.md)\n");
}

/* argv[i] one of generate's own flags (not the shared ones)? 1 / 0 / -1 (printed). */
static int s_own_flag(gen_run *g, int argc, char **argv, int *i, char *err, size_t errlen)
{
    const char *f = argv[*i];
    if (!strcmp(f, "--parity")) {
        g->parity = 1;
        return 1;
    }
    if (*i + 1 >= argc)
        return 0;
    const char *v = argv[*i + 1];
    const char **to = !strcmp(f, "--prompt") ? &g->prompt : !strcmp(f, "--out") ? &g->out
                      : !strcmp(f, "--kl-base") ? &g->kl_base : NULL;
    if (to) {
        *to = v;
    } else if (!strcmp(f, "--sessions")) {
        if (llm_cli_u32("--sessions", v, 1, 64, &g->n_sess, err, errlen))
            return -1;
    } else {
        return 0;
    }
    ++*i;
    return 1;
}

/* EXIT_OK after --help, EXIT_USAGE (printed), or -1: parsed, go on. */
static int s_parse(gen_run *g, int argc, char **argv)
{
    char err[768];
    int rc;
    for (int i = 1; i < argc; i++) {
        int r = llm_cli_gen_flag(&g->o, argc, argv, &i, err, sizeof err);
        if (!r)
            r = arm_flags_parse(&g->af, argc, argv, &i, err, sizeof err);
        if (!r)
            r = llm_cli_draft_flag(&g->draft, argc, argv, &i, err, sizeof err);
        if (!r)
            r = s_own_flag(g, argc, argv, &i, err, sizeof err);
        if (r < 0) {
            fprintf(stderr, "swarm generate: %s\n", err);
            return EXIT_USAGE;
        }
        if (r)
            continue;
        rc = cli_arg_rest(&s_cmd, argv[i], &g->model);
        if (rc != CLI_ARG_NEXT)
            return rc;
    }
    if ((rc = cli_need(&s_cmd, g->model && g->prompt, "MODEL and --prompt TEXT")) != CLI_ARG_NEXT)
        return rc;
    return -1;
}

/* The combinations no arm can honour. 0, or -1 with err. */
static int s_check(gen_run *g, char *err, size_t errlen)
{
    if (arm_flags_check(&g->af, ARM_F_ALL, ARM_ARMS_ALL, "generate", err, errlen))
        return -1;
    llm_arm arm = g->af.arm;
    if (g->n_sess > 1 && g->kl_base) {
        snprintf(err, errlen, "--sessions runs without --kl-base");
        return -1;
    }
    /* ssd: ppl_kl_span runs two models side by side, and under the cap only one may run;
     * resident: the swarm has ended before the KL runs */
    if (arm != LLM_ARM_REFERENCE && g->kl_base) {
        snprintf(err, errlen, "--kl-base runs with --arm reference only");
        return -1;
    }
    if (llm_cli_draft_check(&g->draft, err, errlen))
        return -1;
    /* resident: checked against the reference arm on every run; speculation: against plain
     * generation (the parity run drafts nothing) */
    if (arm == LLM_ARM_RESIDENT || llm_cli_draft_on(&g->draft))
        g->parity = 1;
    return 0;
}

/* arm_open's size(): the prompt's tokens decide the SSD arm's context (its plan counts the
 * KV cache against the cap: sized for this request unless --ctx says otherwise; a prompt
 * that does not fit is the engine's clear error) and where the generated tokens start. */
static int s_size(void *user, arm_handle *h, char *err, size_t errlen)
{
    gen_run *g = user;
    unsigned flags = g->o.no_bos ? 0 : TOKENIZER_ADD_SPECIAL;
    if (tokenizer_encode(h->lm.t, g->prompt, strlen(g->prompt), flags, &g->ids, &g->n_ids, err,
                         errlen))
        return -1;
    if (g->n_ids == 0) {
        snprintf(err, errlen, "the prompt is empty and no BOS is added (drop --no-bos or give "
                 "a prompt)");
        return -1;
    }
    h->pos0 = (uint32_t)g->n_ids - 1;
    uint64_t need = g->n_ids + (uint64_t)g->o.n_predict;
    if (h->arm == LLM_ARM_SSD && !g->o.n_ctx)
        h->n_ctx = need < h->lm.n_ctx_train ? (uint32_t)need : h->lm.n_ctx_train;
    return 0;
}

static int s_open(gen_run *g, char *err, size_t errlen)
{
    arm_open_opts ao = { .cmd = "generate", .log_prefix = "", .model = g->model,
                         .flags = &g->af, .n_ctx = g->o.n_ctx, .ctx_max = 4096,
                         .n_batch = g->o.n_batch, .sessions = g->n_sess, .respawn = 0,
                         .seed = g->o.so.seed, .size = s_size, .user = g };
    if (arm_open(&ao, &g->h, err, errlen))
        return -1;
    if (llm_cli_draft_open(&g->draft, g->h.lm.m, err, errlen))
        return -1;
    g->spec = llm_cli_draft_on(&g->draft) ? &g->draft.o : NULL;
    return 0;
}

/* ---------------------------------------------------------------- run */

static int s_on_token(void *user, const engine_token *t)
{
    s_sink *k = user;
    if (t->id >= 0 && k->n_ids < k->cap)
        k->ids[k->n_ids++] = t->id;
    if (k->print && t->len) {
        fwrite(t->text, 1, t->len, stdout);
        fflush(stdout);
    }
    return arm_stop != 0; /* INT or TERM: every session finishes "cancelled" */
}

/* One generation on a fresh engine. */
static int s_generate(llm_cli_model *lm, const int32_t *prompt, uint32_t n_prompt,
                      const llm_cli_gen_opts *o, uint32_t n_ctx, uint32_t n_batch, int threads,
                      const draft_opts *spec, const int32_t *force, s_sink *sink,
                      engine_stats *st, char *err, size_t errlen)
{
    engine *e = engine_new(lm->m, lm->t, n_ctx, n_batch, threads, err, errlen);
    if (!e)
        return -1;
    engine_request q = { .prompt = prompt, .n_prompt = n_prompt, .max_tokens = o->n_predict,
                         .sampling = o->so, .stop = o->stops, .n_stop = o->n_stop,
                         .on_token = s_on_token, .user = sink, .draft = spec,
                         .force = force };
    int rc = engine_generate(e, &q, st, err, errlen);
    engine_free(&e);
    return rc;
}

/* Sessions 1..K-1 of --sessions K: each on its own thread and engine over the same model
 * (llm.h: sessions may run on different threads), seeded seed + k, printing nothing. */
struct s_extra {
    llm_cli_model *lm;
    const int32_t *prompt;
    uint32_t n_prompt, n_ctx;
    int threads;
    llm_cli_gen_opts o;
    const draft_opts *spec;
    s_sink sink;
    engine_stats st;
    char err[512];
    int rc, started;
    pthread_t th;
};

static void *s_extra_main(void *arg)
{
    s_extra *e = arg;
    e->rc = s_generate(e->lm, e->prompt, e->n_prompt, &e->o, e->n_ctx, e->o.n_batch,
                       e->threads, e->spec, NULL, &e->sink, &e->st, e->err, sizeof e->err);
    return NULL;
}

static int s_start_extras(gen_run *g)
{
    if (g->n_sess > 1 && !(g->extra = calloc(g->n_sess - 1, sizeof *g->extra))) {
        fprintf(stderr, "swarm generate: out of memory\n");
        return -1;
    }
    for (uint32_t k = 1; k < g->n_sess; k++) {
        s_extra *e = &g->extra[k - 1];
        *e = (s_extra){ .lm = &g->h.lm, .prompt = g->ids, .n_prompt = (uint32_t)g->n_ids,
                        .n_ctx = g->h.n_ctx, .threads = g->h.threads, .o = g->o, .spec = g->spec,
                        .sink = { .cap = g->o.n_predict } };
        e->o.so.seed = g->o.so.seed + k;
        if (!(e->sink.ids = malloc(g->o.n_predict * sizeof *e->sink.ids)) ||
            pthread_create(&e->th, NULL, s_extra_main, e)) {
            fprintf(stderr, "swarm generate: cannot start session %u\n", k);
            return -1;
        }
        e->started = 1;
    }
    return 0;
}

/* Every session, session 0 on this thread, timed together. 0, or -1 (printed). */
static int s_sessions(gen_run *g)
{
    char err[768];
    g->sink = (s_sink){ .print = 1, .cap = g->o.n_predict };
    g->sink2 = (s_sink){ .cap = g->o.n_predict };
    g->sink.ids = malloc(g->o.n_predict * sizeof *g->sink.ids);
    g->sink2.ids = malloc(g->o.n_predict * sizeof *g->sink2.ids);
    if (!g->sink.ids || !g->sink2.ids) {
        fprintf(stderr, "swarm generate: out of memory\n");
        return -1;
    }
    /* the sessions share passes (llm_model_batching), as serve's slots do (the SSD arm
     * planned for them has it on already) */
    if ((g->h.arm == LLM_ARM_REFERENCE || g->h.arm == LLM_ARM_RESIDENT) && g->n_sess > 1) {
        if (llm_model_batching(g->h.lm.m, g->o.n_batch + g->n_sess - 1, err, sizeof err)) {
            fprintf(stderr, "swarm generate: %s\n", err);
            return -1;
        }
        g->batched = 1;
    }
    uint64_t t_gen = util_now_ns();
    if (s_start_extras(g))
        return -1;
    int grc = s_generate(&g->h.lm, g->ids, (uint32_t)g->n_ids, &g->o, g->h.n_ctx, g->o.n_batch,
                         g->h.threads, g->spec, NULL, &g->sink, &g->st, err, sizeof err);
    for (uint32_t k = 1; k < g->n_sess; k++) {
        pthread_join(g->extra[k - 1].th, NULL);
        g->extra[k - 1].started = 0;
        if (!grc && g->extra[k - 1].rc) {
            snprintf(err, sizeof err, "session %u: %s", k, g->extra[k - 1].err);
            grc = -1;
        }
    }
    g->gen_wall_ms = (double)(util_now_ns() - t_gen) / 1e6;
    if (grc) {
        fprintf(stderr, "\nswarm generate: %s\n", err);
        g->corrupt = sums_err_is_mismatch(err);
        return -1;
    }
    if (arm_stop) { /* cut short: no gate can judge it, so nothing is written */
        fprintf(stderr, "\nswarm generate: interrupted after %u generated tokens; no result "
                        "written\n", g->st.n_gen);
        return -1;
    }
    return 0;
}

/* "sampled" (speculative sampling: s_force), "argmax" (a draft model's greedy tokens, or a
 * greedy request) or "lookup". */
static const char *s_drafts_kind(const gen_run *g)
{
    if (!g->spec->model)
        return "lookup";
    return g->spec->greedy || g->o.so.temperature == 0 ? "argmax" : "sampled";
}

/* Run, print the speeds, end the arm (the swarm before the parity run, the SSD gates). */
static int s_run(gen_run *g)
{
    if (s_sessions(g))
        return -1;
    putchar('\n');
    fflush(stdout);
    uint64_t all_gen = g->st.n_gen;
    for (uint32_t k = 1; k < g->n_sess; k++) {
        const engine_stats *q = &g->extra[k - 1].st;
        all_gen += q->n_gen;
        fprintf(stderr, "session %u: generated %u: ttft %.2f ms, %.2f tok/s, itl p50 %.2f p95 "
                        "%.2f ms\n", k, q->n_gen, q->ttft_ms, q->gen_tok_s, q->itl_ms_p50,
                q->itl_ms_p95);
    }
    g->agg_tok_s = g->gen_wall_ms > 0 ? all_gen / (g->gen_wall_ms / 1e3) : 0;
    fprintf(stderr, "%u session%s: %llu tokens generated in %.1f ms: %.2f tok/s aggregate\n",
            g->n_sess, g->n_sess > 1 ? "s" : "", (unsigned long long)all_gen, g->gen_wall_ms,
            g->agg_tok_s);
    llm_model_batch_counts(g->h.lm.m, &g->passes, &g->pass_rows);
    if (g->passes)
        fprintf(stderr, "batched: %llu passes carried %llu positions (%.2f a pass)\n",
                (unsigned long long)g->passes, (unsigned long long)g->pass_rows,
                (double)g->pass_rows / (double)g->passes);
    /* the coordinator's peak before it maps the parity reference */
    g->coord_rss = util_vmhwm_bytes(0);
    g->io_gen = util_io_read_bytes();
    arm_open_judge(&g->h);
    const engine_stats *st = &g->st;
    fprintf(stderr, "%s: %s, ctx %u, %u threads; prompt %u tokens in %.1f ms (%.2f tok/s); "
                    "generated %u (%s): ttft %.2f ms, %.2f tok/s, itl p50 %.2f p95 %.2f p99 "
                    "%.2f ms\n", g->h.lm.path, llm_model_arch(g->h.lm.m)->hp.name, g->h.n_ctx,
            (unsigned)g->h.threads, st->n_prompt, st->prompt_ms, st->prompt_tok_s, st->n_gen,
            engine_finish_name(st->finish), st->ttft_ms, st->gen_tok_s, st->itl_ms_p50,
            st->itl_ms_p95, st->itl_ms_p99);
    if (g->spec)
        fprintf(stderr, "speculation (%s, %s drafts%s): %u drafted, %u accepted (%.1f%%), %.2f tokens per "
                        "pass over %u passes, drafter %.1f ms waited for, %u passes drafted "
                        "ahead\n",
                g->draft.path ? g->draft.path : "prompt lookup", s_drafts_kind(g),
                g->spec->fixed ? ", k fixed" : "", st->n_drafted, st->n_accepted,
                st->n_drafted ? 100.0 * st->n_accepted / st->n_drafted : 0.0,
                st->n_passes ? (double)(st->n_passes + st->n_accepted) / st->n_passes : 0.0,
                st->n_passes, st->draft_ms, st->n_ahead_hits);
    return 0;
}

/* ---------------------------------------------------------------- parity and KL */

static int s_same(const engine_stats *a, const engine_stats *b)
{
    return a->ids_digest == b->ids_digest && a->logits_digest == b->logits_digest &&
           a->n_gen == b->n_gen;
}

/* The parity run's tokens: with sampled drafts (the request samples, a draft model drafts,
 * not --draft-greedy) the draws differ from plain generation's by design (engine.h), so the
 * run's own tokens (k's) are replayed through plain passes and the gate checks their logits;
 * NULL otherwise (the parity run draws, and must draw the same). *o is the parity run's
 * options: its -n becomes the tokens replayed. */
static const int32_t *s_force(const gen_run *g, const s_sink *k, llm_cli_gen_opts *o)
{
    if (!g->spec || !g->spec->model || g->spec->greedy || g->o.so.temperature == 0)
        return NULL;
    o->n_predict = k->n_ids;
    return k->ids;
}

/* Sessions 1.. against the reference with their seeds (greedy: the same run as session 0's).
 * 1 all the same, 0 one differs (void_reason says which), -1 a run failed (printed). */
static int s_parity_extras(gen_run *g, llm_cli_model *pm)
{
    char err[768];
    for (uint32_t k = 1; k < g->n_sess; k++) {
        engine_stats st3 = g->st2;
        const engine_stats *q = &g->extra[k - 1].st;
        if (g->o.so.temperature > 0) {
            llm_cli_gen_opts ok = g->o;
            ok.so.seed = g->o.so.seed + k;
            g->sink2.n_ids = 0;
            const int32_t *force = s_force(g, &g->extra[k - 1].sink, &ok);
            if (s_generate(pm, g->ids, (uint32_t)g->n_ids, &ok, g->h.n_ctx, 1, 1, NULL, force,
                           &g->sink2, &st3, err, sizeof err)) {
                fprintf(stderr, "swarm generate: parity run, session %u: %s\n", k, err);
                return -1;
            }
        }
        if (!s_same(&st3, q)) {
            snprintf(g->void_reason, sizeof g->void_reason, "parity: session %u: %u tokens ids "
                     "%016" PRIx64 " logits %016" PRIx64 " vs reference arm (1 thread, "
                     "batch 1) %u tokens ids %016" PRIx64 " logits %016" PRIx64, k,
                     q->n_gen, q->ids_digest, q->logits_digest, st3.n_gen, st3.ids_digest,
                     st3.logits_digest);
            return 0;
        }
    }
    return 1;
}

/* The reference arm again with what can differ set apart: one thread and one position per
 * pass (arch.h's determinism says neither may change a bit), and under --arm ssd or
 * resident the arm itself. */
static int s_parity(gen_run *g)
{
    char err[768];
    g->gate_parity = GATE_NA;
    if (!g->parity)
        return 0;
    llm_cli_model *pm = &g->h.lm;
    if (g->h.arm != LLM_ARM_REFERENCE || g->batched) { /* batched: a plain model */
        g->ref.t = g->h.lm.t; /* borrowed: ref.m alone is freed */
        if (!(g->ref.m = llm_model_open(g->h.lm.path, err, sizeof err))) {
            fprintf(stderr, "swarm generate: parity reference: %s\n", err);
            return -1;
        }
        pm = &g->ref;
    }
    llm_cli_gen_opts o0 = g->o;
    const int32_t *force = s_force(g, &g->sink, &o0);
    if (s_generate(pm, g->ids, (uint32_t)g->n_ids, &o0, g->h.n_ctx, 1, 1, NULL, force, &g->sink2,
                   &g->st2, err, sizeof err)) {
        fprintf(stderr, "swarm generate: parity run: %s\n", err);
        return -1;
    }
    int same = s_same(&g->st2, &g->st);
    if (same && (same = s_parity_extras(g, pm)) < 0)
        return -1;
    g->gate_parity = same ? GATE_PASS : GATE_VOID;
    const engine_stats *st = &g->st, *st2 = &g->st2;
    if (!same && !g->void_reason[0])
        snprintf(g->void_reason, sizeof g->void_reason, "parity: %u tokens ids %016" PRIx64
                 " logits %016" PRIx64 " vs reference arm (1 thread, batch 1) %u tokens ids "
                 "%016" PRIx64 " logits %016" PRIx64, st->n_gen, st->ids_digest,
                 st->logits_digest, st2->n_gen, st2->ids_digest, st2->logits_digest);
    fprintf(stderr, "parity: %s%s%s\n", result_gate_name(g->gate_parity),
            same && force ? " (speculative sampling: the tokens drawn replayed through the "
                            "reference arm, 1 thread, batch 1, with identical logits)"
            : same ? g->n_sess > 1 ? " (every session's token ids and logits identical to "
                                   "the reference arm, 1 thread, batch 1)"
                                 : " (token ids and logits identical to the reference arm, 1 "
                                   "thread, batch 1)"
                 : ": ",
            g->void_reason);
    return 0;
}

/* --kl-base: the prompt and every generated token but the last through both files (the
 * positions whose logits drew them). */
static int s_kl(gen_run *g)
{
    char err[768];
    if (!g->kl_base || !g->sink.n_ids)
        return 0;
    if (llm_cli_open(&g->base, g->kl_base, err, sizeof err)) {
        fprintf(stderr, "swarm generate: --kl-base: %s\n", err);
        return -1;
    }
    int32_t *seq = realloc(g->ids, (g->n_ids + g->sink.n_ids) * sizeof *g->ids);
    if (!seq)
        return -1;
    g->ids = seq;
    memcpy(g->ids + g->n_ids, g->sink.ids, g->sink.n_ids * sizeof *g->ids);
    uint32_t L = (uint32_t)(g->n_ids + g->sink.n_ids - 1);
    if (ppl_kl_span(g->h.lm.m, g->base.m, g->ids, L, (uint32_t)g->n_ids - 1, g->o.n_batch,
                    g->h.threads, &g->kl, err, sizeof err)) {
        fprintf(stderr, "swarm generate: --kl-base: %s\n", err);
        return -1;
    }
    g->have_kl = 1;
    fprintf(stderr, "KL vs %s over %" PRIu64 " generated positions: mean %.6g p99 %.6g max "
                    "%.6g, top-1 agreement %.4f\n", g->base.path, g->kl.n_scored,
            g->kl.kl_mean, g->kl.kl_p99, g->kl.kl_max, g->kl.top1_agree);
    return 0;
}

/* ---------------------------------------------------------------- report */

static json_t *s_num_or_null(double v)
{
    return v >= 0 ? json_real(v) : json_null();
}

static json_t *s_finite_or_null(double v)
{
    return isfinite(v) ? json_real(v) : json_null();
}

static json_t *s_hex(uint64_t v)
{
    char h[17];
    snprintf(h, sizeof h, "%016" PRIx64, v);
    return json_string(h);
}

static json_t *s_session_json(const engine_stats *st, uint64_t seed)
{
    json_t *o = json_object();
    json_object_set_new(o, "seed", json_integer((json_int_t)seed));
    json_object_set_new(o, "tokens_out", json_integer(st->n_gen));
    json_object_set_new(o, "ids_digest", s_hex(st->ids_digest));
    json_object_set_new(o, "logits_digest", s_hex(st->logits_digest));
    json_object_set_new(o, "ttft_ms", json_real(st->ttft_ms));
    json_object_set_new(o, "itl_ms_p50", s_finite_or_null(st->itl_ms_p50));
    json_object_set_new(o, "itl_ms_p95", s_finite_or_null(st->itl_ms_p95));
    json_object_set_new(o, "gen_tok_s", s_finite_or_null(st->gen_tok_s));
    return o;
}

/* {"f32": 5, "q8_0": 14}: how many tensors of each type the model has. */
static json_t *s_tensor_types(const arch_model *am)
{
    json_t *o = json_object();
    const arch_tensor *outer[] = { &am->tok_embd, &am->out_norm, &am->output };
    for (uint32_t l = 0; l <= am->hp.n_layers; l++) {
        uint32_t n = l < am->hp.n_layers ? am->layers[l].n_tensors : 3;
        for (uint32_t i = 0; i < n; i++) {
            const arch_tensor *t = l < am->hp.n_layers ? &am->layers[l].t[i] : outer[i];
            if (l == am->hp.n_layers && i == 2 && am->hp.tied_output)
                continue;
            const char *name = quant_type_name((quant_type)t->type);
            json_t *c = json_object_get(o, name);
            json_object_set_new(o, name, json_integer(c ? json_integer_value(c) + 1 : 1));
        }
    }
    return o;
}

/* The failovers of a resident run (fields: docs/results.md, "generate results"). */
static json_t *s_failovers_json(const llm_failover *f, uint32_t n)
{
    json_t *a = json_array();
    for (uint32_t k = 0; k < n; k++) {
        json_t *o = json_object();
        double deg_s = f[k].degraded_ms / 1e3;
        json_object_set_new(o, "worker", json_string(f[k].worker));
        json_object_set_new(o, "how", json_string(f[k].how));
        json_object_set_new(o, "at_pos", f[k].at_pos == LLM_NO_POS ? json_null()
                                                                   : json_integer(f[k].at_pos));
        json_object_set_new(o, "detection_ms", s_num_or_null(f[k].detection_ms));
        json_object_set_new(o, "sessions_replayed", json_integer(f[k].sessions_replayed));
        json_object_set_new(o, "tokens_replayed",
                            json_integer((json_int_t)f[k].tokens_replayed));
        json_object_set_new(o, "rebuild_ms", json_real(f[k].rebuild_ms));
        json_object_set_new(o, "degraded_tokens",
                            json_integer((json_int_t)f[k].degraded_tokens));
        json_object_set_new(o, "degraded_tok_s",
                            s_num_or_null(deg_s > 0 ? f[k].degraded_tokens / deg_s : -1));
        json_object_set_new(o, "rejoin_ms", s_num_or_null(f[k].rejoin_ms));
        json_object_set_new(o, "reprefill_tokens",
                            json_integer((json_int_t)f[k].reprefill_tokens));
        json_object_set_new(o, "reprefill_ms", s_num_or_null(f[k].rejoin_ms >= 0
                                                                 ? f[k].reprefill_ms : -1));
        json_array_append_new(a, o);
    }
    return a;
}

/* One resident worker: its plan, and how it ended when the swarm reported it. */
static json_t *s_worker_json(const partition_llm_plan *plan, uint32_t i,
                             const llm_worker_status *ws)
{
    json_t *w = json_object();
    json_object_set_new(w, "first", json_integer(plan->first[i]));
    json_object_set_new(w, "last", json_integer(plan->last[i]));
    json_object_set_new(w, "need_bytes", json_integer((json_int_t)plan->need[i]));
    if (!ws)
        return w;
    json_object_set_new(w, "id", json_string(ws->id));
    json_object_set_new(w, "endpoint", ws->endpoint[0] ? json_string(ws->endpoint)
                                                       : json_null());
    json_object_set_new(w, "state", json_string(ws->state));
    json_object_set_new(w, "load_ms", json_real(ws->load_ms));
    json_object_set_new(w, "fetched_bytes", json_integer((json_int_t)ws->fetched_bytes));
    json_object_set_new(w, "resumed_bytes", json_integer((json_int_t)ws->resumed_bytes));
    json_object_set_new(w, "fetch_ms", json_real(ws->fetch_ms));
    json_object_set_new(w, "acts", json_integer((json_int_t)ws->acts));
    json_object_set_new(w, "wait_ms", json_real(ws->wait_ms));
    json_object_set_new(w, "compute_ms", json_real(ws->compute_ms));
    json_object_set_new(w, "io_ms", json_real(ws->io_ms));
    return w;
}

/* The resident arm's fields: workers, routes, links, failovers. */
static void s_json_resident(json_t *j, const arm_handle *h)
{
    const partition_llm_plan *plan = h->plan;
    json_t *ws = json_array();
    for (uint32_t i = 0; i < plan->n_workers; i++)
        json_array_append_new(ws, s_worker_json(plan, i, i < h->n_wst ? &h->wst[i] : NULL));
    json_object_set_new(j, "workers", ws);
    json_object_set_new(j, "embedding_at", json_string(plan->embedding_at));
    json_object_set_new(j, "transport", json_string(h->transport));
    json_object_set_new(j, "shared_core", h->shared_core >= 0 ? json_integer(h->shared_core)
                                                               : json_null());
    json_object_set_new(j, "head_at", json_string(plan->head_at));
    json_object_set_new(j, "worker_cap_bytes", json_integer((json_int_t)h->worker_cap));
    json_object_set_new(j, "acts", json_integer((json_int_t)h->acts));
    json_object_set_new(j, "deadline_replays", json_integer((json_int_t)h->deadline_replays));
    json_object_set_new(j, "prefill_chunks", json_integer((json_int_t)h->prefill_chunks));
    json_object_set_new(j, "failovers", s_failovers_json(h->fos, h->fos ? h->n_fo : 0));
    json_object_set_new(j, "profile", json_string(netem_profile_is_none(&h->profile)
                                                      ? "none" : h->profile.name));
    json_object_set_new(j, "wire_bytes", json_integer((json_int_t)h->wire));
}

/* The request: model, context, sampling, stops. */
static void s_json_request(json_t *j, const gen_run *g)
{
    const llm_cli_gen_opts *o = &g->o;
    const arch_model *am = llm_model_arch(g->h.lm.m);
    json_t *stops = json_array(), *smp = json_object();
    for (uint32_t i = 0; i < o->n_stop; i++)
        json_array_append_new(stops, json_string(o->stops[i]));
    json_object_set_new(smp, "temperature", json_real(o->so.temperature));
    json_object_set_new(smp, "top_k", json_integer(o->so.top_k));
    json_object_set_new(smp, "top_p", json_real(o->so.top_p));
    json_object_set_new(smp, "min_p", json_real(o->so.min_p));
    json_object_set_new(smp, "repeat_penalty", json_real(o->so.repeat_penalty));
    json_object_set_new(smp, "seed", json_integer((json_int_t)o->so.seed));
    json_object_set_new(j, "model", json_string(g->h.lm.path));
    json_object_set_new(j, "architecture", json_string(am->hp.name));
    json_object_set_new(j, "tensor_types", s_tensor_types(am));
    json_object_set_new(j, "ctx", json_integer(g->h.n_ctx));
    json_object_set_new(j, "n_batch", json_integer(o->n_batch));
    json_object_set_new(j, "threads", json_integer(g->h.threads));
    json_object_set_new(j, "sampling", smp);
    json_object_set_new(j, "stop", stops);
}

/* Sessions, latency and speed. */
static void s_json_speed(json_t *j, const gen_run *g)
{
    const engine_stats *st = &g->st;
    json_t *per = json_array();
    json_array_append_new(per, s_session_json(st, g->o.so.seed));
    for (uint32_t k = 1; k < g->n_sess; k++)
        json_array_append_new(per, s_session_json(&g->extra[k - 1].st, g->o.so.seed + k));
    json_object_set_new(j, "sessions", json_integer(g->n_sess));
    json_object_set_new(j, "batch_passes", json_integer((json_int_t)g->passes));
    json_object_set_new(j, "batch_rows", json_integer((json_int_t)g->pass_rows));
    json_object_set_new(j, "per_session", per);
    json_object_set_new(j, "gen_wall_ms", json_real(g->gen_wall_ms));
    json_object_set_new(j, "aggregate_gen_tok_s", json_real(g->agg_tok_s));
    json_object_set_new(j, "tokens_in", json_integer(st->n_prompt));
    json_object_set_new(j, "tokens_out", json_integer(st->n_gen));
    json_object_set_new(j, "finish_reason", json_string(engine_finish_name(st->finish)));
    json_object_set_new(j, "setup_ms", json_real(g->h.setup_ms));
    json_object_set_new(j, "prompt_ms", json_real(st->prompt_ms));
    json_object_set_new(j, "ttft_ms", json_real(st->ttft_ms));
    json_object_set_new(j, "itl_ms_p50", s_finite_or_null(st->itl_ms_p50));
    json_object_set_new(j, "itl_ms_p95", s_finite_or_null(st->itl_ms_p95));
    json_object_set_new(j, "itl_ms_p99", s_finite_or_null(st->itl_ms_p99));
    json_object_set_new(j, "prompt_tok_s", s_finite_or_null(st->prompt_tok_s));
    json_object_set_new(j, "gen_tok_s", s_finite_or_null(st->gen_tok_s));
    if (g->spec) {
        json_t *sp = json_object();
        json_object_set_new(sp, "drafter", json_string(g->draft.path ? g->draft.path
                                                                     : "lookup"));
        json_object_set_new(sp, "draft_max", json_integer(llm_cli_draft_max(&g->draft)));
        json_object_set_new(sp, "passes", json_integer(st->n_passes));
        json_object_set_new(sp, "drafted", json_integer(st->n_drafted));
        json_object_set_new(sp, "accepted", json_integer(st->n_accepted));
        json_object_set_new(sp, "draft_ms", json_real(st->draft_ms));
        json_object_set_new(sp, "ahead_hits", json_integer(st->n_ahead_hits));
        json_object_set_new(sp, "drafts", json_string(s_drafts_kind(g)));
        json_object_set_new(sp, "fixed", json_boolean(g->spec->fixed));
        json_object_set_new(j, "speculative", sp);
    }
}

/* Bytes: weights, memory peaks, storage reads, the SSD arm's fields. */
static void s_json_bytes(json_t *j, const gen_run *g)
{
    const llm_ssd *x = g->h.ssd;
    int resident = g->h.arm == LLM_ARM_RESIDENT;
    json_object_set_new(j, "weight_bytes",
                        json_integer((json_int_t)llm_model_weight_bytes(g->h.lm.m)));
    json_object_set_new(j, "pass_bytes",
                        json_integer((json_int_t)llm_model_pass_bytes(g->h.lm.m)));
    /* one process's peak, or under the resident arm the coordinator's (before the parity
     * run) and its workers' (live ones, read before they exit) */
    uint64_t own = x ? x->peak_rss : resident ? g->coord_rss : util_vmhwm_bytes(0);
    json_object_set_new(j, "peak_rss_bytes", json_integer((json_int_t)own));
    if (resident)
        json_object_set_new(j, "workers_peak_rss_bytes",
                            json_integer((json_int_t)g->h.workers_rss));
    json_object_set_new(j, "aggregate_peak_rss_bytes",
                        json_integer((json_int_t)(own + g->h.workers_rss)));
    json_object_set_new(j, "cap_bytes", json_integer((json_int_t)(x ? x->lo.cap_bytes : 0)));
    /* ssd: storage reads during the generation (what the cache gate judged); reference:
     * since the command began (the mapping's faults, when the file was not cached);
     * resident: the coordinator's until the generation ended (not the parity run's) */
    uint64_t io = x ? x->io1 - x->io0 : resident ? g->io_gen - g->h.io0
                                                 : util_io_read_bytes() - g->h.io0;
    json_object_set_new(j, "ssd_read_bytes", json_integer((json_int_t)io));
    if (x)
        llm_ssd_json(j, x, g->h.lm.m);
    else
        json_object_set_new(j, "cap_mode", json_string("none"));
}

static json_t *s_kl_json(const gen_run *g)
{
    json_t *k = json_object();
    json_object_set_new(k, "base", json_string(g->base.path));
    json_object_set_new(k, "positions", json_integer((json_int_t)g->kl.n_scored));
    json_object_set_new(k, "kl_mean", json_real(g->kl.kl_mean));
    json_object_set_new(k, "kl_p99", json_real(g->kl.kl_p99));
    json_object_set_new(k, "kl_max", json_real(g->kl.kl_max));
    json_object_set_new(k, "top1_agree", json_real(g->kl.top1_agree));
    return k;
}

/* The result object (fields: docs/results.md, "generate results"). */
static json_t *s_json(const gen_run *g)
{
    const run_result *rr = g->h.ssd ? &g->h.ssd->rr : NULL;
    json_t *j = json_object(), *gates = json_object();
    json_object_set_new(gates, "parity", json_string(result_gate_name(g->gate_parity)));
    json_object_set_new(gates, "cache", json_string(result_gate_name(rr ? rr->gate_cache
                                                                        : GATE_NA)));
    json_object_set_new(gates, "content", json_string(result_gate_name(rr ? rr->gate_content
                                                                          : GATE_NA)));
    json_object_set_new(j, "command", json_string("generate"));
    json_object_set_new(j, "arm", json_string(g->h.arm_name));
    if (g->h.plan)
        s_json_resident(j, &g->h);
    s_json_request(j, g);
    s_json_speed(j, g);
    s_json_bytes(j, g);
    json_object_set_new(j, "gates", gates);
    json_object_set_new(j, "void", json_boolean(g->voided));
    json_object_set_new(j, "void_reason", json_string(g->void_reason));
    json_object_set_new(j, "ids_digest", s_hex(g->st.ids_digest));
    json_object_set_new(j, "logits_digest", s_hex(g->st.logits_digest));
    if (g->have_kl)
        json_object_set_new(j, "kl", s_kl_json(g));
    json_object_set_new(j, "git_rev", json_string(util_git_rev()));
    json_object_set_new(j, "unix_time",
                        json_integer((json_int_t)(util_wall_ns() / 1000000000ull)));
    return j;
}

/* Every void reason in one line: the SSD gates' first, then parity's. */
static void s_void(gen_run *g)
{
    const run_result *rr = g->h.ssd ? &g->h.ssd->rr : NULL;
    g->voided = g->gate_parity == GATE_VOID ||
                (rr && (rr->gate_cache == GATE_VOID || rr->gate_content == GATE_VOID));
    if (rr && rr->void_reason[0]) {
        char pr[sizeof g->void_reason];
        snprintf(pr, sizeof pr, "%s", g->void_reason);
        snprintf(g->void_reason, sizeof g->void_reason, "%s%s%s", rr->void_reason,
                 pr[0] ? "; " : "", pr);
    }
}

static int s_report(gen_run *g)
{
    char err[768];
    s_void(g);
    if (g->out) {
        json_t *j = s_json(g);
        int rc = j ? result_append_jsonl(g->out, j, err, sizeof err) : -1;
        json_decref(j);
        if (rc) {
            fprintf(stderr, "swarm generate: %s\n", j ? err : "out of memory");
            return -1;
        }
    }
    if (g->voided)
        fprintf(stderr, "swarm generate: the run is void: %s\n", g->void_reason);
    return 0;
}

static void s_free(gen_run *g)
{
    llm_model_free(&g->ref.m);
    llm_cli_draft_close(&g->draft);
    free(g->ids);
    free(g->sink.ids);
    free(g->sink2.ids);
    for (uint32_t k = 1; g->extra && k < g->n_sess; k++) {
        if (g->extra[k - 1].started)
            pthread_join(g->extra[k - 1].th, NULL);
        free(g->extra[k - 1].sink.ids);
    }
    free(g->extra);
    llm_cli_close(&g->base);
    arm_open_close(&g->h);
}

int cmd_generate(int argc, char **argv)
{
    char err[768];
    gen_run *g = calloc(1, sizeof *g); /* an arm_handle holds paths: not for the stack */
    if (!g) {
        fprintf(stderr, "swarm generate: out of memory\n");
        return EXIT_FAIL;
    }
    g->n_sess = 1;
    llm_cli_gen_defaults(&g->o);
    arm_flags_init(&g->af);
    int rc = s_parse(g, argc, argv);
    if (rc >= 0)
        goto out;
    rc = EXIT_USAGE;
    if (s_check(g, err, sizeof err)) {
        fprintf(stderr, "swarm generate: %s\n", err);
        goto out;
    }
    arm_install_signals(); /* INT/TERM: stop at the next token or join step, write no result */
    rc = EXIT_FAIL;
    if (s_open(g, err, sizeof err)) {
        fprintf(stderr, "swarm generate: %s\n", err);
        rc = arm_open_exit_code(&g->h, err);
        goto out;
    }
    if (s_run(g)) {
        rc = g->corrupt ? EXIT_VOID : EXIT_FAIL;
        goto out;
    }
    if (s_parity(g) || s_kl(g) || s_report(g))
        goto out;
    rc = g->voided ? EXIT_VOID : EXIT_OK;
out:
    s_free(g);
    free(g);
    quant_pool_shutdown();
    return rc;
}
