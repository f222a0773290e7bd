/* llm_pass.c — one pass through the units in order for llm_pipe's workers: an act sent
 * down each chain of LIVE workers, units of lost workers run here, results taken in, the
 * deadline on what is in flight (split from llm_pipe.c, which keeps the processes, the
 * control plane and the routes). dist/
 */
#include <stdio.h>
#include <string.h>
#include <zmq.h>

#include "base/log.h"
#include "base/util.h"
#include "dist/llm_pipe_int.h"
#include "dist/llm_swarm_int.h"

static void s_fire(llm_swarm *sw, uint32_t pos0, uint32_t n)
{
    uint64_t now = util_now_ns();
    for (uint32_t k = 0; k < sw->o.n_faults; k++) {
        ls_fault *f = &sw->faults[k];
        if (f->f.done || f->f.at < pos0 || f->f.at >= (uint64_t)pos0 + n)
            continue;
        f->f.done = 1;
        ls_worker *w = &sw->w[f->w];
        uint32_t pos = (uint32_t)f->f.at;
        if (w->state != LW_LIVE || !lp_attached(w)) {
            log_warn("%s: fault at position %u not injected: its layers already run here",
                     w->id, pos);
            continue;
        }
        w->fault_ns = now;
        if (f->f.kind == FAULT_DROP) {
            log_info("%s: its next result will be dropped (position %u)", w->id, pos);
            w->drop_result = 1;
            continue;
        }
        if (f->f.kind == FAULT_KILL)
            log_info("%s: killing it (position %u)", w->id, pos);
        else if (f->f.kind == FAULT_STOP)
            log_info("%s: stopping it for %.2f s (position %u)", w->id, f->f.seconds, pos);
        else
            log_info("%s: cutting its control link for %.2f s (position %u)", w->id,
                     f->f.seconds, pos);
        fault_inject(&f->f, w->pid, now, &w->cont_at_ns, &w->cut_until_ns);
    }
}

void lp_unlink(llm_swarm *sw, ls_pass *p)
{
    for (ls_pass **pp = &sw->inflight; *pp; pp = &(*pp)->next)
        if (*pp == p) {
            *pp = p->next;
            sw->n_inflight--;
            return;
        }
}

/* p's sessions as slice segments (one when it carries no "sg"). Their count. */
static uint32_t s_segs(const ls_pass *p, slice_seg *sg)
{
    if (!p->n_segs) {
        sg[0] = (slice_seg){ .session = p->session, .pos0 = p->pos0, .n = p->n };
        return 1;
    }
    for (uint32_t i = 0; i < p->n_segs; i++)
        sg[i] = (slice_seg){ .session = p->segs[i].session, .pos0 = p->segs[i].pos0,
                             .n = p->segs[i].n };
    return p->n_segs;
}

/* Run p's units from p->unit: local ones here, up to the next remote chain, which is sent.
 * LP_OK (sent or done), LP_LOST (a route could not be set), -1 (p failed). */
static int s_advance(llm_swarm *sw, ls_pass *p, int *lost, char *how, size_t howlen)
{
    while (p->unit <= p->stop) {
        ls_worker *w = &sw->w[p->unit];
        if (p->rejoin) { /* a catch-up: its one unit on the rejoiner's process (llm_rejoin.c) */
            msg_act a = { .req = ++sw->req, .step = sw->req, .epoch = sw->epoch,
                          .hop = (uint32_t)p->unit, .session = p->session, .pos = p->pos0,
                          .n_pos = p->n, .dim = sw->dim, .x = p->x };
            if (proto_encode_act(sw->b, MSG_ACT, &a)) {
                snprintf(p->err, sizeof p->err, "session %llu: cannot encode %u positions",
                         (unsigned long long)p->session, p->n);
                goto fail;
            }
            if (!w->cut_until_ns)
                lp_send(sw, w->push);
            p->req = a.req;
            p->unit = p->stop + 1;
            return LP_OK;
        }
        if (w->state != LW_LIVE) {
            uint64_t t = util_now_ns();
            slice_seg sg[PROTO_MAX_SEGS];
            uint32_t k = s_segs(p, sg);
            for (uint32_t i = 0, row = 0; i < k; row += sg[i++].n)
                lr_record(sw, (uint32_t)p->unit, sg[i].session, sg[i].pos0, sg[i].n,
                          p->x + (size_t)row * sw->dim);
            if (slice_step_segs(w->fb, sg, k, p->x, &sw->fb_stats, p->err, sizeof p->err))
                goto fail;
            if (p->n_tr < PROTO_MAX_TRACE) /* its stage, as a worker's trace would say */
                p->tr[p->n_tr++] = (msg_trace){ .stage = (uint32_t)p->unit,
                                                .compute_ns = util_now_ns() - t };
            p->here = 1;
            p->unit++;
            continue;
        }
        /* Routes change only with nothing else in flight: every main pass has the same stop,
         * and replays (other stops) run only while settling. */
        if (sw->route_stop != p->stop) {
            int rc = lp_route(sw, p->stop, lost, how, howlen, p->err, sizeof p->err);
            if (rc == LP_LOST) {
                lp_unlink(sw, p);
                return LP_LOST;
            }
            if (rc)
                goto fail;
        }
        int k = p->unit;
        while (k < p->stop && (uint32_t)k + 1 < sw->n && sw->w[k + 1].state == LW_LIVE)
            k++;
        msg_act a = { .req = ++sw->req, .step = sw->req, .epoch = sw->epoch,
                      .hop = (uint32_t)p->unit, .session = p->session, .pos = p->pos0,
                      .n_pos = p->n, .dim = sw->dim, .x = p->x };
        for (uint32_t i = 0; i < p->n_segs; i++) { /* several sessions in one act ("sg") */
            a.segs.s[i].session = p->segs[i].session;
            a.segs.s[i].pos = p->segs[i].pos0;
            a.segs.s[i].n = p->segs[i].n;
        }
        a.segs.n = p->n_segs;
        uint64_t t_enc = util_now_ns();
        int enc = proto_encode_act(sw->b, MSG_ACT, &a);
        sw->coord_ser_ns += util_now_ns() - t_enc;
        if (enc) {
            snprintf(p->err, sizeof p->err, "session %llu: cannot encode %u positions",
                     (unsigned long long)p->session, p->n);
            goto fail;
        }
        /* A fault for these positions lands before the act leaves, so it meets the act
         * wherever the scheduler runs the workers: sent first, on one shared core the act
         * could pass through the whole chain before the kill was issued. */
        for (uint32_t i = 0; !p->replay && i < (p->n_segs ? p->n_segs : 1); i++)
            s_fire(sw, p->n_segs ? p->segs[i].pos0 : p->pos0, p->n_segs ? p->segs[i].n : p->n);
        if (!w->cut_until_ns) /* over a cut link the act is lost; the wait finds the cut */
            lp_send(sw, w->push);
        sw->act_bytes += proto_buf_len(sw->b);
        p->req = a.req;
        p->sent_ns = util_now_ns();
        p->chain0 = p->unit;
        p->chain1 = k;
        for (uint32_t i = 0; i < sw->n; i++)
            p->acts0[i] = sw->w[i].hb_acts;
        p->unit = k + 1;
        return LP_OK;
    }
    p->state = LP_DONE;
    /* at once, not when its owner wakes: a rebuild that runs first must replay these too */
    if (p->cached)
        *p->cached = p->pos0 + p->n;
    for (uint32_t i = 0; i < p->n_segs; i++)
        if (p->segs[i].cached)
            *p->segs[i].cached = p->segs[i].pos0 + p->segs[i].n;
    lp_unlink(sw, p);
    return LP_OK;
fail:
    p->state = LP_FAIL;
    lp_unlink(sw, p);
    return -1;
}

int lp_start(llm_swarm *sw, ls_pass *p, int *lost, char *how, size_t howlen)
{
    p->n_tr = 0;
    p->held_ns = 0;
    p->here = 0;
    p->state = LP_RUN;
    p->unit = p->first;
    p->req = 0;
    p->sent_ns = 0;
    p->err[0] = 0;
    p->next = sw->inflight;
    sw->inflight = p;
    sw->n_inflight++;
    return s_advance(sw, p, lost, how, howlen);
}

/* One result frame: into its pass, which moves on. A worker found lost on the way: its
 * index; else -1. */
static int s_on_result(llm_swarm *sw, const void *frame, size_t got, uint64_t arrival_ns,
                       char *how, size_t howlen)
{
    char why[256];
    uint64_t t0 = util_now_ns();
    memset(sw->m, 0, sizeof *sw->m);
    sw->m->u.act.x = sw->ax; /* not a pass's x: a stale result must not touch it */
    int bad = got > sw->frame_cap ||
              proto_decode_n(frame, got, sw->dim, sw->max_batch, sw->m, why, sizeof why);
    sw->coord_deser_ns += util_now_ns() - t0;
    if (bad) {
        sw->bad_msgs++;
        log_warn("bad message on the result socket (%zu bytes): %s", got,
                 got > sw->frame_cap ? "too long" : why);
        return -1;
    }
    sw->wire += got;
    msg_act *a = &sw->m->u.act;
    if (a->hop >= 1 && a->hop <= sw->n && sw->w[a->hop - 1].cut_until_ns)
        return -1; /* from a worker whose link is cut: lost on the way */
    ls_pass *p = sw->inflight;
    while (p && !(p->req && p->req == a->req))
        p = p->next;
    if (sw->m->type != MSG_RESULT || a->epoch != sw->epoch || !p) {
        sw->stale_results++; /* an old epoch's, replayed since */
        return -1;
    }
    ls_worker *from = a->hop >= 1 && a->hop <= sw->n ? &sw->w[a->hop - 1] : NULL;
    if (from && from->drop_result) { /* --drop-result: as if lost on the link */
        from->drop_result = 0;
        log_info("%s: its result for positions %llu..%llu dropped (--drop-result)", from->id,
                 (unsigned long long)a->pos, (unsigned long long)(a->pos + a->n_pos - 1));
        return -1;
    }
    sw->acts++;
    p->req = 0;
    if (p->sent_ns && t0 - p->sent_ns > sw->max_rt_ns)
        sw->max_rt_ns = t0 - p->sent_ns;
    /* the result's last link is emulated at our end: its hold time is a wait too */
    p->held_ns += t0 > arrival_ns ? t0 - arrival_ns : 0;
    uint64_t traced = 0;
    /* the (query, key) pairs the act's attention scored and its windows squared (chunk_plan.h) */
    double pairs = 0, squares = 0;
    for (uint32_t i = 0; i < p->n_segs; i++) {
        pairs += chunk_pairs(p->segs[i].pos0, p->segs[i].n);
        squares += chunk_squares(p->segs[i].pos0, p->segs[i].n);
    }
    if (!p->n_segs) {
        pairs = chunk_pairs((uint32_t)a->pos, a->n_pos);
        squares = chunk_squares((uint32_t)a->pos, a->n_pos);
    }
    for (uint32_t k = 0; k < a->n_trace && k < PROTO_MAX_TRACE; k++) {
        const msg_trace *t = &a->trace[k];
        traced += t->wait_ns + t->deser_ns + t->compute_ns + t->ser_ns + t->send_ns;
        if (t->stage >= sw->n)
            continue;
        if (p->n_tr < PROTO_MAX_TRACE)
            p->tr[p->n_tr++] = *t;
        ls_worker *tw = &sw->w[t->stage];
        if (t->compute_ns > tw->max_compute_ns)
            tw->max_compute_ns = t->compute_ns;
        tw->tr_acts++;
        tw->tr_wait_ns += t->wait_ns;
        tw->tr_compute_ns += t->compute_ns;
        if (a->n_pos >= 2) /* a decoding step's n = 1 runs other kernels: not the model's */
            chunk_fit_add(&tw->fit, a->n_pos, pairs, squares, t->compute_ns);
        tw->tr_io_ns += t->deser_ns + t->ser_ns + t->send_ns;
    }
    if (p->sent_ns && !p->replay) { /* a stage's ser/send figures are its previous act's */
        sw->transit_ns += t0 - p->sent_ns > traced ? t0 - p->sent_ns - traced : 0;
        sw->transit_passes++;
        sw->tr_all_ns += traced;
        sw->transit_links += a->n_trace + 1;
    }
    if (a->n_pos != p->n) {
        snprintf(p->err, sizeof p->err, "the result of request %llu carries %u positions, %u "
                 "were sent", (unsigned long long)a->req, a->n_pos, p->n);
        p->state = LP_FAIL;
        lp_unlink(sw, p);
        return -1;
    }
    memcpy(p->x, sw->ax, (size_t)p->n * sw->dim * sizeof(float));
    int lost;
    if (s_advance(sw, p, &lost, how, howlen) == LP_LOST) {
        p->state = LP_RERUN;
        return lost;
    }
    return -1;
}

int lp_collect(llm_swarm *sw, char *how, size_t howlen)
{
    zmq_msg_t m;
    uint64_t arrival;
    int lost = -1;
    zmq_msg_init(&m);
    while (lost < 0 && zmq_msg_recv(&m, sw->pull, ZMQ_DONTWAIT) >= 0) {
        if (sw->shaper) { /* the link into the coordinator holds it until its release */
            uint64_t now = util_now_ns();
            if (netem_queue_push(sw->rq, &m, netem_release_at(sw->shaper, now,
                                                              zmq_msg_size(&m)), now))
                log_warn("result link queue full: a result dropped");
            continue;
        }
        lost = s_on_result(sw, zmq_msg_data(&m), zmq_msg_size(&m), util_now_ns(), how, howlen);
    }
    while (lost < 0 && sw->rq && netem_queue_pop_due(sw->rq, util_now_ns(), &m, &arrival))
        lost = s_on_result(sw, zmq_msg_data(&m), zmq_msg_size(&m), arrival, how, howlen);
    zmq_msg_close(&m);
    return lost;
}

int lp_all_heard(const llm_swarm *sw, uint64_t from)
{
    for (uint32_t i = 0; i < sw->n; i++)
        if (sw->w[i].state == LW_LIVE && sw->w[i].hb.heard_ns <= from)
            return 0;
    return 1;
}

/* The hop a pass's act was lost on: the first worker of its chain that finished nothing
 * since it left (it never got it), else the chain's last (its result to us was lost). */
static int s_lost_on(const llm_swarm *sw, const ls_pass *p)
{
    for (int i = p->chain0; i <= p->chain1; i++)
        if (sw->w[i].state == LW_LIVE && sw->w[i].hb_acts == p->acts0[i])
            return i;
    return p->chain1;
}

int lp_check_deadline(llm_swarm *sw, char *how, size_t howlen)
{
    uint64_t now = util_now_ns();
    uint64_t deadline = pirate_window_ns(lp_hb_ms(sw), lp_liveness(sw), sw->ctl_allow_ns);
    if (LS_DEADLINE_X * sw->max_rt_ns > deadline)
        deadline = LS_DEADLINE_X * sw->max_rt_ns;
    for (ls_pass *p = sw->inflight; p; p = p->next) {
        if (p->state != LP_RUN || p->rejoin || !p->req || !p->sent_ns)
            continue;
        /* from the act's leaving or the pipeline's last sign of work, whichever is later (as
         * the dense steps' deadline): a long pass that is being computed is slow, not lost */
        uint64_t from = p->sent_ns > sw->progress_ns ? p->sent_ns : sw->progress_ns;
        if (now - from <= deadline || !lp_all_heard(sw, from))
            continue;
        if (p->deadline_tries >= LS_DEADLINE_REPLAYS) {
            int i = s_lost_on(sw, p);
            /* short: a failover record keeps 64 characters of it */
            snprintf(how, howlen, "no result after %u replays (positions %u..%u)",
                     p->deadline_tries, p->pos0, p->pos0 + p->n - 1);
            return i;
        }
        p->deadline_tries++;
        sw->deadline_replays++;
        log_warn("session %llu positions %u..%u: no result from %s..%s in %.0f ms, no progress "
                 "for %.0f ms (the deadline: %dx the slowest act so far, at least a liveness "
                 "window) with every worker heard since: replaying what is in flight under a "
                 "new epoch", (unsigned long long)p->session, p->pos0, p->pos0 + p->n - 1,
                 sw->w[p->chain0].id, sw->w[p->chain1].id, (now - p->sent_ns) / 1e6,
                 (now - from) / 1e6, LS_DEADLINE_X);
        sw->route_stop = -1; /* every route set again: every worker on a fresh data socket */
        for (uint32_t i = 0; i < sw->n; i++)
            sw->w[i].routed_next = -2;
        return -2;
    }
    return -1;
}

void lp_abort_all(llm_swarm *sw, int state, const char *why)
{
    for (ls_pass *p = sw->inflight; p; p = p->next) {
        p->state = state;
        if (why)
            snprintf(p->err, sizeof p->err, "%s", why);
    }
    sw->inflight = NULL;
    sw->n_inflight = 0;
}

int lp_run(llm_swarm *sw, uint64_t session, float *x, uint32_t n, uint32_t pos0, int stop,
           int replay, int *lost, char *how, size_t howlen, char *err, size_t errlen)
{
    ls_pass p = { .session = session, .x = x, .n = n, .pos0 = pos0, .stop = stop,
                  .replay = replay };
    int rc = lp_start(sw, &p, lost, how, howlen);
    while (rc == LP_OK && p.state == LP_RUN) {
        int l = lp_collect(sw, how, howlen);
        if (l < 0 && p.state == LP_RUN)
            l = lp_poll(sw, how, howlen);
        if (l >= 0) {
            lp_abort_all(sw, LP_RERUN, NULL);
            *lost = l;
            return LP_LOST;
        }
        if (p.state == LP_RUN)
            lp_wait(sw, 1);
    }
    if (rc == LP_LOST)
        return LP_LOST;
    if (p.state == LP_FAIL) {
        snprintf(err, errlen, "%s", p.err);
        return -1;
    }
    return LP_OK;
}

