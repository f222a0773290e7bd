/* worker.c — `swarm worker`: load an assigned layer range under a cap and serve it. dist/ */
#include "dist/worker.h"

#include <errno.h>
#include <getopt.h>
#include <sched.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <unistd.h>
#include <zmq.h>

#include "arch/kernel.h"
#include "base/log.h"
#include "base/util.h"
#include "base/exitcode.h"
#include "dist/worker_int.h"

_Static_assert(PROTO_MAX_SEGS <= SLICE_MAX_SEGS, "an act's segments fit one slice step");


static volatile sig_atomic_t s_stop;

/* A flood of bad frames must not become a flood of log lines: the first 10 of each plane are
 * logged, then one in 1000 (the counters in stats keep the exact numbers). Per plane, so a
 * flood on one never hides the other's first problems. */
int worker_log_bad(worker_t *w, int plane)
{
    uint64_t n = ++w->bad_seen[plane ? 1 : 0];
    return n <= 10 || n % 1000 == 0;
}

static void s_on_signal(int sig)
{
    (void)sig;
    s_stop = 1;
}

void *zsock_new(void *ctx, int type, char *err, unsigned long errlen)
{
    void *s = zmq_socket(ctx, type);
    int linger = WORKER_LINGER_MS;
    int64_t maxmsg = PROTO_MAX_FRAME;
    if (!s) {
        snprintf(err, errlen, "zmq_socket: %s", zmq_strerror(errno));
        return NULL;
    }
    zmq_setsockopt(s, ZMQ_LINGER, &linger, sizeof linger);
    zmq_setsockopt(s, ZMQ_MAXMSGSIZE, &maxmsg, sizeof maxmsg);
    return s;
}

int worker_send_ctl(worker_t *w)
{
    if (!w->peer_len)
        return -1;
    if (zmq_send(w->ctl, w->peer, w->peer_len, ZMQ_SNDMORE | ZMQ_DONTWAIT) < 0)
        return -1;
    return zmq_send(w->ctl, proto_buf_data(w->out), proto_buf_len(w->out), ZMQ_DONTWAIT) < 0
               ? -1 : 0;
}

static void s_send_error_to(worker_t *w, const uint8_t *peer, size_t plen, uint32_t code,
                            const char *text)
{
    msg_error e = { .code = code };
    snprintf(e.text, sizeof e.text, "%s: %s", w->id, text);
    if (proto_encode_error(w->out, &e))
        return;
    zmq_send(w->ctl, peer, plen, ZMQ_SNDMORE | ZMQ_DONTWAIT);
    zmq_send(w->ctl, proto_buf_data(w->out), proto_buf_len(w->out), ZMQ_DONTWAIT);
}

/* Back to WAITING: release layers, close the route, forget the coordinator. */
/* A spawned worker (--once, --report-fd) whose coordinator is silent but still its parent:
 * the coordinator is paused (SIGSTOP, a debugger, a VM descheduled), not gone, and gets its
 * worker back when it resumes instead of finding every worker lost. Once the coordinator dies
 * the worker is reparented and the silence bound applies. */
static int s_parent_waits(const worker_t *w)
{
    return w->parent > 1 && getppid() == w->parent;
}

static void s_release(worker_t *w, const char *why)
{
    if (w->state != W_WAITING || w->peer_len)
        log_info("%s: releasing assignment (%s); waiting for a coordinator", w->id, why);
    worker_fetch_stop(w, why);
    compute_wait(w->comp); /* an activation in progress is dropped: the route is gone */
    slice_free(&w->slice);
    w->n_pend_end = 0;
    w->path[0] = 0;
    if (w->push) {
        zmq_close(w->push);
        w->push = NULL;
    }
    w->push_ep[0] = 0;
    netem_shaper_free(&w->shaper);
    if (w->queue) {
        zmq_msg_t m;
        zmq_msg_init(&m);
        while (netem_queue_pop_due(w->queue, UINT64_MAX, &m, NULL))
            zmq_msg_close(&m);
        zmq_msg_close(&m);
    }
    free(w->x);
    w->x = NULL;
    w->peer_len = 0;
    w->state = W_WAITING;
    memset(&w->route, 0, sizeof w->route);
}

static void s_on_hello(worker_t *w, const msg_hello *h)
{
    (void)h;
    msg_hello me = { .cap_bytes = w->cap_bytes, .proto_version = PROTO_VERSION,
                     .caps = PROTO_CAP_RESIDENT | PROTO_CAP_NETEM | PROTO_CAP_LLM |
                             PROTO_CAP_SEGS,
                     .pid = (uint32_t)getpid() };
    snprintf(me.id, sizeof me.id, "%s", w->id);
    snprintf(me.data_ep, sizeof me.data_ep, "%s", w->data_ep);
    snprintf(me.pubkey, sizeof me.pubkey, "%s", w->pub);
    if (proto_encode_hello(w->out, &me) == 0)
        worker_send_ctl(w);
}

/* Loaded: tell the coordinator. Loading blocked this loop, so the coordinator's silence is
 * measured from now. */
static void s_answer_ready(worker_t *w)
{
    if (proto_encode_ready(w->out, &w->ready) == 0)
        worker_send_ctl(w);
    w->last_heard_ns = util_now_ns();
}

/* Refused: say why, in the log and to the coordinator (e->code is set by the caller). */
static void s_refuse(worker_t *w, const msg_assign *a, msg_error *e, const char *err)
{
    log_error("%s: refusing assignment [%u, %u): %s", w->id, a->first, a->last, err);
    snprintf(e->text, sizeof e->text, "%s: %s", w->id, err);
    if (proto_encode_error(w->out, e) == 0)
        worker_send_ctl(w);
}

/* The assignment's range as a slice: a real model's with its sessions' caches (assign's
 * n_ctx > 0), or the dense lab model's (n_ctx 0: stateless, one position per act, no cache),
 * planned under the cap and verified against the coordinator's checksums as it loads. */
void worker_load_assign(worker_t *w, const msg_assign *a, const char *path, uint64_t t0)
{
    char err[1024];
    msg_error e = { 0 };
    int cap_short = 0;
    int dense = a->n_ctx == 0;
    uint64_t io0 = util_io_read_bytes();
    /* The same dense assignment again (a coordinator re-adopting us after a freeze or a cut):
     * the layers are still resident and verified and hold no state, so answer at once. */
    if (dense && w->slice && slice_stateless(w->slice) && !strcmp(w->path, path) &&
        w->model_size == a->model_size && w->first == a->first && w->last == a->last) {
        log_info("%s: layers [%u, %u) still resident: ready", w->id, a->first, a->last);
        w->state = W_LOADED;
        s_answer_ready(w);
        return;
    }
    compute_wait(w->comp); /* the thread borrows the slice: never free it under a job */
    slice_free(&w->slice);
    w->n_pend_end = 0;
    w->path[0] = 0;
    uint32_t batch = dense ? 1 : a->max_batch;
    /* the pull socket takes frames up to PROTO_MAX_FRAME (set when it was bound) */
    if (proto_frame_limit(a->dim, batch) > PROTO_MAX_FRAME) {
        snprintf(err, sizeof err, "acts of %u x %u floats need frames of %zu bytes, over "
                 "this worker's %u", batch, a->dim, proto_frame_limit(a->dim, batch),
                 PROTO_MAX_FRAME);
        e.code = PERR_CAP;
        goto refuse;
    }
    if (a->last <= a->first || a->last - a->first > PROTO_MAX_LAYERS) {
        snprintf(err, sizeof err, "layers [%u, %u): not a range of 1..%u layers", a->first,
                 a->last, PROTO_MAX_LAYERS);
        e.code = PERR_MODEL;
        goto refuse;
    }
    uint32_t threads = a->threads ? a->threads : 1;
    /* the dense layer's products are OpenBLAS's, whose threads are process-wide */
    if (dense)
        kernel_set_threads((int)threads);
    slice_opts so = { .path = path, .first = a->first, .last = a->last,
                      .n_ctx = dense ? 1 : a->n_ctx, .sessions = dense ? 1 : a->sessions,
                      .max_batch = batch, .cap_bytes = w->cap_bytes, .threads = (int)threads,
                      .expect_sums = a->checksums };
    w->slice = slice_new_ex(&so, &cap_short, err, sizeof err);
    if (!w->slice) {
        e.code = cap_short ? PERR_CAP : PERR_MODEL;
        goto refuse;
    }
    if (slice_dim(w->slice) != a->dim || dense != slice_stateless(w->slice)) {
        snprintf(err, sizeof err, "%s: model differs from the coordinator's (dim %u vs %u, %s)",
                 a->model_path, slice_dim(w->slice), a->dim,
                 slice_stateless(w->slice) ? "stateless" : "with a KV cache");
        e.code = PERR_MODEL;
        goto refuse;
    }
    w->first = a->first;
    w->last = a->last;
    w->dim = a->dim;
    w->max_batch = batch;
    free(w->x);
    if (!(w->x = malloc(sizeof(float) * a->dim * batch))) {
        snprintf(err, sizeof err, "out of memory");
        e.code = PERR_INTERNAL;
        goto refuse;
    }
    snprintf(w->path, sizeof w->path, "%s", path);
    w->model_size = a->model_size;
    memset(&w->ready, 0, sizeof w->ready);
    w->ready.bytes_loaded = slice_loaded_bytes(w->slice);
    w->ready.load_ns = util_now_ns() - t0;
    w->ready.fetched_bytes = w->fetched;
    w->ready.fetch_ns = w->fetched ? w->fetch_t0 : 0;
    w->ready.resumed_bytes = w->resumed;
    w->ready.read_bytes = util_io_read_bytes() - io0;
    w->ready.peak_rss_bytes = util_vmhwm_bytes(0);
    w->ready.cgroup_peak_bytes = cap_peak(&w->cap);
    w->state = W_LOADED;
    if (dense)
        log_info("%s: loaded layers [%u, %u) (%llu MiB) in %.1f ms", w->id, a->first, a->last,
                 (unsigned long long)(w->ready.bytes_loaded >> 20), w->ready.load_ns / 1e6);
    else
        log_info("%s: loaded layers [%u, %u) of %s (%llu MiB), %u sessions x %u positions, "
                 "in %.1f ms", w->id, a->first, a->last, a->model_path,
                 (unsigned long long)(w->ready.bytes_loaded >> 20), a->sessions, a->n_ctx,
                 w->ready.load_ns / 1e6);
    s_answer_ready(w);
    return;
refuse:
    slice_free(&w->slice);
    s_refuse(w, a, &e, err);
}

static void s_on_assign(worker_t *w, const msg_assign *a)
{
    char err[512];
    struct stat st;
    w->assign_t0 = util_now_ns();
    w->fetched = w->resumed = 0;
    /* A local copy is used when there is one (verified against the coordinator's checksums
     * as it loads); otherwise, or with --fetch, the bytes come from the coordinator. */
    if (!w->force_fetch && stat(a->model_path, &st) == 0) {
        worker_load_assign(w, a, a->model_path, w->assign_t0);
        return;
    }
    if (worker_fetch_begin(w, a, err, sizeof err)) {
        log_error("%s: %s", w->id, err);
        s_send_error_to(w, w->peer, w->peer_len, PERR_MODEL, err);
    }
}

static void s_on_route(worker_t *w, const msg_route *r)
{
    char err[256];
    if (w->state == W_WAITING) {
        s_send_error_to(w, w->peer, w->peer_len, PERR_STATE, "route before assign");
        return;
    }
    if (!r->next_key[0] && !w->plaintext && !sec_endpoint_is_local(r->next_ep)) {
        log_error("%s: refusing a plaintext route to %s (no key for it; start with --plaintext "
                  "to allow)", w->id, r->next_ep);
        s_send_error_to(w, w->peer, w->peer_len, PERR_STATE, "plaintext route refused");
        return;
    }
    if (w->sec) { /* the data plane accepts the coordinator's keys and the previous hop's */
        sec_reset_dynamic(w->sec);
        if (r->prev_key[0])
            sec_allow(w->sec, r->prev_key);
    }
    /* A new epoch gets a fresh socket even to the same hop: a connection the next hop's ZAP
     * refused is not retried by libzmq, and what was queued on it is stale by now anyway. */
    if (strcmp(r->next_ep, w->push_ep) || strcmp(r->next_key, w->push_key) ||
        r->epoch != w->route.epoch) {
        if (w->push)
            zmq_close(w->push);
        w->push = zsock_new(w->ctx, ZMQ_PUSH, err, sizeof err);
        if (w->push && r->next_key[0] && w->pub[0])
            sec_client(w->push, w->pub, w->secret, r->next_key);
        if (!w->push || zmq_connect(w->push, r->next_ep)) {
            log_error("%s: cannot connect to next hop %s: %s", w->id, r->next_ep,
                      zmq_strerror(errno));
            s_send_error_to(w, w->peer, w->peer_len, PERR_INTERNAL, "cannot connect next hop");
            return;
        }
        snprintf(w->push_ep, sizeof w->push_ep, "%s", r->next_ep);
        snprintf(w->push_key, sizeof w->push_key, "%s", r->next_key);
    }
    netem_profile p = { 0 };
    snprintf(p.name, sizeof p.name, "route");
    p.delay_ns = r->link.delay_ns;
    p.jitter_ns = r->link.jitter_ns;
    p.dist = r->link.dist;
    p.loss = r->link.loss_ppm / 1e6;
    p.rate_bps = r->link.rate_bps;
    p.rto_ns = 200000000ull;
    netem_shaper_free(&w->shaper);
    if (!netem_profile_is_none(&p))
        w->shaper = netem_shaper_new(&p, r->link.seed);
    w->route = *r;
    w->state = W_SERVING;
    log_info("%s: route epoch %llu: hop %u -> %s%s", w->id, (unsigned long long)r->epoch, r->hop,
             r->next_ep, r->last ? " (coordinator)" : "");
}

/* Free a session's caches now, or once the running activation is done (the compute thread
 * borrows the slice). A worker without a slice has no sessions: nothing to free. */
static void s_on_session_end(worker_t *w, uint64_t session)
{
    if (!w->slice)
        return;
    if (compute_busy(w->comp)) {
        if (w->n_pend_end < WORKER_PEND_ENDS) {
            w->pend_end[w->n_pend_end++] = session;
            return;
        }
        compute_wait(w->comp); /* the activation is dropped; the coordinator replays it */
    }
    for (uint32_t i = 0; i < w->n_pend_end; i++)
        slice_end(w->slice, w->pend_end[i]);
    w->n_pend_end = 0;
    if (slice_end(w->slice, session))
        log_debug("%s: session %llu ended: its caches freed", w->id,
                  (unsigned long long)session);
}

static int s_on_ctl(worker_t *w)
{
    uint8_t peer[256];
    zmq_msg_t m;
    int plen, more;
    size_t ml;
    char err[256];

    plen = zmq_recv(w->ctl, peer, sizeof peer, ZMQ_DONTWAIT);
    if (plen < 0)
        return 0;
    zmq_msg_init(&m);
    if (zmq_msg_recv(&m, w->ctl, ZMQ_DONTWAIT) < 0) {
        zmq_msg_close(&m);
        return 1;
    }
    more = zmq_msg_more(&m);
    ml = zmq_msg_size(&m);
    const char *uid = zmq_msg_gets(&m, "User-Id");
    char key[sizeof w->peer_key];
    snprintf(key, sizeof key, "%s", uid ? uid : "");
    if (more) { /* drain an unexpected multipart message */
        zmq_msg_t junk;
        zmq_msg_init(&junk);
        while (zmq_msg_more(&m) && zmq_msg_recv(&junk, w->ctl, ZMQ_DONTWAIT) >= 0)
            if (!zmq_msg_more(&junk))
                break;
        zmq_msg_close(&junk);
        w->stats.bad_msgs++;
        if (worker_log_bad(w, WORKER_PLANE_CTL))
            log_warn("%s: dropped a multipart control message", w->id);
        zmq_msg_close(&m);
        return 1;
    }
    /* Where the decoder may copy bytes: a chunk's into chunk_buf, an act's nowhere (any type
     * can arrive on any socket: never leave another union member's pointer stale; a hostile
     * act on this socket once wrote through one). */
    w->msg->u.act.x = NULL;
    w->msg->u.chunk.data = w->chunk_buf;
    int rc = proto_decode(zmq_msg_data(&m), ml, 0, w->msg, err, sizeof err);
    zmq_msg_close(&m);
    if (rc == -2) {
        w->stats.bad_msgs++;
        if (worker_log_bad(w, WORKER_PLANE_CTL))
            log_warn("%s: peer speaks protocol version %u, this worker %u: refused", w->id,
                 w->msg->version, PROTO_VERSION);
        char t[128];
        snprintf(t, sizeof t, "protocol version %u not supported (worker speaks %u)",
                 w->msg->version, PROTO_VERSION);
        s_send_error_to(w, peer, (size_t)plen, PERR_VERSION, t);
        return 1;
    }
    if (rc) {
        w->stats.bad_msgs++;
        if (worker_log_bad(w, WORKER_PLANE_CTL))
            log_warn("%s: dropped a bad control message (%zu bytes): %s", w->id, ml, err);
        return 1;
    }
    int same = w->peer_len == (size_t)plen && !memcmp(w->peer, peer, (size_t)plen);
    if (!same) {
        if (w->peer_len && w->msg->type != MSG_HELLO)
            return 1; /* stray message from a stranger: ignore */
        /* A coordinator restarted at once (a crash, a kill -9) says hello from a new
         * connection while the old one is not yet known to be gone: the same CURVE key is the
         * same operator, taken at once; over plaintext the old one must have been silent for
         * a coordinator's own liveness window (PIRATE_LIVENESS heartbeats: a live one sends
         * one every PIRATE_HEARTBEAT_MS), not PIRATE_WORKER_SILENT_MS. */
        uint64_t quiet_ns = util_now_ns() - w->last_heard_ns;
        if (w->peer_len &&
            ((key[0] && !strcmp(key, w->peer_key)) ||
             (!key[0] && !w->peer_key[0] &&
              quiet_ns > (uint64_t)PIRATE_HEARTBEAT_MS * PIRATE_LIVENESS * 1000000ull))) {
            s_release(w, key[0] ? "a new coordinator with the same key said hello"
                                : "a new coordinator said hello; the last one is silent");
            if (w->once) { /* a spawned worker serves the coordinator that spawned it */
                s_stop = 1;
                return 1;
            }
        }
        if (w->peer_len) {
            s_send_error_to(w, peer, (size_t)plen, PERR_BUSY, "serving another coordinator");
            return 1;
        }
        if (w->msg->type != MSG_HELLO) {
            s_send_error_to(w, peer, (size_t)plen, PERR_STATE, "say hello first");
            return 1;
        }
        memcpy(w->peer, peer, (size_t)plen);
        w->peer_len = (size_t)plen;
        snprintf(w->peer_key, sizeof w->peer_key, "%s", key);
        log_info("%s: coordinator connected", w->id);
    }
    w->last_heard_ns = util_now_ns();
    switch (w->msg->type) {
    case MSG_HELLO: s_on_hello(w, &w->msg->u.hello); break;
    case MSG_ASSIGN: s_on_assign(w, &w->msg->u.assign); break;
    case MSG_ROUTE: s_on_route(w, &w->msg->u.route); break;
    case MSG_CHUNK: worker_fetch_on_chunk(w, &w->msg->u.chunk); break;
    case MSG_SESSION_END: s_on_session_end(w, w->msg->u.send.session); break;
    case MSG_HEARTBEAT: {
        /* Echoed with our progress: answered here, on the loop, whatever the compute thread
         * is doing, so silence means dead or frozen, never busy. */
        msg_heartbeat hb = w->msg->u.hb;
        hb.busy_ns = compute_busy_ns(w->comp, util_now_ns());
        hb.acts = w->stats.acts;
        hb.queued = (uint32_t)netem_queue_len(w->queue);
        if (proto_encode_heartbeat(w->out, &hb) == 0)
            worker_send_ctl(w);
        break;
    }
    case MSG_STATS:
        w->stats.peak_rss_bytes = util_vmhwm_bytes(0);
        w->stats.cgroup_peak_bytes = cap_peak(&w->cap);
        if (proto_encode_stats(w->out, &w->stats) == 0)
            worker_send_ctl(w);
        break;
    case MSG_BYE:
        s_release(w, "coordinator said bye");
        if (w->once)
            s_stop = 1;
        break;
    default:
        w->stats.bad_msgs++;
        if (worker_log_bad(w, WORKER_PLANE_CTL))
            log_warn("%s: unexpected %s on the control plane", w->id,
                 proto_type_name(w->msg->type));
    }
    return 1;
}

/* Decode one activation whose emulated link delay has elapsed and hand it to the compute
 * thread; s_serve_end forwards it when the thread is done. */
static void s_serve_begin(worker_t *w, zmq_msg_t *m, uint64_t arrival_ns)
{
    char err[256];
    uint64_t t0 = util_now_ns();
    msg_act *a = &w->amsg->u.act;
    w->amsg->u.chunk.data = NULL; /* an act's x is the only place bytes may land */
    a->x = w->x;
    int rc = proto_decode_n(zmq_msg_data(m), zmq_msg_size(m), w->dim, w->max_batch, w->amsg,
                            err, sizeof err);
    int stateless = w->slice && slice_stateless(w->slice);
    if (rc == 0 && !stateless && (!a->session || a->pos > UINT32_MAX)) {
        snprintf(err, sizeof err, "session %llu at position %llu: a real model's act needs a "
                 "session >= 1 and a position below 2^32", (unsigned long long)a->session,
                 (unsigned long long)a->pos);
        rc = -1;
    }
    if (rc || w->amsg->type != MSG_ACT) {
        w->stats.bad_msgs++;
        if (worker_log_bad(w, WORKER_PLANE_DATA))
            log_warn("%s: dropped a bad data message (%zu bytes): %s", w->id, zmq_msg_size(m),
                 rc ? err : "not an act");
        return;
    }
    if (a->epoch != w->route.epoch || a->hop != w->route.hop) {
        w->stats.stale_msgs++;
        log_debug("%s: dropped act req %llu from epoch %llu hop %u (now epoch %llu hop %u)",
                  w->id, (unsigned long long)a->req, (unsigned long long)a->epoch, a->hop,
                  (unsigned long long)w->route.epoch, w->route.hop);
        return;
    }
    w->cur_arrival_ns = arrival_ns;
    w->cur_t0 = t0;
    w->cur_t1 = util_now_ns();
    /* a stateless range (the dense model) takes any session and position: they are the
     * coordinator's numbering of independent steps (runtime/slice.h) */
    slice_seg sg[PROTO_MAX_SEGS];
    uint32_t k = a->segs.n;
    for (uint32_t i = 0; i < k; i++) /* several sessions' rows in one pass ("sg") */
        sg[i] = (slice_seg){ .session = a->segs.s[i].session, .pos0 = a->segs.s[i].pos,
                             .n = a->segs.s[i].n };
    if (!k)
        sg[k++] = (slice_seg){ .session = a->session, .pos0 = (uint32_t)a->pos,
                               .n = a->n_pos ? a->n_pos : 1 };
    if (compute_start_segs(w->comp, w->slice, sg, k, w->x, w->dim))
        log_error("%s: compute thread refused a job (busy): dropped", w->id);
}

/* The compute thread finished: forward the activation, unless the route moved meanwhile
 * (the coordinator replays what an old epoch carried). */
static void s_serve_end(worker_t *w)
{
    char err[256];
    int rc;
    uint64_t compute_ns = 0;
    msg_act *a = &w->amsg->u.act;
    if (!compute_collect(w->comp, &rc, NULL, &compute_ns, err, sizeof err))
        return;
    for (uint32_t i = 0; w->slice && i < w->n_pend_end; i++)
        slice_end(w->slice, w->pend_end[i]);
    w->n_pend_end = 0;
    if (rc) {
        /* said, not just logged: the coordinator awaits this act's result and would
         * otherwise wait on a worker that answers every heartbeat */
        char text[PROTO_MAX_STR];
        log_error("%s: compute failed: %s", w->id, err);
        snprintf(text, sizeof text, "act req %llu: %s", (unsigned long long)a->req, err);
        if (w->state == W_SERVING)
            s_send_error_to(w, w->peer, w->peer_len, PERR_STATE, text);
        return;
    }
    if (w->state != W_SERVING || a->epoch != w->route.epoch || a->hop != w->route.hop) {
        w->stats.stale_msgs++;
        log_debug("%s: act req %llu finished under epoch %llu, now %llu: dropped", w->id,
                  (unsigned long long)a->req, (unsigned long long)a->epoch,
                  (unsigned long long)w->route.epoch);
        return;
    }
    uint64_t t2 = util_now_ns();
    /* Serialize and send durations are only known after the frame is built and queued, so
     * the trace carries this stage's figures from its previous message (steady state: the
     * same work on the same sizes; a few microseconds either way). */
    if (a->n_trace < PROTO_MAX_TRACE) {
        msg_trace *tr = &a->trace[a->n_trace++];
        tr->stage = w->route.hop;
        tr->wait_ns = w->cur_t0 - w->cur_arrival_ns;
        tr->deser_ns = w->cur_t1 - w->cur_t0;
        tr->compute_ns = compute_ns;
        tr->ser_ns = w->last_ser_ns;
        tr->send_ns = w->last_send_ns;
    }
    a->hop = w->route.hop + 1;
    if (proto_encode_act(w->out, w->route.last ? MSG_RESULT : MSG_ACT, a)) {
        log_error("%s: encode failed", w->id);
        return;
    }
    uint64_t t3 = util_now_ns();
    if (zmq_send(w->push, proto_buf_data(w->out), proto_buf_len(w->out), ZMQ_DONTWAIT) < 0) {
        /* Never block on a dead next hop: the coordinator replays what does not arrive. */
        if (worker_log_bad(w, WORKER_PLANE_DATA))
            log_error("%s: send to %s failed: %s", w->id, w->push_ep, zmq_strerror(errno));
        w->stats.bad_msgs++;
        /* The next route (the coordinator replays under a new epoch) makes a fresh socket:
         * a connection refused once (say by a ZAP handler not yet told our key) is retried. */
        w->push_ep[0] = 0;
        return;
    }
    w->last_ser_ns = t3 - t2;
    w->last_send_ns = util_now_ns() - t3;
    w->stats.acts++;
    w->stats.bytes_out += proto_buf_len(w->out);
}

/* Cheap checks at arrival, so frames that can never be an activation for us take no place in
 * the queue (256 slots, where work waits while the compute thread is busy: a hostile sender
 * must not crowd out the real activations behind a slow compute). The full decode still comes
 * at release. 0 / -1 with why filled. */
static int s_screen(const worker_t *w, const zmq_msg_t *m, char *why, size_t len)
{
    uint32_t v, t;
    size_t n = zmq_msg_size(m);
    if (zmq_msg_more(m))
        return snprintf(why, len, "multipart"), -1;
    if (w->state != W_SERVING)
        return snprintf(why, len, "no route yet"), -1;
    if (proto_peek(zmq_msg_data((zmq_msg_t *)m), n, &v, &t))
        return snprintf(why, len, "not a swarm frame"), -1;
    if (v != PROTO_VERSION)
        return snprintf(why, len, "protocol version %u, this worker %u", v, PROTO_VERSION), -1;
    if (t != MSG_ACT)
        return snprintf(why, len, "a %s, not an act", proto_type_name(t)), -1;
    if (n < (size_t)w->dim * sizeof(float))
        return snprintf(why, len, "too short for %u floats", w->dim), -1;
    return 0;
}

static void s_on_data(worker_t *w)
{
    zmq_msg_t m;
    char why[128];
    zmq_msg_init(&m);
    while (zmq_msg_recv(&m, w->pull, ZMQ_DONTWAIT) >= 0) {
        uint64_t now = util_now_ns();
        w->stats.bytes_in += zmq_msg_size(&m);
        if (s_screen(w, &m, why, sizeof why)) {
            w->stats.bad_msgs++;
            if (worker_log_bad(w, WORKER_PLANE_DATA))
                log_warn("%s: dropped a bad data message (%zu bytes): %s", w->id,
                         zmq_msg_size(&m), why);
            continue;
        }
        /* Everything goes through the queue (released at once without a link profile); the
         * compute thread takes one activation at a time from it, so the queue is where work
         * waits while the loop keeps answering the control plane. */
        uint64_t rel = w->shaper ? netem_release_at(w->shaper, now, zmq_msg_size(&m)) : now;
        if (netem_queue_push(w->queue, &m, rel, now)) {
            w->stats.bad_msgs++;
            if (worker_log_bad(w, WORKER_PLANE_DATA))
                log_warn("%s: link emulation queue full: message dropped", w->id);
        }
    }
    zmq_msg_close(&m);
}

static void s_release_due(worker_t *w)
{
    zmq_msg_t m;
    uint64_t arrival;
    if (compute_busy(w->comp))
        return; /* one activation at a time; the completion wakes the loop */
    zmq_msg_init(&m);
    if (netem_queue_pop_due(w->queue, util_now_ns(), &m, &arrival))
        s_serve_begin(w, &m, arrival);
    zmq_msg_close(&m);
}

/* The control loop: control messages first and all of them (small, cheap), then incoming
 * activations into the queue, then the next due activation to the compute thread when it is
 * free. Nothing here waits for compute, so heartbeats are answered within one poll turn. */
static void s_loop(worker_t *w)
{
    while (!s_stop) {
        zmq_pollitem_t items[3] = { { w->ctl, 0, ZMQ_POLLIN, 0 }, { w->pull, 0, ZMQ_POLLIN, 0 },
                                    { NULL, compute_fd(w->comp), ZMQ_POLLIN, 0 } };
        int busy = compute_busy(w->comp);
        uint64_t now = util_now_ns(), next = busy ? UINT64_MAX : netem_queue_next(w->queue);
        long timeout = 100;
        if (next != UINT64_MAX) {
            timeout = next > now ? (long)((next - now) / 1000000) : 0;
            if (timeout > 100)
                timeout = 100;
        }
        if (zmq_poll(items, 3, timeout) < 0 && errno != EINTR)
            break;
        for (int k = 0; k < 256 && s_on_ctl(w); k++)
            ;
        if (items[1].revents & ZMQ_POLLIN)
            s_on_data(w);
        if (items[2].revents & ZMQ_POLLIN)
            s_serve_end(w);
        next = compute_busy(w->comp) ? UINT64_MAX : netem_queue_next(w->queue);
        if (next != UINT64_MAX) {
            now = util_now_ns();
            /* Sub-millisecond remainder: zmq_poll only has ms resolution. */
            if (next > now && next - now < 1000000)
                util_sleep_until_ns(next);
            s_release_due(w);
        }
        /* a coordinator that has sent nothing (not even a heartbeat) this long is gone: its
         * layers are released and the next one is waited for (pirate.h) */
        if (w->peer_len &&
            util_now_ns() - w->last_heard_ns > PIRATE_WORKER_SILENT_MS * 1000000ull &&
            !s_parent_waits(w)) {
            s_release(w, "coordinator silent");
            if (w->once)
                break;
        }
    }
}

static int s_bind(worker_t *w, const char *listen, int report_fd, char *err, size_t errlen)
{
    size_t len = sizeof w->ctl_ep;
    char host[PROTO_MAX_STR], data[PROTO_MAX_STR + 8];
    w->ctl = zsock_new(w->ctx, ZMQ_ROUTER, err, errlen);
    w->pull = zsock_new(w->ctx, ZMQ_PULL, err, errlen);
    if (!w->ctl || !w->pull)
        return -1;
    /* A coordinator reconnects with the same routing id after a freeze or a cut; without
     * handover the ROUTER can reject the new connection while the old one is still being
     * torn down (seen: 3 of 12 SIGSTOP runs never rejoined), leaving the worker deaf. */
    int handover = 1;
    zmq_setsockopt(w->ctl, ZMQ_ROUTER_HANDOVER, &handover, sizeof handover);
    if (w->sec && (sec_server(w->ctl, w->secret) || sec_server(w->pull, w->secret))) {
        snprintf(err, errlen, "cannot enable CURVE: %s", zmq_strerror(errno));
        return -1;
    }
    if (zmq_bind(w->ctl, listen)) {
        snprintf(err, errlen, "cannot listen on %s: %s", listen, zmq_strerror(errno));
        return -1;
    }
    zmq_getsockopt(w->ctl, ZMQ_LAST_ENDPOINT, w->ctl_ep, &len);
    /* Data plane: same host, ephemeral port, announced in hello. */
    snprintf(host, sizeof host, "%s", w->ctl_ep);
    char *colon = strrchr(host, ':');
    if (!colon || strncmp(host, "tcp://", 6)) {
        snprintf(err, errlen, "--listen must be tcp://HOST:PORT (got %s)", listen);
        return -1;
    }
    *colon = 0;
    snprintf(data, sizeof data, "%s:*", host);
    if (zmq_bind(w->pull, data)) {
        snprintf(err, errlen, "cannot bind data plane on %s: %s", data, zmq_strerror(errno));
        return -1;
    }
    len = sizeof w->data_ep;
    zmq_getsockopt(w->pull, ZMQ_LAST_ENDPOINT, w->data_ep, &len);
    if (report_fd >= 0) {
        char line[PROTO_MAX_STR + 2];
        int n = snprintf(line, sizeof line, "%s\n", w->ctl_ep);
        if (write(report_fd, line, (size_t)n) != n)
            log_warn("%s: could not report the endpoint to the parent", w->id);
        close(report_fd);
    }
    return 0;
}

static void s_usage(void)
{
    printf("usage: swarm worker --listen tcp://HOST:PORT [--cap 600M] [--id NAME]\n"
           "  Waits for a coordinator, loads its assigned layer range resident (verifying each\n"
           "  layer's checksum) under the cap (a memory cgroup when permitted), and serves\n"
           "  activations to the next hop. Survives its coordinator and serves the next one.\n"
           "  --key FILE        CURVE key pair (from swarm keygen): encrypt and authenticate\n"
           "  --allow KEY       coordinator public key(s) accepted: a .pub file, a folder of\n"
           "                    them, or a key inline as z85:KEY (a bare value is a path)\n"
           "  --plaintext       allow plaintext off loopback (anyone may connect)\n"
           "  --cache DIR       where fetched models go (default /var/tmp/swarm-cache)\n"
           "  --fetch           always take the layers from the coordinator, even with a\n"
           "                    local copy (otherwise only when the model path is missing)\n"
           "  --slowdown N      test knob: compute every activation N times (the output is\n"
           "                    unchanged), as if this machine were N times slower\n"
           "  --once            exit when the first coordinator says bye or goes silent\n"
           "  --report-fd N     write the bound control endpoint to fd N (used when spawned)\n"
           "  --verbose         debug logs\n");
}

/* The control loop's thread runs at nice -5 where it may (root or CAP_SYS_NICE), so on a
 * machine whose cores are all busy a heartbeat's wake-up gets the CPU before the compute
 * (CFS weight 3121 against 1024). SCHED_RESET_ON_FORK makes every thread started from it (the
 * compute thread and its pool, the hasher, ZeroMQ's I/O threads) start at nice 0 again: the
 * compute keeps the priority the reference arm's compute has. Done only from nice 0 (a worker
 * the user started under nice keeps what it was given); any failure leaves the priority as it
 * was, which costs only that preference. */
static void s_control_priority(void)
{
    errno = 0;
    if (getpriority(PRIO_PROCESS, 0) != 0 || errno)
        return;
    struct sched_param sp = { .sched_priority = 0 };
    if (sched_setscheduler(0, SCHED_OTHER | SCHED_RESET_ON_FORK, &sp))
        return;
    if (setpriority(PRIO_PROCESS, (id_t)gettid(), -5))
        log_debug("control loop: cannot raise its priority (%s)", strerror(errno));
}

int worker_main(int argc, char **argv)
{
    static const struct option opts[] = {
        { "listen", required_argument, 0, 'l' }, { "cap", required_argument, 0, 'c' },
        { "id", required_argument, 0, 'i' },     { "once", no_argument, 0, 'o' },
        { "report-fd", required_argument, 0, 'r' }, { "verbose", no_argument, 0, 'v' },
        { "key", required_argument, 0, 'k' },   { "allow", required_argument, 0, 'a' },
        { "plaintext", no_argument, 0, 'p' },
        { "cache", required_argument, 0, 'C' }, { "fetch", no_argument, 0, 'F' },
        { "slowdown", required_argument, 0, 'S' },
        { "help", no_argument, 0, 'h' },         { 0, 0, 0, 0 }
    };
    worker_t w;
    const char *keyfile = NULL, *allow[16];
    int n_allow = 0;
    const char *listen = NULL;
    int report_fd = -1, c, rc = EXIT_FAIL;
    char err[512];

    memset(&w, 0, sizeof w);
    snprintf(w.id, sizeof w.id, "w%d", (int)getpid());
    snprintf(w.cache_dir, sizeof w.cache_dir, "/var/tmp/swarm-cache");
    optind = 1;
    while ((c = getopt_long(argc, argv, "h", opts, NULL)) != -1) {
        switch (c) {
        case 'l': listen = optarg; break;
        case 'c':
            if (util_parse_size(optarg, &w.cap_bytes)) {
                fprintf(stderr, "swarm worker: bad --cap '%s'\n", optarg);
                return EXIT_USAGE;
            }
            break;
        case 'i': snprintf(w.id, sizeof w.id, "%s", optarg); break;
        case 'o': w.once = 1; break;
        case 'r': report_fd = atoi(optarg); break;
        case 'v': log_set_level(2); break;
        case 'k': keyfile = optarg; break;
        case 'a':
            if (n_allow < 16)
                allow[n_allow++] = optarg;
            break;
        case 'p': w.plaintext = 1; break;
        case 'C': snprintf(w.cache_dir, sizeof w.cache_dir, "%s", optarg); break;
        case 'F': w.force_fetch = 1; break;
        case 'S': {
            char *end;
            unsigned long v = strtoul(optarg, &end, 10);
            if (*optarg < '1' || *optarg > '9' || *end || v > 100000) {
                fprintf(stderr, "swarm worker: bad --slowdown '%s' (an integer in 1..100000)\n",
                        optarg);
                return EXIT_USAGE;
            }
            w.slowdown = (uint32_t)v;
            break;
        }
        case 'h': s_usage(); return EXIT_OK;
        default: return EXIT_USAGE;
        }
    }
    if (!listen) {
        fprintf(stderr, "swarm worker: --listen tcp://HOST:PORT is required\n");
        return EXIT_USAGE;
    }
    if (!keyfile && !w.plaintext && !sec_endpoint_is_local(listen)) {
        fprintf(stderr, "swarm worker: %s is not loopback: give --key FILE (CURVE) and --allow "
                "the coordinator's .pub, or --plaintext to accept anyone\n", listen);
        return EXIT_USAGE;
    }
    if (keyfile && sec_load_key(keyfile, w.pub, w.secret, err, sizeof err)) {
        fprintf(stderr, "swarm worker: %s\n", err);
        return EXIT_USAGE;
    }
    if (keyfile && !n_allow) {
        fprintf(stderr, "swarm worker: --key needs at least one --allow (coordinator keys)\n");
        return EXIT_USAGE;
    }
    log_set_role(w.id);
    util_min_timerslack();
    signal(SIGINT, s_on_signal);
    signal(SIGTERM, s_on_signal);
    signal(SIGPIPE, SIG_IGN);
    cap_sweep_stale();
    if (w.cap_bytes) {
        char tag[64];
        snprintf(tag, sizeof tag, "worker-%s", w.id); /* RUN/worker-<id>-<pid> */
        cap_enter(&w.cap, w.cap_bytes, tag, 0);
        if (!w.cap.enforced)
            log_warn("%s: cap is advisory: %s", w.id, w.cap.why);
    }
    s_control_priority(); /* before any thread is started */
    w.ctx = zmq_ctx_new();
    w.out = proto_buf_new();
    w.msg = malloc(sizeof *w.msg);
    w.amsg = malloc(sizeof *w.amsg);
    w.queue = netem_queue_new(WORKER_QUEUE_CAP);
    w.chunk_buf = malloc(PROTO_MAX_CHUNK);
    if (!w.ctx || !w.out || !w.msg || !w.amsg || !w.queue || !w.chunk_buf) {
        log_error("out of memory");
        goto out;
    }
    w.comp = compute_new(w.slowdown, err, sizeof err);
    if (!w.comp) {
        log_error("%s: compute thread: %s", w.id, err);
        goto out;
    }
    if (keyfile) {
        w.sec = sec_zap_start(w.ctx, w.id, err, sizeof err);
        if (!w.sec) {
            log_error("%s", err);
            goto out;
        }
        for (int i = 0; i < n_allow; i++) {
            if (sec_allow_path(w.sec, allow[i], err, sizeof err)) {
                log_error("--allow: %s", err);
                goto out;
            }
        }
    }
    if (w.once && report_fd >= 0) /* spawned by its coordinator (dist/spawn.c) */
        w.parent = getppid();
    if (s_bind(&w, listen, report_fd, err, sizeof err)) {
        log_error("%s", err);
        goto out;
    }
    log_info("%s: listening on %s (data %s), cap %llu MiB %s, %s", w.id, w.ctl_ep, w.data_ep,
             (unsigned long long)(w.cap_bytes >> 20), w.cap.enforced ? "(cgroup)" : "",
             w.sec ? "CURVE" : "plaintext");
    s_loop(&w);
    rc = EXIT_OK;
out:
    s_release(&w, "shutting down");
    if (w.ctl)
        zmq_close(w.ctl);
    if (w.pull)
        zmq_close(w.pull);
    if (w.ctx)
        zmq_ctx_term(w.ctx);
    sec_zap_stop(&w.sec);
    proto_buf_free(&w.out);
    netem_queue_free(&w.queue);
    compute_free(&w.comp);
    free(w.msg);
    free(w.amsg);
    free(w.chunk_buf);
    free(w.pend);
    cap_leave(&w.cap);
    log_info("%s: stopped", w.id);
    return rc;
}
