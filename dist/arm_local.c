/* arm_local.c — the single-process arms: reference (all resident) and ssd (capped, streamed). dist/ */
#include <math.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "base/cap.h"
#include "base/devstat.h"
#include "runtime/exec.h"
#include "arch/kernel.h"
#include "base/log.h"
#include "base/util.h"
#include "dist/arm.h"
#include "runtime/gate.h"
#include "quant/quant.h"

volatile sig_atomic_t arm_stop;

static void s_on_signal(int sig)
{
    (void)sig;
    arm_stop = 1;
}

/* SA_RESETHAND: the first INT or TERM asks for a clean stop; a second one ends the process at
 * once (a run stuck where it cannot look at arm_stop still goes). sigaction also replaces the
 * SIG_IGN a non-interactive shell gives a background job for INT. */
void arm_install_signals(void)
{
    struct sigaction sa = { .sa_handler = s_on_signal, .sa_flags = SA_RESETHAND };
    sigemptyset(&sa.sa_mask);
    sigaction(SIGINT, &sa, NULL);
    sigaction(SIGTERM, &sa, NULL);
}

void arm_make_inputs(const config_t *cfg, uint32_t steps, uint32_t dim, float *inputs)
{
    for (uint32_t s = 0; s < steps; s++)
        util_step_input(cfg->input_seed, s, inputs + (uint64_t)s * dim, (int)dim);
}

void arm_progress(const arm_ctx *a, const char *what, uint32_t done, uint32_t total,
                  double elapsed_ms)
{
    if (!a->progress)
        return;
    fprintf(stderr, "\r[%s] step %u/%u  %.2f steps/s   ", what, done, total,
            elapsed_ms > 0 ? done / (elapsed_ms / 1000.0) : 0.0);
    if (done == total)
        fprintf(stderr, "\n");
}

void arm_parity(const arm_ctx *a, run_result *r)
{
    uint64_t n = (uint64_t)a->steps * a->model->dim;
    util_sha256 *h = util_sha256_new();
    if (h) {
        util_sha256_update(h, a->outputs, n * sizeof(float));
        util_sha256_final_hex(h, r->output_digest);
    }
    if (!a->ref_outputs) {
        r->gate_parity = GATE_NA;
        return;
    }
    double mx = 0;
    int nan = 0;
    for (uint64_t i = 0; i < n; i++) {
        double dlt = fabs((double)a->outputs[i] - (double)a->ref_outputs[i]);
        if (isnan(dlt))
            nan = 1;
        else if (dlt > mx)
            mx = dlt;
    }
    r->has_max_abs_diff = 1;
    r->max_abs_diff = mx;
    if (memcmp(a->outputs, a->ref_outputs, n * sizeof(float)) == 0)
        r->gate_parity = GATE_PASS;
    else
        result_void(r, &r->gate_parity, "parity: outputs differ from the reference (max abs "
                    "diff %g%s)", mx, nan ? ", NaN present" : "");
}

static void s_stage(run_result *r, const char *name, uint64_t ns, uint32_t steps)
{
    json_object_set_new(r->stage_ms, name, json_real(steps ? ns / 1e6 / steps : 0));
}

/* device* result fields: the steps as the block device saw them (devstat.h), or why not. */
static void s_device_fields(run_result *r, const devstat_dev *dv, const devstat_sample *d0,
                            const char *dverr)
{
    devstat_sample d1;
    devstat_delta dd;
    char why[256], b1[32];
    json_t *x = r->extra;
    if (!dv || devstat_read(dv, &d1, why, sizeof why)) {
        json_object_set_new(x, "device", json_null());
        json_object_set_new(x, "device_error", json_string(dv ? why : dverr));
        return;
    }
    devstat_diff(d0, &d1, &dd);
    json_object_set_new(x, "device", json_string(dv->name));
    json_object_set_new(x, "device_reads", json_integer((json_int_t)dd.reads));
    json_object_set_new(x, "device_read_bytes", json_integer((json_int_t)dd.read_bytes));
    json_object_set_new(x, "device_avg_request_bytes",
                        json_integer((json_int_t)dd.avg_request_bytes));
    json_object_set_new(x, "device_busy_ms", json_real(dd.busy_ms));
    json_object_set_new(x, "device_util", json_real(dd.util));
    log_info("%s: at the device (%s): %llu reads, %s per request, busy %.0f%% of %.0f ms",
             r->arm, dv->name, (unsigned long long)dd.reads,
             util_fmt_size(dd.avg_request_bytes, b1, sizeof b1), 100 * dd.util, dd.wall_ms);
}

/* One process, layers [0, L) through an exec; capped when budget != 0. */
static int s_run_single(arm_ctx *a, run_result *r, const exec_opts *o, int capped, char *err,
                        size_t errlen, int quality)
{
    const model_t *m = a->model;
    uint32_t d = m->dim;
    cap_t cap = { 0 };
    exec_t *e = NULL;
    exec_stats st = { 0 };
    devstat_dev dv;
    devstat_sample d0 = { 0 };
    char why[512], dverr[256] = "";
    int has_dev = 0;
    int rc = -1;

    kernel_set_threads((int)a->cfg->threads);
    /* Find the model's block device before joining the cgroup: sysfs walks allocate. */
    if (capped)
        has_dev = devstat_find(m->path, &dv, dverr, sizeof dverr) == 0;
    if (capped) {
        /* Join the cgroup before allocating: v1 does not move earlier charges. */
        cap_enter(&cap, a->cfg->cap_bytes, r->arm, 0);
        cap_describe(&cap, r->cap_mode, sizeof r->cap_mode);
        r->cap_bytes = a->cfg->cap_bytes;
        if (!cap.enforced)
            log_warn("cap is advisory: %s", cap.why);
    }
    util_reset_hwm();
    uint64_t io0 = util_io_read_bytes();
    uint64_t t0 = util_now_ns();
    e = exec_new(m, 0, m->n_layers, o, why, sizeof why);
    if (!e) {
        snprintf(err, errlen, "%s arm: %s", r->arm, why);
        goto out;
    }
    /* quant's row products use the run's threads (the f32 path: OpenBLAS's, set above) */
    exec_set_threads(e, (int)a->cfg->threads);
    const exec_plan *p = exec_get_plan(e);
    if (capped && p->working_set > a->cfg->cap_bytes) {
        snprintf(err, errlen, "%s arm: plan needs %llu bytes, over the cap", r->arm,
                 (unsigned long long)p->working_set);
        goto out;
    }
    uint64_t t1 = util_now_ns();
    uint64_t io1 = util_io_read_bytes();
    r->setup_ms = (t1 - t0) / 1e6;
    r->setup_read_bytes = io1 - io0;
    if (capped)
        log_info("%s: %u layers resident, %u streamed per step (%llu MiB/step), queue depth %u, "
                 "ring %u slots, chunk %u rows, %s, %s, buffers %s",
                 r->arm, p->n_resident, p->n_streamed,
                 (unsigned long long)(p->streamed_per_step >> 20), o->queue_depth,
                 p->ring_slots, p->rows_per_chunk, exec_is_direct(e) ? "O_DIRECT" : "BUFFERED (labelled)",
                 !p->n_streamed        ? "nothing streamed"
                 : exec_uses_uring(e) ? "io_uring"
                                      : "synchronous pread (io_uring unavailable)",
                 exec_io_buffers(e));
    json_object_set_new(r->extra, "resident_layers", json_integer(p->n_resident));
    json_object_set_new(r->extra, "streamed_layers", json_integer(p->n_streamed));
    json_object_set_new(r->extra, "queue_depth", json_integer(o->queue_depth));
    json_object_set_new(r->extra, "ring_slots", json_integer(p->n_streamed ? p->ring_slots : 0));
    json_object_set_new(r->extra, "chunk_rows", json_integer(p->rows_per_chunk));
    json_object_set_new(r->extra, "chunk_bytes",
                        json_integer((json_int_t)(p->rows_per_chunk *
                                                  (m->w_bytes ? m->w_bytes / d : d * 4ull))));
    json_object_set_new(r->extra, "io", json_string(p->n_streamed == 0 ? "resident"
                                                    : exec_is_direct(e) ? "direct"
                                                                        : "buffered"));
    json_object_set_new(r->extra, "planned_working_set_bytes",
                        json_integer((json_int_t)p->working_set));
    json_object_set_new(r->extra, "blas_threads", json_integer(a->cfg->threads));
    json_object_set_new(r->extra, "io_buffers", json_string(exec_io_buffers(e)));
    /* The block device's view of the steps (requests as they reached it, busy time). */
    if (has_dev)
        has_dev = devstat_read(&dv, &d0, dverr, sizeof dverr) == 0;

    uint64_t tstart = util_now_ns();
    for (uint32_t s = 0; s < a->steps; s++) {
        float *x = a->outputs + (uint64_t)s * d;
        uint64_t ts = util_now_ns();
        memcpy(x, a->inputs + (uint64_t)s * d, sizeof(float) * d);
        if (arm_stop) {
            snprintf(err, errlen, "%s arm: interrupted at step %u", r->arm, s);
            goto out;
        }
        if (exec_step(e, x, &st, why, sizeof why)) {
            snprintf(err, errlen, "%s arm: step %u: %s", r->arm, s, why);
            goto out;
        }
        uint64_t te = util_now_ns();
        r->step_ms[s] = (te - ts) / 1e6;
        arm_progress(a, r->condition, s + 1, a->steps, (te - tstart) / 1e6);
    }
    r->total_ms = (util_now_ns() - tstart) / 1e6;
    exec_drain(e);
    r->ssd_read_bytes = util_io_read_bytes() - io1;
    if (capped)
        s_device_fields(r, has_dev ? &dv : NULL, &d0, dverr);
    r->streamed_bytes = st.streamed_bytes;
    r->peak_rss_bytes = util_vmhwm_bytes(0);
    r->cgroup_peak_bytes = cap_peak(&cap);
    uint64_t failcnt = capped && cap.enforced ? cap_failcnt(&cap) : 0;
    /* What the cap measures ends here: the stats, gates and parity that follow are not the
     * arm's working set, and under a tight cap (tiny.ini's 2 MiB) their allocations in an
     * ASan build were OOM-killed in the group (twice on 2026-12-02, dmesg). Safe twice. */
    if (capped && cap_leave(&cap))
        log_warn("could not remove cgroup %s", cap.dir);
    s_stage(r, "compute", st.compute_ns, a->steps);
    s_stage(r, "read_wait", st.wait_ns, a->steps);
    s_stage(r, "verify", st.verify_ns, a->steps);
    s_stage(r, "verify_wait", st.verify_wait_ns, a->steps);
    result_finish_stats(r);

    /* Resident layers were verified at load; streamed ones as they were consumed. */
    gate_cache_judge(r, r->ssd_read_bytes, r->streamed_bytes, 0);
    gate_content_judge(r, &st);
    if (failcnt)
        log_warn("%s: the cgroup hit its limit %llu times (reclaim under the cap)", r->arm,
                 (unsigned long long)failcnt);
    if (quality)
        arm_quality(a, r);
    else
        arm_parity(a, r);
    rc = 0;
out:
    exec_free(&e);
    if (capped && cap_leave(&cap))
        log_warn("could not remove cgroup %s", cap.dir);
    return rc;
}

int arm_run_reference(arm_ctx *a, run_result *r, char *err, size_t errlen)
{
    exec_opts o = { .budget_bytes = 0, .queue_depth = 1, .chunk_bytes = a->cfg->chunk_bytes,
                    .verify_resident = 1, .buffered = a->cfg->buffered };
    return s_run_single(a, r, &o, 0, err, errlen, 0);
}

int arm_run_ssd(arm_ctx *a, run_result *r, char *err, size_t errlen)
{
    exec_opts o = { .budget_bytes = a->cfg->cap_bytes,
                    .queue_depth = a->cfg->queue_depth,
                    .chunk_bytes = a->cfg->chunk_bytes,
                    .overhead_bytes = a->cfg->overhead_bytes,
                    .buffered = a->cfg->buffered,
                    .total_steps = a->steps,
                    .verify_resident = 1,
                    .buffers_4k = a->cfg->buffers_4k };
    return s_run_single(a, r, &o, 1, err, errlen, 0);
}

static void s_quant_opts(const config_t *cfg, exec_opts *o)
{
    *o = (exec_opts){ .budget_bytes = cfg->cap_bytes,
                      .queue_depth = 1,
                      .chunk_bytes = cfg->chunk_bytes,
                      .overhead_bytes = cfg->overhead_bytes,
                      .resident_only = 1,
                      .verify_resident = 1 };
}

int arm_quant_fit(const config_t *cfg, const model_t *m, char *err, size_t errlen)
{
    exec_opts o;
    exec_plan p;
    char why[512], b1[32], b2[32], b3[32];
    s_quant_opts(cfg, &o);
    if (!exec_plan_make(m, 0, m->n_layers, &o, &p, why, sizeof why))
        return 0;
    snprintf(err, errlen, "quantized arm: %u layers of %s (%s of weights) do not fit resident "
             "under the cap %s with %s reserved: %s", m->n_layers, quant_type_name(m->w_type),
             util_fmt_size((uint64_t)m->n_layers * model_layer_bytes(m), b1, sizeof b1),
             util_fmt_size(cfg->cap_bytes, b2, sizeof b2),
             util_fmt_size(cfg->overhead_bytes, b3, sizeof b3), why);
    return -1;
}

int arm_run_quantized(arm_ctx *a, run_result *r, char *err, size_t errlen)
{
    exec_opts o;
    const model_t *m = a->model;
    if (arm_quant_fit(a->cfg, m, err, errlen))
        return -1;
    s_quant_opts(a->cfg, &o);
    json_object_set_new(r->extra, "quant_weight_bytes",
                        json_integer((json_int_t)((uint64_t)m->n_layers * model_layer_bytes(m))));
    return s_run_single(a, r, &o, 1, err, errlen, 1);
}
