/* result.c — run figures to JSON Lines and a readable table. runtime/ */
#include "runtime/result.h"

#include <errno.h>
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/util.h"

void result_init(run_result *r, const char *arm, uint32_t steps)
{
    memset(r, 0, sizeof *r);
    snprintf(r->arm, sizeof r->arm, "%s", arm);
    snprintf(r->condition, sizeof r->condition, "%s", arm);
    snprintf(r->profile, sizeof r->profile, "none");
    snprintf(r->cap_mode, sizeof r->cap_mode, "none");
    r->steps = steps;
    r->step_ms = calloc(steps ? steps : 1, sizeof(double));
    r->stage_ms = json_object();
    r->extra = json_object();
}

void result_free(run_result *r)
{
    free(r->step_ms);
    r->step_ms = NULL;
    json_decref(r->stage_ms);
    json_decref(r->extra);
    r->stage_ms = r->extra = NULL;
}

void result_finish_stats(run_result *r)
{
    uint32_t n = r->steps > 1 ? r->steps - 1 : r->steps;
    const double *src = r->steps > 1 ? r->step_ms + 1 : r->step_ms;
    double *v = malloc(sizeof(double) * (n ? n : 1));
    double sum = 0;
    if (!v)
        return;
    for (uint32_t i = 0; i < n; i++) {
        v[i] = src[i];
        sum += v[i];
    }
    util_sort_doubles(v, n);
    r->step_ms_p50 = util_percentile(v, n, 50);
    r->step_ms_p95 = util_percentile(v, n, 95);
    r->step_ms_p99 = util_percentile(v, n, 99);
    r->step_ms_mean_steady = n ? sum / n : 0;
    r->ttfr_ms = r->steps ? r->step_ms[0] : 0;
    r->steps_per_s = r->total_ms > 0 ? r->steps / (r->total_ms / 1000.0) : 0;
    free(v);
}

void result_void(run_result *r, gate_state *gate, const char *fmt, ...)
{
    char msg[256];
    va_list ap;
    size_t len = strlen(r->void_reason);
    *gate = GATE_VOID;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    snprintf(r->void_reason + len, sizeof r->void_reason - len, "%s%s", len ? "; " : "", msg);
}

int result_is_void(const run_result *r)
{
    return r->gate_cache == GATE_VOID || r->gate_content == GATE_VOID ||
           r->gate_parity == GATE_VOID || r->gate_quality == GATE_VOID;
}

const char *result_gate_name(gate_state g)
{
    return g == GATE_PASS ? "pass" : g == GATE_VOID ? "void" : "n/a";
}

static json_t *s_num(double v)
{
    return isfinite(v) ? json_real(v) : json_null();
}

json_t *result_to_json(const run_result *r)
{
    json_t *o = json_object(), *steps = json_array(), *gates = json_object();
    json_object_set_new(o, "arm", json_string(r->arm));
    json_object_set_new(o, "condition", json_string(r->condition));
    json_object_set_new(o, "profile", json_string(r->profile));
    json_object_set_new(o, "steps", json_integer(r->steps));
    json_object_set_new(o, "setup_ms", s_num(r->setup_ms));
    json_object_set_new(o, "ttfr_ms", s_num(r->ttfr_ms));
    json_object_set_new(o, "total_ms", s_num(r->total_ms));
    json_object_set_new(o, "step_ms_p50", s_num(r->step_ms_p50));
    json_object_set_new(o, "step_ms_p95", s_num(r->step_ms_p95));
    json_object_set_new(o, "step_ms_p99", s_num(r->step_ms_p99));
    json_object_set_new(o, "step_ms_mean_steady", s_num(r->step_ms_mean_steady));
    json_object_set_new(o, "steps_per_s", s_num(r->steps_per_s));
    json_object_set(o, "stage_ms", r->stage_ms);
    json_object_set_new(o, "ssd_read_bytes", json_integer((json_int_t)r->ssd_read_bytes));
    json_object_set_new(o, "streamed_bytes", json_integer((json_int_t)r->streamed_bytes));
    json_object_set_new(o, "setup_read_bytes", json_integer((json_int_t)r->setup_read_bytes));
    json_object_set_new(o, "peak_rss_bytes", json_integer((json_int_t)r->peak_rss_bytes));
    json_object_set_new(o, "cgroup_peak_bytes", json_integer((json_int_t)r->cgroup_peak_bytes));
    json_object_set_new(o, "cap_bytes", json_integer((json_int_t)r->cap_bytes));
    json_object_set_new(o, "cap_mode", json_string(r->cap_mode));
    json_object_set_new(o, "output_digest", json_string(r->output_digest));
    json_object_set_new(o, "max_abs_diff", r->has_max_abs_diff ? json_real(r->max_abs_diff)
                                                                : json_null());
    json_object_set_new(gates, "cache", json_string(result_gate_name(r->gate_cache)));
    json_object_set_new(gates, "content", json_string(result_gate_name(r->gate_content)));
    json_object_set_new(gates, "parity", json_string(result_gate_name(r->gate_parity)));
    json_object_set_new(gates, "quality", json_string(result_gate_name(r->gate_quality)));
    json_object_set_new(o, "gates", gates);
    json_object_set_new(o, "void", json_boolean(result_is_void(r)));
    json_object_set_new(o, "void_reason", json_string(r->void_reason));
    for (uint32_t i = 0; i < r->steps; i++)
        json_array_append_new(steps, s_num(r->step_ms[i]));
    json_object_set_new(o, "step_ms", steps);
    json_object_set_new(o, "model", json_string(r->model));
    json_object_set_new(o, "config", json_string(r->config));
    json_object_set_new(o, "git_rev", json_string(util_git_rev()));
    json_object_set_new(o, "unix_time", json_integer((json_int_t)(util_wall_ns() / 1000000000ull)));
    json_object_update(o, r->extra);
    return o;
}

int result_append_jsonl(const char *path, json_t *obj, char *err, size_t errlen)
{
    FILE *f = fopen(path, "a");
    char *s;
    int rc = 0;
    if (!f) {
        snprintf(err, errlen, "%s: cannot open for append: %s", path, strerror(errno));
        return -1;
    }
    s = json_dumps(obj, JSON_COMPACT | JSON_REAL_PRECISION(10));
    if (!s || fprintf(f, "%s\n", s) < 0) {
        snprintf(err, errlen, "%s: write failed", path);
        rc = -1;
    }
    free(s);
    if (fclose(f) && !rc) {
        snprintf(err, errlen, "%s: close failed: %s", path, strerror(errno));
        rc = -1;
    }
    return rc;
}

void result_print(const run_result *r)
{
    char b1[32], b2[32], b3[32], b4[32];
    printf("%-16s %8.2f steps/s  ttfr %8.2f ms  step p50 %8.2f p95 %8.2f p99 %8.2f ms  "
           "setup %8.1f ms\n",
           r->condition, r->steps_per_s, r->ttfr_ms, r->step_ms_p50, r->step_ms_p95,
           r->step_ms_p99, r->setup_ms);
    printf("%-16s ssd read %s (streamed %s)  peak rss %s  cgroup peak %s  cap %s\n", "",
           util_fmt_size(r->ssd_read_bytes, b1, sizeof b1),
           util_fmt_size(r->streamed_bytes, b2, sizeof b2),
           util_fmt_size(r->peak_rss_bytes, b3, sizeof b3),
           r->cgroup_peak_bytes ? util_fmt_size(r->cgroup_peak_bytes, b4, sizeof b4) : "-",
           r->cap_mode);
    if (r->has_max_abs_diff)
        snprintf(b1, sizeof b1, "%g", r->max_abs_diff);
    else
        snprintf(b1, sizeof b1, "n/a");
    printf("%-16s gates: cache %s, content %s, parity %s  max_abs_diff %s  digest %.16s\n", "",
           result_gate_name(r->gate_cache), result_gate_name(r->gate_content),
           result_gate_name(r->gate_parity), b1, r->output_digest);
    const json_t *qa = json_object_get(r->extra, "quality_max_abs_err");
    const json_t *qr = json_object_get(r->extra, "quality_max_rel_err");
    if (r->gate_quality != GATE_NA && qa && qr)
        printf("%-16s quality %s: max abs err %.3g (limit %.3g), max rel err %.3g (limit %.3g)\n",
               "", result_gate_name(r->gate_quality), json_number_value(qa),
               json_number_value(json_object_get(r->extra, "quality_limit_abs")),
               json_number_value(qr),
               json_number_value(json_object_get(r->extra, "quality_limit_rel")));
    if (result_is_void(r))
        printf("%-16s VOID: %s\n", "", r->void_reason);
    fflush(stdout);
}
