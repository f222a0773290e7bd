/* llm_pipe.c — the one coordinator's workers: their processes, joins, control plane and
 * routes, for a real model's sessions (llm_swarm.c) and the dense lab's steps (steps.c)
 * alike; one pass through the units in order is llm_pass.c. dist/
 *
 * Nothing waits on a guess: a reply is awaited until it comes, the worker's process is gone
 * (waitpid, checked every LS_POLL_MS), or its control plane leaves heartbeats unanswered
 * for `liveness` periods (dist/pirate.h's defaults, or a dense config's [swarm] settings).
 * The workers answer heartbeats on their loop whatever they compute (dist/compute.c), so
 * silence means dead, frozen or cut off, never slow.
 */
#include <errno.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>
#include <xxhash.h>
#include <zmq.h>

#include "base/cap.h"
#include "base/log.h"
#include "base/sec.h"
#include "base/util.h"
#include "base/zmon.h"
#include "dist/arm.h"
#include "dist/llm_pipe_int.h"
#include "dist/llm_swarm_int.h"
#include "dist/spawn.h"

#define LS_POLL_MS 20 /* how often a wait looks at the processes: a kill is seen this soon */
/* A listed worker has this long to answer the first hello (a
 * connection and a CURVE handshake take milliseconds; a host that is down never answers). */
#define LS_HELLO_MS 10000
#define S_EV_REFUSED                                                                    \
    (ZMQ_EVENT_HANDSHAKE_FAILED_AUTH | ZMQ_EVENT_HANDSHAKE_FAILED_PROTOCOL |            \
     ZMQ_EVENT_HANDSHAKE_FAILED_NO_DETAIL)

/* The control plane's period and liveness: a config's, or the defaults (pirate.h). */
uint32_t lp_hb_ms(const llm_swarm *sw)
{
    return sw->hb_ms ? sw->hb_ms : PIRATE_HEARTBEAT_MS;
}

uint32_t lp_liveness(const llm_swarm *sw)
{
    return sw->liveness ? sw->liveness : PIRATE_LIVENESS;
}

void lp_send(llm_swarm *sw, void *sock)
{
    /* never blocks: a dead peer's queue is dropped with its socket when it is fenced */
    if (zmq_send(sock, proto_buf_data(sw->b), proto_buf_len(sw->b), ZMQ_DONTWAIT) >= 0)
        sw->wire += proto_buf_len(sw->b);
}

static void s_close(ls_worker *w)
{
    zmon_close(&w->mon, w->remote ? w->ctl : NULL);
    if (w->ctl)
        zmq_close(w->ctl);
    if (w->push)
        zmq_close(w->push);
    w->ctl = w->push = NULL;
}

/* Is there a worker at the other end to talk to: a spawned process, or a listed worker's
 * connection? */
int lp_attached(const ls_worker *w)
{
    return w->ctl && (w->pid > 0 || w->remote);
}

void lp_fence(llm_swarm *sw, uint32_t i)
{
    ls_worker *w = &sw->w[i];
    /* A listed worker cannot be killed from here: its connection goes, and the new epoch
     * makes anything it still sends stale (a frozen one that wakes is dropped by every
     * hop; it forgets us after its own silence bound, PIRATE_WORKER_SILENT_MS). */
    uint64_t rd = 0;
    if (w->pid > 0 && /* works on a stopped process too */
        spawn_reap(w->pid, SPAWN_KILL, &rd, NULL, 0) == 1)
        sw->reaped_read_bytes += rd;
    w->pid = 0;
    s_close(w);
    if (w->rep_fd >= 0)
        close(w->rep_fd);
    w->rep_fd = -1;
    w->deadline_ns = 0;
    w->cut_until_ns = w->cont_at_ns = 0;
    pirate_reset(&w->hb, util_now_ns());
    /* every route is set again in a new epoch: an act the fenced worker forwarded before it
     * went must be dropped by the others, not computed after the pass's rerun */
    for (uint32_t k = 0; k < sw->n; k++)
        sw->w[k].routed_next = -2;
}

void lp_detach(llm_swarm *sw, uint32_t i)
{
    ls_worker *w = &sw->w[i];
    s_close(w);
    for (uint32_t k = 0; k < sw->n; k++)
        sw->w[k].routed_next = -2; /* a new epoch: what it still sends is stale */
}

static void s_hello_msg(llm_swarm *sw, ls_worker *w)
{
    msg_hello h = { .proto_version = PROTO_VERSION, .pid = (uint32_t)getpid() };
    snprintf(h.id, sizeof h.id, "coordinator");
    snprintf(h.data_ep, sizeof h.data_ep, "%s", sw->pull_ep);
    if (proto_encode_hello(sw->b, &h) == 0)
        lp_send(sw, w->ctl);
}

static void s_send_hello(llm_swarm *sw, ls_worker *w)
{
    s_hello_msg(sw, w);
    w->hello_retry_ns = 0;
    w->state = LW_JOIN_HELLO;
    w->routed_next = -2;
    w->echo_seq = w->route_seq = 0;
    uint64_t now = util_now_ns();
    pirate_reset(&w->hb, now);
    w->why[0] = 0;
    /* hello to ready (its load) is bounded once a load has been timed here */
    w->join_ns = now;
    w->deadline_ns = sw->meas_load_ns ? now + LS_DEADLINE_X * sw->meas_load_ns +
                                            LS_DEADLINE_PLUS_MS * 1000000ull : 0;
}

/* One routing id for this coordinator's life on every control socket, so a worker that lost
 * us for a while (a cut, a freeze) knows us when we say hello again; its ROUTER hands the id
 * over to the new connection. */
static void s_routing_id(void *ctl)
{
    char rid[64];
    snprintf(rid, sizeof rid, "llm-coord-%d", (int)getpid());
    zmq_setsockopt(ctl, ZMQ_ROUTING_ID, rid, strlen(rid));
}

/* A listed worker: its control socket, CURVE when it has a key, with our one routing id. */
static int s_connect_remote(llm_swarm *sw, uint32_t i, char *err, size_t errlen)
{
    ls_worker *w = &sw->w[i];
    int linger = 0;
    s_close(w);
    w->ctl = zmq_socket(sw->zctx, ZMQ_DEALER);
    if (!w->ctl) {
        snprintf(err, errlen, "%s: no socket: %s", w->id, zmq_strerror(errno));
        return -1;
    }
    zmq_setsockopt(w->ctl, ZMQ_LINGER, &linger, sizeof linger);
    s_routing_id(w->ctl);
    if (w->pub[0] && sec_client(w->ctl, sw->o.key_pub, sw->o.key_secret, w->pub)) {
        snprintf(err, errlen, "%s: cannot enable CURVE: %s", w->id, zmq_strerror(errno));
        return -1;
    }
    /* A worker that is loading cannot answer heartbeats; the kernel still says when its
     * process dies (the connection drops), which this monitor reports. */
    w->mon = zmon_open(sw->zctx, w->ctl, "llm-mon", i, ++w->mon_gen,
                       ZMQ_EVENT_DISCONNECTED | S_EV_REFUSED);
    if (zmq_connect(w->ctl, w->ctl_ep)) {
        snprintf(err, errlen, "%s: cannot connect to %s: %s", w->id, w->ctl_ep,
                 zmq_strerror(errno));
        return -1;
    }
    s_send_hello(sw, w);
    return 0;
}

int lp_probe(llm_swarm *sw, uint32_t i, char *err, size_t errlen)
{
    ls_worker *w = &sw->w[i];
    int linger = 0;
    /* no join deadline: a process that is alive may be stopped for a while, and its layers
     * run here meanwhile; it is taken back whenever it answers */
    if (w->remote) {
        int rc = s_connect_remote(sw, i, err, errlen);
        w->deadline_ns = 0;
        return rc;
    }
    s_close(w);
    w->ctl = zmq_socket(sw->zctx, ZMQ_DEALER);
    if (!w->ctl) {
        snprintf(err, errlen, "%s: no socket: %s", w->id, zmq_strerror(errno));
        return -1;
    }
    zmq_setsockopt(w->ctl, ZMQ_LINGER, &linger, sizeof linger);
    s_routing_id(w->ctl);
    if (zmq_connect(w->ctl, w->ctl_ep)) {
        snprintf(err, errlen, "%s: cannot connect to %s: %s", w->id, w->ctl_ep,
                 zmq_strerror(errno));
        s_close(w);
        return -1;
    }
    s_send_hello(sw, w);
    w->deadline_ns = 0;
    return 0;
}

/* Did a listed worker's control connection drop (1), or its CURVE handshake fail (2: a
 * key it does not accept, or not ours), since we last looked? */
static int s_dropped(ls_worker *w)
{
    int ev = zmon_drain(w->mon);
    return ev & S_EV_REFUSED ? 2 : ev & ZMQ_EVENT_DISCONNECTED ? 1 : 0;
}

int lp_spawn(llm_swarm *sw, uint32_t i, char *err, size_t errlen)
{
    ls_worker *w = &sw->w[i];
    if (w->remote)
        return s_connect_remote(sw, i, err, errlen);
    /* A respawn may be forked by whichever thread settles (a server's request thread, the
     * monitor): the worker must not die with that thread, so it is not tied to it; it drops
     * a silent coordinator itself (PIRATE_WORKER_SILENT_MS). Nothing waits for its endpoint
     * here: lp_poll reads it when it comes, against the deadline set now. */
    spawn_opts o = { .exe = sw->self, .id = w->id, .cap_bytes = w->cap_bytes,
                     .slowdown = sw->o.slowdown,
                     .host = sw->o.bind_host[0] ? sw->o.bind_host : NULL };
    if (spawn_begin(&o, &w->pid, &w->rep_fd, err, errlen))
        return -1;
    uint64_t now = util_now_ns();
    w->rep_got = 0;
    w->state = LW_JOIN_SPAWN;
    w->join_ns = now;
    w->deadline_ns = now + (sw->meas_spawn_ns ? LS_DEADLINE_X * sw->meas_spawn_ns +
                                                    LS_DEADLINE_PLUS_MS * 1000000ull
                                              : SPAWN_REPORT_MS * 1000000ull);
    return 0;
}

/* A spawned worker in JOIN_SPAWN: its endpoint read if it came (connect, hello), its
 * deadline checked. 0, or -1 when it failed (w->why filled). */
static int s_spawn_progress(llm_swarm *sw, uint32_t i, uint64_t now)
{
    ls_worker *w = &sw->w[i];
    char ep[PROTO_MAX_STR];
    int linger = 0;
    int rc = spawn_poll_endpoint(w->rep_fd, w->rep_buf, sizeof w->rep_buf, &w->rep_got, 0, ep,
                                 sizeof ep);
    if (rc < 0) {
        snprintf(w->why, sizeof w->why, "its process (pid %d) ended or wrote no endpoint "
                 "before reporting one", (int)w->pid);
        return -1;
    }
    if (rc == 0) {
        if (now < w->deadline_ns)
            return 0;
        snprintf(w->why, sizeof w->why, "no endpoint reported in %.0f ms (the deadline: %s)",
                 (double)(now - w->join_ns) / 1e6,
                 sw->meas_spawn_ns ? "10x the slowest spawn at start + 2 s"
                                   : "SPAWN_REPORT_MS, nothing measured yet");
        return -1;
    }
    close(w->rep_fd);
    w->rep_fd = -1;
    w->took_spawn_ns = now - w->join_ns;
    snprintf(w->ctl_ep, sizeof w->ctl_ep, "%s", ep); /* said hello to again by lp_probe */
    w->ctl = zmq_socket(sw->zctx, ZMQ_DEALER);
    zmq_setsockopt(w->ctl, ZMQ_LINGER, &linger, sizeof linger);
    s_routing_id(w->ctl);
    if (zmq_connect(w->ctl, ep)) {
        snprintf(w->why, sizeof w->why, "cannot connect to %s: %s", ep, zmq_strerror(errno));
        return -1;
    }
    s_send_hello(sw, w);
    return 0;
}

void lp_join_failed(llm_swarm *sw, uint32_t i, const char *why)
{
    ls_worker *w = &sw->w[i];
    char msg[sizeof w->why];
    snprintf(msg, sizeof msg, "%s", why); /* why may be w->why, which the fence keeps */
    for (int j = 0; w->cu && j < LR_DEPTH; j++) /* its catch-up passes will not come back */
        if (w->cu[j].state == LP_RUN) {
            lp_unlink(sw, &w->cu[j]);
            w->cu[j].state = LP_RERUN;
        }
    lp_fence(sw, i);
    w->state = LW_LOST;
    snprintf(w->why, sizeof w->why, "%s", msg);
    if (!w->fb) { /* at start: llm_swarm_new decides (its layers here, or the run fails) */
        log_warn("%s: did not join: %s", w->id, msg);
        return;
    }
    w->respawn_fails++;
    if (!sw->o.respawn) {
        log_warn("%s: did not rejoin: %s", w->id, msg);
        return;
    }
    /* tried again for as long as the run lasts, each wait twice the last (capped) */
    uint64_t ms = LS_BACKOFF_MIN_MS;
    for (uint32_t k = 0; k < w->tries && ms < LS_BACKOFF_MAX_MS; k++)
        ms *= 2;
    if (ms > LS_BACKOFF_MAX_MS)
        ms = LS_BACKOFF_MAX_MS;
    if (w->remote && ms < LS_RETRY_MS)
        ms = LS_RETRY_MS;
    w->tries++;
    w->respawn_due = 1;
    w->retry_ns = util_now_ns() + ms * 1000000ull;
    log_warn("%s: did not rejoin (attempt %u): %s; trying again in %.2f s", w->id, w->tries,
             msg, (double)ms / 1e3);
}

/* A joining worker failed: its process goes, its layers stay here. */
static void s_join_failed(llm_swarm *sw, uint32_t i)
{
    lp_join_failed(sw, i, sw->w[i].why);
}

static void s_on_hello(llm_swarm *sw, uint32_t i, const msg_hello *h)
{
    ls_worker *w = &sw->w[i];
    msg_assign *a = sw->assign;
    char why[256];
    if (proto_assign_check(&(msg_assign){ .n_ctx = sw->n_ctx, .first = w->first,
                                          .last = w->last }, h, why, sizeof why)) {
        snprintf(w->why, sizeof w->why, "%s", why);
        s_join_failed(sw, i);
        return;
    }
    if (sw->segs_on && !(h->caps & PROTO_CAP_SEGS)) {
        snprintf(w->why, sizeof w->why, "announces no multi-session acts (caps 0x%x, "
                 "PROTO_CAP_SEGS 0x%x missing), and this swarm's sessions share acts", h->caps,
                 PROTO_CAP_SEGS);
        s_join_failed(sw, i);
        return;
    }
    w->caps = h->caps;
    if (w->pub[0] && strcmp(h->pubkey, w->pub)) {
        snprintf(why, sizeof why, "presented key %.12s..., the config says %.12s...",
                 h->pubkey, w->pub);
        snprintf(w->why, sizeof w->why, "%s", why); /* a copy: w and h share *sw */
        s_join_failed(sw, i);
        return;
    }
    snprintf(w->data_ep, sizeof w->data_ep, "%s", h->data_ep);
    w->hello_ns = util_now_ns();
    w->hello_pid = h->pid;
    memset(a, 0, sizeof *a);
    snprintf(a->model_path, sizeof a->model_path, "%s", sw->model);
    a->model_size = sw->g->file_size;
    a->n_layers = sw->n_layers;
    a->dim = sw->dim;
    a->first = w->first;
    a->last = w->last;
    for (uint32_t l = a->first; l < a->last; l++)
        a->checksums[l - a->first] = sw->sums[l];
    a->header_bytes = sw->g->data_offset; /* a fetch starts with the header, then its layers */
    a->threads = (uint32_t)(sw->o.threads > 0 ? sw->o.threads : 1);
    a->cap_bytes = sw->o.cap_bytes;
    a->n_ctx = sw->n_ctx;
    a->sessions = sw->o.sessions;
    a->max_batch = sw->max_batch;
    if (proto_encode_assign(sw->b, a) == 0)
        lp_send(sw, w->ctl);
    w->state = LW_JOIN_LOAD;
}

/* Weight distribution: bytes of the model file for a worker that has no copy, while its
 * assignment loads. Any range inside the file (its header, then its layers' tensors, as
 * dist/fetch.c asks), bounded and checked; a chunk carries its hash. */
static void s_on_fetch(llm_swarm *sw, uint32_t i, const msg_fetch *f)
{
    ls_worker *w = &sw->w[i];
    uint64_t size = sw->g->file_size;
    if (w->state != LW_JOIN_LOAD || f->off > size || f->len > size - f->off ||
        f->len > PROTO_MAX_CHUNK) {
        log_warn("%s asked for bytes [%llu, +%u) %s: ignored", w->id,
                 (unsigned long long)f->off, f->len,
                 w->state != LW_JOIN_LOAD ? "while not loading" : "outside the model");
        return;
    }
    ssize_t n = pread(sw->fd, sw->chunk, f->len, (off_t)f->off);
    if (n != (ssize_t)f->len) {
        log_error("cannot read %s for %s: %s", sw->model, w->id,
                  n < 0 ? strerror(errno) : "short read");
        return;
    }
    msg_chunk ch = { .off = f->off, .seq = f->seq, .hash = XXH3_64bits(sw->chunk, f->len),
                     .len = f->len, .data = sw->chunk };
    if (proto_encode_chunk(sw->b, &ch) == 0) { /* the worker counts what it got too */
        lp_send(sw, w->ctl);
        sw->served_bytes += f->len;
    }
}

/* One control message from worker i (already known not to be over a cut link). 1 when it
 * says the worker cannot serve (an error from a LIVE worker): how is filled. */
static int s_on_ctl(llm_swarm *sw, uint32_t i, size_t n, char *how, size_t howlen)
{
    ls_worker *w = &sw->w[i];
    char why[256];
    int linger = 0;
    memset(sw->m, 0, sizeof *sw->m);
    if (proto_decode_n(sw->frame, n, 0, 1, sw->m, why, sizeof why)) {
        sw->bad_msgs++;
        log_warn("%s: bad control message (%zu bytes): %s", w->id, n, why);
        return 0;
    }
    sw->wire += n;
    pirate_heard(&w->hb, util_now_ns());
    switch (sw->m->type) {
    case MSG_HEARTBEAT: {
        const msg_heartbeat *hb = &sw->m->u.hb;
        w->echo_seq = hb->seq;
        /* Progress: it finished an activation since its last echo, or it is computing one
         * and not for so long that it looks stuck */
        int computing = hb->busy_ns && (!w->stall_ns || hb->busy_ns < w->stall_ns);
        if (w->state == LW_LIVE && (hb->acts > w->hb_acts || computing))
            sw->progress_ns = util_now_ns();
        w->hb_acts = hb->acts;
        w->hb_busy_ns = hb->busy_ns;
        break;
    }
    case MSG_STATS:
        w->stats = sw->m->u.stats;
        w->have_stats = 1;
        break;
    case MSG_HELLO:
        if (w->state == LW_JOIN_HELLO)
            s_on_hello(sw, i, &sw->m->u.hello);
        break;
    case MSG_READY:
        if (w->state != LW_JOIN_LOAD)
            break;
        w->ready = sw->m->u.ready;
        w->push = zmq_socket(sw->zctx, ZMQ_PUSH);
        zmq_setsockopt(w->push, ZMQ_LINGER, &linger, sizeof linger);
        if (w->pub[0] && sec_client(w->push, sw->o.key_pub, sw->o.key_secret, w->pub)) {
            snprintf(w->why, sizeof w->why, "cannot enable CURVE on its data link: %s",
                     zmq_strerror(errno));
            s_join_failed(sw, i);
            break;
        }
        if (zmq_connect(w->push, w->data_ep)) {
            char ep[PROTO_MAX_STR]; /* a copy: w->why and w->data_ep share *sw */
            snprintf(ep, sizeof ep, "%s", w->data_ep);
            snprintf(w->why, sizeof w->why, "cannot connect to its data endpoint %s: %s", ep,
                     zmq_strerror(errno));
            s_join_failed(sw, i);
            break;
        }
        w->took_load_ns = util_now_ns() - w->join_ns;
        w->deadline_ns = 0;
        w->state = LW_READY;
        lr_reset(w); /* a fresh process: its caches hold nothing yet */
        break;
    case MSG_FETCH:
        s_on_fetch(sw, i, &sw->m->u.fetch);
        break;
    case MSG_ERROR:
        if (w->state == LW_READY && lr_act_failed(sw, i, sw->m->u.error.text))
            break; /* a catch-up act it could not take (its session ended meanwhile) */
        if (w->state == LW_LIVE) {
            snprintf(how, howlen, "said: %s", sw->m->u.error.text);
            w->sign_ns = util_now_ns();
            return 1;
        }
        if (sw->m->u.error.code == PERR_BUSY && w->remote && w->state == LW_JOIN_HELLO) {
            /* still held by a coordinator it has not yet found gone (ours, restarted: it
             * lets go within its liveness window): asked again shortly, within the join's
             * bounds (LS_HELLO_MS at start, the deadline later) */
            snprintf(w->why, sizeof w->why, "busy: %s", sw->m->u.error.text);
            w->hello_retry_ns = util_now_ns() + LS_BUSY_RETRY_MS * 1000000ull;
            break;
        }
        if (sw->m->u.error.code == PERR_STATE) /* it released us: a cut longer than its
                                                * silence bound (PIRATE_WORKER_SILENT_MS) */
            snprintf(w->why, sizeof w->why, "it no longer knows this coordinator (silent too "
                     "long for it: a cut or a freeze): %s", sw->m->u.error.text);
        else
            snprintf(w->why, sizeof w->why, "refused layers [%u, %u): %s", w->first, w->last,
                     sw->m->u.error.text);
        s_join_failed(sw, i);
        break;
    default:
        break;
    }
    return 0;
}

/* Worker i's control messages under an emulated control link: each is held for the link's
 * round trip first (both directions folded into our receive side: a heartbeat's echo comes
 * back 2 x one-way later, as on the real link). 1 when one says the worker cannot serve. */
static int s_ctl_held(llm_swarm *sw, uint32_t i, char *how, size_t howlen)
{
    ls_worker *w = &sw->w[i];
    zmq_msg_t m;
    int said = 0;
    zmq_msg_init(&m);
    while (w->ctl && zmq_msg_recv(&m, w->ctl, ZMQ_DONTWAIT) >= 0) {
        uint64_t now = util_now_ns();
        if (w->cut_until_ns)
            continue; /* nothing is heard over a cut link */
        if (netem_queue_push(w->ctlq, &m, netem_release_at(sw->ctl_shaper, now,
                                                          zmq_msg_size(&m)), now))
            log_warn("%s: control link queue full: a message dropped", w->id);
    }
    while (!said && netem_queue_pop_due(w->ctlq, util_now_ns(), &m, NULL)) {
        size_t n = zmq_msg_size(&m);
        if (n > sw->frame_cap || w->cut_until_ns)
            continue;
        memcpy(sw->frame, zmq_msg_data(&m), n);
        said = s_on_ctl(sw, i, n, how, howlen);
    }
    zmq_msg_close(&m);
    return said;
}

int lp_poll(llm_swarm *sw, char *how, size_t howlen)
{
    uint64_t now = util_now_ns();
    uint32_t hb_ms = lp_hb_ms(sw), live = lp_liveness(sw);
    for (uint32_t i = 0; i < sw->n; i++) {
        ls_worker *w = &sw->w[i];
        fault_release(w->pid, now, &w->cont_at_ns, &w->cut_until_ns);
        if (w->state == LW_JOIN_HELLO && w->hello_retry_ns && now >= w->hello_retry_ns) {
            w->hello_retry_ns = 0;
            s_hello_msg(sw, w);
        }
        if (w->state == LW_JOIN_SPAWN && s_spawn_progress(sw, i, now)) {
            s_join_failed(sw, i);
            continue;
        }
        if ((w->state == LW_JOIN_HELLO || w->state == LW_JOIN_LOAD) && w->deadline_ns &&
            now > w->deadline_ns) {
            snprintf(w->why, sizeof w->why, "not ready %.0f ms after its hello (the deadline: "
                     "10x the slowest load at start + 2 s; stopped, frozen or cut off)",
                     (double)(now - w->join_ns) / 1e6);
            s_join_failed(sw, i);
            continue;
        }
        int n;
        if (sw->ctl_shaper && w->ctlq) {
            if (s_ctl_held(sw, i, how, howlen))
                return (int)i;
        }
        while (!sw->ctl_shaper && w->ctl &&
               (n = zmq_recv(w->ctl, sw->frame, sw->frame_cap, ZMQ_DONTWAIT)) >= 0) {
            if (w->cut_until_ns || (size_t)n > sw->frame_cap)
                continue; /* nothing is heard over a cut link */
            if (s_on_ctl(sw, i, (size_t)n, how, howlen))
                return (int)i;
        }
        int drop;
        if (w->remote && w->state != LW_LIVE && w->state != LW_LOST && (drop = s_dropped(w))) {
            char ep[sizeof w->ctl_ep]; /* a copy: w->why and w->ctl_ep share *sw */
            snprintf(ep, sizeof ep, "%s", w->ctl_ep);
            if (drop == 2)
                snprintf(w->why, sizeof w->why, "%s refused the CURVE handshake (it does not "
                         "accept our key, or its key is not the config's)", ep);
            else
                snprintf(w->why, sizeof w->why, "its connection dropped while it %s",
                         w->state == LW_JOIN_LOAD ? "loaded" : "joined");
            s_join_failed(sw, i);
            continue;
        }
        char ended[64];
        uint64_t rd = 0;
        int reaped = w->pid > 0 ? spawn_reap(w->pid, SPAWN_POLL, &rd, ended, sizeof ended) : -1;
        if (reaped == 0)
            w->alive_ns = now; /* it ended after this, if it ends */
        if (reaped == 1) {
            w->pid = 0;
            sw->reaped_read_bytes += rd;
            if (w->state == LW_LIVE) {
                snprintf(how, howlen, "%s", ended);
                w->sign_ns = w->alive_ns;
                return (int)i;
            }
            snprintf(w->why, sizeof w->why, "%s", ended);
            s_join_failed(sw, i);
            continue;
        }
        if (lp_attached(w) && w->state != LW_JOIN_HELLO &&
            pirate_due(&w->hb, now, hb_ms)) {
            msg_heartbeat hb = { .seq = pirate_sent(&w->hb, now), .sent_ns = now };
            if (!w->cut_until_ns && proto_encode_heartbeat(sw->b, &hb) == 0)
                lp_send(sw, w->ctl); /* over a cut link it is lost, and goes unanswered */
        }
        if (w->state == LW_READY &&
            pirate_lost(&w->hb, now, PIRATE_HEARTBEAT_MS, PIRATE_LIVENESS, 0)) {
            snprintf(w->why, sizeof w->why, "heartbeats stopped while it rejoined (%.0f ms "
                     "unanswered)", (double)(now - w->hb.heard_ns) / 1e6);
            s_join_failed(sw, i);
            continue;
        }
        if (w->state == LW_LIVE &&
            pirate_lost(&w->hb, now, hb_ms, live, sw->ctl_allow_ns)) {
            snprintf(how, howlen, "heartbeats stopped (%.0f ms unanswered)",
                     (double)(now - w->hb.heard_ns) / 1e6);
            w->sign_ns = w->hb.heard_ns;
            return (int)i;
        }
    }
    return -1;
}

/* ms to wait at most: LS_POLL_MS, or less when a held result is due sooner. */
static long s_wait_ms(const llm_swarm *sw)
{
    uint64_t next = sw->rq ? netem_queue_next(sw->rq) : 0, now = util_now_ns();
    if (!next)
        return LS_POLL_MS;
    return next <= now ? 0 : (long)((next - now) / 1000000 < LS_POLL_MS
                                        ? (next - now + 999999) / 1000000 : LS_POLL_MS);
}

/* Wait up to LS_POLL_MS for anything on the control sockets or the result socket. */
void lp_wait(llm_swarm *sw, int with_pull)
{
    zmq_pollitem_t it[LS_MAX_W + 1];
    int k = 0;
    for (uint32_t i = 0; i < sw->n; i++)
        if (sw->w[i].ctl)
            it[k++] = (zmq_pollitem_t){ sw->w[i].ctl, 0, ZMQ_POLLIN, 0 };
    if (with_pull)
        it[k++] = (zmq_pollitem_t){ sw->pull, 0, ZMQ_POLLIN, 0 };
    zmq_poll(it, k, with_pull ? s_wait_ms(sw) : LS_POLL_MS);
}

void lp_wait_results(llm_swarm *sw)
{
    zmq_pollitem_t it = { sw->pull, 0, ZMQ_POLLIN, 0 };
    zmq_poll(&it, 1, s_wait_ms(sw));
}

void lp_wait_any(llm_swarm *sw)
{
    zmq_pollitem_t it[LS_MAX_W + 1];
    int k = 0;
    uint64_t now = util_now_ns(), next = sw->rq ? netem_queue_next(sw->rq) : UINT64_MAX;
    long ms = (long)lp_hb_ms(sw) / 2; /* heartbeats go out on time */
    if (ms > LS_POLL_MS)
        ms = LS_POLL_MS;
    for (uint32_t i = 0; i < sw->n; i++) {
        uint64_t cn = sw->w[i].ctlq ? netem_queue_next(sw->w[i].ctlq) : UINT64_MAX;
        if (cn < next)
            next = cn;
        if (sw->w[i].ctl)
            it[k++] = (zmq_pollitem_t){ sw->w[i].ctl, 0, ZMQ_POLLIN, 0 };
    }
    /* zmq_poll counts whole ms: a held message due sooner than that is slept for to the ns
     * (an emulated LAN's one-way delay is 0.2 ms) */
    if (next != UINT64_MAX && next <= now + 1000000) {
        if (next > now)
            util_sleep_until_ns(next);
        return;
    }
    if (next != UINT64_MAX && (long)((next - now) / 1000000) < ms)
        ms = (long)((next - now) / 1000000);
    it[k++] = (zmq_pollitem_t){ sw->pull, 0, ZMQ_POLLIN, 0 };
    zmq_poll(it, k, ms);
}

void lp_collect_stats(llm_swarm *sw, uint32_t timeout_ms)
{
    char how[256];
    uint64_t deadline = util_now_ns() + (uint64_t)timeout_ms * 1000000ull;
    msg_stats q = { 0 };
    for (uint32_t i = 0; i < sw->n; i++)
        if (sw->w[i].state == LW_LIVE && lp_attached(&sw->w[i]) && !sw->w[i].cut_until_ns &&
            proto_encode_stats(sw->b, &q) == 0)
            lp_send(sw, sw->w[i].ctl);
    while (util_now_ns() < deadline) {
        int pending = 0;
        for (uint32_t i = 0; i < sw->n; i++)
            pending += sw->w[i].state == LW_LIVE && !sw->w[i].have_stats;
        if (!pending)
            break;
        lp_poll(sw, how, sizeof how); /* a loss now is moot: its figures stay the last known */
        lp_wait_any(sw);
    }
}

int lp_join_all(llm_swarm *sw, char *err, size_t errlen)
{
    char how[256];
    uint64_t t0 = util_now_ns();
    for (uint32_t i = 0; i < sw->n; i++)
        if (lp_spawn(sw, i, how, sizeof how))
            lp_join_failed(sw, i, how);
    for (;;) {
        int l = lp_poll(sw, how, sizeof how), all = 1;
        uint64_t now = util_now_ns(), slowest = 0;
        if (l >= 0) {
            snprintf(err, errlen, "%s: %s", sw->w[l].id, how);
            return -1;
        }
        if (arm_stop) {
            snprintf(err, errlen, "interrupted while the workers joined");
            return -1;
        }
        for (uint32_t i = 0; i < sw->n; i++)
            if (sw->w[i].state == LW_READY && sw->w[i].took_load_ns > slowest)
                slowest = sw->w[i].took_load_ns;
        for (uint32_t i = 0; i < sw->n; i++) {
            ls_worker *w = &sw->w[i];
            /* a listed worker that fails at start is a config to fix: the run says so; a
             * spawned one is lost like any later (llm_swarm_new: its layers here) */
            if (w->state == LW_LOST && w->remote) {
                snprintf(err, errlen, "%s: %s", w->id, w->why);
                return -1;
            }
            if (w->remote && w->state == LW_JOIN_HELLO &&
                now - t0 > LS_HELLO_MS * 1000000ull) {
                snprintf(err, errlen, "%s at %s: no answer to hello in %d s (is its worker "
                         "running there?)", w->id, w->ctl_ep, LS_HELLO_MS / 1000);
                return -1;
            }
            /* one load timed: a spawned worker still loading gets a deadline from it (the
             * same file, layers of about the same size), so a stopped one is not awaited */
            if (!w->remote && slowest && !w->deadline_ns &&
                (w->state == LW_JOIN_HELLO || w->state == LW_JOIN_LOAD))
                w->deadline_ns = w->join_ns + LS_DEADLINE_X * slowest +
                                 LS_DEADLINE_PLUS_MS * 1000000ull;
            all &= w->state == LW_READY || w->state == LW_LOST;
        }
        if (all)
            break;
        lp_wait(sw, 0);
    }
    for (uint32_t i = 0; i < sw->n; i++) {
        ls_worker *w = &sw->w[i];
        if (w->state != LW_READY)
            continue;
        w->state = LW_LIVE;
        if (w->took_spawn_ns > sw->meas_spawn_ns)
            sw->meas_spawn_ns = w->took_spawn_ns;
        if (w->took_load_ns > sw->meas_load_ns)
            sw->meas_load_ns = w->took_load_ns;
    }
    if (sw->meas_spawn_ns || sw->meas_load_ns)
        log_info("joined: the slowest spawn reported in %.1f ms, the slowest load took %.1f ms "
                 "(a later join's deadlines: %dx these + %d ms)", sw->meas_spawn_ns / 1e6,
                 sw->meas_load_ns / 1e6, LS_DEADLINE_X, LS_DEADLINE_PLUS_MS);
    return 0;
}

/* Where worker i's output goes for a pass through units 0..stop: the next worker, or -1 the
 * coordinator. */
static int s_next(const llm_swarm *sw, uint32_t i, int stop)
{
    return (int)i < stop && i + 1 < sw->n && sw->w[i + 1].state == LW_LIVE ? (int)i + 1 : -1;
}

int lp_route(llm_swarm *sw, int stop, int *lost, char *how, size_t howlen, char *err,
             size_t errlen)
{
    int same = 1;
    for (uint32_t i = 0; i < sw->n; i++)
        if (sw->w[i].state == LW_LIVE && sw->w[i].routed_next != s_next(sw, i, stop))
            same = 0;
    if (same) { /* the routes in force already end where these would */
        sw->route_stop = stop;
        return LP_OK;
    }
    sw->epoch++;
    /* Downstream first, each route confirmed before the one of the worker that sends to it:
     * a route both lets the previous hop's key through its data socket's ZAP check and
     * connects to the next hop. Sent all at once, a worker could connect before the next
     * had allowed its key: that CURVE handshake is refused, libzmq does not retry a
     * connection refused by ZAP, and the act queued on it is lost without a word (the
     * resident arm then waited forever: the e2e_hosts_llm hang). */
    for (uint32_t i = sw->n; i-- > 0;) {
        ls_worker *w = &sw->w[i];
        if (w->state != LW_LIVE)
            continue;
        int on = s_next(sw, i, stop) >= 0;
        w->routed_next = s_next(sw, i, stop);
        msg_route r = { .epoch = sw->epoch, .hop = i, .last = !on };
        if (sw->shaper) /* the worker holds each act for its incoming link */
            netem_profile_link(&sw->o.profile, sw->o.seed * 131 + i * 7 + sw->epoch, &r.link);
        snprintf(r.next_ep, sizeof r.next_ep, "%s", on ? sw->w[i + 1].data_ep : sw->pull_ep);
        /* CURVE: the key of whoever it sends to; its data socket takes the previous live
         * worker's key beside ours (acts after a unit run here come from us) */
        snprintf(r.next_key, sizeof r.next_key, "%s", on ? sw->w[i + 1].pub : sw->o.key_pub);
        snprintf(r.prev_key, sizeof r.prev_key, "%s",
                 i > 0 && sw->w[i - 1].state == LW_LIVE ? sw->w[i - 1].pub : sw->o.key_pub);
        uint64_t now = util_now_ns();
        msg_heartbeat hb = { .seq = pirate_sent(&w->hb, now), .sent_ns = now };
        if (proto_encode_route(sw->b, &r)) {
            snprintf(err, errlen, "%s: cannot encode its route", w->id);
            return -1;
        }
        lp_send(sw, w->ctl);
        if (proto_encode_heartbeat(sw->b, &hb) == 0)
            lp_send(sw, w->ctl);
        w->route_seq = hb.seq;
        /* the echo of the heartbeat sent after a route says the route is in force */
        while (w->state == LW_LIVE && w->echo_seq < w->route_seq) {
            int l = lp_poll(sw, how, howlen);
            if (l >= 0) {
                *lost = l;
                sw->route_stop = -1;
                for (uint32_t k = 0; k < sw->n; k++)
                    sw->w[k].routed_next = -2; /* not known to be in force */
                return LP_LOST;
            }
            if (w->echo_seq < w->route_seq)
                lp_wait(sw, 0);
        }
    }
    sw->route_stop = stop;
    return LP_OK;
}

void lp_session_end(llm_swarm *sw, uint64_t session)
{
    for (uint32_t i = 0; i < sw->n; i++)
        if (sw->w[i].state == LW_LIVE)
            lp_session_end_one(sw, i, session);
}

void lp_session_end_one(llm_swarm *sw, uint32_t i, uint64_t session)
{
    msg_session_end e = { .session = session, .epoch = sw->epoch };
    if (sw->w[i].ctl && proto_encode_session_end(sw->b, &e) == 0)
        lp_send(sw, sw->w[i].ctl);
}

void lp_route_rejoiner(llm_swarm *sw, uint32_t i)
{
    ls_worker *w = &sw->w[i];
    msg_route r = { .epoch = sw->epoch, .hop = i, .last = 1 };
    uint64_t now = util_now_ns();
    if (sw->shaper)
        netem_profile_link(&sw->o.profile, sw->o.seed * 131 + i * 7 + sw->epoch, &r.link);
    snprintf(r.next_ep, sizeof r.next_ep, "%s", sw->pull_ep);
    snprintf(r.next_key, sizeof r.next_key, "%s", sw->o.key_pub);
    snprintf(r.prev_key, sizeof r.prev_key, "%s", sw->o.key_pub);
    msg_heartbeat hb = { .seq = pirate_sent(&w->hb, now), .sent_ns = now };
    if (proto_encode_route(sw->b, &r) == 0)
        lp_send(sw, w->ctl);
    if (proto_encode_heartbeat(sw->b, &hb) == 0)
        lp_send(sw, w->ctl);
    w->route_seq = hb.seq;
    w->routed_next = -2; /* its place in the chain is set when it goes LIVE */
}

void lp_close_all(llm_swarm *sw)
{
    /* a bye not delivered within the workers' silence bound is moot: by then a worker has
     * released itself and (--once) exited; an unbounded linger would wait on a dead one */
    int linger = PIRATE_WORKER_SILENT_MS;
    for (uint32_t i = 0; i < sw->n; i++) {
        ls_worker *w = &sw->w[i];
        msg_bye bye = { .reason = "done" };
        if (w->pid > 0 && w->cont_at_ns)
            kill(w->pid, SIGCONT); /* a stopped worker hears its bye */
        if (lp_attached(w) && w->state != LW_JOIN_HELLO && proto_encode_bye(sw->b, &bye) == 0) {
            zmq_setsockopt(w->ctl, ZMQ_LINGER, &linger, sizeof linger);
            zmq_send(w->ctl, proto_buf_data(sw->b), proto_buf_len(sw->b), ZMQ_DONTWAIT);
        }
    }
    for (uint32_t i = 0; i < sw->n; i++) {
        ls_worker *w = &sw->w[i];
        int heard = w->ctl != NULL;
        s_close(w);
        if (w->rep_fd >= 0)
            close(w->rep_fd);
        w->rep_fd = -1;
        /* a worker told bye exits (--once); one that did not hear it is stopped */
        if (w->pid > 0 && !heard)
            kill(w->pid, SIGTERM);
        if (w->pid > 0)
            spawn_reap(w->pid, SPAWN_WAIT, NULL, NULL, 0);
        w->pid = 0;
    }
}
