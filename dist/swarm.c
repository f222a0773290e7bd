/* swarm.c — the resident arm: workers, partition, route, steps in flight, fallback, rejoin. dist/
 *
 * The route is a chain of segments, one per worker, in layer order. A segment is served by
 * its worker while that worker is alive and loaded, and by the coordinator itself (a local
 * exec under the lost worker's budget, streaming what does not fit) while it is not. Every
 * route change bumps the epoch; workers drop activations of another epoch, the coordinator
 * drops results of an old one, and every step still in flight is replayed from its input
 * (which the coordinator keeps) under the new epoch. A step's result is recorded once.
 *
 * Loss detection is the zguide's Paranoid Pirate on the control plane: a heartbeat every
 * heartbeat_ms, and a worker silent for liveness x heartbeat_ms (plus the control link's
 * emulated round trip) is lost. Default 100 ms x 5 = 0.5 s, under the 1 s target. Workers
 * compute on a thread of their own and answer heartbeats meanwhile, so silence means dead,
 * frozen or cut off, never busy; the echo carries the worker's progress (busy time on its
 * current activation, activations done), which is how a slow worker is told from a stuck
 * one: the step deadline counts from the pipeline's last sign of progress, and a worker
 * whose one activation outlasts S_STALL_FACTOR times its slowest so far is lost as stalled.
 */
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
#include "base/exitcode.h"
#include "arch/kernel.h"
#include "base/log.h"
#include "base/sec.h"
#include "base/util.h"
#include "dist/arm.h"
#include "runtime/gate.h"
#include "dist/partition.h"
#include "proto/proto.h"
#include "dist/worker.h"
#include "dist/swarm_int.h"

/* ------------------------------------------------------------ routes and epochs */

static int s_is_local(const swarm_peer *p)
{
    return p->state != P_READY;
}

/* How long one activation may take before its worker counts as stalled rather than slow:
 * S_STALL_FACTOR x its slowest so far, never less than that many step deadlines. Before its
 * first result there is nothing to compare with, and a busy worker is taken at its word
 * (UINT64_MAX: never stalled). */
static uint64_t s_stall_ns(const swarm_t *c, const swarm_peer *p)
{
    uint64_t deadline = (uint64_t)c->cfg->step_deadline_ms * 1000000ull;
    if (!p->max_compute_ns)
        return UINT64_MAX;
    return S_STALL_FACTOR * (p->max_compute_ns > deadline ? p->max_compute_ns : deadline);
}

/* Worker i's next hop under the current epoch, followed by a heartbeat: its echo proves the
 * route is in force (control messages are processed in order). */
static void s_route_peer(swarm_t *c, uint32_t i)
{
    swarm_peer *p = &c->p[i];
    msg_route rt = { .epoch = c->epoch, .hop = i };
    int next_remote = i + 1 < c->n && !s_is_local(&c->p[i + 1]);
    snprintf(rt.next_ep, sizeof rt.next_ep, "%s", next_remote ? c->p[i + 1].data_ep : c->pull_ep);
    snprintf(rt.next_key, sizeof rt.next_key, "%s", next_remote ? c->p[i + 1].pub : c->pub);
    rt.last = i + 1 == c->n;
    if (i > 0 && !s_is_local(&c->p[i - 1]))
        snprintf(rt.prev_key, sizeof rt.prev_key, "%s", c->p[i - 1].pub);
    else
        snprintf(rt.prev_key, sizeof rt.prev_key, "%s", c->pub);
    netem_profile_link(&c->a->profile, c->cfg->input_seed * 131 + i * 7 + c->epoch, &rt.link);
    if (proto_encode_route(c->out, &rt) == 0)
        swarm_ctl_send(c, p);
    swarm_send_heartbeat(c, p);
    p->barrier_seq = p->hb.seq;
    p->barrier_ok = 0;
}

/* Wait for worker i's route echo; a worker that does not answer within its liveness is lost
 * (which reroutes). 0 when acknowledged. */
static int s_barrier_one(swarm_t *c, uint32_t i)
{
    swarm_peer *p = &c->p[i];
    uint64_t limit = pirate_window_ns(c->cfg->heartbeat_ms, c->cfg->liveness, c->ctl_allow_ns);
    uint64_t t0 = util_now_ns();
    while (p->state == P_READY && !p->barrier_ok) {
        if (util_now_ns() - t0 > limit) {
            swarm_mark_lost(c, p, "no route ack");
            return -1;
        }
        zmq_pollitem_t it = { p->dealer, 0, ZMQ_POLLIN, 0 };
        if (p->dealer)
            zmq_poll(&it, 1, 10);
        swarm_handle_ctl(c, p);
    }
    return p->state == P_READY ? 0 : -1;
}

/* A new epoch's routes, the last hop first, each acknowledged before its predecessor hears of
 * it: with CURVE a receiver must allow the sender's key before the sender connects, or its
 * ZAP handler refuses the handshake (seen on the namespace hosts, 2026-11-30). Returns 1 when
 * this epoch's routes are all in force, 0 when a worker was lost meanwhile (the nested
 * reroute then set up a newer epoch). */
int swarm_send_routes(swarm_t *c)
{
    uint64_t ep = ++c->epoch;
    for (uint32_t i = c->n; i-- > 0;) {
        if (c->p[i].state != P_READY)
            continue;
        s_route_peer(c, i);
        if (s_barrier_one(c, i) || c->epoch != ep)
            return 0;
    }
    return 1;
}

static void s_send_step(swarm_t *c, uint32_t s);

static void s_replay_inflight(swarm_t *c)
{
    for (uint32_t s = c->low; s < c->next_send; s++) {
        if (c->in_flight[s] && !c->done[s]) {
            c->replays++;
            for (uint32_t i = 0; i < c->n; i++)
                if (c->p[i].fo >= 0 && c->p[i].state != P_READY)
                    c->fo[c->p[i].fo].replayed++;
            s_send_step(c, s);
        }
    }
}

static void s_reroute(swarm_t *c)
{
    if (swarm_send_routes(c))
        s_replay_inflight(c); /* (a nested reroute already replayed under its epoch) */
}

/* p's layers here, as the llm swarm runs a lost worker's: a slice of the model (stateless for
 * the dense lab model) under p's cap, resident what fits and the rest streamed with the
 * [ssd] settings. 0, or -1 with c->budget_err. */
static int s_open_fallback(swarm_t *c, swarm_peer *p)
{
    char err[512];
    uint64_t sums[PROTO_MAX_LAYERS];
    exec_opts o = { .budget_bytes = p->cap_bytes, .queue_depth = c->cfg->queue_depth,
                    .chunk_bytes = c->cfg->chunk_bytes,
                    .overhead_bytes = c->cfg->overhead_bytes, .buffered = c->cfg->buffered,
                    .verify_resident = 1, .buffers_4k = c->cfg->buffers_4k };
    for (uint32_t l = p->first; l < p->last && l - p->first < PROTO_MAX_LAYERS; l++)
        sums[l - p->first] = c->m->layers[l].checksum;
    slice_opts so = { .path = c->m->path, .first = p->first, .last = p->last, .n_ctx = 1,
                      .sessions = 1, .max_batch = 1, .cap_bytes = p->cap_bytes,
                      .expect_sums = sums, .exec = &o };
    if (p->last - p->first > PROTO_MAX_LAYERS || !(p->fb = slice_new(&so, err, sizeof err))) {
        snprintf(c->budget_err, sizeof c->budget_err, "fallback for %s impossible: %s", p->id,
                 p->last - p->first > PROTO_MAX_LAYERS ? "too many layers" : err);
        return -1;
    }
    const exec_plan *pl = slice_plan(p->fb);
    if (c->t_start) /* taken over during the steps: its load is in their reads too */
        c->fb_loaded += slice_loaded_bytes(p->fb);
    log_info("fallback for %s: %u layers resident, %u streamed per step", p->id,
             pl->n_resident, pl->n_streamed);
    return 0;
}

void swarm_mark_lost(swarm_t *c, swarm_peer *p, const char *how)
{
    uint64_t now = util_now_ns();
    if (p->state == P_LOST)
        return;
    int was_setup = p->state != P_READY && p->state != P_REJOINING;
    swarm_failover *f = NULL;
    if (c->n_fo < sizeof c->fo / sizeof c->fo[0]) {
        f = &c->fo[c->n_fo];
        memset(f, 0, sizeof *f);
        snprintf(f->worker, sizeof f->worker, "%s", p->id);
        snprintf(f->how, sizeof f->how, "%s", how);
        f->lost_step = c->n_done;
        f->lost_ns = now;
        uint64_t since = p->fault_ns ? p->fault_ns : p->hb.heard_ns;
        f->detection_ms = since && now > since ? (now - since) / 1e6 : 0;
        f->rejoin_ms = -1;
        p->fo = (int)c->n_fo++;
    }
    p->state = P_LOST;
    p->probe_ns = now;
    p->hb_busy_ns = p->hb_acts = 0; /* a new process starts counting afresh */
    swarm_close_ctl(p);
    if (p->push) {
        zmq_close(p->push);
        p->push = NULL;
    }
    log_warn("%s lost (%s) at step %u%s after %.0f ms: layers [%u, %u) fall back to the "
             "coordinator", p->id, how, c->n_done, was_setup ? " (during setup)" : "",
             f ? f->detection_ms : 0.0, p->first, p->last);
    /* Fallback under the lost worker's budget: resident what fits, stream the rest. */
    if (!p->fb && s_open_fallback(c, p)) {
        c->budget_fail = 1;
        log_error("%s", c->budget_err);
        return;
    }
    s_reroute(c);
}

/* ------------------------------------------------------------ data plane */

static void s_record_result(swarm_t *c, msg_act *a, uint64_t arrival_ns, uint64_t t_deser)
{
    uint32_t s = (uint32_t)a->step;
    uint64_t now = util_now_ns();
    if (s >= c->a->steps || c->done[s]) {
        c->dup_results++;
        return;
    }
    memcpy(c->a->outputs + (uint64_t)s * c->d, a->x, sizeof(float) * c->d);
    c->done[s] = 1;
    c->in_flight[s] = 0;
    c->n_done++;
    c->n_inflight--;
    while (c->low < c->a->steps && c->done[c->low])
        c->low++;
    double e2e = (now - c->sent_ns[s]) / 1e6;
    c->progress_ns = now;
    c->lat_ms[s] = e2e;
    c->r->step_ms[s] = e2e;
    double work = 0;
    for (uint32_t i = 0; i < a->n_trace; i++) {
        const msg_trace *t = &a->trace[i];
        if (t->stage < c->n && t->compute_ns > c->p[t->stage].max_compute_ns)
            c->p[t->stage].max_compute_ns = t->compute_ns;
        c->st_wait += t->wait_ns / 1e6;
        c->st_deser += t->deser_ns / 1e6;
        c->st_compute += t->compute_ns / 1e6;
        c->st_ser += t->ser_ns / 1e6;
        c->st_send += t->send_ns / 1e6;
        work += (t->wait_ns + t->deser_ns + t->compute_ns + t->ser_ns + t->send_ns) / 1e6;
    }
    /* The result's last link is emulated at our end: its hold time is a wait too. */
    double wait_here = t_deser > arrival_ns ? (t_deser - arrival_ns) / 1e6 : 0;
    c->st_wait += wait_here;
    work += wait_here;
    c->st_e2e += e2e;
    c->st_net += e2e - work > 0 ? e2e - work : 0;
    if (c->in_fallback[s]) {
        for (uint32_t i = 0; i < c->n; i++)
            if (c->p[i].fo >= 0 && c->p[i].state != P_READY) {
                c->fo[c->p[i].fo].fallback_steps++;
                c->fo[c->p[i].fo].fallback_ms_sum += e2e;
            }
    }
}

/* Run local segments from hop h on, then hand the act to the next remote worker. */
static void s_deliver(swarm_t *c, msg_act *a, uint32_t h, uint64_t arrival_ns)
{
    char err[512];
    while (h < c->n && s_is_local(&c->p[h])) {
        swarm_peer *p = &c->p[h];
        uint64_t t = util_now_ns();
        if (!p->fb) {
            /* Budget failure: cannot serve this segment; the run stops. */
            return;
        }
        /* stateless: one step at any position, whatever else is in flight */
        if (slice_step_stats(p->fb, 1, 0, 1, a->x, &c->fb_stats, err, sizeof err)) {
            log_error("fallback %s: %s", p->id, err);
            c->budget_fail = 1;
            snprintf(c->budget_err, sizeof c->budget_err, "fallback %s: %s", p->id, err);
            return;
        }
        if (a->n_trace < PROTO_MAX_TRACE)
            a->trace[a->n_trace++] = (msg_trace){ .stage = h, .compute_ns = util_now_ns() - t };
        c->in_fallback[a->step] = 1;
        h++;
    }
    if (h == c->n) {
        s_record_result(c, a, arrival_ns, util_now_ns());
        return;
    }
    swarm_peer *p = &c->p[h];
    a->hop = h;
    a->epoch = c->epoch;
    uint64_t t0 = util_now_ns();
    if (proto_encode_act(c->out, MSG_ACT, a))
        return;
    uint64_t t1 = util_now_ns();
    if (p->cut_until_ns)
        log_debug("step %llu to %s lost on the cut link", (unsigned long long)a->step, p->id);
    else if (zmq_send(p->push, proto_buf_data(c->out), proto_buf_len(c->out), ZMQ_DONTWAIT) < 0)
        log_debug("send of step %llu to %s failed (%s): the deadline will replay it",
                  (unsigned long long)a->step, p->id, zmq_strerror(errno));
    c->coord_ser += (t1 - t0) / 1e6;
    c->bytes_wire += proto_buf_len(c->out);
}

static void s_send_step(swarm_t *c, uint32_t s)
{
    msg_act *a = &c->act;
    memset(a, 0, offsetof(msg_act, trace));
    a->req = s;
    a->step = s;
    a->epoch = c->epoch;
    a->dim = c->d;
    memcpy(c->x, c->a->inputs + (uint64_t)s * c->d, sizeof(float) * c->d);
    a->x = c->x;
    if (!c->in_flight[s]) {
        c->in_flight[s] = 1;
        c->n_inflight++;
    }
    c->sent_ns[s] = util_now_ns();
    s_deliver(c, a, 0, c->sent_ns[s]);
}

static void s_handle_data(swarm_t *c, zmq_msg_t *m, uint64_t arrival_ns)
{
    char err[256];
    uint64_t t0 = util_now_ns();
    msg_act *a = &c->msg->u.act;
    /* Where the decoder may copy bytes: an act's x here, never a chunk (a peer can send any
     * type on any socket; the pointers of other union members must not be stale). */
    c->msg->u.chunk.data = NULL;
    a->x = c->x;
    int rc = proto_decode(zmq_msg_data(m), zmq_msg_size(m), c->d, c->msg, err, sizeof err);
    if (rc || (c->msg->type != MSG_ACT && c->msg->type != MSG_RESULT)) {
        c->bad_msgs++;
        log_warn("dropped a bad data message (%zu bytes): %s", zmq_msg_size(m),
                 rc ? err : "not an act");
        return;
    }
    c->coord_deser += (util_now_ns() - t0) / 1e6;
    if (a->epoch != c->epoch) {
        c->stale_msgs++;
        log_debug("dropped step %llu from old epoch %llu (now %llu)",
                  (unsigned long long)a->step, (unsigned long long)a->epoch,
                  (unsigned long long)c->epoch);
        return;
    }
    if (a->step >= c->a->steps) {
        c->bad_msgs++;
        return;
    }
    if (c->msg->type == MSG_RESULT) {
        if (c->p[c->n - 1].cut_until_ns) {
            c->stale_msgs++; /* from the last worker, over a cut link */
            return;
        }
        if (a->hop != c->n) {
            c->bad_msgs++;
            return;
        }
        s_record_result(c, a, arrival_ns, t0);
        return;
    }
    if (a->hop >= c->n || !s_is_local(&c->p[a->hop])) {
        c->bad_msgs++;
        return;
    }
    /* The act is for a segment the coordinator serves now: copy to the send scratch. */
    msg_act *o = &c->act;
    *o = *a;
    memcpy(c->x, a->x, sizeof(float) * c->d);
    o->x = c->x;
    s_deliver(c, o, a->hop, arrival_ns);
}

static void s_on_pull(swarm_t *c)
{
    zmq_msg_t m;
    zmq_msg_init(&m);
    while (zmq_msg_recv(&m, c->pull, ZMQ_DONTWAIT) >= 0) {
        uint64_t now = util_now_ns();
        if (zmq_msg_more(&m)) {
            c->bad_msgs++;
            continue;
        }
        if (!c->shaper) {
            s_handle_data(c, &m, now);
            continue;
        }
        uint64_t rel = netem_release_at(c->shaper, now, zmq_msg_size(&m));
        if (netem_queue_push(c->queue, &m, rel, now))
            c->bad_msgs++;
    }
    zmq_msg_close(&m);
}

static void s_release_due(swarm_t *c)
{
    zmq_msg_t m;
    uint64_t arrival;
    zmq_msg_init(&m);
    while (netem_queue_pop_due(c->queue, util_now_ns(), &m, &arrival))
        s_handle_data(c, &m, arrival);
    zmq_msg_close(&m);
}

/* ------------------------------------------------------------ control plane */

static void s_rejoin_done(swarm_t *c, swarm_peer *p)
{
    uint64_t now = util_now_ns();
    if (p->fo >= 0) {
        swarm_failover *f = &c->fo[p->fo];
        f->rejoin_ms = f->hello_ns ? (now - f->hello_ns) / 1e6 : 0;
        log_info("%s rejoined: route moves back, fallback released (%.0f ms from hello)", p->id,
                 f->rejoin_ms);
    }
    slice_free(&p->fb);
    p->fo = -1;
    s_reroute(c);
}

/* One control message from worker p, once its (emulated) control link has delivered it. */
static void s_ctl_one(swarm_t *c, swarm_peer *p, zmq_msg_t *m)
{
    char err[256];
    /* No bytes are copied out of a control message: an act or a chunk sent here by a
     * confused or hostile peer is decoded (and refused) without touching any buffer. */
    c->msg->u.act.x = NULL;
    c->msg->u.chunk.data = NULL;
    int rc = proto_decode(zmq_msg_data(m), zmq_msg_size(m), 0, c->msg, err, sizeof err);
    if (rc == -2) {
        log_error("%s speaks protocol version %u, we speak %u", p->id, c->msg->version,
                  PROTO_VERSION);
        c->bad_msgs++;
        return;
    }
    if (rc) {
        c->bad_msgs++;
        log_warn("%s: dropped a bad control message: %s", p->id, err);
        return;
    }
    pirate_heard(&p->hb, util_now_ns());
    switch (c->msg->type) {
    case MSG_HELLO: {
        const msg_hello *h = &c->msg->u.hello;
        snprintf(p->data_ep, sizeof p->data_ep, "%s", h->data_ep);
        p->pid = h->pid;
        if (!p->cap_bytes)
            p->cap_bytes = h->cap_bytes;
        if (p->push)
            zmq_close(p->push);
        if (p->pub[0] && strcmp(c->msg->u.hello.pubkey, p->pub)) {
            log_error("%s presented key %.12s..., the config says %.12s...: refused", p->id,
                      c->msg->u.hello.pubkey, p->pub);
            break;
        }
        p->push = swarm_sock(c, ZMQ_PUSH);
        if (p->push && p->pub[0])
            sec_client(p->push, c->pub, c->secret, p->pub);
        if (!p->push || zmq_connect(p->push, p->data_ep))
            log_error("%s: cannot connect data plane %s", p->id, p->data_ep);
        if (p->state == P_NEW)
            p->state = P_HELLO;
        else if (p->state == P_LOST) {
            if (p->fo >= 0)
                c->fo[p->fo].hello_ns = util_now_ns();
            log_info("%s is back (hello): re-assigning [%u, %u)", p->id, p->first, p->last);
            swarm_send_assign(c, p);
            p->state = P_REJOINING;
        }
        break;
    }
    case MSG_READY:
        p->ready = c->msg->u.ready;
        if (p->state == P_REJOINING) {
            p->state = P_READY;
            p->barrier_ok = 1;
            s_rejoin_done(c, p);
        } else {
            p->state = P_READY;
        }
        break;
    case MSG_HEARTBEAT: {
        const msg_heartbeat *hb = &c->msg->u.hb;
        if (hb->seq >= p->barrier_seq)
            p->barrier_ok = 1;
        /* Progress: it finished an activation since its last echo, or it is computing one
         * (and not for so long that it looks stuck). */
        if (p->state == P_READY &&
            (hb->acts > p->hb_acts || (hb->busy_ns && hb->busy_ns < s_stall_ns(c, p))))
            c->progress_ns = util_now_ns();
        p->hb_acts = hb->acts;
        p->hb_busy_ns = hb->busy_ns;
        break;
    }
    case MSG_STATS:
        p->stats = c->msg->u.stats;
        p->have_stats = 1;
        break;
    case MSG_FETCH: {
        /* Weight distribution: any bytes of our model file, bounded and checked. */
        msg_fetch f = c->msg->u.fetch;
        if (f.off > c->m->file_size || f.len > c->m->file_size - f.off || c->model_fd < 0) {
            c->bad_msgs++;
            log_warn("%s asked for bytes [%llu, +%u) outside the model: ignored", p->id,
                     (unsigned long long)f.off, f.len);
            break;
        }
        ssize_t n = pread(c->model_fd, c->chunk, f.len, (off_t)f.off);
        if (n != (ssize_t)f.len) {
            log_error("cannot read %s for %s: %s", c->m->path, p->id, strerror(errno));
            break;
        }
        msg_chunk ch = { .off = f.off, .seq = f.seq, .hash = XXH3_64bits(c->chunk, f.len),
                         .len = f.len, .data = c->chunk };
        if (proto_encode_chunk(c->out, &ch) == 0 && swarm_ctl_send(c, p) == 0)
            c->served_bytes += f.len;
        break;
    }
    case MSG_ERROR:
        log_error("%s: %s", p->id, c->msg->u.error.text);
        if (c->msg->u.error.code == PERR_STATE && p->state != P_LOST) {
            /* The worker forgot us (a cut longer than its coordinator timeout): say
             * hello again. In setup it is re-assigned; in a run it is lost and rejoins. */
            if (p->state == P_READY)
                swarm_mark_lost(c, p, "worker released us");
            else {
                p->state = P_NEW;
                p->probe_ns = 0;
            }
        } else if (p->state == P_LOADING || p->state == P_REJOINING) {
            snprintf(c->budget_err, sizeof c->budget_err, "%s", c->msg->u.error.text);
            p->state = P_NEW; /* refused: setup fails with its reason */
        }
        break;
    default:
        c->bad_msgs++;
    }
}

/* Read what worker p sent on the control plane. With a profile that covers the control plane,
 * each message is held for the link's round trip first (both directions folded into our
 * receive side: a heartbeat's echo comes back 2 x one-way later, as on the real link). */
void swarm_handle_ctl(swarm_t *c, swarm_peer *p)
{
    zmq_msg_t m;
    zmq_msg_init(&m);
    while (p->dealer && zmq_msg_recv(&m, p->dealer, ZMQ_DONTWAIT) >= 0) {
        uint64_t now = util_now_ns();
        if (p->cut_until_ns)
            continue; /* the cut link loses what the worker sends */
        if (!c->ctl_shaper) {
            s_ctl_one(c, p, &m);
            continue;
        }
        if (netem_queue_push(p->ctlq, &m, netem_release_at(c->ctl_shaper, now,
                                                          zmq_msg_size(&m)), now))
            c->bad_msgs++;
    }
    while (p->ctlq && netem_queue_pop_due(p->ctlq, util_now_ns(), &m, NULL))
        s_ctl_one(c, p, &m);
    zmq_msg_close(&m);
}

/* Heartbeats, liveness, probes of lost workers, scheduled SIGCONTs, reaping. */
static void s_tick(swarm_t *c)
{
    uint64_t now = util_now_ns();
    uint32_t hb_ms = c->cfg->heartbeat_ms, live = c->cfg->liveness;
    for (uint32_t i = 0; i < c->n; i++) {
        swarm_peer *p = &c->p[i];
        int ended = fault_release(p->spawned ? p->spawned : (pid_t)p->pid, now,
                                  &p->cont_at_ns, &p->cut_until_ns);
        if (ended & (1 << FAULT_STOP))
            log_info("%s: SIGCONT (stop fault over)", p->id);
        if (ended & (1 << FAULT_CUT))
            log_info("%s: link restored", p->id);
        swarm_reap(c, p, 0);
        if (p->state == P_LOST && p->local && !p->spawned && c->cfg->respawn) {
            char err[256];
            log_info("%s: respawning", p->id);
            if (swarm_spawn(c, p, err, sizeof err))
                log_error("%s: respawn failed: %s", p->id, err);
            else
                swarm_close_ctl(p); /* the new process listens on a new port */
            p->probe_ns = 0;
        }
        if (p->state == P_REJOINING && swarm_ctl_dropped(p)) {
            swarm_mark_lost(c, p, "connection dropped while rejoining");
            now = util_now_ns();
            continue;
        }
        if (p->state == P_READY || p->state == P_REJOINING) {
            if (pirate_due(&p->hb, now, hb_ms))
                swarm_send_heartbeat(c, p);
            /* Silence counts only if we kept asking (pirate.h). Read whatever arrived
             * meanwhile before judging. */
            if (p->state == P_READY && pirate_lost(&p->hb, now, hb_ms, live, c->ctl_allow_ns))
                swarm_handle_ctl(c, p);
            if (p->state == P_READY && pirate_lost(&p->hb, now, hb_ms, live, c->ctl_allow_ns)) {
                swarm_mark_lost(c, p, p->fault_ns ? "fault injected" : "heartbeats stopped");
                now = util_now_ns();
            } else if (p->state == P_READY && p->hb_busy_ns > s_stall_ns(c, p)) {
                /* Answering, but one activation has run far longer than any before it. */
                log_warn("%s has computed one activation for %.0f ms (its slowest so far "
                         "%.0f ms): stalled", p->id, p->hb_busy_ns / 1e6,
                         p->max_compute_ns / 1e6);
                swarm_mark_lost(c, p, "compute stalled");
                now = util_now_ns();
            }
        } else if (p->state == P_LOST && !p->cut_until_ns &&
                   now - p->probe_ns >= S_PROBE_MS * 1000000ull) {
            /* Ask again. The socket was made fresh when the worker was lost, so nothing
             * stale is queued towards it; ZMQ_IMMEDIATE drops hellos until it connects. */
            p->probe_ns = now;
            if (p->dealer || swarm_connect_ctl(c, p) == 0)
                swarm_send_hello(c, p);
        }
    }
}

static void s_inject_faults(swarm_t *c, uint32_t step)
{
    for (uint32_t k = 0; k < c->a->n_faults; k++) {
        fault_t *f = &c->a->faults[k];
        if (f->done || f->at != step)
            continue;
        for (uint32_t i = 0; i < c->n; i++) {
            swarm_peer *p = &c->p[i];
            pid_t pid = p->spawned ? p->spawned : (pid_t)p->pid;
            if (strcmp(p->id, f->worker))
                continue;
            f->done = 1;
            p->fault_ns = util_now_ns();
            if (f->kind == FAULT_KILL)
                log_info("fault: SIGKILL %s (pid %d) at step %u", p->id, (int)pid, step);
            else if (f->kind == FAULT_STOP)
                log_info("fault: SIGSTOP %s for %.1f s at step %u", p->id, f->seconds, step);
            else /* the coordinator's end of the link goes dark both ways, as if the cable
                  * were pulled here */
                log_info("fault: cutting %s's link for %.1f s at step %u", p->id, f->seconds,
                         step);
            fault_inject(f, pid, p->fault_ns, &p->cont_at_ns, &p->cut_until_ns);
        }
    }
}

/* Has every worker on the route said something since `from`? Only then does "no progress since
 * from" mean the pipeline is stuck: a coordinator that was itself descheduled has not asked
 * (seen under ASan on a loaded machine: a replay right after the coordinator woke, before the
 * echoes of its new heartbeats were back). A worker never heard from is liveness's to judge. */
static int s_all_heard(const swarm_t *c, uint64_t from)
{
    for (uint32_t i = 0; i < c->n; i++)
        if (c->p[i].state == P_READY && c->p[i].hb.heard_ns <= from)
            return 0;
    return 1;
}

/* Per-step deadline: a step out longer than step_deadline_ms is replayed under a new epoch,
 * counted from when it was sent or from the pipeline's last sign of progress, whichever is
 * later. A slow pipeline that is working (results arriving, workers reporting an activation
 * in progress or finished) is left alone however long a step takes; a message lost on the
 * way (nothing in the pipeline moves) is replayed. */
static void s_check_deadlines(swarm_t *c)
{
    /* Progress is heard at heartbeat pace: "nothing moved" cannot be known sooner than one
     * liveness window, the time in which every live worker has answered (a deadline of half
     * a window replayed a busy pipeline on a loaded machine). */
    uint64_t deadline_ns = (uint64_t)c->cfg->step_deadline_ms * 1000000ull;
    uint64_t window_ns = pirate_window_ns(c->cfg->heartbeat_ms, c->cfg->liveness,
                                          c->ctl_allow_ns);
    if (deadline_ns < window_ns)
        deadline_ns = window_ns;
    uint64_t now = util_now_ns();
    for (uint32_t s = c->low; s < c->next_send; s++) {
        uint64_t from = c->sent_ns[s] > c->progress_ns ? c->sent_ns[s] : c->progress_ns;
        if (c->in_flight[s] && !c->done[s] && now - from > deadline_ns && s_all_heard(c, from)) {
            log_warn("step %u not back and no progress for %.0f ms: replaying the steps in "
                     "flight", s, deadline_ns / 1e6);
            c->deadline_replays++;
            s_reroute(c);
            break;
        }
    }
}

/* Keep up to `inflight` steps in the pipeline until every step is done (results recorded by
 * step), serving the control plane, the emulated links and the deadlines between them. */
static void s_drive(swarm_t *c)
{
    arm_ctx *a = c->a;
    uint32_t K = a->inflight ? a->inflight : 1;
    long half_hb = (long)a->cfg->heartbeat_ms / 2;
    c->t_start = c->progress_ns = util_now_ns();
    while (c->n_done < a->steps && !arm_stop && !c->budget_fail) {
        while (c->n_inflight < K && c->next_send < a->steps && !c->budget_fail) {
            s_inject_faults(c, c->next_send);
            s_send_step(c, c->next_send++);
        }
        zmq_pollitem_t it[CONFIG_MAX_WORKERS + 1];
        it[0] = (zmq_pollitem_t){ c->pull, 0, ZMQ_POLLIN, 0 };
        for (uint32_t i = 0; i < c->n; i++)
            it[i + 1] = (zmq_pollitem_t){ c->p[i].dealer, 0, c->p[i].dealer ? ZMQ_POLLIN : 0, 0 };
        uint64_t now = util_now_ns(), next = netem_queue_next(c->queue);
        long timeout = half_hb;
        for (uint32_t i = 0; c->ctl_shaper && i < c->n; i++) {
            uint64_t cn = netem_queue_next(c->p[i].ctlq);
            if (cn < next)
                next = cn;
        }
        if (next != UINT64_MAX)
            timeout = next > now ? (long)((next - now) / 1000000) : 0;
        if (timeout > half_hb)
            timeout = half_hb;
        zmq_poll(it, (int)c->n + 1, timeout);
        if (it[0].revents & ZMQ_POLLIN)
            s_on_pull(c);
        for (uint32_t i = 0; i < c->n; i++)
            if ((it[i + 1].revents & ZMQ_POLLIN) || c->p[i].ctlq)
                swarm_handle_ctl(c, &c->p[i]);
        next = netem_queue_next(c->queue);
        if (next != UINT64_MAX) {
            now = util_now_ns();
            if (next > now && next - now < 1000000)
                util_sleep_until_ns(next);
            s_release_due(c);
        }
        s_tick(c);
        s_check_deadlines(c);
        arm_progress(a, c->r->condition, c->n_done, a->steps, (util_now_ns() - c->t_start) / 1e6);
    }
}

/* ------------------------------------------------------------ the arm */

int arm_run_resident(arm_ctx *a, run_result *r, char *err, size_t errlen)
{
    swarm_t *c = calloc(1, sizeof *c);
    int rc = -1;
    err[0] = 0;
    if (!c) {
        snprintf(err, errlen, "out of memory");
        return -1;
    }
    c->a = a;
    c->r = r;
    c->cfg = a->cfg;
    c->m = a->model;
    c->d = a->model->dim;
    c->ctx = zmq_ctx_new();
    c->out = proto_buf_new();
    c->msg = malloc(sizeof *c->msg);
    c->x = malloc(sizeof(float) * c->d);
    c->queue = netem_queue_new(S_QUEUE_CAP);
    c->sent_ns = calloc(a->steps, sizeof *c->sent_ns);
    c->done = calloc(a->steps, 1);
    c->in_flight = calloc(a->steps, 1);
    c->in_fallback = calloc(a->steps, 1);
    c->lat_ms = calloc(a->steps, sizeof *c->lat_ms);
    c->chunk = malloc(PROTO_MAX_CHUNK);
    c->model_fd = open(a->model->path, O_RDONLY | O_CLOEXEC);
    if (!c->chunk ||!c->ctx || !c->out || !c->msg || !c->x || !c->queue || !c->sent_ns || !c->done ||
        !c->in_flight || !c->in_fallback || !c->lat_ms) {
        snprintf(err, errlen, "out of memory");
        goto out;
    }
    signal(SIGPIPE, SIG_IGN);
    util_min_timerslack();
    kernel_set_threads((int)a->cfg->threads);
    if (!netem_profile_is_none(&a->profile)) {
        c->shaper = netem_shaper_new(&a->profile, a->cfg->input_seed * 977 + 3);
        if (a->profile.control_plane) {
            netem_profile rt = a->profile;
            rt.delay_ns *= 2; /* there and back, held at our end */
            rt.jitter_ns *= 2;
            c->ctl_shaper = netem_shaper_new(&rt, a->cfg->input_seed * 977 + 11);
            c->ctl_allow_ns = rt.delay_ns + 2 * rt.jitter_ns;
            for (uint32_t i = 0; i < CONFIG_MAX_WORKERS; i++)
                c->p[i].ctlq = netem_queue_new(S_QUEUE_CAP);
        }
    }
    snprintf(r->cap_mode, sizeof r->cap_mode, "per worker");
    util_reset_hwm();
    uint64_t t0 = util_now_ns();
    if (swarm_setup(c, err, errlen))
        goto out;
    r->setup_ms = (util_now_ns() - t0) / 1e6;
    for (uint32_t i = 0; i < c->n; i++)
        c->p[i].io_before = c->p[i].pid ? util_io_read_bytes_pid((int)c->p[i].pid) : 0;
    uint64_t io0 = util_io_read_bytes(), reaped0 = c->reaped_read_bytes;

    s_drive(c);
    r->total_ms = (util_now_ns() - c->t_start) / 1e6;
    for (uint32_t i = 0; i < c->n; i++)
        if (c->p[i].fo >= 0 && c->p[i].state != P_READY)
            log_info("%s did not rejoin before the end of the run", c->p[i].id);
    for (uint32_t i = 0; i < c->n; i++)
        slice_drain(c->p[i].fb);
    /* Our own reads: the kernel adds a reaped child's I/O to its parent's count. */
    r->ssd_read_bytes = util_io_read_bytes() - io0 - (c->reaped_read_bytes - reaped0);
    r->streamed_bytes = c->fb_stats.streamed_bytes;
    swarm_collect_stats(c);
    swarm_report(c);
    result_finish_stats(r);
    if (c->n_done == a->steps)
        arm_parity(a, r);
    /* Gates: streaming happened only in fallback, whose load during the steps counts too. */
    gate_cache_judge(r, r->ssd_read_bytes, c->fb_stats.streamed_bytes, c->fb_loaded);
    gate_content_judge(r, &c->fb_stats);
    if (c->budget_fail && a->ref_outputs) {
        /* Partial run: what was completed must still be exactly the reference's. */
        uint32_t bad = 0;
        for (uint32_t s = 0; s < a->steps; s++)
            if (c->done[s] && memcmp(a->outputs + (uint64_t)s * c->d,
                                     a->ref_outputs + (uint64_t)s * c->d, sizeof(float) * c->d))
                bad++;
        json_object_set_new(r->extra, "completed_steps", json_integer(c->n_done));
        json_object_set_new(r->extra, "completed_steps_match_reference", json_boolean(!bad));
    }
    if (c->budget_fail) {
        snprintf(err, errlen, "%s (%u of %u steps completed and kept)", c->budget_err,
                 c->n_done, a->steps);
        result_void(r, &r->gate_parity, "incomplete: %s", c->budget_err);
        rc = -EXIT_BUDGET;
    } else if (arm_stop) {
        snprintf(err, errlen, "interrupted after %u of %u steps", c->n_done, a->steps);
        rc = -1;
    } else {
        rc = 0;
    }
out:
    if (c->ctx) {
        swarm_teardown(c);
        if (rc && rc != -EXIT_BUDGET && !err[0])
            snprintf(err, errlen, "resident arm failed");
    }
    netem_shaper_free(&c->shaper);
    netem_shaper_free(&c->ctl_shaper);
    netem_queue_free(&c->queue);
    for (uint32_t i = 0; i < CONFIG_MAX_WORKERS; i++)
        netem_queue_free(&c->p[i].ctlq);
    proto_buf_free(&c->out);
    if (c->ctx)
        zmq_ctx_term(c->ctx);
    sec_zap_stop(&c->sec);
    free(c->msg);
    free(c->x);
    free(c->sent_ns);
    free(c->done);
    free(c->in_flight);
    free(c->in_fallback);
    free(c->lat_ms);
    free(c->chunk);
    if (c->model_fd >= 0)
        close(c->model_fd);
    free(c);
    return rc;
}

