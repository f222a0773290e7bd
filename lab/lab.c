/* lab.c — the dense lab behind `swarm lab` (cli/cmd_lab.c parses): machine figures, predictions, every condition x repeat, table.md and plots. lab/
 *
 * Order matters ("Measurement rules and gates" in docs/design.md): measure the machine, predict every condition and print the
 * predictions, and only then run anything. The reference arm runs first; its outputs are the
 * parity reference of every later run. An arm that fails is recorded (a JSONL line with
 * "failed": true and the error) and the lab goes on. The report (table.md, plots) is built by
 * reading results.jsonl back (lab_report.c), so it shows exactly what was recorded.
 */
#include <errno.h>
#include <limits.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "dist/config.h"
#include "base/exitcode.h"
#include "base/log.h"
#include "arch/model.h"
#include "base/util.h"
#include "dist/arm.h"
#include "lab/lab.h"
#include "lab/predict.h"

/* ---------------------------------------------------------------- small helpers */

static json_t *s_real(double v)
{
    return isfinite(v) ? json_real(v) : json_null();
}

/* ---------------------------------------------------------------- conditions and predictions */

static int s_parse_conditions(lab_t *L, char *err, size_t errlen)
{
    L->n_cond = 0;
    for (uint32_t i = 0; i < L->cfg.n_conditions; i++) {
        lab_cond *c = &L->cond[L->n_cond++];
        const char *s = L->cfg.conditions[i], *prof = NULL;
        memset(c, 0, sizeof *c);
        _Static_assert(sizeof c->name == sizeof L->cfg.conditions[0], "same size: plain copy");
        memcpy(c->name, s, sizeof c->name);
        c->profile_configured_ms = c->profile_measured_ms = 0;
        if (!strcmp(s, "reference")) {
            c->arm = "reference";
            c->kind = PREDICT_REFERENCE;
        } else if (!strcmp(s, "ssd")) {
            c->arm = "ssd";
            c->kind = PREDICT_SSD;
        } else if (!strcmp(s, "quantized")) {
            c->arm = "quantized";
            c->kind = PREDICT_QUANTIZED;
        } else if (!strcmp(s, "resident") || !strncmp(s, "resident/", 9)) {
            c->arm = "resident";
            c->kind = PREDICT_RESIDENT;
            prof = s[8] ? s + 9 : L->cfg.profile;
            /* "resident/lan+fault": the same profile, with a worker killed mid-run. */
            static char pbuf[64];
            const char *plus = strchr(prof, '+');
            if (plus) {
                if (strcmp(plus, "+fault")) {
                    snprintf(err, errlen, "[lab] conditions: unknown suffix '%s' in '%s' (the only "
                         "suffix is +fault)", plus, s);
                    return -1;
                }
                snprintf(pbuf, sizeof pbuf, "%.*s", (int)(plus - prof), prof);
                prof = pbuf;
                c->fault = 1;
            }
        } else {
            snprintf(err, errlen, "[lab] conditions: unknown condition '%s' (conditions: "
                     "reference, ssd, quantized, resident/PROFILE, resident/PROFILE+fault)", s);
            return -1;
        }
        if (!prof)
            netem_profile_builtin("none", &c->profile);
        else if (config_profile(&L->cfg, prof, &c->profile, err, errlen))
            return -1;
    }
    return 0;
}

/* Self-test each resident condition's profile on loopback: the added delay per hop it really
 * produces on this machine, beside the configured mean. */
static void s_measure_profiles(lab_t *L)
{
    char err[512], desc[256];
    for (uint32_t i = 0; i < L->n_cond; i++) {
        lab_cond *c = &L->cond[i];
        netem_selftest_result st;
        if (c->kind != PREDICT_RESIDENT)
            continue;
        c->profile_configured_ms = ((double)c->profile.delay_ns +
                                    c->profile.loss * (double)c->profile.rto_ns) / 1e6;
        c->profile_measured_ms = NAN;
        for (uint32_t j = 0; j < i; j++) /* same profile measured already */
            if (L->cond[j].kind == PREDICT_RESIDENT &&
                !strcmp(L->cond[j].profile.name, c->profile.name))
                c->profile_measured_ms = L->cond[j].profile_measured_ms;
        if (!isnan(c->profile_measured_ms))
            continue;
        if (netem_selftest_run(&c->profile, 0, 1 + i, &st, err, sizeof err)) {
            log_warn("profile %s: self-test failed (%s); predicting with the configured delay",
                     c->profile.name, err);
            continue;
        }
        c->profile_measured_ms = st.added_mean_ms;
        printf("  profile  %-8s configured %.3f ms, measured %.3f ms added per hop (p50 %.3f, "
               "p95 %.3f, %d msgs)%s\n           [%s]\n",
               c->profile.name, st.configured_ms, st.added_mean_ms, st.added_p50_ms,
               st.added_p95_ms, st.count, st.pass ? "" : "  (outside the self-test tolerance)",
               netem_profile_describe(&c->profile, desc, sizeof desc));
    }
}

static int s_predict_all(lab_t *L, char *err, size_t errlen)
{
    printf("\npredictions (before any run; tolerance +-%.0f%%, first step = one steady step):\n",
           PREDICT_TOLERANCE * 100);
    printf("  %-16s %11s %11s %10s  %-8s %s\n", "condition", "steps/s", "step ms", "ttfr ms",
           "binding", "step ms = formula");
    for (uint32_t i = 0; i < L->n_cond; i++) {
        lab_cond *c = &L->cond[i];
        double prof = isnan(c->profile_measured_ms) ? c->profile_configured_ms
                                                    : c->profile_measured_ms;
        const model_t *m = c->kind == PREDICT_QUANTIZED ? &L->qm : &L->m;
        if (predict_condition(c->kind, &L->cfg, m, &L->pm, prof, &c->pred, err, errlen))
            return -1;
        printf("  %-16s %11.3f %11.4f %10.4f  %-8s %s\n", c->name, c->pred.steps_per_s,
               c->pred.step_ms, c->pred.ttfr_ms, c->pred.binding, c->pred.formula);
    }
    printf("\n");
    fflush(stdout);
    return 0;
}

/* ---------------------------------------------------------------- running */

static void s_lab_fields(const lab_t *L, const lab_cond *c, uint32_t rep, run_result *r)
{
    json_t *x = r->extra;
    json_object_set_new(x, "profile_configured_ms", s_real(c->profile_configured_ms));
    json_object_set_new(x, "profile_measured_ms", s_real(c->profile_measured_ms));
    json_object_set_new(x, "predicted_steps_per_s", s_real(c->pred.steps_per_s));
    json_object_set_new(x, "predicted_ttfr_ms", s_real(c->pred.ttfr_ms));
    json_object_set_new(x, "prediction", predict_to_json(&c->pred));
    json_object_set_new(x, "repeat", json_integer(rep));
    json_object_set_new(x, "repeats", json_integer(L->repeats));
    json_object_set_new(x, "disk_gbps", s_real(L->pm.disk_gbps));
    json_object_set_new(x, "disk_queue_depth", json_integer(L->pm.disk_qd));
    json_object_set_new(x, "disk_io_buffers", json_string(L->pm.disk_io_buffers));
    json_object_set_new(x, "disk_device",
                        L->pm.disk_has_device ? json_string(L->pm.disk_device) : json_null());
    json_object_set_new(x, "disk_avg_request_bytes",
                        json_integer((json_int_t)L->pm.disk_avg_request_bytes));
    json_object_set_new(x, "disk_device_util", s_real(L->pm.disk_busy_util));
    json_object_set_new(x, "layer_ms", s_real(L->pm.layer_ms));
    json_object_set_new(x, "layer_ms_worker", s_real(L->pm.layer_ms_worker));
    json_object_set_new(x, "verify_ms", s_real(L->pm.verify_ms));
    json_object_set_new(x, "hop_ms", s_real(L->pm.hop_ms));
    if (L->has_quant) {
        json_object_set_new(x, "quant_layer_ms", s_real(L->pm.quant_layer_ms));
        json_object_set_new(x, "quant_gbps", s_real(L->pm.quant_gbps));
        json_object_set_new(x, "quant_layers", json_integer(L->pm.quant_layers));
    }
}

/* One run of one condition; its JSONL line is appended whatever happens. 0 ok, -1 failed. */
static int s_run_one(lab_t *L, const lab_cond *c, uint32_t rep, uint32_t idx, uint32_t total)
{
    arm_ctx a = { 0 };
    run_result r;
    char err[1024] = "";
    int arc, is_ref = !strcmp(c->arm, "reference");
    uint64_t n = (uint64_t)L->cfg.steps * L->m.dim;

    fprintf(stderr, "[%u/%u] %s repeat %u/%u ...\n", idx, total, c->name, rep, L->repeats);
    a.cfg = &L->cfg;
    a.model = c->kind == PREDICT_QUANTIZED ? &L->qm : &L->m;
    a.steps = L->cfg.steps;
    a.inputs = L->inputs;
    a.profile = c->profile;
    a.inflight = L->cfg.inflight;
    a.workers = L->cfg.workers;
    a.progress = isatty(2);
    if (c->fault) {
        /* Kill the middle worker a quarter of the way in; it is respawned and rejoins, so
         * the run shows detection, fallback and rejoin (docs/design.md: fault tolerance). */
        static config_t fcfg;
        uint32_t nw = L->cfg.n_workers ? L->cfg.n_workers : L->cfg.workers;
        fcfg = L->cfg;
        fcfg.respawn = 1;
        a.cfg = &fcfg;
        a.n_faults = 1;
        a.faults[0].kind = FAULT_KILL;
        a.faults[0].at = L->cfg.steps / 4;
        if (L->cfg.n_workers)
            snprintf(a.faults[0].worker, sizeof a.faults[0].worker, "%s",
                     L->cfg.worker[nw / 2].name);
        else
            snprintf(a.faults[0].worker, sizeof a.faults[0].worker, "w%u", nw / 2);
    }
    /* The first reference run becomes the parity reference of everything after it. */
    a.outputs = is_ref && !L->have_ref ? L->refout : L->outputs;
    a.ref_outputs = L->have_ref ? L->refout : NULL;
    memset(a.outputs, 0, n * sizeof(float)); /* a failing arm must not pass on stale bytes */

    result_init(&r, c->arm, L->cfg.steps);
    snprintf(r.condition, sizeof r.condition, "%s", c->name);
    snprintf(r.profile, sizeof r.profile, "%s", c->profile.name[0] ? c->profile.name : "none");
    snprintf(r.model, sizeof r.model, "%s", a.model->path);
    snprintf(r.config, sizeof r.config, "%s", L->cfg.path[0] ? L->cfg.path : "(built-in defaults)");
    arc = is_ref ? arm_run_reference(&a, &r, err, sizeof err)
        : !strcmp(c->arm, "ssd") ? arm_run_ssd(&a, &r, err, sizeof err)
        : c->kind == PREDICT_QUANTIZED ? arm_run_quantized(&a, &r, err, sizeof err)
                                 : arm_run_resident(&a, &r, err, sizeof err);
    s_lab_fields(L, c, rep, &r);
    json_object_set_new(r.extra, "failed", json_boolean(arc != 0));
    json_object_set_new(r.extra, "error", json_string(arc ? err : ""));
    if (arc) {
        L->n_failed++;
        fprintf(stderr, "[%u/%u] %s repeat %u/%u FAILED: %s\n", idx, total, c->name, rep,
                L->repeats, err);
    } else {
        if (is_ref && !L->have_ref)
            L->have_ref = 1;
        if (result_is_void(&r))
            L->n_void++;
        fprintf(stderr, "[%u/%u] %s repeat %u/%u: %.3f steps/s (predicted %.3f), ttfr %.3f ms%s%s\n",
                idx, total, c->name, rep, L->repeats, r.steps_per_s, c->pred.steps_per_s,
                r.ttfr_ms, result_is_void(&r) ? "  VOID: " : "", r.void_reason);
    }
    json_t *j = result_to_json(&r);
    if (result_append_jsonl(L->jsonl, j, err, sizeof err))
        log_error("%s", err);
    json_decref(j);
    result_free(&r);
    return arc ? -1 : 0;
}

/* Reference conditions first (they produce the parity reference), then the rest in order. */
static void s_run_all(lab_t *L)
{
    uint32_t total = L->n_cond * L->repeats, idx = 0;
    for (int pass = 0; pass < 2; pass++)
        for (uint32_t i = 0; i < L->n_cond; i++) {
            if ((L->cond[i].kind == PREDICT_REFERENCE) != (pass == 0))
                continue;
            for (uint32_t rep = 1; rep <= L->repeats && !arm_stop; rep++)
                s_run_one(L, &L->cond[i], rep, ++idx, total);
        }
}

/* Without a reference condition, still compute the parity reference once (not recorded). */
static int s_parity_reference(lab_t *L)
{
    arm_ctx a = { .cfg = &L->cfg, .model = &L->m, .steps = L->cfg.steps, .inputs = L->inputs,
                  .outputs = L->refout, .progress = 0 };
    run_result r;
    char err[1024];
    for (uint32_t i = 0; i < L->n_cond; i++)
        if (L->cond[i].kind == PREDICT_REFERENCE)
            return 0;
    result_init(&r, "reference", L->cfg.steps);
    int rc = arm_run_reference(&a, &r, err, sizeof err);
    if (rc)
        log_error("parity reference: %s", err);
    else
        L->have_ref = 1;
    result_free(&r);
    return rc;
}

static void s_cat(const char *path)
{
    char buf[4096];
    size_t n;
    FILE *f = fopen(path, "r");
    if (!f)
        return;
    while ((n = fread(buf, 1, sizeof buf, f)) > 0)
        fwrite(buf, 1, n, stdout);
    fclose(f);
}

/* ---------------------------------------------------------------- the lab */

/* The config (file, overrides, flags), its conditions, the model's source and the results
 * folder: everything that can be refused before minutes of work. 0, or an exit code
 * (printed). */
static int s_setup(lab_t *L, const lab_opts *o, model_source *src)
{
    char err[1024];
    if (config_load(&L->cfg, o->config, err, sizeof err))
        goto bad_config;
    for (uint32_t i = 0; i < o->n_sets; i++)
        if (config_set(&L->cfg, o->sets[i], err, sizeof err))
            goto bad_config;
    if (o->steps)
        L->cfg.steps = o->steps;
    L->repeats = o->repeats ? o->repeats : o->quick ? 1 : L->cfg.repeats; /* explicit R wins */
    if (s_parse_conditions(L, err, sizeof err))
        goto bad_config;
    /* A missing model is a usage error, found before anything (the results folder) is made. */
    config_model_source(&L->cfg, o->model, src);
    if (model_check_source(src, err, sizeof err) < 0)
        goto bad_config;
    /* The results folder next: a bad --out fails before minutes of work. */
    if (o->out) {
        snprintf(L->dir, sizeof L->dir, "%s", o->out);
    } else {
        char stamp[32];
        time_t now = time(NULL);
        strftime(stamp, sizeof stamp, "%Y%m%d-%H%M%S", localtime(&now));
        snprintf(L->dir, sizeof L->dir, "%s/lab-%s", L->cfg.lab_out, stamp);
    }
    snprintf(L->jsonl, sizeof L->jsonl, "%s/results.jsonl", L->dir);
    if (util_mkdir_p(L->dir)) {
        log_error("%s: cannot create: %s", L->dir, strerror(errno));
        return EXIT_FAIL;
    }
    if (access(L->jsonl, F_OK) == 0) {
        log_warn("%s exists: replacing it", L->jsonl);
        if (unlink(L->jsonl)) {
            log_error("%s: %s", L->jsonl, strerror(errno));
            return EXIT_FAIL;
        }
    }
    return 0;
bad_config:
    fprintf(stderr, "swarm lab: %s\n", err);
    return EXIT_USAGE;
}

/* The model, the inputs and output buffers, the quantized file when a condition wants it
 * (made if missing and allowed, checked against the cap before any figure). 0, or an exit
 * code (logged). */
static int s_open(lab_t *L, const model_source *src)
{
    char err[1024];
    if (model_open_source(&L->m, src, err, sizeof err)) {
        log_error("%s", err);
        return EXIT_FAIL;
    }
    uint64_t n = (uint64_t)L->cfg.steps * L->m.dim;
    L->inputs = malloc(n * sizeof(float));
    L->outputs = calloc(n, sizeof(float));
    L->refout = calloc(n, sizeof(float));
    if (!L->inputs || !L->outputs || !L->refout) {
        log_error("out of memory for %u steps x %u", L->cfg.steps, L->m.dim);
        return EXIT_FAIL;
    }
    arm_make_inputs(&L->cfg, L->cfg.steps, L->m.dim, L->inputs);
    for (uint32_t i = 0; i < L->n_cond && !L->has_quant; i++)
        if (L->cond[i].kind == PREDICT_QUANTIZED) {
            int qrc = arm_quant_open(&L->cfg, &L->m, src->generate, &L->qm, err, sizeof err);
            if (qrc == -2) {
                fprintf(stderr, "swarm lab: %s\n", err);
                return EXIT_USAGE;
            }
            if (qrc || arm_quant_fit(&L->cfg, &L->qm, err, sizeof err)) {
                log_error("%s", err);
                return EXIT_FAIL;
            }
            L->has_quant = 1;
        }
    return 0;
}

/* Measure the machine, predict and print every condition: before anything runs. */
static int s_measure(lab_t *L)
{
    char err[1024];
    log_info("measuring the machine (disk, compute, hash, hop, profiles)");
    if (predict_measure_machine(&L->cfg, &L->m, &L->pm, err, sizeof err) ||
        (L->has_quant && predict_measure_quant(&L->cfg, &L->qm, &L->pm, err, sizeof err))) {
        log_error("%s", err);
        return -1;
    }
    predict_print_machine(stdout, &L->pm);
    s_measure_profiles(L);
    if (s_predict_all(L, err, sizeof err)) {
        log_error("%s", err);
        return -1;
    }
    return 0;
}

int lab_run(const lab_opts *o)
{
    static lab_t lab;
    lab_t *L = &lab;
    model_source src;
    int rc;
    arm_install_signals();
    memset(L, 0, sizeof *L);
    config_defaults(&L->cfg);
    if ((rc = s_setup(L, o, &src)) != 0)
        return rc;
    if ((rc = s_open(L, &src)) != 0)
        goto out;
    rc = EXIT_FAIL;
    printf("swarm lab: %s, model %s (%u layers x %u), %u steps, %u repeat%s, %u conditions -> %s\n",
           o->config, L->m.path, L->m.n_layers, L->m.dim, L->cfg.steps, L->repeats,
           L->repeats == 1 ? "" : "s", L->n_cond, L->dir);
    if (s_measure(L) || s_parity_reference(L))
        goto out;
    s_run_all(L);
    if (lab_report(L))
        goto out;
    char path[PATH_MAX + 32];
    snprintf(path, sizeof path, "%s/table.md", L->dir);
    printf("\n");
    s_cat(path);
    fflush(stdout);
    rc = L->n_failed ? EXIT_FAIL : L->n_void ? EXIT_VOID : EXIT_OK;
    log_info("results in %s (%d failed run%s, %d void)", L->dir, L->n_failed,
             L->n_failed == 1 ? "" : "s", L->n_void);
out:
    free(L->inputs);
    free(L->outputs);
    free(L->refout);
    model_close(&L->qm);
    model_close(&L->m);
    return rc;
}
