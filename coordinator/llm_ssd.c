/* llm_ssd.c — the SSD arm around a command's run: plan, cgroup, counters, gates, result
 * fields (see llm_ssd.h). coordinator/ */
#include "coordinator/llm_ssd.h"

#include <stdio.h>

#include "common/util.h"
#include "coordinator/gate.h"

/* Before any allocation the cap should charge: the block device (sysfs walks allocate), then
 * the cgroup (v1 does not move charges made before joining), then the model under the plan. */
int llm_ssd_open(llm_ssd *x, llm_cli_model *lm, uint32_t n_ctx, uint32_t n_batch, char *err,
                 size_t errlen)
{
    exec_plan plan;
    x->lo.n_ctx = n_ctx;
    x->lo.n_batch = n_batch;
    /* a cap the plan cannot hold is refused with its numbers here, not by the OOM killer */
    if (llm_ssd_plan(lm->path, &x->lo, &plan, err, errlen))
        return -1;
    x->has_dev = devstat_find(lm->path, &x->dv, x->dverr, sizeof x->dverr) == 0;
    cap_enter(&x->cap, x->lo.cap_bytes, x->tag, 0);
    cap_describe(&x->cap, x->cap_mode, sizeof x->cap_mode);
    util_reset_hwm();
    if (llm_cli_open_model(lm, &x->lo, err, errlen))
        return -1;
    const exec_plan *p = llm_model_plan(lm->m);
    char b1[32], b2[32], b3[32];
    fprintf(stderr, "ssd arm: cap %s (%s; knobs from %s), %u layers resident, %u streamed "
            "(%.1f MiB per pass), ring %u x %s, working set %s, %s, buffers %s, checksums: %s\n",
            util_fmt_size(x->lo.cap_bytes, b1, sizeof b1), x->cap_mode, x->from, p->n_resident,
            p->n_streamed, p->streamed_per_step / 1048576.0, p->ring_slots,
            util_fmt_size(p->slot_bytes, b2, sizeof b2),
            util_fmt_size(p->working_set, b3, sizeof b3),
            exec_is_direct(llm_model_exec(lm->m)) ? "O_DIRECT" : "buffered (labelled)",
            exec_io_buffers(llm_model_exec(lm->m)), llm_model_sums_source(lm->m));
    /* what loading read (resident layers, embedding, head) is not the steps' */
    llm_model_drain(lm->m);
    llm_model_stats(lm->m, &x->s0);
    x->io0 = util_io_read_bytes();
    if (x->has_dev)
        x->has_dev = devstat_read(&x->dv, &x->d0, x->dverr, sizeof x->dverr) == 0;
    return 0;
}

/* After the run: storage against streamed bytes (cache gate), every streamed layer
 * hashed and matching (content gate). */
void llm_ssd_judge(llm_ssd *x, llm_model *m)
{
    llm_model_drain(m);
    llm_model_stats(m, &x->s1);
    x->io1 = util_io_read_bytes();
    x->cgroup_peak = cap_peak(&x->cap);
    x->peak_rss = util_vmhwm_bytes(0);
    exec_stats d = { .content_fail = x->s1.content_fail - x->s0.content_fail,
                     .layers_streamed = x->s1.layers_streamed - x->s0.layers_streamed,
                     .layers_due = x->s1.layers_due - x->s0.layers_due };
    gate_cache_judge(&x->rr, x->io1 - x->io0, x->s1.streamed_bytes - x->s0.streamed_bytes, 0);
    gate_content_judge(&x->rr, &d);
    fprintf(stderr, "ssd gates: cache %s (storage %.1f MiB for %.1f MiB streamed), content %s "
            "(%llu streamed layers hashed, %llu failed)%s%s\n",
            result_gate_name(x->rr.gate_cache), (x->io1 - x->io0) / 1048576.0,
            (x->s1.streamed_bytes - x->s0.streamed_bytes) / 1048576.0,
            result_gate_name(x->rr.gate_content), (unsigned long long)d.layers_streamed,
            (unsigned long long)d.content_fail, x->rr.void_reason[0] ? ": " : "",
            x->rr.void_reason);
}

/* The SSD fields of a result (README, "generate"). */
void llm_ssd_json(json_t *j, const llm_ssd *x, const llm_model *m)
{
    const exec_plan *p = llm_model_plan(m);
    const exec_t *e = llm_model_exec(m);
    uint64_t sb = x->s1.streamed_bytes - x->s0.streamed_bytes;
    json_object_set_new(j, "cap_mode", json_string(x->cap_mode));
    json_object_set_new(j, "ssd_from", json_string(x->from));
    json_object_set_new(j, "streamed_bytes", json_integer((json_int_t)sb));
    json_object_set_new(j, "resident_layers", json_integer(p->n_resident));
    json_object_set_new(j, "streamed_layers", json_integer(p->n_streamed));
    json_object_set_new(j, "streamed_per_pass_bytes",
                        json_integer((json_int_t)p->streamed_per_step));
    json_object_set_new(j, "queue_depth", json_integer(x->lo.queue_depth));
    json_object_set_new(j, "chunk_bytes", json_integer((json_int_t)x->lo.chunk_bytes));
    json_object_set_new(j, "ring_slots", json_integer(p->n_streamed ? p->ring_slots : 0));
    json_object_set_new(j, "planned_working_set_bytes",
                        json_integer((json_int_t)p->working_set));
    json_object_set_new(j, "held_bytes", json_integer((json_int_t)llm_model_held_bytes(m)));
    json_object_set_new(j, "io", json_string(!p->n_streamed        ? "resident"
                                             : exec_is_direct(e) ? "direct"
                                                                 : "buffered"));
    json_object_set_new(j, "io_uring", json_boolean(exec_uses_uring(e)));
    json_object_set_new(j, "io_buffers", json_string(exec_io_buffers(e)));
    json_object_set_new(j, "checksums", json_string(llm_model_sums_source(m)));
    json_object_set_new(j, "cgroup_peak_bytes", json_integer((json_int_t)x->cgroup_peak));
    json_object_set_new(j, "read_wait_ms", json_real((x->s1.wait_ns - x->s0.wait_ns) / 1e6));
    json_object_set_new(j, "layer_ms", json_real((x->s1.compute_ns - x->s0.compute_ns) / 1e6));
    json_object_set_new(j, "hash_wait_ms",
                        json_real((x->s1.verify_wait_ns - x->s0.verify_wait_ns) / 1e6));
    devstat_sample d1;
    devstat_delta dd;
    char why[256];
    if (!x->has_dev || devstat_read(&x->dv, &d1, why, sizeof why)) {
        json_object_set_new(j, "device", json_null());
        json_object_set_new(j, "device_error", json_string(x->has_dev ? why : x->dverr));
        return;
    }
    /* read now, after the generation: what the device served since d0 (the result line is
     * written with nothing else read between) */
    devstat_diff(&x->d0, &d1, &dd);
    json_object_set_new(j, "device", json_string(x->dv.name));
    json_object_set_new(j, "device_reads", json_integer((json_int_t)dd.reads));
    json_object_set_new(j, "device_read_bytes", json_integer((json_int_t)dd.read_bytes));
    json_object_set_new(j, "device_avg_request_bytes",
                        json_integer((json_int_t)dd.avg_request_bytes));
    json_object_set_new(j, "device_busy_ms", json_real(dd.busy_ms));
    json_object_set_new(j, "device_util", json_real(dd.util));
}

void llm_ssd_leave(llm_ssd *x)
{
    cap_leave(&x->cap);
}
