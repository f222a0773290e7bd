/* swarm_report.c — the resident arm's end: stats from the workers, teardown, and the JSONL fields. dist/ */
#include <errno.h>
#include <fcntl.h>
#include <xxhash.h>
#include <math.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/wait.h>
#include <unistd.h>
#include <poll.h>
#include <zmq.h>

#include "base/cap.h"
#include "runtime/exec.h"
#include "arch/kernel.h"
#include "base/log.h"
#include "base/sec.h"
#include "base/util.h"
#include "dist/arm.h"
#include "dist/partition.h"
#include "proto/proto.h"
#include "dist/worker.h"
#include "dist/swarm_int.h"

/* ------------------------------------------------------------ teardown and report */

void swarm_collect_stats(swarm_t *c)
{
    uint64_t deadline = util_now_ns() + S_STATS_TIMEOUT_MS * 1000000ull;
    for (uint32_t i = 0; i < c->n; i++) {
        if (c->p[i].state != P_READY)
            continue;
        msg_stats q = { 0 };
        if (proto_encode_stats(c->out, &q) == 0)
            swarm_ctl_send(c, &c->p[i]);
    }
    for (;;) {
        int pending = 0;
        for (uint32_t i = 0; i < c->n; i++)
            if (c->p[i].state == P_READY && !c->p[i].have_stats)
                pending++;
        if (!pending || util_now_ns() > deadline)
            break;
        zmq_pollitem_t it[CONFIG_MAX_WORKERS];
        for (uint32_t i = 0; i < c->n; i++)
            it[i] = (zmq_pollitem_t){ c->p[i].dealer, 0, c->p[i].dealer ? ZMQ_POLLIN : 0, 0 };
        zmq_poll(it, (int)c->n, 20);
        for (uint32_t i = 0; i < c->n; i++)
            if ((it[i].revents & ZMQ_POLLIN) || c->p[i].ctlq)
                swarm_handle_ctl(c, &c->p[i]);
    }
}

void swarm_teardown(swarm_t *c)
{
    msg_bye bye;
    snprintf(bye.reason, sizeof bye.reason, "run over");
    for (uint32_t i = 0; i < c->n; i++) {
        swarm_peer *p = &c->p[i];
        if (p->dealer && proto_encode_bye(c->out, &bye) == 0)
            swarm_ctl_send(c, p);
    }
    /* A lost or rejoining spawned worker may never see the bye: stop it now. */
    for (uint32_t i = 0; i < c->n; i++)
        if (c->p[i].spawned && c->p[i].state != P_READY) {
            if (c->p[i].cont_at_ns)
                kill(c->p[i].spawned, SIGCONT);
            kill(c->p[i].spawned, SIGTERM);
        }
    /* Spawned workers exit on bye (--once); give them 2 s, then SIGKILL. */
    uint64_t deadline = util_now_ns() + 2000000000ull;
    for (uint32_t i = 0; i < c->n; i++) {
        swarm_peer *p = &c->p[i];
        while (p->spawned && util_now_ns() < deadline) {
            swarm_reap(c, p, 0);
            if (p->spawned)
                usleep(5000);
        }
        if (p->spawned && p->cont_at_ns)
            kill(p->spawned, SIGCONT);
        swarm_reap(c, p, 1);
        slice_free(&p->fb);
        swarm_close_ctl(p);
        if (p->push)
            zmq_close(p->push);
        p->push = NULL;
    }
    if (c->pull)
        zmq_close(c->pull);
    c->pull = NULL;
}

void swarm_report(swarm_t *c)
{
    run_result *r = c->r;
    json_t *pw = json_array(), *fo = json_array(), *bs = json_object();
    uint64_t agg = util_vmhwm_bytes(0), maxrss = 0, wread = 0;
    double n = c->n_done ? c->n_done : 1;
    for (uint32_t i = 0; i < c->n; i++) {
        swarm_peer *p = &c->p[i];
        json_t *o = json_object();
        uint64_t rss = p->have_stats ? p->stats.peak_rss_bytes : p->ready.peak_rss_bytes;
        json_object_set_new(o, "id", json_string(p->id));
        json_object_set_new(o, "endpoint", json_string(p->ctl_ep));
        json_object_set_new(o, "first", json_integer(p->first));
        json_object_set_new(o, "last", json_integer(p->last));
        json_object_set_new(o, "peak_rss_bytes", json_integer((json_int_t)rss));
        json_object_set_new(o, "cgroup_peak_bytes", json_integer((json_int_t)(
            p->have_stats ? p->stats.cgroup_peak_bytes : p->ready.cgroup_peak_bytes)));
        json_object_set_new(o, "cap_bytes", json_integer((json_int_t)p->cap_bytes));
        json_object_set_new(o, "load_ms", json_real(p->ready.load_ns / 1e6));
        json_object_set_new(o, "fetched_bytes", json_integer((json_int_t)p->ready.fetched_bytes));
        json_object_set_new(o, "fetch_ms", json_real(p->ready.fetch_ns / 1e6));
        json_object_set_new(o, "resumed_bytes", json_integer((json_int_t)p->ready.resumed_bytes));
        json_object_set_new(o, "bad_msgs", json_integer((json_int_t)p->stats.bad_msgs));
        json_object_set_new(o, "stale_msgs", json_integer((json_int_t)p->stats.stale_msgs));
        json_object_set_new(o, "state", json_string(p->state == P_READY ? "ready" : "lost"));
        json_array_append_new(pw, o);
        agg += rss;
        if (rss > maxrss)
            maxrss = rss;
        c->bytes_wire += p->stats.bytes_out;
        if (p->pid && p->state == P_READY) {
            uint64_t now_io = util_io_read_bytes_pid((int)p->pid);
            if (now_io > p->io_before)
                wread += now_io - p->io_before;
        }
    }
    for (uint32_t k = 0; k < c->n_fo; k++) {
        swarm_failover *f = &c->fo[k];
        json_t *o = json_object();
        json_object_set_new(o, "worker", json_string(f->worker));
        json_object_set_new(o, "how", json_string(f->how));
        json_object_set_new(o, "lost_at_step", json_integer((json_int_t)f->lost_step));
        json_object_set_new(o, "detection_ms", json_real(f->detection_ms));
        json_object_set_new(o, "steps_replayed", json_integer((json_int_t)f->replayed));
        json_object_set_new(o, "steps_in_fallback", json_integer((json_int_t)f->fallback_steps));
        json_object_set_new(o, "fallback_step_ms", f->fallback_steps
                                ? json_real(f->fallback_ms_sum / f->fallback_steps) : json_null());
        json_object_set_new(o, "rejoin_ms", f->rejoin_ms >= 0 ? json_real(f->rejoin_ms)
                                                              : json_null());
        json_array_append_new(fo, o);
    }
    uint32_t hops = c->n + 1;
    json_object_set_new(bs, "payload", json_integer((json_int_t)((uint64_t)c->n_done * hops *
                                                                 c->d * 4)));
    json_object_set_new(bs, "wire", json_integer((json_int_t)c->bytes_wire));
    json_object_set_new(r->extra, "workers", json_integer(c->n));
    json_object_set_new(r->extra, "inflight", json_integer(c->a->inflight));
    json_object_set_new(r->extra, "hops", json_integer(hops));
    json_object_set_new(r->extra, "per_worker", pw);
    json_object_set_new(r->extra, "aggregate_peak_rss_bytes", json_integer((json_int_t)agg));
    json_object_set_new(r->extra, "coordinator_peak_rss_bytes",
                        json_integer((json_int_t)util_vmhwm_bytes(0)));
    json_object_set_new(r->extra, "bytes_sent", bs);
    json_object_set_new(r->extra, "workers_read_bytes_during_steps",
                        json_integer((json_int_t)wread));
    json_object_set_new(r->extra, "failover", fo);
    json_object_set_new(r->extra, "lost_steps",
                        json_integer((json_int_t)(c->a->steps - c->n_done)));
    json_object_set_new(r->extra, "duplicate_steps", json_integer(0));
    json_object_set_new(r->extra, "duplicate_results_dropped",
                        json_integer((json_int_t)c->dup_results));
    json_object_set_new(r->extra, "stale_msgs_dropped", json_integer((json_int_t)c->stale_msgs));
    json_object_set_new(r->extra, "bad_msgs", json_integer((json_int_t)c->bad_msgs));
    json_object_set_new(r->extra, "replays", json_integer((json_int_t)c->replays));
    json_object_set_new(r->extra, "deadline_replays",
                        json_integer((json_int_t)c->deadline_replays));
    json_object_set_new(r->extra, "distributed_bytes", json_integer((json_int_t)c->served_bytes));
    json_object_set_new(r->extra, "transport", json_string(c->sec ? "curve" : "plaintext"));
    json_object_set_new(r->extra, "zap_refused", json_integer((json_int_t)sec_refused(c->sec)));
    json_object_set_new(r->extra, "link_delay_ms",
                        json_real(c->a->profile.delay_ns / 1e6));
    r->peak_rss_bytes = maxrss;
    r->cap_bytes = c->cfg->worker_cap_bytes;
    r->setup_read_bytes = c->setup_read;
    json_object_set_new(r->stage_ms, "wait", json_real(c->st_wait / n));
    json_object_set_new(r->stage_ms, "deser", json_real((c->st_deser + c->coord_deser) / n));
    json_object_set_new(r->stage_ms, "compute", json_real(c->st_compute / n));
    json_object_set_new(r->stage_ms, "ser", json_real((c->st_ser + c->coord_ser) / n));
    json_object_set_new(r->stage_ms, "send", json_real(c->st_send / n));
    json_object_set_new(r->stage_ms, "network", json_real(c->st_net / n));
    json_object_set_new(r->stage_ms, "e2e", json_real(c->st_e2e / n));
    /* Per-request latency (several in flight) beside service throughput. */
    double *v = malloc(sizeof(double) * (c->n_done ? c->n_done : 1));
    uint32_t k = 0;
    for (uint32_t s = 0; v && s < c->a->steps; s++)
        if (c->done[s])
            v[k++] = c->lat_ms[s];
    if (v) {
        util_sort_doubles(v, k);
        json_object_set_new(r->extra, "latency_ms_p50", json_real(k ? util_percentile(v, k, 50) : 0));
        json_object_set_new(r->extra, "latency_ms_p95", json_real(k ? util_percentile(v, k, 95) : 0));
        json_object_set_new(r->extra, "latency_ms_p99", json_real(k ? util_percentile(v, k, 99) : 0));
    }
    free(v);
}

