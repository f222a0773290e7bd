/* cmd_generate.c — `swarm generate MODEL --prompt TEXT`: text streamed to stdout, speed to
 * stderr, a result line (JSONL) with digests, gates and an optional KL against a base file.
 * cli/ */
#include <inttypes.h>
#include <math.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "base/exitcode.h"
#include "base/util.h"
#include "dist/arm.h"
#include "cli/cmd.h"
#include "dist/llm_cli.h"
#include "dist/llm_swarm.h"
#include "runtime/result.h"
#include "text/engine.h"
#include "text/ppl.h"
#include "quant/quant.h"

static void s_usage(FILE *f)
{
    fprintf(f,
            "usage: swarm generate MODEL.gguf|CONFIG --prompt TEXT [options]\n"
            "  Streams the generated text to stdout; prompt tokens/s, generation tokens/s, time\n"
            "  to first token and inter-token latency p50/p95/p99 go to stderr.\n"
            "  --prompt TEXT         the prompt (tokenized with the file's tokenizer)\n"
            "  --arm reference|ssd|resident  where the weights live (default reference: resident;\n"
            "                        ssd: leading layers resident under --cap, the rest\n"
            "                        streamed every pass, cache and content gates judged;\n"
            "                        resident: the layers in --workers spawned workers\n"
            "                        (loopback), partitioned by bytes under --worker-cap,\n"
            "                        checked against the reference arm on every run)\n"
            "  --workers N           resident: workers to spawn (default 3)\n"
            "  --worker-cap SIZE     resident: each worker's cap (default: none)\n"
            "  --kill-worker wI@TOKEN, --stop-worker wI@TOKEN:SECONDS,\n"
            "  --cut-link wI@TOKEN:SECONDS\n"
            "                        resident: kill worker I, stop it, or cut its link to the\n"
            "                        coordinator (both ways, both planes)\n"
            "                        while the pass that draws generated token TOKEN (1 = the\n"
            "                        first) is in flight; it is fenced, its layers move here,\n"
            "                        every live session's caches are rebuilt, and the tokens\n"
            "                        stay the reference arm's (the parity gate)\n"
            "  --profile NAME        resident: emulate every data link (none, lan: RTT 0.4 ms,\n"
            "                        wifi: 4.5 ms with jitter, wan: 60 ms); workers + 1 hops\n"
            "  --respawn             resident: start a fresh worker for a lost one's layers;\n"
            "                        it is re-prefilled and the route moves back\n"
            "  --worker-slowdown N   resident, a test knob: workers compute every pass N times\n"
            "  --sessions K          K generations at once (reference or resident arm), each on\n"
            "                        its own thread and KV cache, session k seeded seed + k;\n"
            "                        the text shown is session 0's; per-session latency and\n"
            "                        the aggregate tokens/s are reported, every session's\n"
            "                        tokens checked by the parity gate\n"
            LLM_CLI_GEN_USAGE
            LLM_CLI_SSD_USAGE
            "  --ctx under --arm ssd defaults to the prompt's tokens + -n (the plan counts the\n"
            "                        KV cache against the cap)\n"
            "  --parity              run the reference arm again (1 thread, one position per\n"
            "                        pass) and require identical token ids and logits digest\n"
            "  --kl-base OTHER.gguf  KL divergence and top-1 agreement of MODEL against OTHER\n"
            "                        at the generated positions (same tokens through both)\n"
            "  --out FILE.jsonl      append a result object (fields: docs/results.md)\n");
}

typedef struct {
    int print;
    int32_t *ids;                 /* generated ids (n_predict of room) */
    uint32_t n_ids, cap;
} s_sink;

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
                      s_sink *sink, engine_stats *st, char *err, size_t errlen)
{
    engine *e = engine_new(lm->m, lm->t, n_ctx, n_batch, threads, err, errlen);
    if (!e)
        return -1;
    engine_request q = { .prompt = prompt, .n_prompt = n_prompt, .max_tokens = o->n_predict,
                         .sampling = o->so, .stop = o->stops, .n_stop = o->n_stop,
                         .on_token = s_on_token, .user = sink };
    int rc = engine_generate(e, &q, st, err, errlen);
    engine_free(&e);
    return rc;
}

/* Sessions 1..K-1 of --sessions K: each on its own thread and engine over the same model
 * (llm.h: sessions may run on different threads), seeded seed + k, printing nothing. */
typedef struct {
    llm_cli_model *lm;
    const int32_t *prompt;
    uint32_t n_prompt, n_ctx;
    llm_cli_gen_opts o;
    s_sink sink;
    engine_stats st;
    char err[512];
    int rc, started;
    pthread_t th;
} s_extra;

static void *s_extra_main(void *arg)
{
    s_extra *e = arg;
    e->rc = s_generate(e->lm, e->prompt, e->n_prompt, &e->o, e->n_ctx, e->o.n_batch,
                       (int)e->o.threads, &e->sink, &e->st, e->err, sizeof e->err);
    return NULL;
}

static json_t *s_session_json(const engine_stats *st, uint64_t seed)
{
    char h[17];
    json_t *o = json_object();
    json_object_set_new(o, "seed", json_integer((json_int_t)seed));
    json_object_set_new(o, "tokens_out", json_integer(st->n_gen));
    snprintf(h, sizeof h, "%016" PRIx64, st->ids_digest);
    json_object_set_new(o, "ids_digest", json_string(h));
    snprintf(h, sizeof h, "%016" PRIx64, st->logits_digest);
    json_object_set_new(o, "logits_digest", json_string(h));
    json_object_set_new(o, "ttft_ms", json_real(st->ttft_ms));
    json_object_set_new(o, "itl_ms_p50", isfinite(st->itl_ms_p50) ? json_real(st->itl_ms_p50)
                                                                  : json_null());
    json_object_set_new(o, "itl_ms_p95", isfinite(st->itl_ms_p95) ? json_real(st->itl_ms_p95)
                                                                  : json_null());
    json_object_set_new(o, "gen_tok_s", isfinite(st->gen_tok_s) ? json_real(st->gen_tok_s)
                                                                : json_null());
    return o;
}

static void s_hex(uint64_t v, char out[17])
{
    snprintf(out, 17, "%016" PRIx64, v);
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

static json_t *s_num_or_null(double v)
{
    return v >= 0 ? json_real(v) : json_null();
}

/* The failovers of a resident run (fields: README, "generate"). */
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

static void s_failover_line(const llm_failover *f)
{
    double deg_s = f->degraded_ms / 1e3;
    char det[48] = "a loss not injected here";
    if (f->detection_ms >= 0)
        snprintf(det, sizeof det, "detected %.1f ms after the fault", f->detection_ms);
    char at[32] = "between passes";
    if (f->at_pos != LLM_NO_POS)
        snprintf(at, sizeof at, "at position %u", f->at_pos);
    fprintf(stderr, "failover %s (%s) %s: %s; %u sessions, %llu positions "
                    "replayed, caches whole %.1f ms after the loss; %llu positions degraded at "
                    "%.2f tok/s",
            f->worker, f->how, at, det, f->sessions_replayed, (unsigned long long)f->tokens_replayed, f->rebuild_ms,
            (unsigned long long)f->degraded_tokens, deg_s > 0 ? f->degraded_tokens / deg_s : 0);
    if (f->rejoin_ms >= 0)
        fprintf(stderr, "; rejoined %.1f ms after the loss (%llu positions re-prefilled in "
                        "%.1f ms)", f->rejoin_ms, (unsigned long long)f->reprefill_tokens,
                f->reprefill_ms);
    fputc('\n', stderr);
}

int cmd_generate(int argc, char **argv)
{
    const char *model = NULL, *prompt = NULL, *arm = "reference", *out = NULL, *kl_base = NULL;
    int parity = 0, ssd_flag = 0;
    const char *workers_s = "3", *wcap_s = "0", *sessions_s = "1";
    llm_swarm_opts rf = { .slowdown = 1 }; /* the resident flags: faults, respawn, slowdown */
    llm_cli_gen_opts o;
    llm_cli_ssd_flags sf;
    char err[768];
    llm_cli_gen_defaults(&o);
    llm_cli_ssd_init(&sf);
    for (int i = 1; i < argc; i++) {
        int r = llm_cli_gen_flag(&o, argc, argv, &i, err, sizeof err);
        if (!r && (r = llm_cli_ssd_flag(&sf, argc, argv, &i, err, sizeof err)) > 0)
            ssd_flag = 1;
        if (r < 0) {
            fprintf(stderr, "swarm generate: %s\n", err);
            return EXIT_USAGE;
        }
        if (r)
            continue;
        const char *f = argv[i];
        if (!strcmp(f, "--help") || !strcmp(f, "-h")) {
            s_usage(stdout);
            return EXIT_OK;
        } else if (!strcmp(f, "--parity")) {
            parity = 1;
        } else if ((!strcmp(f, "--workers") || !strcmp(f, "--worker-cap")) && i + 1 < argc) {
            *(!strcmp(f, "--workers") ? &workers_s : &wcap_s) = argv[++i];
        } else if (!strcmp(f, "--profile") && i + 1 < argc) {
            if (netem_profile_builtin(argv[++i], &rf.profile)) {
                fprintf(stderr, "swarm generate: unknown profile '%s' (profiles: none, lan, "
                                "wifi, wan)\n", argv[i]);
                return EXIT_USAGE;
            }
        } else if (!strcmp(f, "--sessions") && i + 1 < argc) {
            sessions_s = argv[++i];
        } else if (!strcmp(f, "--respawn")) {
            rf.respawn = 1;
        } else if (!strcmp(f, "--worker-slowdown") && i + 1 < argc) {
            if (llm_cli_u32(f, argv[++i], 1, 64, &rf.slowdown, err, sizeof err)) {
                fprintf(stderr, "swarm generate: %s\n", err);
                return EXIT_USAGE;
            }
        } else if ((!strcmp(f, "--kill-worker") || !strcmp(f, "--stop-worker") ||
                    !strcmp(f, "--cut-link")) && i + 1 < argc) {
            if (rf.n_faults == FAULT_MAX ||
                fault_parse(fault_kind_of_flag(f), argv[++i], "wI@TOKEN",
                            &rf.faults[rf.n_faults], err, sizeof err)) {
                fprintf(stderr, "swarm generate: %s: %s\n", f,
                        rf.n_faults == FAULT_MAX ? "too many faults" : err);
                return EXIT_USAGE;
            }
            if (rf.faults[rf.n_faults].at < 1) {
                fprintf(stderr, "swarm generate: %s %s: tokens count from 1\n", f, argv[i]);
                return EXIT_USAGE;
            }
            rf.n_faults++;
        } else if ((!strcmp(f, "--prompt") || !strcmp(f, "--arm") || !strcmp(f, "--out") ||
                    !strcmp(f, "--kl-base")) && i + 1 < argc) {
            const char *v = argv[++i];
            *(!strcmp(f, "--prompt") ? &prompt : !strcmp(f, "--arm") ? &arm
                                               : !strcmp(f, "--out") ? &out : &kl_base) = v;
        } else if (f[0] == '-') {
            fprintf(stderr, "swarm generate: unknown option or missing value '%s'\n", f);
            s_usage(stderr);
            return EXIT_USAGE;
        } else if (!model) {
            model = f;
        } else {
            fprintf(stderr, "swarm generate: unexpected argument '%s' (quote the prompt)\n", f);
            return EXIT_USAGE;
        }
    }
    if (!model || !prompt) {
        fprintf(stderr, "swarm generate: need MODEL and --prompt TEXT\n");
        s_usage(stderr);
        return EXIT_USAGE;
    }
    int resident = !strcmp(arm, "resident");
    uint32_t n_workers = 0;
    uint64_t wcap = 0;
    if (strcmp(arm, "reference") && strcmp(arm, "ssd") && !resident) {
        fprintf(stderr, "swarm generate: unknown arm '%s' (arms: reference, ssd, resident)\n",
                arm);
        return EXIT_USAGE;
    }
    if (llm_cli_u32("--workers", workers_s, 1, 8, &n_workers, err, sizeof err) ||
        util_parse_size(wcap_s, &wcap)) {
        fprintf(stderr, "swarm generate: %s\n", n_workers ? "--worker-cap: not a size" : err);
        return EXIT_USAGE;
    }
    if (!resident && (rf.n_faults || rf.respawn || rf.slowdown > 1 ||
                      !netem_profile_is_none(&rf.profile))) {
        fprintf(stderr, "swarm generate: --kill-worker, --stop-worker, --cut-link, --respawn, "
                        "--profile and --worker-slowdown are the resident arm's (add --arm "
                        "resident)\n");
        return EXIT_USAGE;
    }
    uint32_t n_sess = 1;
    if (llm_cli_u32("--sessions", sessions_s, 1, 64, &n_sess, err, sizeof err)) {
        fprintf(stderr, "swarm generate: %s\n", err);
        return EXIT_USAGE;
    }
    if (n_sess > 1 && (!strcmp(arm, "ssd") || kl_base)) {
        fprintf(stderr, "swarm generate: --sessions runs on the reference and resident arms, "
                        "without --kl-base (the SSD arm holds one session at a time)\n");
        return EXIT_USAGE;
    }
    if (resident && kl_base) {
        fprintf(stderr, "swarm generate: --kl-base runs with --arm reference only\n");
        return EXIT_USAGE;
    }
    /* the resident arm is checked against the reference arm on every run */
    if (resident)
        parity = 1;
    /* ssd_x is large (a run_result, paths): not for the stack */
    llm_ssd *x = calloc(1, sizeof *x);
    if (!x) {
        fprintf(stderr, "swarm generate: out of memory\n");
        return EXIT_FAIL;
    }
    x->on = !strcmp(arm, "ssd");
    x->tag = "generate";
    if (!x->on && ssd_flag) {
        fprintf(stderr, "swarm generate: --cap, --queue-depth, --chunk and --buffered are the "
                        "SSD arm's (add --arm ssd)\n");
        free(x);
        return EXIT_USAGE;
    }
    if (x->on && kl_base) {
        /* ppl_kl_span runs two models side by side: under the cap only one may run */
        fprintf(stderr, "swarm generate: --kl-base runs with --arm reference only\n");
        free(x);
        return EXIT_USAGE;
    }
    if (x->on && llm_cli_ssd_opts(&sf, model, &x->lo, x->from, sizeof x->from, err,
                                  sizeof err)) {
        fprintf(stderr, "swarm generate: %s\n", err);
        free(x);
        return EXIT_USAGE;
    }

    arm_install_signals(); /* INT/TERM: stop at the next token or join step, write no result */
    int rc = EXIT_FAIL;
    llm_swarm *sw = NULL;
    partition_llm_plan *plan = NULL; /* the resident arm's, kept for the result */
    uint64_t acts = 0, wire = 0;
    llm_failover *fos = NULL; /* the resident arm's failovers, kept for the result */
    llm_worker_status wst[8]; /* the resident arm's workers, as they ended */
    uint32_t n_wst = 0, n_fo_st = 0;
    const char *transport = "loopback"; /* spawned workers; listed: plaintext or curve */
    int shared_core = -1;     /* the core coordinator and workers share (llm_swarm_cpu) */
    s_extra *extra = NULL;    /* sessions 1.. of --sessions */
    uint32_t n_fo = 0;
    llm_cli_model lm, base = { 0 }, ref = { 0 };
    int32_t *ids = NULL;
    size_t n_ids = 0;
    s_sink sink = { .print = 1 }, sink2 = { 0 };
    json_t *j = NULL;
    uint64_t io0 = util_io_read_bytes(), t_setup = util_now_ns();
    /* the resident and SSD arms open the tokenizer alone: the weights are the arm's (the
     * parity run maps the reference afterwards) */
    if (x->on || resident ? llm_cli_open_tok(&lm, model, err, sizeof err)
                          : llm_cli_open(&lm, model, err, sizeof err)) {
        fprintf(stderr, "swarm generate: %s\n", err);
        free(x);
        return EXIT_FAIL;
    }
    uint32_t n_ctx = 0;
    unsigned flags = o.no_bos ? 0 : TOKENIZER_ADD_SPECIAL;
    if (resident && o.n_ctx > lm.n_ctx_train) {
        fprintf(stderr, "swarm generate: --ctx %u: %s was trained for %u positions at most\n",
                o.n_ctx, lm.path, lm.n_ctx_train);
        goto out;
    }
    if (resident) /* as llm_cli_ctx: the file's context, at most 4096 */
        n_ctx = o.n_ctx ? o.n_ctx : lm.n_ctx_train < 4096 ? lm.n_ctx_train : 4096;
    if ((!x->on && !resident && llm_cli_ctx(&o, lm.m, &n_ctx, err, sizeof err)) ||
        tokenizer_encode(lm.t, prompt, strlen(prompt), flags, &ids, &n_ids, err, sizeof err)) {
        fprintf(stderr, "swarm generate: %s\n", err);
        goto out;
    }
    if (x->on) {
        /* the SSD plan counts the KV cache against the cap: sized for this request unless
         * --ctx says otherwise (a prompt that does not fit is the engine's clear error) */
        uint64_t need = n_ids + (uint64_t)o.n_predict;
        if (o.n_ctx > lm.n_ctx_train) {
            fprintf(stderr, "swarm generate: --ctx %u: %s was trained for %u positions at "
                            "most\n", o.n_ctx, lm.path, lm.n_ctx_train);
            goto out;
        }
        n_ctx = o.n_ctx ? o.n_ctx : need < lm.n_ctx_train ? (uint32_t)need : lm.n_ctx_train;
        if (llm_ssd_open(x, &lm, n_ctx, o.n_batch, err, sizeof err)) {
            fprintf(stderr, "swarm generate: ssd arm: %s\n", err);
            goto out;
        }
    }
    if (resident) {
        char self[4096];
        ssize_t sl = readlink("/proc/self/exe", self, sizeof self - 1);
        self[sl > 0 ? sl : 0] = 0;
        llm_swarm_opts so = rf;
        so.model = lm.path;
        so.self_exe = self;
        so.workers = n_workers;
        so.cap_bytes = wcap;
        so.sessions = n_sess;
        so.n_ctx = n_ctx;
        so.max_batch = o.n_batch;
        so.threads = (int)o.threads;
        so.seed = o.so.seed;
        /* a config that lists workers: those, at their endpoints, not spawned ones */
        if (llm_cli_hosts(model, &so, err, sizeof err)) {
            fprintf(stderr, "swarm generate: resident arm: %s\n", err);
            rc = EXIT_USAGE;
            goto out;
        }
        if (so.n_hosts)
            transport = so.key_pub[0] ? "curve" : "plaintext";
        /* generated token t is drawn from the pass over position n_ids + t - 2 (the first
         * from the prompt's last position) */
        for (uint32_t k = 0; k < so.n_faults; k++)
            so.faults[k].at = (uint64_t)n_ids + so.faults[k].at - 2 + (so.faults[k].at == 1);
        if (!(sw = llm_swarm_new(&so, err, sizeof err))) {
            fprintf(stderr, "swarm generate: resident arm: %s\n", err);
            rc = EXIT_USAGE;
            goto out;
        }
        const partition_llm_plan *pl = llm_swarm_plan(sw);
        shared_core = llm_swarm_cpu(sw);
        n_wst = llm_swarm_status(sw, wst, 8, &n_fo_st);
        for (uint32_t i = 0; i < pl->n_workers; i++)
            fprintf(stderr, "%s%s%s: layers [%u, %u), %.1f MiB planned%s\n",
                    i < n_wst ? wst[i].id : "w", i < n_wst && wst[i].endpoint[0] ? " at " : "",
                    i < n_wst ? wst[i].endpoint : "", pl->first[i], pl->last[i],
                    pl->need[i] / 1048576.0, so.n_hosts && so.key_pub[0] ? " (CURVE)" : "");
        llm_layers_hook h;
        llm_swarm_hook(sw, &h);
        llm_opts lo = { .arm = LLM_ARM_RESIDENT, .hook = &h };
        llm_model *rm = llm_model_open_opts(lm.path, &lo, err, sizeof err);
        if (!rm) {
            fprintf(stderr, "swarm generate: resident arm: %s\n", err);
            goto out;
        }
        lm.m = rm; /* held past the swarm (its hook is not called once no session lives) */
    }
    double setup_ms = (double)(util_now_ns() - t_setup) / 1e6;
    const arch_model *am = llm_model_arch(lm.m);
    if (n_ids == 0) {
        fprintf(stderr, "swarm generate: the prompt is empty and no BOS is added (drop "
                        "--no-bos or give a prompt)\n");
        goto out;
    }
    sink.cap = sink2.cap = o.n_predict;
    sink.ids = malloc(o.n_predict * sizeof *sink.ids);
    sink2.ids = malloc(o.n_predict * sizeof *sink2.ids);
    if (!sink.ids || !sink2.ids) {
        fprintf(stderr, "swarm generate: out of memory\n");
        goto out;
    }
    engine_stats st, st2;
    if (n_sess > 1 && !(extra = calloc(n_sess - 1, sizeof *extra))) {
        fprintf(stderr, "swarm generate: out of memory\n");
        goto out;
    }
    uint64_t t_gen = util_now_ns();
    for (uint32_t k = 1; k < n_sess; k++) {
        s_extra *e = &extra[k - 1];
        *e = (s_extra){ .lm = &lm, .prompt = ids, .n_prompt = (uint32_t)n_ids, .n_ctx = n_ctx,
                        .o = o, .sink = { .cap = o.n_predict } };
        e->o.so.seed = o.so.seed + k;
        if (!(e->sink.ids = malloc(o.n_predict * sizeof *e->sink.ids)) ||
            pthread_create(&e->th, NULL, s_extra_main, e)) {
            fprintf(stderr, "swarm generate: cannot start session %u\n", k);
            goto out;
        }
        e->started = 1;
    }
    int grc = s_generate(&lm, ids, (uint32_t)n_ids, &o, n_ctx, o.n_batch, (int)o.threads,
                         &sink, &st, err, sizeof err);
    for (uint32_t k = 1; k < n_sess; k++) {
        pthread_join(extra[k - 1].th, NULL);
        extra[k - 1].started = 0;
        if (!grc && extra[k - 1].rc) {
            snprintf(err, sizeof err, "session %u: %s", k, extra[k - 1].err);
            grc = -1;
        }
    }
    double gen_wall_ms = (double)(util_now_ns() - t_gen) / 1e6;
    if (grc) {
        fprintf(stderr, "\nswarm generate: %s\n", err);
        goto out;
    }
    if (arm_stop) { /* cut short: no gate can judge it, so nothing is written */
        fprintf(stderr, "\nswarm generate: interrupted after %u generated tokens; no result "
                        "written\n", st.n_gen);
        goto out;
    }
    putchar('\n');
    fflush(stdout);
    uint64_t all_gen = st.n_gen;
    for (uint32_t k = 1; k < n_sess; k++) {
        const engine_stats *q = &extra[k - 1].st;
        all_gen += q->n_gen;
        fprintf(stderr, "session %u: generated %u: ttft %.2f ms, %.2f tok/s, itl p50 %.2f p95 "
                        "%.2f ms\n", k, q->n_gen, q->ttft_ms, q->gen_tok_s, q->itl_ms_p50,
                q->itl_ms_p95);
    }
    double agg_tok_s = gen_wall_ms > 0 ? all_gen / (gen_wall_ms / 1e3) : 0;
    fprintf(stderr, "%u session%s: %llu tokens generated in %.1f ms: %.2f tok/s aggregate\n",
            n_sess, n_sess > 1 ? "s" : "", (unsigned long long)all_gen, gen_wall_ms, agg_tok_s);
    uint64_t coord_rss = util_vmhwm_bytes(0), workers_rss = 0, io_gen = util_io_read_bytes();
    if (sw) {
        /* The swarm ends before the parity run: the workers' memory is not the parity
         * reference's to sit beside. Peaks first: the coordinator's before it maps the
         * reference, the workers' before they exit. */
        workers_rss = llm_swarm_workers_rss(sw);
        n_wst = llm_swarm_status(sw, wst, 8, &n_fo_st);
        for (uint32_t i = 0; i < n_wst; i++)
            if (wst[i].acts)
                fprintf(stderr, "%s: %llu acts: compute %.2f ms an act, waiting %.3f, "
                        "(de)serialising and sending %.3f\n", wst[i].id,
                        (unsigned long long)wst[i].acts, wst[i].compute_ms / wst[i].acts,
                        wst[i].wait_ms / wst[i].acts, wst[i].io_ms / wst[i].acts);
        if ((plan = malloc(sizeof *plan)))
            *plan = *llm_swarm_plan(sw);
        llm_swarm_counts(sw, &acts, &wire);
        const llm_failover *fo = llm_swarm_failovers(sw, &n_fo);
        if (n_fo && (fos = malloc(n_fo * sizeof *fos)))
            memcpy(fos, fo, n_fo * sizeof *fos);
        for (uint32_t k = 0; fos && k < n_fo; k++)
            s_failover_line(&fos[k]);
        llm_swarm_free(&sw);
    }
    if (x->on) {
        llm_ssd_judge(x, lm.m);
        /* the parity reference maps the whole file: not under the SSD arm's cap */
        llm_ssd_leave(x);
    }
    fprintf(stderr, "%s: %s, ctx %u, %u threads; prompt %u tokens in %.1f ms (%.2f tok/s); "
                    "generated %u (%s): ttft %.2f ms, %.2f tok/s, itl p50 %.2f p95 %.2f p99 "
                    "%.2f ms\n", lm.path, am->hp.name, n_ctx, o.threads, st.n_prompt,
            st.prompt_ms, st.prompt_tok_s, st.n_gen, engine_finish_name(st.finish), st.ttft_ms,
            st.gen_tok_s, st.itl_ms_p50, st.itl_ms_p95, st.itl_ms_p99);

    gate_state gate_parity = GATE_NA;
    char void_reason[768] = "";
    if (parity) {
        /* The reference arm again with what can differ set apart: one thread and one
         * position per pass (arch.h's determinism says neither may change a bit), and under
         * --arm ssd the arm itself. */
        llm_cli_model *pm = &lm;
        if (x->on || resident) {
            ref.t = lm.t; /* borrowed: ref.m alone is freed */
            if (!(ref.m = llm_model_open(lm.path, err, sizeof err))) {
                fprintf(stderr, "swarm generate: parity reference: %s\n", err);
                goto out;
            }
            pm = &ref;
        }
        if (s_generate(pm, ids, (uint32_t)n_ids, &o, n_ctx, 1, 1, &sink2, &st2, err,
                       sizeof err)) {
            fprintf(stderr, "swarm generate: parity run: %s\n", err);
            goto out;
        }
        int same = st2.ids_digest == st.ids_digest && st2.logits_digest == st.logits_digest &&
                   st2.n_gen == st.n_gen;
        /* every other session against the reference with its seed (greedy: the same run) */
        for (uint32_t k = 1; same && k < n_sess; k++) {
            engine_stats st3 = st2;
            const engine_stats *q = &extra[k - 1].st;
            if (o.so.temperature > 0) {
                llm_cli_gen_opts ok = o;
                ok.so.seed = o.so.seed + k;
                sink2.n_ids = 0;
                if (s_generate(pm, ids, (uint32_t)n_ids, &ok, n_ctx, 1, 1, &sink2, &st3, err,
                               sizeof err)) {
                    fprintf(stderr, "swarm generate: parity run, session %u: %s\n", k, err);
                    goto out;
                }
            }
            if (st3.ids_digest != q->ids_digest || st3.logits_digest != q->logits_digest ||
                st3.n_gen != q->n_gen) {
                same = 0;
                snprintf(void_reason, sizeof void_reason, "parity: session %u: %u tokens ids "
                         "%016" PRIx64 " logits %016" PRIx64 " vs reference arm (1 thread, "
                         "batch 1) %u tokens ids %016" PRIx64 " logits %016" PRIx64, k,
                         q->n_gen, q->ids_digest, q->logits_digest, st3.n_gen, st3.ids_digest,
                         st3.logits_digest);
            }
        }
        gate_parity = same ? GATE_PASS : GATE_VOID;
        if (!same && !void_reason[0])
            snprintf(void_reason, sizeof void_reason, "parity: %u tokens ids %016" PRIx64
                     " logits %016" PRIx64 " vs reference arm (1 thread, batch 1) %u tokens ids "
                     "%016" PRIx64 " logits %016" PRIx64, st.n_gen, st.ids_digest,
                     st.logits_digest, st2.n_gen, st2.ids_digest, st2.logits_digest);
        fprintf(stderr, "parity: %s%s%s\n", result_gate_name(gate_parity),
                same ? n_sess > 1 ? " (every session's token ids and logits identical to "
                                    "the reference arm, 1 thread, batch 1)"
                                  : " (token ids and logits identical to the reference arm, 1 "
                                    "thread, batch 1)"
                     : ": ",
                void_reason);
    }
    ppl_result kl;
    int have_kl = 0;
    if (kl_base && sink.n_ids) {
        if (llm_cli_open(&base, kl_base, err, sizeof err)) {
            fprintf(stderr, "swarm generate: --kl-base: %s\n", err);
            goto out;
        }
        /* prompt + every generated token but the last: the positions whose logits drew them */
        int32_t *seq = realloc(ids, (n_ids + sink.n_ids) * sizeof *ids);
        if (!seq)
            goto out;
        ids = seq;
        memcpy(ids + n_ids, sink.ids, sink.n_ids * sizeof *ids);
        uint32_t L = (uint32_t)(n_ids + sink.n_ids - 1);
        if (ppl_kl_span(lm.m, base.m, ids, L, (uint32_t)n_ids - 1, o.n_batch, (int)o.threads,
                        &kl, err, sizeof err)) {
            fprintf(stderr, "swarm generate: --kl-base: %s\n", err);
            goto out;
        }
        have_kl = 1;
        fprintf(stderr, "KL vs %s over %" PRIu64 " generated positions: mean %.6g p99 %.6g max "
                        "%.6g, top-1 agreement %.4f\n", base.path, kl.n_scored, kl.kl_mean,
                kl.kl_p99, kl.kl_max, kl.top1_agree);
    }
    /* every void reason in one line: the SSD gates' first, then parity's */
    int voided = gate_parity == GATE_VOID || x->rr.gate_cache == GATE_VOID ||
                 x->rr.gate_content == GATE_VOID;
    if (x->rr.void_reason[0]) {
        char pr[sizeof void_reason];
        snprintf(pr, sizeof pr, "%s", void_reason);
        snprintf(void_reason, sizeof void_reason, "%s%s%s", x->rr.void_reason,
                 pr[0] ? "; " : "", pr);
    }
    if (out) {
        char h1[17], h2[17];
        json_t *gates = json_object(), *stops = json_array(), *smp = json_object();
        j = json_object();
        s_hex(st.ids_digest, h1);
        s_hex(st.logits_digest, h2);
        for (uint32_t i = 0; i < o.n_stop; i++)
            json_array_append_new(stops, json_string(o.stops[i]));
        json_object_set_new(smp, "temperature", json_real(o.so.temperature));
        json_object_set_new(smp, "top_k", json_integer(o.so.top_k));
        json_object_set_new(smp, "top_p", json_real(o.so.top_p));
        json_object_set_new(smp, "min_p", json_real(o.so.min_p));
        json_object_set_new(smp, "repeat_penalty", json_real(o.so.repeat_penalty));
        json_object_set_new(smp, "seed", json_integer((json_int_t)o.so.seed));
        json_object_set_new(gates, "parity", json_string(result_gate_name(gate_parity)));
        json_object_set_new(gates, "cache", json_string(result_gate_name(x->rr.gate_cache)));
        json_object_set_new(gates, "content",
                            json_string(result_gate_name(x->rr.gate_content)));
        json_object_set_new(j, "command", json_string("generate"));
        json_object_set_new(j, "arm", json_string(arm));
        if (plan) {
            json_t *ws = json_array();
            for (uint32_t i = 0; i < plan->n_workers; i++) {
                json_t *w = json_object();
                json_object_set_new(w, "first", json_integer(plan->first[i]));
                json_object_set_new(w, "last", json_integer(plan->last[i]));
                json_object_set_new(w, "need_bytes", json_integer((json_int_t)plan->need[i]));
                if (i < n_wst) {
                    const llm_worker_status *ws1 = &wst[i];
                    json_object_set_new(w, "id", json_string(ws1->id));
                    json_object_set_new(w, "endpoint", ws1->endpoint[0]
                                                           ? json_string(ws1->endpoint)
                                                           : json_null());
                    json_object_set_new(w, "state", json_string(ws1->state));
                    json_object_set_new(w, "load_ms", json_real(ws1->load_ms));
                    json_object_set_new(w, "fetched_bytes",
                                        json_integer((json_int_t)ws1->fetched_bytes));
                    json_object_set_new(w, "resumed_bytes",
                                        json_integer((json_int_t)ws1->resumed_bytes));
                    json_object_set_new(w, "fetch_ms", json_real(ws1->fetch_ms));
                    json_object_set_new(w, "acts", json_integer((json_int_t)ws1->acts));
                    json_object_set_new(w, "wait_ms", json_real(ws1->wait_ms));
                    json_object_set_new(w, "compute_ms", json_real(ws1->compute_ms));
                    json_object_set_new(w, "io_ms", json_real(ws1->io_ms));
                }
                json_array_append_new(ws, w);
            }
            json_object_set_new(j, "workers", ws);
            json_object_set_new(j, "embedding_at", json_string(plan->embedding_at));
            json_object_set_new(j, "transport", json_string(transport));
            json_object_set_new(j, "shared_core", shared_core >= 0
                                                      ? json_integer(shared_core) : json_null());
            json_object_set_new(j, "head_at", json_string(plan->head_at));
            json_object_set_new(j, "worker_cap_bytes", json_integer((json_int_t)wcap));
            json_object_set_new(j, "acts", json_integer((json_int_t)acts));
            json_object_set_new(j, "failovers", s_failovers_json(fos, fos ? n_fo : 0));
            json_object_set_new(j, "profile", json_string(netem_profile_is_none(&rf.profile)
                                                              ? "none" : rf.profile.name));
            json_object_set_new(j, "wire_bytes", json_integer((json_int_t)wire));
        }
        json_object_set_new(j, "model", json_string(lm.path));
        json_object_set_new(j, "architecture", json_string(am->hp.name));
        json_object_set_new(j, "tensor_types", s_tensor_types(am));
        json_object_set_new(j, "ctx", json_integer(n_ctx));
        json_object_set_new(j, "n_batch", json_integer(o.n_batch));
        json_object_set_new(j, "threads", json_integer(o.threads));
        json_object_set_new(j, "sampling", smp);
        json_object_set_new(j, "stop", stops);
        json_t *per = json_array();
        json_array_append_new(per, s_session_json(&st, o.so.seed));
        for (uint32_t k = 1; k < n_sess; k++)
            json_array_append_new(per, s_session_json(&extra[k - 1].st, o.so.seed + k));
        json_object_set_new(j, "sessions", json_integer(n_sess));
        json_object_set_new(j, "per_session", per);
        json_object_set_new(j, "gen_wall_ms", json_real(gen_wall_ms));
        json_object_set_new(j, "aggregate_gen_tok_s", json_real(agg_tok_s));
        json_object_set_new(j, "tokens_in", json_integer(st.n_prompt));
        json_object_set_new(j, "tokens_out", json_integer(st.n_gen));
        json_object_set_new(j, "finish_reason", json_string(engine_finish_name(st.finish)));
        json_object_set_new(j, "setup_ms", json_real(setup_ms));
        json_object_set_new(j, "prompt_ms", json_real(st.prompt_ms));
        json_object_set_new(j, "ttft_ms", json_real(st.ttft_ms));
        json_object_set_new(j, "itl_ms_p50", isfinite(st.itl_ms_p50) ? json_real(st.itl_ms_p50)
                                                                     : json_null());
        json_object_set_new(j, "itl_ms_p95", isfinite(st.itl_ms_p95) ? json_real(st.itl_ms_p95)
                                                                     : json_null());
        json_object_set_new(j, "itl_ms_p99", isfinite(st.itl_ms_p99) ? json_real(st.itl_ms_p99)
                                                                     : json_null());
        json_object_set_new(j, "prompt_tok_s", isfinite(st.prompt_tok_s)
                                                   ? json_real(st.prompt_tok_s) : json_null());
        json_object_set_new(j, "gen_tok_s", isfinite(st.gen_tok_s) ? json_real(st.gen_tok_s)
                                                                   : json_null());
        json_object_set_new(j, "weight_bytes",
                            json_integer((json_int_t)llm_model_weight_bytes(lm.m)));
        json_object_set_new(j, "pass_bytes", json_integer((json_int_t)llm_model_pass_bytes(lm.m)));
        /* one process's peak, or under the resident arm the coordinator's (before the
         * parity run) and its workers' (live ones, read before they exit) */
        uint64_t own = x->on ? x->peak_rss : resident ? coord_rss : util_vmhwm_bytes(0);
        json_object_set_new(j, "peak_rss_bytes", json_integer((json_int_t)own));
        if (resident) {
            json_object_set_new(j, "workers_peak_rss_bytes", json_integer((json_int_t)workers_rss));
        }
        json_object_set_new(j, "aggregate_peak_rss_bytes",
                            json_integer((json_int_t)(own + workers_rss)));
        json_object_set_new(j, "cap_bytes", json_integer((json_int_t)(x->on ? x->lo.cap_bytes
                                                                             : 0)));
        /* ssd: storage reads during the generation (what the cache gate judged); reference:
         * since the command began (the mapping's faults, when the file was not cached);
         * resident: the coordinator's until the generation ended (not the parity run's) */
        json_object_set_new(j, "ssd_read_bytes",
                            json_integer((json_int_t)(x->on ? x->io1 - x->io0
                                                      : resident ? io_gen - io0
                                                                 : util_io_read_bytes() - io0)));
        if (x->on)
            llm_ssd_json(j, x, lm.m);
        else
            json_object_set_new(j, "cap_mode", json_string("none"));
        json_object_set_new(j, "gates", gates);
        json_object_set_new(j, "void", json_boolean(voided));
        json_object_set_new(j, "void_reason", json_string(void_reason));
        json_object_set_new(j, "ids_digest", json_string(h1));
        json_object_set_new(j, "logits_digest", json_string(h2));
        if (have_kl) {
            json_t *k = json_object();
            json_object_set_new(k, "base", json_string(base.path));
            json_object_set_new(k, "positions", json_integer((json_int_t)kl.n_scored));
            json_object_set_new(k, "kl_mean", json_real(kl.kl_mean));
            json_object_set_new(k, "kl_p99", json_real(kl.kl_p99));
            json_object_set_new(k, "kl_max", json_real(kl.kl_max));
            json_object_set_new(k, "top1_agree", json_real(kl.top1_agree));
            json_object_set_new(j, "kl", k);
        }
        json_object_set_new(j, "git_rev", json_string(util_git_rev()));
        json_object_set_new(j, "unix_time",
                            json_integer((json_int_t)(util_wall_ns() / 1000000000ull)));
        if (result_append_jsonl(out, j, err, sizeof err)) {
            fprintf(stderr, "swarm generate: %s\n", err);
            goto out;
        }
    }
    if (voided)
        fprintf(stderr, "swarm generate: the run is void: %s\n", void_reason);
    rc = voided ? EXIT_VOID : EXIT_OK;
out:
    if (x->on)
        llm_ssd_leave(x); /* safe twice, and on an advisory cap */
    llm_model_free(&ref.m);
    free(x);
    json_decref(j);
    free(ids);
    free(sink.ids);
    free(sink2.ids);
    for (uint32_t k = 1; extra && k < n_sess; k++) {
        if (extra[k - 1].started)
            pthread_join(extra[k - 1].th, NULL);
        free(extra[k - 1].sink.ids);
    }
    free(extra);
    llm_cli_close(&base);
    if (sw) { /* a failure before the swarm ended: the model's sessions end on it first */
        llm_model_free(&lm.m);
        llm_swarm_free(&sw);
    }
    free(plan);
    free(fos);
    llm_cli_close(&lm);
    quant_pool_shutdown();
    return rc;
}
