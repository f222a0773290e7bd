/* cmd_run.c — `swarm run`: one arm of the dense lab on a config: parse, build, run, report.
 * cli/ */
#include <errno.h>
#include <getopt.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "arch/model.h"
#include "base/exitcode.h"
#include "base/log.h"
#include "cli/cmd.h"
#include "dist/arm.h"
#include "dist/config.h"
#include "runtime/exec.h"
#include "runtime/result.h"

static void s_run_usage(void)
{
    printf(
        "usage: swarm run [CONFIG] --arm reference|ssd|resident|quantized [options]\n"
        "  Runs one arm for N steps, prints a table, appends one JSON object to --out.\n"
        "  --steps N            steps (default: [run] steps, 32)\n"
        "  --out FILE.jsonl     append the result here (default: none)\n"
        "  --model FILE         an existing model file instead of [model] path; never\n"
        "                       generated (make one with swarm gen). A missing [model] path\n"
        "                       is generated only when the config says [model] generate = 1\n"
        "  --cap SIZE           working-set cap (e.g. 600M, 20M)\n"
        "  --set SEC.KEY=VAL    override any config key (repeatable)\n"
        "  --buffered           ssd arm: buffered reads (labelled; the cache gate judges)\n"
        "  --no-parity          skip the in-process reference run (parity gate n/a;\n"
        "                       for --arm quantized the quality gate n/a)\n"
        "  --arm quantized      every layer resident under [ssd] cap with W in [quantized]\n"
        "                       type (MODEL.TYPE.gguf beside the model, made when missing\n"
        "                       if the model may be generated); quality gate, not parity\n"
        "  --profile NAME       resident arm: link profile on each data link\n"
        "  --inflight K         resident arm: steps in the pipeline at once\n"
        "  --workers N          resident arm: local workers to spawn\n"
        "  --kill-worker ID@STEP, --stop-worker ID@STEP:SECONDS, --cut-link ID@STEP:SECONDS\n"
        "                       resident arm: inject a fault from the coordinator side\n"
        "  --respawn            resident arm: respawn a lost local worker; it rejoins\n"
        "  --dump-inputs FILE   raw inputs, steps x dim little-endian f32, no header\n"
        "  --dump-outputs FILE  raw outputs, same layout\n"
        "  --quiet              no progress line\n"
        "exit: 0 ok, 1 error, 2 usage/config, 3 a gate voided the result, 4 fallback budget\n");
}

static int s_dump(const char *path, const float *v, uint64_t n)
{
    FILE *f = fopen(path, "wb");
    if (!f || fwrite(v, sizeof(float), n, f) != n) {
        log_error("%s: cannot write: %s", path, strerror(errno));
        if (f)
            fclose(f);
        return -1;
    }
    return fclose(f) ? -1 : 0;
}

static int s_parse_fault(arm_ctx *a, fault_kind k, const char *s)
{
    char err[256];
    if (a->n_faults >= FAULT_MAX ||
        fault_parse(k, s, "ID@STEP", &a->faults[a->n_faults], err, sizeof err))
        return -1;
    a->n_faults++;
    return 0;
}

/* A positive integer flag up to hi, all of it a number. 0 / -1 with a message on stderr. */
static int s_flag_u32(const char *flag, const char *v, uint32_t hi, uint32_t *out)
{
    char *end;
    errno = 0;
    unsigned long x = strtoul(v, &end, 10);
    if (errno || end == v || *end || v[0] == '-' || !x || x > hi) {
        fprintf(stderr, "swarm run: %s: '%s' must be an integer in 1..%u\n", flag, v, hi);
        return -1;
    }
    *out = (uint32_t)x;
    return 0;
}

/* Fault flags name workers: listed [worker.NAME] sections, or w0..w(N-1) when spawned. A name
 * that matches none would silently inject nothing, so it is refused with the names there are. */
static int s_check_faults(const arm_ctx *a, const config_t *cfg, const char *arm)
{
    char names[1024] = "";
    uint32_t n = cfg->n_workers ? cfg->n_workers : cfg->workers;
    if (!a->n_faults)
        return 0;
    if (strcmp(arm, "resident")) {
        fprintf(stderr, "swarm run: --kill-worker, --stop-worker and --cut-link need --arm "
                "resident (workers to fault), not --arm %s\n", arm);
        return -1;
    }
    for (uint32_t k = 0; k < a->n_faults; k++) {
        int found = 0;
        names[0] = 0;
        for (uint32_t i = 0; i < n; i++) {
            char id[80];
            if (cfg->n_workers)
                snprintf(id, sizeof id, "%s", cfg->worker[i].name);
            else
                snprintf(id, sizeof id, "w%u", i);
            found |= !strcmp(id, a->faults[k].worker);
            if (strlen(names) + strlen(id) + 3 < sizeof names)
                snprintf(names + strlen(names), sizeof names - strlen(names), "%s%s",
                         i ? ", " : "", id);
        }
        if (!found) {
            fprintf(stderr, "swarm run: unknown worker '%s' in a fault flag (workers: %s)\n",
                    a->faults[k].worker, names);
            return -1;
        }
    }
    return 0;
}

/* The command line, parsed. */
typedef struct {
    const char *arm, *out, *dump_in, *dump_out, *profile, *model_flag;
    const char *sets[64];         /* --set, and the flags that are config keys */
    int nsets, parity, quiet;
    uint32_t steps, inflight, workers;
} s_opts;

/* --model, --cap, --buffered and --set are config overrides, applied in order. */
static int s_add_set(s_opts *o, int c, const char *v)
{
    static char buf[64][PATH_MAX + 32];
    if (c == 'm')
        o->model_flag = v;
    else if (c == 'S' && !strncmp(v, "model.path=", 11))
        o->model_flag = NULL; /* the later one wins, as in the config */
    if (o->nsets >= 64) {
        fprintf(stderr, "swarm run: too many overrides\n");
        return -1;
    }
    snprintf(buf[o->nsets], sizeof buf[o->nsets], "%s%s",
             c == 'm' ? "model.path=" : c == 'c' ? "ssd.cap=" : c == 'b' ? "ssd.io=" : "",
             c == 'b' ? "buffered" : v);
    o->sets[o->nsets] = buf[o->nsets];
    o->nsets++;
    if (c == 'c' && o->nsets < 64) { /* one cap for every capped process */
        snprintf(buf[o->nsets], sizeof buf[o->nsets], "swarm.cap=%s", v);
        o->sets[o->nsets] = buf[o->nsets];
        o->nsets++;
    }
    return 0;
}

/* EXIT_OK after --help, EXIT_USAGE (printed), or -1: parsed, go on. */
static int s_parse(s_opts *o, arm_ctx *a, int argc, char **argv)
{
    static const struct option opts[] = {
        { "arm", required_argument, 0, 'a' },      { "steps", required_argument, 0, 'n' },
        { "out", required_argument, 0, 'o' },      { "model", required_argument, 0, 'm' },
        { "cap", required_argument, 0, 'c' },      { "set", required_argument, 0, 'S' },
        { "buffered", no_argument, 0, 'b' },       { "no-parity", no_argument, 0, 'P' },
        { "profile", required_argument, 0, 'p' },  { "inflight", required_argument, 0, 'i' },
        { "workers", required_argument, 0, 'w' },  { "dump-inputs", required_argument, 0, 'I' },
        { "dump-outputs", required_argument, 0, 'O' }, { "quiet", no_argument, 0, 'q' },
        { "kill-worker", required_argument, 0, 'K' }, { "stop-worker", required_argument, 0, 'T' },
        { "cut-link", required_argument, 0, 'C' }, { "help", no_argument, 0, 'h' },
        { "respawn", no_argument, 0, 'R' },
        { 0, 0, 0, 0 }
    };
    int c;
    optind = 1;
    while ((c = getopt_long(argc, argv, "h", opts, NULL)) != -1) {
        switch (c) {
        case 'a': o->arm = optarg; break;
        case 'n':
            if (s_flag_u32("--steps", optarg, 1000000, &o->steps))
                return EXIT_USAGE;
            break;
        case 'o': o->out = optarg; break;
        case 'm': case 'c': case 'b': case 'S':
            if (s_add_set(o, c, optarg))
                return EXIT_USAGE;
            break;
        case 'P': o->parity = 0; break;
        case 'R': o->sets[o->nsets++] = "swarm.respawn=1"; break;
        case 'p': o->profile = optarg; break;
        case 'i':
            if (s_flag_u32("--inflight", optarg, 64, &o->inflight))
                return EXIT_USAGE;
            break;
        case 'w':
            if (s_flag_u32("--workers", optarg, CONFIG_MAX_WORKERS, &o->workers))
                return EXIT_USAGE;
            break;
        case 'I': o->dump_in = optarg; break;
        case 'O': o->dump_out = optarg; break;
        case 'q': o->quiet = 1; break;
        case 'K': case 'T': case 'C':
            if (s_parse_fault(a, c == 'K' ? FAULT_KILL : c == 'T' ? FAULT_STOP : FAULT_CUT,
                              optarg)) {
                fprintf(stderr, "swarm run: bad fault '%s' (ID@STEP, ID@STEP:SECONDS)\n", optarg);
                return EXIT_USAGE;
            }
            break;
        case 'h': s_run_usage(); return EXIT_OK;
        default: return EXIT_USAGE;
        }
    }
    return -1;
}

/* The config (file, then overrides, then flags) and the arm's checks. 0 / -1 (printed). */
static int s_configure(const s_opts *o, arm_ctx *a, config_t *cfg, int argc, char **argv)
{
    char err[1024];
    if (optind < argc && config_load(cfg, argv[optind], err, sizeof err))
        goto err;
    /* a text-lab config names a real model, which `run` (the dense model's steps) cannot run:
     * its [model] defaults would otherwise send it looking for the lab's dense file */
    if (optind < argc && cfg->llm.on) {
        fprintf(stderr, "swarm run: %s is a text-lab config ([llm] model %s): run it with `swarm "
                "lab %s`, or generate from its model with `swarm generate %s`\n", argv[optind],
                cfg->llm.model, argv[optind], argv[optind]);
        return -1;
    }
    for (int i = 0; i < o->nsets; i++)
        if (config_set(cfg, o->sets[i], err, sizeof err))
            goto err;
    if (!o->arm) {
        fprintf(stderr, "swarm run: --arm is required (arms: reference, ssd, resident, "
                "quantized)\n");
        return -1;
    }
    if (strcmp(o->arm, "reference") && strcmp(o->arm, "ssd") && strcmp(o->arm, "resident") &&
        strcmp(o->arm, "quantized")) {
        fprintf(stderr, "swarm run: unknown arm '%s' (arms: reference, ssd, resident, "
                "quantized)\n", o->arm);
        return -1;
    }
    if (o->steps)
        cfg->steps = o->steps;
    if (o->inflight)
        cfg->inflight = o->inflight;
    if (o->workers)
        cfg->workers = o->workers;
    if (o->profile)
        snprintf(cfg->profile, sizeof cfg->profile, "%s", o->profile);
    if (config_profile(cfg, cfg->profile, &a->profile, err, sizeof err))
        goto err;
    return s_check_faults(a, cfg, o->arm);
err:
    fprintf(stderr, "swarm run: %s\n", err);
    return -1;
}

/* What the arm needs before the parity reference is spent on it: the SSD arm's plan, the
 * quantized file and its fit. 0, or an exit code (logged). */
static int s_prepare(const char *arm, config_t *cfg, model_t *m, const model_source *src,
                     model_t *qm)
{
    char err[1024];
    if (!strcmp(arm, "ssd")) {
        /* Refuse an impossible plan before spending a reference run on it. */
        exec_opts po = { .budget_bytes = cfg->cap_bytes, .queue_depth = cfg->queue_depth,
                         .chunk_bytes = cfg->chunk_bytes, .overhead_bytes = cfg->overhead_bytes };
        exec_plan pl;
        if (exec_plan_make(m, 0, m->n_layers, &po, &pl, err, sizeof err)) {
            log_error("ssd arm: %s", err);
            return EXIT_FAIL;
        }
    }
    if (!strcmp(arm, "quantized")) {
        /* The quantized file (made if missing and allowed) and its fit, before the reference */
        int qrc = arm_quant_open(cfg, m, src->generate, qm, err, sizeof err);
        if (qrc == -2) {
            fprintf(stderr, "swarm run: %s\n", err);
            return EXIT_USAGE;
        }
        if (qrc || arm_quant_fit(cfg, qm, err, sizeof err)) {
            log_error("%s", err);
            return EXIT_FAIL;
        }
    }
    return 0;
}

/* The arm itself, its table and result line. 0 ok, -EXIT_BUDGET partial (written), -1 failed
 * (logged). */
static int s_run_arm(const s_opts *o, arm_ctx *a, const config_t *cfg, run_result *r)
{
    char err[1024];
    const char *arm = o->arm;
    result_init(r, arm, cfg->steps);
    snprintf(r->model, sizeof r->model, "%s", a->model->path);
    snprintf(r->config, sizeof r->config, "%s", cfg->path[0] ? cfg->path : "(built-in defaults)");
    snprintf(r->profile, sizeof r->profile, "%s", a->profile.name[0] ? a->profile.name : "none");
    int arc = !strcmp(arm, "reference") ? arm_run_reference(a, r, err, sizeof err)
              : !strcmp(arm, "ssd")     ? arm_run_ssd(a, r, err, sizeof err)
              : !strcmp(arm, "quantized") ? arm_run_quantized(a, r, err, sizeof err)
                                        : arm_run_resident(a, r, err, sizeof err);
    if (arc && arc != -EXIT_BUDGET) {
        log_error("%s", err);
        return -1;
    }
    if (arc == -EXIT_BUDGET) /* partial: every completed step's result is still written */
        log_error("%s", err);
    result_print(r);
    if (o->out) {
        json_t *j = result_to_json(r);
        if (result_append_jsonl(o->out, j, err, sizeof err))
            log_error("%s", err);
        json_decref(j);
    }
    return arc;
}

int cmd_run(int argc, char **argv)
{
    static config_t cfg;
    arm_ctx a = { 0 };
    model_t m = { 0 }, qm = { 0 };
    run_result r = { 0 }, ref = { 0 };
    s_opts o = { .parity = 1 };
    model_source src;
    int rc;
    char err[1024];
    float *inputs = NULL, *outputs = NULL, *refout = NULL;

    log_set_role("coord");
    arm_install_signals();
    config_defaults(&cfg);
    if ((rc = s_parse(&o, &a, argc, argv)) >= 0)
        return rc;
    if (s_configure(&o, &a, &cfg, argc, argv))
        return EXIT_USAGE;
    /* A missing model is a usage error, found before anything is created. */
    config_model_source(&cfg, o.model_flag, &src);
    if (model_check_source(&src, err, sizeof err) < 0) {
        fprintf(stderr, "swarm run: %s\n", err);
        return EXIT_USAGE;
    }
    if (model_open_source(&m, &src, err, sizeof err)) {
        log_error("%s", err);
        return EXIT_FAIL;
    }
    rc = EXIT_FAIL;
    uint64_t n = (uint64_t)cfg.steps * m.dim;
    inputs = malloc(n * sizeof(float));
    outputs = calloc(n, sizeof(float));
    refout = calloc(n, sizeof(float));
    if (!inputs || !outputs || !refout) {
        log_error("out of memory for %u steps x %u", cfg.steps, m.dim);
        goto out;
    }
    arm_make_inputs(&cfg, cfg.steps, m.dim, inputs);
    a.cfg = &cfg;
    a.model = &m;
    a.steps = cfg.steps;
    a.inputs = inputs;
    a.inflight = cfg.inflight;
    a.workers = cfg.workers;
    a.progress = !o.quiet && isatty(2);
    if ((rc = s_prepare(o.arm, &cfg, &m, &src, &qm)) != 0)
        goto out;
    rc = EXIT_FAIL;
    if (o.parity && strcmp(o.arm, "reference")) {
        /* The parity reference runs first, in this process, uncapped. */
        a.outputs = refout;
        result_init(&ref, "reference", cfg.steps);
        if (arm_run_reference(&a, &ref, err, sizeof err)) {
            log_error("parity reference: %s", err);
            goto out;
        }
        a.ref_outputs = refout;
        log_info("parity reference computed (%.1f ms setup, %.2f steps/s)", ref.setup_ms,
                 ref.steps_per_s);
    }
    a.outputs = outputs;
    if (!strcmp(o.arm, "quantized"))
        a.model = &qm;
    int arc = s_run_arm(&o, &a, &cfg, &r);
    if (arc == -1 || (o.dump_in && s_dump(o.dump_in, inputs, n)) ||
        (o.dump_out && s_dump(o.dump_out, outputs, n)))
        goto out;
    rc = arc == -EXIT_BUDGET ? EXIT_BUDGET : result_is_void(&r) ? EXIT_VOID : EXIT_OK;
out:
    result_free(&r);
    result_free(&ref);
    free(inputs);
    free(outputs);
    free(refout);
    model_close(&qm);
    model_close(&m);
    return rc;
}
