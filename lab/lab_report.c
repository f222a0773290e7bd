/* lab_report.c — the lab's report: results.jsonl read back into table.md and gnuplot PNGs. lab/
 *
 * Everything here comes from the JSONL lines (json_loads per line), so the report shows exactly
 * what was recorded; the conditions' order, predictions and machine figures come from lab_t.
 */
#include <errno.h>
#include <limits.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "base/log.h"
#include "base/util.h"
#include "lab/lab.h"

#define S_ARTICLE_RATIO 13.70  /* lab article, Table 2: resident LAN / unbuffered NVMe steps/s */
#define S_MAX_STAGES 16

/* Per-condition aggregate read back from results.jsonl. */
typedef struct {
    uint32_t runs, ok, failed, voided;
    uint32_t fallback;         /* finished runs in which a worker was lost (failover) */
    char fallback_why[300];    /* the first such run's failover events */
    double *sps, *total, *ttfr, *p50, *setup, *ram, *ssd; /* (ok,) finished runs */
    double *cg, *qabs, *qrel;  /* (ok,) cgroup peak; the quality gate's errors (quantized) */
    double qlim_abs, qlim_rel; /* the quality gate's limits (the type's; the same every run) */
    char qtype[16];
    double *st[S_MAX_STAGES];  /* (ok,) stage ms per step, by stage index */
    double *lat;               /* every step of every finished run (ms) */
    size_t n_lat;
    char reason[600];          /* first void reason or error */
    json_t *pred;              /* borrowed from the first line */
} s_agg;

/* ---------------------------------------------------------------- small helpers */

/* Median, p95, min, max of v (sorted in place). n == 0 gives NaN. */
static void s_stats(double *v, uint32_t n, double *med, double *p95, double *mn, double *mx)
{
    if (!n) {
        *med = *p95 = *mn = *mx = NAN;
        return;
    }
    util_sort_doubles(v, n);
    *med = util_percentile(v, n, 50);
    *p95 = util_percentile(v, n, 95);
    *mn = v[0];
    *mx = v[n - 1];
}

static double s_median(double *v, uint32_t n)
{
    double med, p95, mn, mx;
    s_stats(v, n, &med, &p95, &mn, &mx);
    return med;
}

static double s_num(const json_t *o, const char *key)
{
    const json_t *v = json_object_get(o, key);
    return json_is_number(v) ? json_number_value(v) : NAN;
}

/* ---------------------------------------------------------------- reading results back */

static const char *const s_stage_order[] = { "compute", "verify", "read_wait", "wait", "deser",
                                             "ser", "send", "network" };

static int s_stage_index(char names[S_MAX_STAGES][32], uint32_t *n, const char *key)
{
    for (uint32_t i = 0; i < *n; i++)
        if (!strcmp(names[i], key))
            return (int)i;
    if (*n >= S_MAX_STAGES)
        return -1;
    snprintf(names[*n], 32, "%s", key);
    return (int)(*n)++;
}

/* One result line into its condition's aggregate: failed, void, fallback, the figures, the
 * stages and the step latencies. */
static void s_add_run(s_agg *g, json_t *o, char stages[S_MAX_STAGES][32], uint32_t *n_stages)
{
    g->runs++;
    if (!g->pred)
        g->pred = json_object_get(o, "prediction");
    if (json_is_true(json_object_get(o, "failed"))) {
        g->failed++;
        if (!g->reason[0])
            snprintf(g->reason, sizeof g->reason, "FAILED: %s",
                     json_string_value(json_object_get(o, "error")));
        return;
    }
    if (json_is_true(json_object_get(o, "void"))) {
        g->voided++;
        if (!g->reason[0])
            snprintf(g->reason, sizeof g->reason, "VOID: %s",
                     json_string_value(json_object_get(o, "void_reason")));
    }
    json_t *fo = json_object_get(o, "failover");
    if (json_array_size(fo)) {
        /* A worker was lost: part of the steps ran in the coordinator's fallback, so this
         * is not a clean resident measurement even when every gate passes. */
        if (!g->fallback++)
            for (size_t e = 0; e < json_array_size(fo); e++) {
                json_t *ev = json_array_get(fo, e);
                size_t used = strlen(g->fallback_why);
                snprintf(g->fallback_why + used, sizeof g->fallback_why - used,
                         "%s%s lost (%s) at step %.0f", used ? "; " : "",
                         json_string_value(json_object_get(ev, "worker")),
                         json_string_value(json_object_get(ev, "how")),
                         s_num(ev, "lost_at_step"));
            }
    }
    uint32_t k = g->ok++;
    double agg_rss = s_num(o, "aggregate_peak_rss_bytes");
    g->sps[k] = s_num(o, "steps_per_s");
    g->total[k] = s_num(o, "total_ms") / 1e3;
    g->ttfr[k] = s_num(o, "ttfr_ms");
    g->p50[k] = s_num(o, "step_ms_p50");
    g->setup[k] = s_num(o, "setup_ms");
    g->ram[k] = isfinite(agg_rss) ? agg_rss : s_num(o, "peak_rss_bytes");
    g->ssd[k] = s_num(o, "ssd_read_bytes");
    g->cg[k] = s_num(o, "cgroup_peak_bytes");
    g->qabs[k] = s_num(o, "quality_max_abs_err");
    g->qrel[k] = s_num(o, "quality_max_rel_err");
    g->qlim_abs = s_num(o, "quality_limit_abs");
    g->qlim_rel = s_num(o, "quality_limit_rel");
    if (json_is_string(json_object_get(o, "quant_type")))
        snprintf(g->qtype, sizeof g->qtype, "%s",
                 json_string_value(json_object_get(o, "quant_type")));
    const char *key;
    json_t *val;
    json_object_foreach(json_object_get(o, "stage_ms"), key, val) {
        if (!strcmp(key, "e2e")) /* the resident arm's whole step, not a stage */
            continue;
        int si = s_stage_index(stages, n_stages, key);
        if (si >= 0 && json_is_number(val))
            g->st[si][k] = json_number_value(val);
    }
    json_t *steps = json_object_get(o, "step_ms");
    size_t ns = json_array_size(steps);
    double *nl = realloc(g->lat, sizeof(double) * (g->n_lat + ns + 1));
    if (nl) {
        g->lat = nl;
        for (size_t s = 0; s < ns; s++)
            if (json_is_number(json_array_get(steps, s)))
                g->lat[g->n_lat++] = json_number_value(json_array_get(steps, s));
    }
}

/* Parse results.jsonl into one aggregate per condition. lines: kept alive for borrowed refs. */
static int s_read_results(const lab_t *L, s_agg *ag, char stages[S_MAX_STAGES][32],
                          uint32_t *n_stages, json_t *lines)
{
    FILE *f = fopen(L->jsonl, "r");
    char *line = NULL;
    size_t cap = 0, max = (size_t)L->repeats;
    ssize_t len;
    if (!f) {
        log_error("%s: %s", L->jsonl, strerror(errno));
        return -1;
    }
    /* Stage columns in a fixed, readable order; any other stage name is appended. */
    for (size_t i = 0; i < sizeof s_stage_order / sizeof *s_stage_order; i++)
        s_stage_index(stages, n_stages, s_stage_order[i]);
    for (uint32_t i = 0; i < L->n_cond; i++) {
        s_agg *g = &ag[i];
        double **v[] = { &g->sps, &g->total, &g->ttfr, &g->p50, &g->setup, &g->ram, &g->ssd,
                         &g->cg, &g->qabs, &g->qrel };
        for (size_t k = 0; k < sizeof v / sizeof *v; k++)
            *v[k] = calloc(max + 64, sizeof(double));
        for (int k = 0; k < S_MAX_STAGES; k++)
            g->st[k] = calloc(max + 64, sizeof(double));
    }
    while ((len = getline(&line, &cap, f)) > 0) {
        json_error_t je;
        json_t *o = json_loads(line, 0, &je);
        const char *cn = o ? json_string_value(json_object_get(o, "condition")) : NULL;
        s_agg *g = NULL;
        if (!cn) {
            log_warn("%s: unreadable line skipped (%s)", L->jsonl, o ? "no condition" : je.text);
            json_decref(o);
            continue;
        }
        json_array_append_new(lines, o);
        for (uint32_t i = 0; i < L->n_cond; i++)
            if (!strcmp(L->cond[i].name, cn))
                g = &ag[i];
        if (!g || g->runs >= max + 64)
            continue;
        s_add_run(g, o, stages, n_stages);
    }
    free(line);
    fclose(f);
    return 0;
}

static void s_agg_free(s_agg *g)
{
    double *v[] = { g->sps, g->total, g->ttfr, g->p50, g->setup, g->ram, g->ssd, g->lat,
                    g->cg, g->qabs, g->qrel };
    for (size_t k = 0; k < sizeof v / sizeof *v; k++)
        free(v[k]);
    for (int k = 0; k < S_MAX_STAGES; k++)
        free(g->st[k]);
}

/* ---------------------------------------------------------------- table.md */

static const char *s_fmt(double v, const char *fmt, char *buf, size_t len)
{
    if (!isfinite(v))
        snprintf(buf, len, "—");
    else
        snprintf(buf, len, fmt, v);
    return buf;
}

static const char *s_fmt_bytes(double v, char *buf, size_t len)
{
    if (!isfinite(v))
        return s_fmt(v, "", buf, len);
    return util_fmt_size((uint64_t)v, buf, len);
}

static void s_table_results(FILE *f, const lab_t *L, s_agg *ag)
{
    fprintf(f, "## Results (median across repeats; steps/s with [p95; min–max])\n\n");
    fprintf(f, "| condition | runs ok | steps/s | total time (s) | SSD bytes read | time to first "
               "result (ms) | subsequent step p50 (ms) | aggregate RAM | setup (ms) | gates |\n");
    fprintf(f, "|---|---|---|---|---|---|---|---|---|---|\n");
    for (uint32_t i = 0; i < L->n_cond; i++) {
        s_agg *g = &ag[i];
        double med, p95, mn, mx;
        char b[10][64];
        s_stats(g->sps, g->ok, &med, &p95, &mn, &mx);
        fprintf(f, "| %s | %u/%u | %s [%s; %s–%s] | %s | %s | %s | %s | %s | %s | %s |\n",
                L->cond[i].name, g->ok, g->runs, s_fmt(med, "%.2f", b[0], 64),
                s_fmt(p95, "%.2f", b[1], 64), s_fmt(mn, "%.2f", b[2], 64),
                s_fmt(mx, "%.2f", b[3], 64), s_fmt(s_median(g->total, g->ok), "%.3f", b[4], 64),
                s_fmt_bytes(s_median(g->ssd, g->ok), b[5], 64),
                s_fmt(s_median(g->ttfr, g->ok), "%.3f", b[6], 64),
                s_fmt(s_median(g->p50, g->ok), "%.3f", b[7], 64),
                s_fmt_bytes(s_median(g->ram, g->ok), b[8], 64),
                s_fmt(s_median(g->setup, g->ok), "%.1f", b[9], 64),
                g->failed ? "FAILED" : g->voided ? "VOID" : g->fallback ? "pass, FALLBACK"
                : g->ok ? "pass" : "—");
    }
    fprintf(f, "\nAggregate RAM: the sum of every worker's peak RSS for resident conditions, the "
               "process's peak RSS otherwise. Gates: cache, content and parity (see docs/results.md); "
               "FALLBACK: a worker was lost and the coordinator ran its layers (see below).\n\n");
}

static void s_table_predictions(FILE *f, const lab_t *L, s_agg *ag, char stages[][32],
                                uint32_t n_stages)
{
    fprintf(f, "## Predicted vs measured (tolerance ±%.0f%%; predictions made before any run)\n\n",
            PREDICT_TOLERANCE * 100);
    fprintf(f, "| condition | binding | predicted steps/s | measured | error | predicted TTFR (ms) "
               "| measured | error | verdict |\n|---|---|---|---|---|---|---|---|---|\n");
    for (uint32_t i = 0; i < L->n_cond; i++) {
        s_agg *g = &ag[i];
        const lab_cond *c = &L->cond[i];
        double ms = s_median(g->sps, g->ok), mt = s_median(g->ttfr, g->ok);
        double es = (ms - c->pred.steps_per_s) / c->pred.steps_per_s;
        double et = (mt - c->pred.ttfr_ms) / c->pred.ttfr_ms;
        char b[6][64], verdict[400] = "—";
        if (g->ok) {
            int miss_s = fabs(es) > PREDICT_TOLERANCE, miss_t = fabs(et) > PREDICT_TOLERANCE;
            if (!miss_s && !miss_t) {
                snprintf(verdict, sizeof verdict, "within tolerance");
            } else if (!miss_s) {
                snprintf(verdict, sizeof verdict, "**MISS** (TTFR): wrong term: first-step "
                         "warm-up (measured first step %.3f ms vs steady p50 %.3f ms; the model "
                         "has no warm-up term)", mt, s_median(g->p50, g->ok));
            } else {
                /* Stage medians across repeats, then the term furthest from its prediction. */
                json_t *st = json_object();
                char blame[256];
                for (uint32_t s = 0; s < n_stages; s++)
                    json_object_set_new(st, stages[s], json_real(s_median(g->st[s], g->ok)));
                predict_blame(g->pred, st, 1000.0 / ms, blame, sizeof blame);
                json_decref(st);
                snprintf(verdict, sizeof verdict, "**MISS** (%s%s%s): wrong term: %s",
                         miss_s ? "steps/s" : "", miss_s && miss_t ? ", " : "",
                         miss_t ? "TTFR" : "", blame);
            }
        } else if (g->failed) {
            snprintf(verdict, sizeof verdict, "no measurement (failed)");
        }
        fprintf(f, "| %s | %s | %.3f | %s | %s | %.3f | %s | %s | %s |\n", c->name,
                c->pred.binding, c->pred.steps_per_s, s_fmt(ms, "%.3f", b[0], 64),
                s_fmt(es * 100, "%+.1f%%", b[1], 64), c->pred.ttfr_ms,
                s_fmt(mt, "%.3f", b[2], 64), s_fmt(et * 100, "%+.1f%%", b[3], 64), verdict);
    }
    fprintf(f, "\nStep time formulas (ms; see `lab/predict.c` for the model and its "
               "limitations):\n\n");
    for (uint32_t i = 0; i < L->n_cond; i++)
        fprintf(f, "- %s: %.4f = %s\n", L->cond[i].name, L->cond[i].pred.step_ms,
                L->cond[i].pred.formula);
    fprintf(f, "\n");
}

static void s_table_breakeven(FILE *f, const lab_t *L, s_agg *ag)
{
    int ssd = -1, lan = -1;
    for (uint32_t i = 0; i < L->n_cond; i++) {
        if (L->cond[i].kind == PREDICT_SSD && ag[i].ok)
            ssd = (int)i;
        if (!strcmp(L->cond[i].name, "resident/lan") && ag[i].ok)
            lan = (int)i;
    }
    fprintf(f, "## Break-even against the SSD arm\n\n");
    if (ssd < 0) {
        fprintf(f, "No finished ssd condition: no break-even.\n\n");
    } else {
        double s_setup = s_median(ag[ssd].setup, ag[ssd].ok) / 1e3;
        double s_sps = s_median(ag[ssd].sps, ag[ssd].ok);
        fprintf(f, "Steps n at which setup + n / (steps/s) of the resident condition is no more "
                   "than the SSD arm's (setup %.3f s, %.3f steps/s); medians.\n\n", s_setup, s_sps);
        fprintf(f, "| condition | setup (s) | steps/s | break-even steps |\n|---|---|---|---|\n");
        for (uint32_t i = 0; i < L->n_cond; i++) {
            if (L->cond[i].kind != PREDICT_RESIDENT)
                continue;
            double su = s_median(ag[i].setup, ag[i].ok) / 1e3, sp = s_median(ag[i].sps, ag[i].ok);
            char be[128], b1[32], b2[32];
            if (!ag[i].ok)
                snprintf(be, sizeof be, "— (no finished run)");
            else if (sp <= s_sps)
                snprintf(be, sizeof be, su <= s_setup ? "never behind, never pays back per step "
                         "(not faster per step)" : "never (not faster per step)");
            else if (su <= s_setup)
                snprintf(be, sizeof be, "1 (setup no slower)");
            else
                snprintf(be, sizeof be, "%.0f", ceil((su - s_setup) / (1.0 / s_sps - 1.0 / sp)));
            fprintf(f, "| %s | %s | %s | %s |\n", L->cond[i].name, s_fmt(su, "%.3f", b1, 32),
                    s_fmt(sp, "%.3f", b2, 32), be);
        }
        fprintf(f, "\n");
    }
    if (ssd >= 0 && lan >= 0)
        fprintf(f, "**resident/lan ÷ ssd steps/s = %.2f×** (the lab article's Table 2: %.2f×, "
                   "Windows, 600 MiB working-set cap, NVMe).\n\n",
                s_median(ag[lan].sps, ag[lan].ok) / s_median(ag[ssd].sps, ag[ssd].ok),
                S_ARTICLE_RATIO);
    else
        fprintf(f, "resident/lan ÷ ssd: n/a (needs finished ssd and resident/lan runs; the "
                   "article's Table 2 gives %.2f×).\n\n", S_ARTICLE_RATIO);
}

/* The quantized arm beside the SSD arm and the resident pipeline: speed, RAM, quality. */
static void s_table_quantized(FILE *f, const lab_t *L, s_agg *ag)
{
    int ssd = -1, lan = -1, ref = -1, any = 0;
    for (uint32_t i = 0; i < L->n_cond; i++) {
        if (!strcmp(L->cond[i].name, "ssd") && ag[i].ok)
            ssd = (int)i;
        if (!strcmp(L->cond[i].name, "resident/lan") && ag[i].ok)
            lan = (int)i;
        if (L->cond[i].kind == PREDICT_REFERENCE && ag[i].ok && ref < 0)
            ref = (int)i;
    }
    for (uint32_t i = 0; i < L->n_cond; i++) {
        s_agg *g = &ag[i];
        char b[9][64];
        if (L->cond[i].kind != PREDICT_QUANTIZED)
            continue;
        if (!any++)
            fprintf(f, "## Quantized arm (the whole model resident at a precision that fits "
                       "the cap)\n\n| condition | type | weights | steps/s | ÷ ssd | ÷ "
                       "resident/lan | ÷ reference | peak RSS | cgroup peak | max abs err "
                       "(limit) | max rel err (limit) | gates |\n"
                       "|---|---|---|---|---|---|---|---|---|---|---|---|\n");
        double sps = s_median(g->sps, g->ok);
        fprintf(f, "| %s | %s | %s | %s | %s | %s | %s | %s | %s | %s (%.3g) | %s (%.3g) | %s |\n",
                L->cond[i].name, g->qtype[0] ? g->qtype : "—",
                util_fmt_size((uint64_t)L->qm.n_layers * model_layer_bytes(&L->qm), b[0], 64),
                s_fmt(sps, "%.2f", b[1], 64),
                s_fmt(ssd >= 0 ? sps / s_median(ag[ssd].sps, ag[ssd].ok) : NAN, "%.2f×", b[2],
                      64),
                s_fmt(lan >= 0 ? sps / s_median(ag[lan].sps, ag[lan].ok) : NAN, "%.2f×", b[3],
                      64),
                s_fmt(ref >= 0 ? sps / s_median(ag[ref].sps, ag[ref].ok) : NAN, "%.2f×", b[4],
                      64),
                s_fmt_bytes(s_median(g->ram, g->ok), b[5], 64),
                s_fmt_bytes(s_median(g->cg, g->ok), b[6], 64),
                s_fmt(s_median(g->qabs, g->ok), "%.3g", b[7], 64), g->qlim_abs,
                s_fmt(s_median(g->qrel, g->ok), "%.3g", b[8], 64), g->qlim_rel,
                g->failed ? "FAILED" : g->voided ? "VOID" : g->ok ? "pass" : "—");
    }
    if (any)
        fprintf(f, "\nIts outputs are not the reference's bits: the parity gate is n/a and the "
                   "quality gate judges the error against the f32 reference on the same inputs "
                   "(limits from the type's rounding, docs/lab.md \"The quantized arm\").\n\n");
}

static void s_table_rest(FILE *f, const lab_t *L, s_agg *ag)
{
    int any = 0;
    fprintf(f, "## Link profiles (per hop, one way)\n\n| condition | profile | configured (ms) | "
               "measured added (ms, self-test) |\n|---|---|---|---|\n");
    for (uint32_t i = 0; i < L->n_cond; i++) {
        const lab_cond *c = &L->cond[i];
        char b[32];
        if (c->kind == PREDICT_RESIDENT)
            fprintf(f, "| %s | %s | %.3f | %s |\n", c->name, c->profile.name,
                    c->profile_configured_ms, s_fmt(c->profile_measured_ms, "%.3f", b, 32));
    }
    fprintf(f, "\n## Failures and void runs\n\n");
    for (uint32_t i = 0; i < L->n_cond; i++)
        if (ag[i].reason[0]) {
            fprintf(f, "- %s (%u failed, %u void of %u): %s\n", L->cond[i].name, ag[i].failed,
                    ag[i].voided, ag[i].runs, ag[i].reason);
            any = 1;
        }
    for (uint32_t i = 0; i < L->n_cond; i++)
        if (ag[i].fallback) {
            fprintf(f, "- %s: %u of %u finished runs lost a worker and ran its layers in the "
                       "coordinator's fallback (not a clean resident figure): %s\n",
                    L->cond[i].name, ag[i].fallback, ag[i].ok, ag[i].fallback_why);
            any = 1;
        }
    fprintf(f, "%s\n", any ? "" : "None.\n");
}

static void s_table_head(FILE *f, const lab_t *L)
{
    char b1[32], b2[32], b3[32], tbuf[64];
    time_t now = time(NULL);
    const predict_machine *p = &L->pm;
    strftime(tbuf, sizeof tbuf, "%Y-%m-%d %H:%M:%S", localtime(&now));
    fprintf(f, "# swarm lab — %s\n\n", L->cfg.path[0] ? L->cfg.path : "(built-in defaults)");
    fprintf(f, "%s, git %s. Model %s: %u layers × %u (%s of weights), %u steps per run, %u "
               "repeat%s per condition, SSD cap %s.\n\n",
            tbuf, util_git_rev(), L->m.path, L->m.n_layers, L->m.dim,
            util_fmt_size((uint64_t)L->m.n_layers * model_layer_bytes(&L->m), b1, sizeof b1),
            L->cfg.steps, L->repeats, L->repeats == 1 ? "" : "s",
            util_fmt_size(L->cfg.cap_bytes, b2, sizeof b2));
    fprintf(f, "Machine figures (measured before the runs): disk %.3f GB/s (queue depth %u, chunk "
               "%s; %s per request at the device, busy %.0f%%, buffers %s); layer %.4f ms (%u thread%s), %.4f ms (%u, workers); content hash %.4f ms per "
               "layer; hop %.4f ms one way (ZeroMQ, loopback, %llu B); %ld CPUs.\n\n",
            p->disk_gbps, p->disk_qd, util_fmt_size(p->disk_chunk_bytes, b1, sizeof b1),
            p->disk_has_device ? util_fmt_size(p->disk_avg_request_bytes, b3, sizeof b3) : "?",
            100 * p->disk_busy_util, p->disk_io_buffers, p->layer_ms, p->threads, p->threads == 1 ? "" : "s", p->layer_ms_worker,
            p->worker_threads, p->verify_ms, p->hop_ms, (unsigned long long)p->hop_bytes, p->cpus);
}

/* ---------------------------------------------------------------- plots (gnuplot) */

static int s_write_plot_data(const lab_t *L, s_agg *ag, char stages[][32], uint32_t n_stages,
                             char *names, size_t nlen, int *n_cdf)
{
    char path[PATH_MAX + 32];
    FILE *f;
    snprintf(path, sizeof path, "%s/steps_per_s.dat", L->dir);
    if (!(f = fopen(path, "w")))
        return -1;
    fprintf(f, "# index condition median min max predicted (steps/s)\n");
    for (uint32_t i = 0; i < L->n_cond; i++) {
        double med, p95, mn, mx;
        s_stats(ag[i].sps, ag[i].ok, &med, &p95, &mn, &mx);
        fprintf(f, "%u %s %g %g %g %g\n", i, L->cond[i].name, med, mn, mx,
                L->cond[i].pred.steps_per_s);
    }
    fclose(f);
    snprintf(path, sizeof path, "%s/stages.dat", L->dir);
    if (!(f = fopen(path, "w")))
        return -1;
    fprintf(f, "condition");
    for (uint32_t s = 0; s < n_stages; s++)
        fprintf(f, " %s", stages[s]);
    fprintf(f, "\n");
    for (uint32_t i = 0; i < L->n_cond; i++) {
        fprintf(f, "%s", L->cond[i].name);
        for (uint32_t s = 0; s < n_stages; s++) {
            double v = s_median(ag[i].st[s], ag[i].ok);
            fprintf(f, " %g", isfinite(v) ? v : 0.0);
        }
        fprintf(f, "\n");
    }
    fclose(f);
    snprintf(path, sizeof path, "%s/latency_cdf.dat", L->dir);
    if (!(f = fopen(path, "w")))
        return -1;
    *n_cdf = 0;
    names[0] = 0;
    for (uint32_t i = 0; i < L->n_cond; i++) {
        s_agg *g = &ag[i];
        if (!g->n_lat)
            continue;
        util_sort_doubles(g->lat, g->n_lat);
        fprintf(f, "# %s: step latency (ms), cumulative fraction\n", L->cond[i].name);
        for (size_t k = 0; k < g->n_lat; k++)
            fprintf(f, "%g %g\n", g->lat[k], (double)(k + 1) / (double)g->n_lat);
        fprintf(f, "\n\n");
        size_t used = strlen(names);
        snprintf(names + used, nlen - used, "%s%s", used ? " " : "", L->cond[i].name);
        (*n_cdf)++;
    }
    fclose(f);
    return 0;
}

/* Write plots.gp into the results folder and run gnuplot there. Soft: warns and goes on. */
static void s_plots(const lab_t *L, s_agg *ag, char stages[][32], uint32_t n_stages)
{
    char path[PATH_MAX + 32], names[CONFIG_MAX_CONDITIONS * 66];
    int n_cdf = 0, any_sps = 0, status;
    FILE *f;
    for (uint32_t i = 0; i < L->n_cond; i++)
        any_sps |= ag[i].ok > 0;
    if (s_write_plot_data(L, ag, stages, n_stages, names, sizeof names, &n_cdf)) {
        log_warn("plots: cannot write data files in %s: %s", L->dir, strerror(errno));
        return;
    }
    snprintf(path, sizeof path, "%s/plots.gp", L->dir);
    if (!(f = fopen(path, "w"))) {
        log_warn("plots: %s: %s", path, strerror(errno));
        return;
    }
    fprintf(f, "# plots.gp — written by `swarm lab`; rerun with experiments/plot.sh DIR.\n"
               "set terminal pngcairo size 960,560 noenhanced font \",10\"\n"
               "set datafile missing \"nan\"\nset grid ytics\nset key outside right top\n"
               "set xtics rotate by -25\nset style fill solid 0.6 border -1\n\n");
    fprintf(f, "set output \"steps_per_s.png\"\n"
               "set title \"steps/s per condition (median of %u; bars: min-max; x: predicted)\"\n"
               "set ylabel \"steps/s (log)\"\nset logscale y\nset boxwidth 0.6\n", L->repeats);
    if (any_sps)
        fprintf(f, "plot \"steps_per_s.dat\" using 1:3:xtic(2) with boxes title \"measured\", \\\n"
                   "     \"\" using 1:3:4:5 with yerrorbars lc rgb \"black\" pt 0 title \"min-max\", \\\n"
                   "     \"\" using 1:6 with points pt 2 ps 2 lc rgb \"red\" title \"predicted\"\n\n");
    else
        fprintf(f, "plot \"steps_per_s.dat\" using 1:6:xtic(2) with points pt 2 ps 2 "
                   "lc rgb \"red\" title \"predicted (no finished run)\"\n\n");
    fprintf(f, "set output \"stages.png\"\nunset logscale y\nset yrange [0:*]\n"
               "set title \"time per step by stage (ms; median across repeats)\"\n"
               "set ylabel \"ms per step\"\nset style data histograms\n"
               "set style histogram rowstacked\nset boxwidth 0.6\n"
               "plot for [c=2:%u] \"stages.dat\" using c:xtic(1) title columnheader(c)\n\n",
            n_stages + 1);
    fprintf(f, "set output \"latency_cdf.png\"\nset style data lines\nset xtics norotate\n"
               "set title \"step latency CDF (every step of every repeat, first step included)\"\n"
               "set xlabel \"step latency (ms, log)\"\nset ylabel \"fraction of steps\"\n"
               "set yrange [0:1]\nset logscale x\n");
    if (n_cdf)
        fprintf(f, "names = \"%s\"\nplot for [i=0:%d] \"latency_cdf.dat\" index i using 1:2 "
                   "with steps lw 2 title word(names, i+1)\n", names, n_cdf - 1);
    else
        fprintf(f, "set xrange [0.1:10]\nplot -1 title \"no finished run\"\n");
    fclose(f);

    pid_t pid = fork();
    if (pid == 0) {
        if (chdir(L->dir) == 0) {
            dup2(2, 1); /* gnuplot's chatter goes to stderr, never into our stdout */
            execlp("gnuplot", "gnuplot", "plots.gp", (char *)NULL);
        }
        _exit(127);
    }
    if (pid < 0 || waitpid(pid, &status, 0) < 0) {
        log_warn("plots: cannot start gnuplot: %s", strerror(errno));
        return;
    }
    if (WIFEXITED(status) && WEXITSTATUS(status) == 127)
        log_warn("plots: gnuplot is not installed (apt-get install gnuplot-nox): no PNG plots; "
                 "the data files and plots.gp are in %s", L->dir);
    else if (!WIFEXITED(status) || WEXITSTATUS(status))
        log_warn("plots: gnuplot failed (status %d); see %s/plots.gp", status, L->dir);
}

/* ---------------------------------------------------------------- report */

/* Degraded against healthy: every failover event, its fallback step time beside the steady
 * step of the same profile without the fault (issue: the table shows both rates). */
static void s_table_failover(FILE *f, const lab_t *L, s_agg *ag, json_t *lines)
{
    int any = 0;
    for (size_t i = 0; i < json_array_size(lines); i++) {
        json_t *o = json_array_get(lines, i), *fo = json_object_get(o, "failover");
        const char *cn = json_string_value(json_object_get(o, "condition"));
        char healthy[64], b1[32], b2[32], b3[32], b4[32], b5[32];
        double h_ms = NAN;
        if (!json_array_size(fo) || !cn)
            continue;
        snprintf(healthy, sizeof healthy, "%s", cn);
        char *plus = strchr(healthy, '+');
        if (plus)
            *plus = 0;
        for (uint32_t k = 0; k < L->n_cond; k++)
            if (!strcmp(L->cond[k].name, healthy) && ag[k].ok)
                h_ms = s_median(ag[k].p50, ag[k].ok);
        if (!any) {
            fprintf(f, "## Failover (degraded vs healthy)\n\n"
                       "| condition | repeat | worker | how | lost at step | detection (ms) | "
                       "replayed | steps in fallback | fallback step (ms) | degraded steps/s | "
                       "healthy step p50 (ms) | healthy steps/s | rejoin (ms) | lost / dup |\n"
                       "|---|---|---|---|---|---|---|---|---|---|---|---|---|---|\n");
            any = 1;
        }
        for (size_t e = 0; e < json_array_size(fo); e++) {
            json_t *ev = json_array_get(fo, e);
            double fb = s_num(ev, "fallback_step_ms");
            fprintf(f, "| %s | %.0f | %s | %s | %.0f | %.0f | %.0f | %.0f | %s | %s | %s | %s | "
                       "%s | %.0f / %.0f |\n",
                    cn, s_num(o, "repeat"), json_string_value(json_object_get(ev, "worker")),
                    json_string_value(json_object_get(ev, "how")), s_num(ev, "lost_at_step"),
                    s_num(ev, "detection_ms"), s_num(ev, "steps_replayed"),
                    s_num(ev, "steps_in_fallback"), s_fmt(fb, "%.2f", b1, 32),
                    s_fmt(isfinite(fb) && fb > 0 ? 1000.0 / fb : NAN, "%.2f", b2, 32),
                    s_fmt(h_ms, "%.2f", b3, 32),
                    s_fmt(isfinite(h_ms) && h_ms > 0 ? 1000.0 / h_ms : NAN, "%.2f", b4, 32),
                    s_fmt(s_num(ev, "rejoin_ms"), "%.0f", b5, 32), s_num(o, "lost_steps"),
                    s_num(o, "duplicate_steps"));
        }
    }
    if (any)
        fprintf(f, "\nFallback step: the mean latency of steps served while the lost worker's "
                   "layers ran in the coordinator (resident what fits its budget, the rest "
                   "streamed from disk). Rejoin: from the worker's hello to the route moving "
                   "back.\n\n");
}

int lab_report(const lab_t *L)
{
    s_agg ag[CONFIG_MAX_CONDITIONS];
    char stages[S_MAX_STAGES][32], path[PATH_MAX + 32];
    uint32_t n_stages = 0;
    json_t *lines = json_array();
    FILE *f;
    int rc = -1;

    memset(ag, 0, sizeof ag);
    if (s_read_results(L, ag, stages, &n_stages, lines))
        goto out;
    snprintf(path, sizeof path, "%s/table.md", L->dir);
    if (!(f = fopen(path, "w"))) {
        log_error("%s: %s", path, strerror(errno));
        goto out;
    }
    s_table_head(f, L);
    s_table_results(f, L, ag);
    s_table_predictions(f, L, ag, stages, n_stages);
    s_table_breakeven(f, L, ag);
    s_table_quantized(f, L, ag);
    s_table_failover(f, L, ag, lines);
    s_table_rest(f, L, ag);
    fprintf(f, "Files: results.jsonl (one object per run), steps_per_s.png, stages.png, "
               "latency_cdf.png (data: *.dat, script: plots.gp).\n");
    fclose(f);
    s_plots(L, ag, stages, n_stages);
    rc = 0;
out:
    for (uint32_t i = 0; i < L->n_cond; i++)
        s_agg_free(&ag[i]);
    json_decref(lines);
    return rc;
}

