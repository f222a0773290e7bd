/* llm_swarm.c — a real model's layers in spawned worker processes, behind the llm runner's
 * resident-arm hook: the sessions' tokens, and what happens when a worker is lost (its
 * layers here, the caches rebuilt, a respawned worker re-prefilled). The processes, the wire
 * and the pass through the route are llm_pipe.c's. dist/
 *
 * One pass at a time: an act of n positions goes through the units in order and the call
 * returns with the last layer's output. The workers drop a coordinator that is silent on the
 * control plane for 3 s (PIRATE_WORKER_SILENT_MS); heartbeats go out while anything is awaited, so
 * between passes the caller must not pause longer than that (generate frees the swarm before
 * its parity run).
 */
#include "dist/llm_swarm.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <sched.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include <zmq.h>

#include "arch/sums.h"
#include "base/log.h"
#include "base/sec.h"
#include "base/util.h"
#include "dist/llm_swarm_int.h"
#include "quant/quant.h"

static double s_ms_since(uint64_t t0)
{
    return (double)(util_now_ns() - t0) / 1e6;
}

static void s_snapshot(llm_swarm *sw);

/* Positions p0..p0+n-1 of a session's tokens as layer-0 input (the embedding rows, read from
 * the file: a replay is rare, and the coordinator's runner maps them only where it reads). */
static int s_embed(llm_swarm *sw, const int32_t *tok, uint32_t n, float *x, char *err,
                   size_t errlen)
{
    const arch_tensor *t = &sw->am.tok_embd;
    uint8_t *row = malloc(t->row_bytes);
    char why[160];
    if (!row) {
        snprintf(err, errlen, "out of memory");
        return -1;
    }
    for (uint32_t p = 0; p < n; p++) {
        uint64_t off = t->off + (uint64_t)tok[p] * t->row_bytes;
        if (pread(sw->fd, row, t->row_bytes, (off_t)off) != (ssize_t)t->row_bytes ||
            quant_dequantize_row((quant_type)t->type, row, x + (size_t)p * sw->dim, sw->dim, why,
                                 sizeof why)) {
            util_errf(err, errlen, sw->model, "token_embd row %d: cannot read it", tok[p]);
            free(row);
            return -1;
        }
    }
    free(row);
    arch_embed_finish(&sw->am, x, n); /* the family's scale (gemma's sqrt(dim)) */
    return 0;
}

/* Every live session's cached positions through units 0..stop, in passes of max_batch. An
 * idle session (a server's slot between requests, keeping its prompt cache) is not replayed:
 * its caches are dropped, so the stall is the live sessions' only, and its runner is told
 * through llm_layers_hook.cached (s_cached): a later request on it runs its prompt again. */
static int s_replay(llm_swarm *sw, int stop, uint32_t *sessions, uint64_t *tokens, int *lost,
                    char *how, size_t howlen, char *err, size_t errlen)
{
    *sessions = 0;
    *tokens = 0;
    uint32_t dropped = 0;
    for (uint32_t k = 0; k < sw->o.sessions; k++) {
        ls_session *s = &sw->ss[k];
        if (s->id && s->cached && !s->active) {
            s->cached = 0;
            dropped++;
        }
    }
    if (dropped)
        log_info("caches of %u idle sessions dropped, not rebuilt (their next request runs "
                 "its prompt again)", dropped);
    for (uint32_t k = 0; k < sw->o.sessions; k++) {
        ls_session *s = &sw->ss[k];
        if (!s->id || !s->cached)
            continue;
        for (uint32_t p = 0; p < s->cached; p += sw->max_batch) {
            uint32_t nb = s->cached - p < sw->max_batch ? s->cached - p : sw->max_batch;
            if (s_embed(sw, s->tok + p, nb, sw->rx, err, errlen))
                return -1;
            int rc = lp_run(sw, s->id, sw->rx, nb, p, stop, 1, lost, how, howlen, err, errlen);
            if (rc)
                return rc;
            *tokens += nb;
        }
        (*sessions)++;
    }
    return LP_OK;
}

static int s_any_cached(const llm_swarm *sw)
{
    for (uint32_t k = 0; k < sw->o.sessions; k++)
        if (sw->ss[k].id && sw->ss[k].cached)
            return 1;
    return 0;
}

/* Worker i is lost: fence it, run its layers here under its cap, record the failover, and
 * with respawn start a fresh process for them. */
static int s_lose(llm_swarm *sw, uint32_t i, const char *how, uint32_t at_pos, char *err,
                  size_t errlen)
{
    ls_worker *w = &sw->w[i];
    uint64_t now = util_now_ns();
    /* from our own fault's injection, else from the first sign lp_poll saw (an outside
     * kill: the last look that found the process alive; silence: the last word heard) */
    uint64_t from = w->fault_ns ? w->fault_ns : w->sign_ns;
    double det = from && from <= now ? (double)(now - from) / 1e6 : -1;
    char why[768];
    w->fault_ns = w->sign_ns = 0;
    w->since_ns = now;
    snprintf(w->last_how, sizeof w->last_how, "%s", how);
    lp_fence(sw, i);
    sw->route_stop = -1;
    char at[32] = "between passes", dets[48] = "";
    if (at_pos != LLM_NO_POS)
        snprintf(at, sizeof at, "at position %u", at_pos);
    if (det >= 0)
        snprintf(dets, sizeof dets, ", detected in %.1f ms", det);
    log_warn("%s: lost (%s) %s%s; its layers [%u, %u) run here", w->id, how, at, dets,
             w->first, w->last);
    if (sw->n_fo < sizeof sw->fo / sizeof sw->fo[0]) {
        llm_failover *f = &sw->fo[sw->n_fo];
        memset(f, 0, sizeof *f);
        memcpy(f->worker, w->id, sizeof f->worker); /* both char[8] */
        snprintf(f->how, sizeof f->how, "%s", how);
        f->at_pos = at_pos;
        f->detection_ms = det;
        f->rejoin_ms = -1;
        f->lost_ns = now;
        w->fo = (int)sw->n_fo++;
    } else {
        w->fo = -1;
    }
    if (!w->fb) { /* a worker lost while re-prefilled still has its copy here, current */
        slice_opts so = { .path = sw->model, .first = w->first, .last = w->last,
                          .n_ctx = sw->n_ctx, .sessions = sw->o.sessions,
                          .max_batch = sw->max_batch, .cap_bytes = w->cap_bytes,
                          .threads = sw->o.threads, .expect_sums = sw->sums + w->first };
        if (!(w->fb = slice_new(&so, why, sizeof why))) {
            snprintf(err, errlen, "%s lost (%s) and its layers [%u, %u) cannot run here: %s",
                     w->id, how, w->first, w->last, why);
            return -1;
        }
        w->stale = s_any_cached(sw);
        if (sw->o.respawn) /* its rejoin re-prefilled beside the passes (llm_rejoin.c) */
            lr_begin(sw, i);
    }
    w->state = LW_LOST;
    /* respawned at once after a loss; one that then fails to start or join is tried again
     * with a backoff (lp_join_failed), for as long as the run lasts */
    w->respawn_due = sw->o.respawn;
    w->retry_ns = 0;
    s_snapshot(sw);
    return 0;
}

/* Rebuild stale copies (lowest unit first) and re-prefill ready rejoiners, handling losses
 * on the way, until every unit's caches hold every live session. */
static int s_settle(llm_swarm *sw, uint32_t at_pos, char *err, size_t errlen)
{
    char how[256];
    for (;;) {
        int lost = lp_poll(sw, how, sizeof how);
        s_snapshot(sw);
        if (lost >= 0) {
            if (s_lose(sw, (uint32_t)lost, how, at_pos, err, errlen))
                return -1;
            continue;
        }
        int u = -1, rejoin = 0;
        for (uint32_t i = 0; i < sw->n && u < 0; i++)
            if (sw->w[i].state != LW_LIVE && sw->w[i].stale)
                u = (int)i;
        for (uint32_t i = 0; i < sw->n && u < 0; i++)
            if (sw->w[i].state == LW_READY && (!sw->w[i].rec || lr_due(sw, i)))
                u = (int)i, rejoin = 1;
        if (u < 0) {
            /* respawns last: the caches here come first (a spawn is a fork + exec) */
            for (uint32_t i = 0; i < sw->n; i++)
                if (sw->w[i].respawn_due && util_now_ns() >= sw->w[i].retry_ns) {
                    sw->w[i].respawn_due = 0;
                    sw->w[i].respawns++;
                    log_info("%s: %s (attempt %u)", sw->w[i].id,
                             sw->w[i].remote ? "saying hello again" : "respawning",
                             sw->w[i].tries + 1);
                    if (lp_spawn(sw, i, how, sizeof how))
                        lp_join_failed(sw, i, how);
                }
            s_snapshot(sw);
            return 0;
        }
        ls_worker *w = &sw->w[u];
        uint64_t t0 = util_now_ns();
        uint32_t ns;
        uint64_t nt;
        int rc;
        if (rejoin && w->rec) { /* caught up beside the passes: the rest, then the route */
            ns = 0;
            rc = lr_finish(sw, (uint32_t)u, &nt, &lost, how, sizeof how, err, errlen);
            if (rc == 1)
                continue; /* it failed meanwhile: tried again later */
            for (uint32_t k = 0; k < sw->o.sessions; k++)
                ns += sw->ss[k].id && sw->ss[k].cached;
            if (rc == LP_OK) {
                w->state = LW_LIVE;
                sw->route_stop = -1;
            }
        } else {
            if (rejoin) { /* its process takes the route for the replay; its copy stays */
                w->state = LW_LIVE;
                sw->route_stop = -1;
            }
            rc = s_replay(sw, u, &ns, &nt, &lost, how, sizeof how, err, errlen);
        }
        if (rc < 0)
            return -1;
        if (rc == LP_LOST) {
            if (rejoin && lost != u && w->state == LW_LIVE) {
                w->state = LW_READY; /* not whole yet: replayed again once the loss is handled */
                sw->route_stop = -1;
            }
            if (s_lose(sw, (uint32_t)lost, how, at_pos, err, errlen))
                return -1;
            continue;
        }
        llm_failover *f = w->fo >= 0 ? &sw->fo[w->fo] : NULL;
        if (!rejoin) {
            w->stale = 0;
            if (f) {
                f->sessions_replayed = ns;
                f->tokens_replayed = nt;
                f->rebuild_ms = (double)(util_now_ns() - f->lost_ns) / 1e6;
            }
            log_info("%s: caches rebuilt here: %u sessions, %llu positions in %.1f ms", w->id,
                     ns, (unsigned long long)nt, s_ms_since(t0));
            continue;
        }
        slice_free(&w->fb);
        lr_free(w);
        w->since_ns = util_now_ns();
        w->tries = 0;
        if (f) {
            f->reprefill_tokens = nt;
            f->reprefill_ms = s_ms_since(t0);
            f->rejoin_ms = (double)(util_now_ns() - f->lost_ns) / 1e6;
        }
        w->fo = -1;
        log_info("%s: rejoined: %u sessions re-prefilled (%llu positions) in %.1f ms", w->id, ns,
                 (unsigned long long)nt, s_ms_since(t0));
    }
}

static ls_session *s_session(llm_swarm *sw, uint64_t id)
{
    ls_session *free_slot = NULL;
    for (uint32_t k = 0; k < sw->o.sessions; k++) {
        if (sw->ss[k].id == id)
            return &sw->ss[k];
        if (!sw->ss[k].id && !free_slot)
            free_slot = &sw->ss[k];
    }
    if (free_slot) {
        free_slot->id = id;
        free_slot->cached = 0;
        free_slot->active = -1;
    }
    return free_slot;
}

static int s_settle_due(const llm_swarm *sw)
{
    for (uint32_t i = 0; i < sw->n; i++)
        if ((sw->w[i].state != LW_LIVE && sw->w[i].stale) ||
            (sw->w[i].state == LW_READY && (!sw->w[i].rec || lr_due(sw, i))) ||
            (sw->w[i].respawn_due && util_now_ns() >= sw->w[i].retry_ns))
            return 1;
    return 0;
}

/* A failover or a rejoin, under mu with nothing in flight and no poller: a failure here
 * fails every pass from now on (sw->fatal). */
static void s_settle_locked(llm_swarm *sw, int lost, const char *how, uint32_t at_pos)
{
    char err[768];
    if (sw->fatal[0])
        return;
    if ((lost >= 0 && sw->w[lost].state == LW_LIVE &&
         s_lose(sw, (uint32_t)lost, how, at_pos, err, sizeof err)) ||
        s_settle(sw, at_pos, err, sizeof err)) {
        snprintf(sw->fatal, sizeof sw->fatal, "%s", err);
        log_error("%s", err);
    }
    s_snapshot(sw);
}

/* A failover now (lost >= 0) or a settle that is due (lost < 0), under mu with no poller:
 * every pass in flight is marked to run again, whole, once the caches are rebuilt (the
 * record names the lowest position in flight when the caller has none). settling is kept
 * as it was: a settle already waiting for the pipeline to drain stays in force. */
static void s_failover_now(llm_swarm *sw, int lost, const char *how, uint32_t at_pos)
{
    for (const ls_pass *p = sw->inflight; p; p = p->next)
        if (p->pos0 < at_pos && !p->rejoin) /* a catch-up's positions are not the record's */
            at_pos = p->pos0;
    lp_abort_all(sw, LP_RERUN, NULL);
    int was = sw->settling;
    sw->settling = 1;
    s_settle_locked(sw, lost, how, at_pos);
    sw->settling = was;
    pthread_cond_broadcast(&sw->cv);
}

/* Make progress for the passes in flight: be the poller (wait for results without mu, then
 * move every pass on, look at the workers, handle a loss), or sleep until the poller is
 * done. Under mu. */
static void s_pump(llm_swarm *sw, uint32_t at_pos)
{
    char how[256];
    if (sw->polling) {
        pthread_cond_wait(&sw->cv, &sw->mu);
        return;
    }
    sw->polling = 1;
    pthread_mutex_unlock(&sw->mu);
    lp_wait_results(sw);
    pthread_mutex_lock(&sw->mu);
    sw->polling = 0;
    int lost = lp_collect(sw, how, sizeof how);
    if (lost < 0)
        lost = lp_poll(sw, how, sizeof how);
    int late = lost < 0 ? lp_check_deadline(sw, how, sizeof how) : -1;
    if (late >= 0)
        lost = late;
    s_snapshot(sw);
    if (lost >= 0 || late == -2) /* a replay: what is in flight runs again, like a failover's */
        s_failover_now(sw, lost, how, at_pos);
    else if (!sw->settling)
        lr_pump(sw); /* a rejoiner's next catch-up pass, beside the others */
    pthread_cond_broadcast(&sw->cv);
}

/* Before a pass: no settle in progress; one due (a rejoiner ready, a copy stale) is done
 * now, once what is in flight has drained. Under mu. */
static void s_gate(llm_swarm *sw, uint32_t at_pos)
{
    while (sw->settling)
        pthread_cond_wait(&sw->cv, &sw->mu);
    if (!s_settle_due(sw))
        return;
    sw->settling = 1; /* no new pass starts while what is in flight drains */
    while (sw->n_inflight || sw->polling)
        s_pump(sw, at_pos);
    s_settle_locked(sw, -1, NULL, at_pos);
    sw->settling = 0;
    pthread_cond_broadcast(&sw->cv);
}

/* One pass of k sessions' rows (one after another in x) through every unit: one act
 * (several sessions: "sg", each weight read once for all), run again, whole, after a loss
 * (each session's input rows are kept in its xin) until it is done or fails. */
static int s_pass_locked(llm_swarm *sw, const llm_hook_seg *hs, uint32_t k, float *x, char *err,
                         size_t errlen)
{
    char how[256];
    ls_session *ss[PROTO_MAX_SEGS];
    uint32_t total = 0, pos_min = UINT32_MAX;
    if (!k || k > PROTO_MAX_SEGS) {
        snprintf(err, errlen, "%u sessions in one pass (1..%d)", k, PROTO_MAX_SEGS);
        return -1;
    }
    for (uint32_t i = 0; i < k; i++)
        total += hs[i].n;
    for (uint32_t i = 0; i < k; i++) {
        ls_session *s = ss[i] = s_session(sw, hs[i].session);
        if (!s) {
            snprintf(err, errlen, "session %llu: all %u planned sessions are live",
                     (unsigned long long)hs[i].session, sw->o.sessions);
            return -1;
        }
        for (uint32_t j = 0; j < i; j++)
            if (ss[j] == s) {
                snprintf(err, errlen, "session %llu: twice in one pass",
                         (unsigned long long)hs[i].session);
                return -1;
            }
        uint32_t n = hs[i].n, pos0 = hs[i].pos0;
        if (!n || total > sw->max_batch || (uint64_t)pos0 + n > sw->n_ctx || pos0 > s->cached) {
            snprintf(err, errlen, "session %llu: %u positions from %u (batch <= %u, context %u, "
                     "%u cached)", (unsigned long long)hs[i].session, n, pos0, sw->max_batch,
                     sw->n_ctx, s->cached);
            return -1;
        }
        if (pos0 < pos_min)
            pos_min = pos0;
    }
    ls_pass p = { .session = hs[0].session, .x = x, .n = total, .pos0 = hs[0].pos0,
                  .stop = (int)sw->n - 1 };
    for (uint32_t i = 0, row = 0; i < k; row += hs[i++].n) {
        ls_session *s = ss[i];
        /* the positions before this pass are what a rebuild replays (a rewind drops the
         * rest) */
        memcpy(s->tok + hs[i].pos0, hs[i].tokens, hs[i].n * sizeof *hs[i].tokens);
        s->cached = hs[i].pos0;
        memcpy(s->xin, x + (size_t)row * sw->dim, (size_t)hs[i].n * sw->dim * sizeof(float));
        if (k == 1) { /* one session: the act it always was (no "sg") */
            p.cached = &s->cached;
        } else {
            p.segs[i].session = hs[i].session;
            p.segs[i].pos0 = hs[i].pos0;
            p.segs[i].n = hs[i].n;
            p.segs[i].cached = &s->cached;
        }
    }
    p.n_segs = k > 1 ? k : 0;
    for (;;) {
        s_gate(sw, pos_min);
        if (sw->fatal[0]) {
            snprintf(err, errlen, "%s", sw->fatal);
            return -1;
        }
        int lost;
        int rc = lp_start(sw, &p, &lost, how, sizeof how);
        if (rc == LP_LOST) {
            p.state = LP_RERUN;
            while (sw->polling) /* the result socket is the poller's until it is back */
                pthread_cond_wait(&sw->cv, &sw->mu);
            s_failover_now(sw, lost, how, pos_min);
        }
        while (p.state == LP_RUN)
            s_pump(sw, pos_min);
        if (p.state == LP_DONE)
            break;
        if (p.state == LP_FAIL) {
            snprintf(err, errlen, "%s", sw->fatal[0] ? sw->fatal : p.err);
            return -1;
        }
        /* LP_RERUN: the units it had passed rewrite the same rows with the same bits; every
         * session of it was rebuilt to its cached count (s_replay), so the whole pass runs
         * again from each one's input */
        for (uint32_t i = 0, row = 0; i < k; row += hs[i++].n)
            memcpy(x + (size_t)row * sw->dim, ss[i]->xin,
                   (size_t)hs[i].n * sw->dim * sizeof(float));
    }
    uint64_t now = util_now_ns();
    for (uint32_t i = 0; i < sw->n; i++)
        if (sw->w[i].fo >= 0 && sw->w[i].state != LW_LIVE) {
            llm_failover *f = &sw->fo[sw->w[i].fo];
            f->degraded_tokens += total;
            f->degraded_ms = (double)(now - f->lost_ns) / 1e6 - f->rebuild_ms;
        }
    return 0;
}

static int s_layers(void *ctx, uint64_t session, const int32_t *tokens, float *x, uint32_t n,
                    uint32_t pos0, char *err, size_t errlen)
{
    llm_swarm *sw = ctx;
    llm_hook_seg one = { .session = session, .tokens = tokens, .pos0 = pos0, .n = n };
    pthread_mutex_lock(&sw->mu);
    int rc = s_pass_locked(sw, &one, 1, x, err, errlen);
    pthread_mutex_unlock(&sw->mu);
    return rc;
}

static int s_segs(void *ctx, const llm_hook_seg *segs, uint32_t k, float *x, char *err,
                  size_t errlen)
{
    llm_swarm *sw = ctx;
    pthread_mutex_lock(&sw->mu);
    int rc = s_pass_locked(sw, segs, k, x, err, errlen);
    pthread_mutex_unlock(&sw->mu);
    return rc;
}

/* Threads of process pid (0: ours) pinned to the shared core: to every core the caller had
 * (on), or back to that core (off: exactly those that were moved). A pipelined prefill keeps
 * several stages busy at once, which one shared core cannot; decoding keeps one stage busy at
 * a time and goes back to the shared core, where no hop wakes an idle one (s_colocate). */
static void s_spread_pid(llm_swarm *sw, pid_t pid)
{
    char dir[64];
    snprintf(dir, sizeof dir, pid ? "/proc/%d/task" : "/proc/self/task", (int)pid);
    DIR *d = opendir(dir);
    struct dirent *e;
    cpu_set_t one, cur;
    CPU_ZERO(&one);
    CPU_SET(sw->cpu, &one);
    while (d && (e = readdir(d)) && sw->n_spread < LS_MAX_SPREAD) {
        pid_t tid = (pid_t)atoi(e->d_name);
        if (tid > 0 && !sched_getaffinity(tid, sizeof cur, &cur) && CPU_EQUAL(&cur, &one) &&
            !sched_setaffinity(tid, sizeof sw->cpus0, &sw->cpus0))
            sw->spread[sw->n_spread++] = tid;
    }
    if (d)
        closedir(d);
}

static void s_spread(llm_swarm *sw, int on)
{
    if (sw->cpu < 0)
        return;
    if (!on) {
        cpu_set_t one;
        CPU_ZERO(&one);
        CPU_SET(sw->cpu, &one);
        for (uint32_t i = 0; i < sw->n_spread; i++) /* a thread gone since: ESRCH, moot */
            sched_setaffinity(sw->spread[i], sizeof one, &one);
        sw->n_spread = 0;
        return;
    }
    s_spread_pid(sw, 0);
    for (uint32_t i = 0; i < sw->n; i++)
        if (sw->w[i].pid > 0)
            s_spread_pid(sw, sw->w[i].pid);
}

/* The pipeline's cost model from what was measured: each stage's model fitted to its acts'
 * times (into st), the data links' profile (one-way delay per act; bytes / rate per
 * position) plus what a link was measured to take (the passes' transit a link: ZeroMQ, the
 * kernel, the wake-ups; and the traces' mean (de)serialising and sending), and in *lo the
 * smallest act size measured (a model is trusted only over the sizes it was fitted to). 0;
 * -1 while a stage has no model yet. */
static int s_chunk_model(const llm_swarm *sw, chunk_stage *st, chunk_model *m, uint32_t *lo)
{
    uint64_t io_ns = 0, acts = 0;
    for (uint32_t i = 0; i < sw->n; i++) {
        const ls_worker *w = &sw->w[i];
        if (chunk_fit_line(&w->fit, &st[i]))
            return -1;
        *lo = w->fit.n_lo < *lo ? w->fit.n_lo : *lo;
        io_ns += w->tr_io_ns;
        acts += w->tr_acts;
    }
    const netem_profile *pr = &sw->o.profile;
    double transit = sw->transit_links ? (double)sw->transit_ns / (double)sw->transit_links : 0;
    *m = (chunk_model){ .st = st, .n_st = sw->n,
                        .hop_ns = (double)pr->delay_ns + transit +
                                  (acts ? (double)io_ns / acts : 0),
                        .link_ns_per_pos = pr->rate_bps ? (double)sw->dim * sizeof(float) *
                                                              1e9 / (double)pr->rate_bps
                                                        : 0,
                        .window = sw->n + 1 }; /* as s_prefill_locked sends them */
    return 0;
}

/* The chunk size for n positions from pos0 of a pipelined prefill (batch at most): the one
 * the cost model (s_chunk_model, chunk_plan.c) finds quickest. Until every stage has a model
 * (the first prompt) the chunks are the batch, and the first is a quarter of it (a batch of 8
 * or more): the pipeline fills sooner, and the fits get their second size. *first: the first
 * chunk's size. */
static uint32_t s_prefill_chunk(llm_swarm *sw, uint32_t pos0, uint32_t n, uint32_t batch,
                                uint32_t *first)
{
    chunk_stage st[LS_MAX_W];
    chunk_model m;
    uint32_t lo = batch;
    sw->prefill_batch = batch;
    sw->call_pred_ns = 0;
    *first = batch;
    if (s_chunk_model(sw, st, &m, &lo)) {
        if (n > batch && batch >= 8) /* a line takes acts of 2 positions or more */
            *first = batch / 4;
        return batch;
    }
    double pred, at_batch = chunk_plan_time(&m, pos0, n, batch);
    uint32_t c = chunk_plan_pick(&m, pos0, n, lo, batch, &pred);
    *first = c;
    sw->call_pred_ns = pred;
    /* logged with what the call took (s_prefill_locked): with attention in the model the
     * choice follows the prompt's position */
    snprintf(sw->call_plan, sizeof sw->call_plan,
             "positions %u..%u in chunks of %u (from %u to %u), %.1f ms predicted (%.1f ms in "
             "chunks of %u); stage 0 %.2f ms + %.3f ms a position + %.3f us a (query, key) "
             "pair + %.3f ns a pair a key of its window, hop %.3f ms",
             pos0, pos0 + n - 1, c, lo, batch, pred / 1e6, at_batch / 1e6, batch,
             st[0].fixed_ns / 1e6, st[0].per_pos_ns / 1e6, st[0].per_pair_ns / 1e3,
             st[0].per_sq_ns, m.hop_ns / 1e6);
    sw->prefill_chunk = c;
    return c;
}

/* At the end of a run that pipelined its prompts: what the same prompt (all the positions
 * prefilled) would take on 1..8 hosts, each stage its own host, from the stages' measured
 * models summed (the whole model's) and split evenly, over the same links, in the runner's
 * calls of 4 batches a host (and as one call). Measured on one machine the models include
 * whatever the overlapping stages took from each other (shared cores, memory bandwidth); on
 * hosts of their own that goes, so these are upper bounds in that respect. */
static void s_prefill_predict(const llm_swarm *sw)
{
    chunk_stage st[LS_MAX_W], all = { 0, 0, 0, 0 };
    chunk_model m;
    uint32_t lo = sw->prefill_batch, b = sw->prefill_batch;
    if (!sw->prefill_pos || !b || s_chunk_model(sw, st, &m, &lo))
        return;
    for (uint32_t i = 0; i < sw->n; i++) {
        all.fixed_ns += st[i].fixed_ns;
        all.per_pos_ns += st[i].per_pos_ns;
        all.per_pair_ns += st[i].per_pair_ns;
        all.per_sq_ns += st[i].per_sq_ns;
    }
    char line[1024];
    int at = 0;
    uint32_t n = (uint32_t)sw->prefill_pos;
    for (uint32_t S = 1; S <= 8 && at < (int)sizeof line - 96; S++) {
        double pipe, one, whole;
        uint32_t c = chunk_plan_hosts(&all, S, &m, n, 4 * S * b, lo, b, &pipe, &one);
        if (S == 1) {
            at += snprintf(line + at, sizeof line - at, "1: %.0f ms (1.00, batches of %u)",
                           one / 1e6, b);
            continue;
        }
        /* beside it the prompt as one call (no drain between calls), what the runner's
         * calls of 4 batches a host cost */
        chunk_plan_hosts(&all, S, &m, n, n, lo, b, &whole, &one);
        at += snprintf(line + at, sizeof line - at, "; %u: %.0f ms (%.2f, chunks of %u; "
                       "as one call %.2f)", S, pipe / 1e6, pipe / one, c, whole / one);
    }
    if (sw->pred_calls)
        log_info("prefill: %u calls in modelled chunks took %.1f ms, %.1f ms predicted "
                 "(%.2f)", sw->pred_calls, sw->pred_took_ns / 1e6, sw->pred_ns / 1e6,
                 sw->pred_took_ns / sw->pred_ns);
    log_info("prefill predicted for %llu positions from the measured stages (whole model %.2f "
             "ms + %.3f ms a position + %.3f us a (query, key) pair + %.3f ns a pair a key of "
             "its window, hop %.3f ms), hosts %s",
             (unsigned long long)sw->prefill_pos, all.fixed_ns / 1e6, all.per_pos_ns / 1e6,
             all.per_pair_ns / 1e3, all.per_sq_ns, m.hop_ns / 1e6, line);
}

/* A prompt as acts in flight through the route at once: chunk c + 1 leaves as soon as chunk
 * c has (at most workers + 1 in flight), so while one worker runs chunk c the one before it
 * runs c + 1. Each worker takes its acts in order (one data connection from each sender, one
 * activation at a time, a FIFO even under an emulated link's jitter), so its KV cache holds
 * chunk c's rows before c + 1 attends over them. Chunks finish in order, so the session's
 * cached count (set as each is done) is always a prefix: after a loss the caches are rebuilt
 * to it and the chunks not done run again from their embedding rows. */
static int s_prefill_locked(llm_swarm *sw, uint64_t session, const int32_t *tokens, float *x,
                            uint32_t n, uint32_t pos0, uint32_t batch, char *err, size_t errlen)
{
    char how[256];
    ls_session *s = s_session(sw, session);
    if (!s) {
        snprintf(err, errlen, "session %llu: all %u planned sessions are live",
                 (unsigned long long)session, sw->o.sessions);
        return -1;
    }
    if (!n || !batch || batch > sw->max_batch || (uint64_t)pos0 + n > sw->n_ctx ||
        pos0 > s->cached) {
        snprintf(err, errlen, "session %llu: a prompt of %u positions from %u (chunks of %u, "
                 "batch <= %u, context %u, %u cached)", (unsigned long long)session, n, pos0,
                 batch, sw->max_batch, sw->n_ctx, s->cached);
        return -1;
    }
    /* the workers' buffers hold a batch: chunks of at most that, sized by the cost model */
    uint32_t c0, chunk = s_prefill_chunk(sw, pos0, n, batch, &c0);
    uint32_t nc = n <= c0 ? 1 : 1 + (n - c0 + chunk - 1) / chunk;
    uint32_t window = sw->n + 1, done = 0, next = 0;
    ls_pass *ps = calloc(nc, sizeof *ps);
    if (!ps) {
        snprintf(err, errlen, "session %llu: out of memory for %u chunks",
                 (unsigned long long)session, nc);
        return -1;
    }
    memcpy(s->tok + pos0, tokens, n * sizeof *tokens);
    s->cached = pos0;
    for (uint32_t c = 0, p = 0; c < nc; c++) {
        uint32_t want = c ? chunk : c0;
        ps[c] = (ls_pass){ .session = session, .x = x + (size_t)p * sw->dim,
                           .n = n - p < want ? n - p : want, .pos0 = pos0 + p,
                           .stop = (int)sw->n - 1, .cached = &s->cached };
        p += ps[c].n;
    }
    int rc = -1;
    uint64_t t_call = util_now_ns();
    sw->prefills++;
    sw->prefill_chunks += nc;
    sw->prefill_pos += n;
    if (nc > 1)
        s_spread(sw, 1);
    while (done < nc) {
        s_gate(sw, ps[done].pos0);
        if (sw->fatal[0]) {
            snprintf(err, errlen, "%s", sw->fatal);
            goto out;
        }
        while (next < nc && next - done < window && !sw->settling) {
            int lost, st = lp_start(sw, &ps[next], &lost, how, sizeof how);
            if (st == LP_LOST) {
                ps[next].state = LP_RERUN;
                while (sw->polling)
                    pthread_cond_wait(&sw->cv, &sw->mu);
                s_failover_now(sw, lost, how, ps[done].pos0);
                next++;
                break;
            }
            next++;
            if (sw->n_inflight > sw->max_inflight)
                sw->max_inflight = sw->n_inflight;
        }
        while (ps[done].state == LP_RUN)
            s_pump(sw, ps[done].pos0);
        while (done < next && ps[done].state == LP_DONE)
            done++;
        for (uint32_t c = done; c < next; c++)
            if (ps[c].state == LP_FAIL) {
                snprintf(err, errlen, "%s", sw->fatal[0] ? sw->fatal : ps[c].err);
                goto out;
            }
        if (done < next && ps[done].state == LP_RERUN) {
            /* a loss or a replay: everything in flight was stopped (lp_abort_all: every one
             * of ours is RERUN, none left in flight) and the caches rebuilt to the chunks
             * done; the others run again, in order, from their embedding rows */
            if (s_embed(sw, s->tok + ps[done].pos0,
                        ps[next - 1].pos0 + ps[next - 1].n - ps[done].pos0, ps[done].x, err,
                        errlen))
                goto out;
            next = done;
        }
    }
    rc = 0;
    uint64_t now = util_now_ns();
    if (sw->call_pred_ns > 0) { /* the model's prediction for this call beside what it took */
        sw->pred_ns += sw->call_pred_ns;
        sw->pred_took_ns += (double)(now - t_call);
        sw->pred_calls++;
        log_info("prefill: %s; took %.1f ms (%.2f of predicted)", sw->call_plan,
                 (double)(now - t_call) / 1e6, (double)(now - t_call) / sw->call_pred_ns);
    }
    for (uint32_t i = 0; i < sw->n; i++)
        if (sw->w[i].fo >= 0 && sw->w[i].state != LW_LIVE) {
            llm_failover *f = &sw->fo[sw->w[i].fo];
            f->degraded_tokens += n;
            f->degraded_ms = (double)(now - f->lost_ns) / 1e6 - f->rebuild_ms;
        }
out:
    s_spread(sw, 0);
    free(ps);
    return rc;
}

static int s_prefill(void *ctx, uint64_t session, const int32_t *tokens, float *x, uint32_t n,
                     uint32_t pos0, uint32_t batch, char *err, size_t errlen)
{
    llm_swarm *sw = ctx;
    pthread_mutex_lock(&sw->mu);
    int rc = s_prefill_locked(sw, session, tokens, x, n, pos0, batch, err, errlen);
    pthread_mutex_unlock(&sw->mu);
    return rc;
}

static void s_end(void *ctx, uint64_t session)
{
    llm_swarm *sw = ctx;
    pthread_mutex_lock(&sw->mu);
    lp_session_end(sw, session);
    lr_session_end(sw, session);
    for (uint32_t i = 0; i < sw->n; i++)
        if (sw->w[i].fb)
            slice_end(sw->w[i].fb, session);
    for (uint32_t k = 0; k < sw->o.sessions; k++)
        if (sw->ss[k].id == session)
            sw->ss[k].id = sw->ss[k].cached = 0;
    pthread_mutex_unlock(&sw->mu);
}

/* The session's cached positions follow the runner's rewinds and resets: ss[].cached is the
 * one count of what a rebuild replays (s_replay) and a rejoin re-prefills. */
static void s_trim(void *ctx, uint64_t session, uint32_t pos)
{
    llm_swarm *sw = ctx;
    pthread_mutex_lock(&sw->mu);
    for (uint32_t k = 0; k < sw->o.sessions; k++)
        if (sw->ss[k].id == session && sw->ss[k].cached > pos)
            sw->ss[k].cached = pos;
    pthread_mutex_unlock(&sw->mu);
}

static void s_active(void *ctx, uint64_t session, int on)
{
    llm_swarm *sw = ctx;
    pthread_mutex_lock(&sw->mu);
    ls_session *s = s_session(sw, session);
    if (s)
        s->active = on;
    pthread_mutex_unlock(&sw->mu);
}

static uint32_t s_cached(void *ctx, uint64_t session)
{
    llm_swarm *sw = ctx;
    uint32_t n = 0;
    pthread_mutex_lock(&sw->mu);
    for (uint32_t k = 0; k < sw->o.sessions; k++)
        if (sw->ss[k].id == session)
            n = sw->ss[k].cached;
    pthread_mutex_unlock(&sw->mu);
    return n;
}

static void *s_monitor(void *arg)
{
    llm_swarm *sw = arg;
    pthread_mutex_lock(&sw->mu);
    while (!sw->quit) {
        if (sw->settling) {
            pthread_cond_wait(&sw->cv, &sw->mu);
        } else if (!sw->n_inflight && !sw->polling && s_settle_due(sw)) {
            s_failover_now(sw, -1, NULL, LLM_NO_POS);
        } else {
            s_pump(sw, LLM_NO_POS);
        }
    }
    pthread_mutex_unlock(&sw->mu);
    return NULL;
}

uint64_t llm_swarm_workers_rss(llm_swarm *sw)
{
    uint64_t sum = 0;
    pthread_mutex_lock(&sw->mu);
    for (uint32_t i = 0; i < sw->n; i++)
        if (sw->w[i].pid > 0)
            sum += util_vmhwm_bytes((int)sw->w[i].pid);
        else if (sw->w[i].remote && sw->w[i].state == LW_LIVE)
            sum += sw->w[i].ready.peak_rss_bytes; /* another host's: as it reported at load */
    pthread_mutex_unlock(&sw->mu);
    return sum;
}

uint32_t llm_swarm_status(llm_swarm *sw, llm_worker_status *out, uint32_t max,
                          uint32_t *failovers)
{
    pthread_mutex_lock(&sw->snap_mu);
    uint64_t now = util_now_ns();
    uint32_t n = sw->snap_n;
    for (uint32_t i = 0; i < n && i < max; i++) {
        out[i] = sw->snap[i];
        out[i].since_s = (double)(now - sw->snap_since_ns[i]) / 1e9;
        out[i].retry_in_s = !sw->snap_retry_ns[i]             ? -1
                            : sw->snap_retry_ns[i] <= now ? 0
                            : (double)(sw->snap_retry_ns[i] - now) / 1e9;
    }
    *failovers = sw->snap_fo;
    pthread_mutex_unlock(&sw->snap_mu);
    return n;
}

const char *llm_swarm_fault(llm_swarm *sw)
{
    pthread_mutex_lock(&sw->snap_mu);
    const char *f = sw->snap_fatal[0] ? sw->snap_fatal : NULL; /* set once, never cleared */
    pthread_mutex_unlock(&sw->snap_mu);
    return f;
}

/* The health check's copy of the workers (llm_swarm_status), under mu: states change only
 * under mu, and every place that changes them ends by calling this. */
static void s_snapshot(llm_swarm *sw)
{
    llm_worker_status st[LS_MAX_W];
    uint64_t since[LS_MAX_W], retry[LS_MAX_W];
    memset(st, 0, sizeof st);
    for (uint32_t i = 0; i < sw->n; i++) {
        const ls_worker *w = &sw->w[i];
        llm_worker_status *o = &st[i];
        memcpy(o->id, w->id, sizeof o->id);
        snprintf(o->endpoint, sizeof o->endpoint, "%s", w->remote ? w->ctl_ep : "");
        o->fetched_bytes = w->ready.fetched_bytes;
        o->resumed_bytes = w->ready.resumed_bytes;
        o->fetch_ms = (double)w->ready.fetch_ns / 1e6;
        o->load_ms = (double)w->ready.load_ns / 1e6;
        o->acts = w->tr_acts;
        o->wait_ms = (double)w->tr_wait_ns / 1e6;
        o->compute_ms = (double)w->tr_compute_ns / 1e6;
        o->io_ms = (double)w->tr_io_ns / 1e6;
        o->first = w->first;
        o->last = w->last;
        o->live = w->state == LW_LIVE;
        o->state = w->state == LW_LIVE   ? "serving"
                   : w->state == LW_LOST ? "lost: its layers run in the coordinator"
                   : w->remote && w->state == LW_JOIN_HELLO
                       ? "lost: its layers run in the coordinator (asked to rejoin)"
                       : "rejoining";
        memcpy(o->last_how, w->last_how, sizeof o->last_how);
        o->respawns = w->respawns;
        o->respawn_fails = w->respawn_fails;
        snprintf(o->last_join_error, sizeof o->last_join_error, "%s",
                 w->respawn_fails ? w->why : "");
        since[i] = w->since_ns;
        retry[i] = w->respawn_due ? w->retry_ns : 0;
    }
    pthread_mutex_lock(&sw->snap_mu);
    memcpy(sw->snap, st, sizeof st);
    memcpy(sw->snap_since_ns, since, sizeof since);
    memcpy(sw->snap_retry_ns, retry, sizeof retry);
    sw->snap_n = sw->n;
    sw->snap_fo = sw->n_fo;
    if (sw->fatal[0] && !sw->snap_fatal[0])
        snprintf(sw->snap_fatal, sizeof sw->snap_fatal, "%s", sw->fatal);
    pthread_mutex_unlock(&sw->snap_mu);
}

/* One session with one thread a worker runs one stage of the pipeline at a time: each hop
 * hands the token to the next process and sleeps. Spread over the cores, every hop wakes a
 * process on an idle core (on a VM, a halted vCPU the host must schedule again); on the core
 * the coordinator is on, the next stage starts where the last one ended. So the coordinator's
 * thread (and every thread and worker it starts from now: the ZeroMQ I/O threads, the
 * monitor, the spawned and respawned workers inherit it) keeps to its current core. Measured
 * on this 2-vCPU VM, TinyLlama-shaped F16, 128 tokens, alternating runs (2026-12-01): spread
 * 5.12 tok/s, one core 5.30, the reference 5.46 (means of 4-5). Listed workers run elsewhere,
 * and several sessions or threads want every core: then nothing is pinned. */
static int s_colocate(const llm_swarm_opts *o, cpu_set_t *was)
{
    cpu_set_t one;
    int cpu = sched_getcpu();
    if (o->n_hosts || o->sessions > 1 || o->threads > 1 || cpu < 0 ||
        sched_getaffinity(0, sizeof *was, was))
        return -1;
    CPU_ZERO(&one);
    CPU_SET(cpu, &one);
    if (sched_setaffinity(0, sizeof one, &one))
        return -1;
    log_info("one session, one thread: the coordinator and its workers share core %d", cpu);
    return cpu;
}

/* The worker a fault names: "wI" (the I-th, listed or spawned) or a listed worker's name.
 * A listed worker is a process on its own host: only its link can be cut from here. */
static int s_fault_worker(const llm_swarm *sw, const fault_t *f, ls_fault *out, char *err,
                          size_t errlen)
{
    const llm_swarm_opts *o = &sw->o;
    unsigned w = UINT32_MAX;
    int used = 0;
    for (uint32_t i = 0; i < o->n_hosts; i++)
        if (!strcmp(f->worker, o->hosts[i].id))
            w = i;
    if (w == UINT32_MAX && (sscanf(f->worker, "w%u%n", &w, &used) != 1 || f->worker[used]))
        w = UINT32_MAX;
    if (w >= o->workers) {
        snprintf(err, errlen, "a fault for %s: the workers are w0..w%u", f->worker,
                 o->workers - 1);
        return -1;
    }
    if (o->n_hosts && f->kind != FAULT_CUT) {
        snprintf(err, errlen, "w%u is %s at %s, a process on its own host: the coordinator "
                 "cannot %s it (--cut-link can; kill it there to test a loss)", w,
                 o->hosts[w].id, o->hosts[w].endpoint, f->kind == FAULT_KILL ? "kill" : "stop");
        return -1;
    }
    out->f = *f;
    out->f.done = 0;
    out->w = w;
    return 0;
}

llm_swarm *llm_swarm_new(const llm_swarm_opts *o, char *err, size_t errlen)
{
    llm_swarm *sw = calloc(1, sizeof *sw);
    uint64_t caps[LS_MAX_W];
    char why[1024], how[256];
    size_t len;
    if (sw)
        sw->cpu = -1; /* nothing pinned yet: llm_swarm_free gives back nothing */
    if (!sw || !(sw->plan = calloc(1, sizeof *sw->plan)) || !(sw->b = proto_buf_new()) ||
        !(sw->m = calloc(1, sizeof *sw->m)) || !(sw->assign = calloc(1, sizeof *sw->assign))) {
        snprintf(err, errlen, "out of memory");
        goto err;
    }
    sw->fd = -1;
    pthread_mutex_init(&sw->mu, NULL);
    pthread_cond_init(&sw->cv, NULL);
    pthread_mutex_init(&sw->snap_mu, NULL);
    sw->mu_init = 1;
    for (uint32_t i = 0; i < LS_MAX_W; i++)
        sw->w[i].rep_fd = -1;
    sw->o = *o;
    snprintf(sw->model, sizeof sw->model, "%s", o->model);
    snprintf(sw->self, sizeof sw->self, "%s", o->self_exe);
    sw->o.model = sw->model;
    sw->o.self_exe = sw->self;
    if (o->n_hosts)
        sw->o.workers = o->n_hosts;
    if (!sw->o.workers || sw->o.workers > LS_MAX_W) {
        snprintf(err, errlen, "%u workers: 1..%d", sw->o.workers, LS_MAX_W);
        goto err;
    }
    for (uint32_t k = 0; k < o->n_faults; k++)
        if (s_fault_worker(sw, &o->faults[k], &sw->faults[k], err, errlen))
            goto err;
    if (!(sw->g = gguf_open(o->model, why, sizeof why)) ||
        arch_model_open(&sw->am, sw->g, why, sizeof why)) {
        snprintf(err, errlen, "%s", why);
        goto err;
    }
    sw->am_open = 1;
    if ((sw->fd = open(o->model, O_RDONLY | O_CLOEXEC)) < 0) {
        util_errf(err, errlen, o->model, "%s", strerror(errno));
        goto err;
    }
    partition_llm_opts po = { .sessions = o->sessions, .n_ctx = o->n_ctx,
                              .max_batch = o->max_batch,
                              .threads = o->threads > 0 ? (uint32_t)o->threads : 1 };
    for (uint32_t i = 0; i < sw->o.workers; i++)
        caps[i] = i < o->n_hosts && o->hosts[i].cap_bytes ? o->hosts[i].cap_bytes
                                                           : o->cap_bytes;
    if (partition_llm(&sw->am, &po, sw->o.workers, caps, sw->plan, why, sizeof why)) {
        snprintf(err, errlen, "%s: %s", o->model, why);
        goto err;
    }
    sw->n_layers = sw->am.hp.n_layers;
    sw->dim = sw->am.hp.dim;
    sw->max_batch = o->max_batch;
    sw->n_ctx = o->n_ctx;
    sw->route_stop = -1;
    sw->frame_cap = proto_frame_limit(sw->dim, sw->max_batch);
    size_t xb = (size_t)sw->max_batch * sw->dim * sizeof(float);
    if (!(sw->sums = calloc(sw->n_layers, sizeof *sw->sums)) ||
        !(sw->frame = malloc(sw->frame_cap)) || !(sw->rx = malloc(xb)) ||
        !(sw->ax = malloc(xb)) || !(sw->chunk = malloc(PROTO_MAX_CHUNK)) ||
        !(sw->ss = calloc(o->sessions, sizeof *sw->ss))) {
        snprintf(err, errlen, "out of memory");
        goto err;
    }
    for (uint32_t k = 0; k < o->sessions; k++)
        if (!(sw->ss[k].tok = malloc((size_t)o->n_ctx * sizeof *sw->ss[k].tok)) ||
            !(sw->ss[k].xin = malloc(xb))) {
            snprintf(err, errlen, "out of memory");
            goto err;
        }
    sums_source src;
    if (sums_get(&sw->am, o->model, sw->sums, &src, NULL, 0, why, sizeof why)) {
        snprintf(err, errlen, "%s", why);
        goto err;
    }
    if (!netem_profile_is_none(&o->profile)) {
        if (!(sw->shaper = netem_shaper_new(&o->profile, o->seed * 977 + 3)) ||
            !(sw->rq = netem_queue_new(256))) {
            snprintf(err, errlen, "out of memory");
            goto err;
        }
    }
    sw->cpu = s_colocate(o, &sw->cpus0);
    sw->zctx = zmq_ctx_new();
    /* CURVE: the result socket is a server that takes the listed workers' keys (ZAP) */
    if (o->key_pub[0] && !(sw->sec = sec_zap_start(sw->zctx, "coord", err, errlen)))
        goto err;
    sw->pull = zmq_socket(sw->zctx, ZMQ_PULL);
    if (sw->sec && sec_server(sw->pull, o->key_secret)) {
        snprintf(err, errlen, "cannot enable CURVE on the result socket: %s",
                 zmq_strerror(errno));
        goto err;
    }
    for (uint32_t i = 0; sw->sec && i < o->n_hosts; i++)
        sec_allow(sw->sec, o->hosts[i].pub);
    char bind[128];
    snprintf(bind, sizeof bind, "tcp://%s:*", o->bind_host[0] ? o->bind_host : "127.0.0.1");
    len = sizeof sw->pull_ep;
    if (zmq_bind(sw->pull, bind) ||
        zmq_getsockopt(sw->pull, ZMQ_LAST_ENDPOINT, sw->pull_ep, &len)) {
        snprintf(err, errlen, "cannot bind the result socket at %s: %s", bind,
                 zmq_strerror(errno));
        goto err;
    }
    for (uint32_t i = 0; i < sw->o.workers; i++) {
        ls_worker *w = &sw->w[i];
        snprintf(w->id, sizeof w->id, "w%u", i);
        w->cap_bytes = caps[i];
        if (i < o->n_hosts) {
            const llm_swarm_host *h = &o->hosts[i];
            w->remote = 1;
            snprintf(w->id, sizeof w->id, "%s", h->id);
            snprintf(w->ctl_ep, sizeof w->ctl_ep, "%s", h->endpoint);
            snprintf(w->pub, sizeof w->pub, "%s", h->pub);
        }
        w->routed_next = -2;
        w->first = sw->plan->first[i];
        w->last = sw->plan->last[i];
        w->fo = -1;
    }
    sw->n = sw->o.workers;
    if (lp_join_all(sw, err, errlen))
        goto err;
    /* a spawned worker that did not start or load is lost like a later loss: its layers run
     * here under its cap (or the run ends, saying why) and, with respawn, it is tried again */
    for (uint32_t i = 0; i < sw->n; i++)
        if (sw->w[i].state == LW_LOST) {
            snprintf(why, sizeof why, "failed to join: %s", sw->w[i].why);
            if (s_lose(sw, i, why, LLM_NO_POS, err, errlen))
                goto err;
        }
    int lost = -1, rc = lp_route(sw, (int)sw->n - 1, &lost, how, sizeof how, err, errlen);
    /* a worker lost between joining and its first route is lost like any other: its layers
     * run here (no session holds a cache yet) and, with respawn, it is asked back */
    if (rc == LP_LOST && s_lose(sw, (uint32_t)lost, how, LLM_NO_POS, err, errlen))
        goto err;
    if (rc < 0)
        goto err;
    for (uint32_t i = 0; i < sw->n; i++)
        sw->w[i].since_ns = util_now_ns();
    s_snapshot(sw);
    if (pthread_create(&sw->monitor, NULL, s_monitor, sw)) {
        snprintf(err, errlen, "cannot start the swarm's monitor thread");
        goto err;
    }
    sw->monitor_on = 1;
    return sw;
err:
    llm_swarm_free(&sw);
    return NULL;
}

void llm_swarm_free(llm_swarm **swp)
{
    if (!swp || !*swp)
        return;
    llm_swarm *sw = *swp;
    s_prefill_predict(sw);
    if (sw->transit_passes)
        log_info("%llu passes: %.3f ms a pass in transit (%.3f ms a link: ZeroMQ, the kernel, "
                 "the wake-ups), outside the %.3f ms a pass the stages' traces account for",
                 (unsigned long long)sw->transit_passes,
                 (double)sw->transit_ns / 1e6 / (double)sw->transit_passes,
                 (double)sw->transit_ns / 1e6 / (double)sw->transit_links,
                 (double)sw->tr_all_ns / 1e6 / (double)sw->transit_passes);
    if (sw->monitor_on) {
        pthread_mutex_lock(&sw->mu);
        sw->quit = 1;
        pthread_cond_broadcast(&sw->cv);
        pthread_mutex_unlock(&sw->mu);
        pthread_join(sw->monitor, NULL);
    }
    if (sw->b && sw->zctx)
        lp_close_all(sw);
    for (uint32_t i = 0; i < sw->n; i++) {
        slice_free(&sw->w[i].fb);
        lr_free(&sw->w[i]);
    }
    netem_queue_free(&sw->rq); /* holds zmq messages: before the context ends */
    netem_shaper_free(&sw->shaper);
    if (sw->pull)
        zmq_close(sw->pull);
    if (sw->zctx)
        zmq_ctx_term(sw->zctx);
    sec_zap_stop(&sw->sec);
    free(sw->chunk);
    for (uint32_t k = 0; sw->ss && k < sw->o.sessions; k++) {
        free(sw->ss[k].tok);
        free(sw->ss[k].xin);
    }
    free(sw->ss);
    if (sw->am_open)
        arch_model_close(&sw->am);
    gguf_close(&sw->g);
    if (sw->fd >= 0)
        close(sw->fd);
    if (sw->mu_init) {
        pthread_mutex_destroy(&sw->mu);
        pthread_cond_destroy(&sw->cv);
        pthread_mutex_destroy(&sw->snap_mu);
    }
    proto_buf_free(&sw->b);
    free(sw->m);
    free(sw->assign);
    free(sw->frame);
    free(sw->rx);
    free(sw->ax);
    free(sw->sums);
    free(sw->plan);
    if (sw->cpu >= 0) /* the caller's thread gets its cores back */
        sched_setaffinity(0, sizeof sw->cpus0, &sw->cpus0);
    free(sw);
    *swp = NULL;
}

void llm_swarm_hook(llm_swarm *sw, llm_layers_hook *h)
{
    *h = (llm_layers_hook){ .layers = s_layers, .end = s_end, .trim = s_trim,
                            .active = s_active, .cached = s_cached, .ctx = sw,
                            .max_batch = sw->max_batch, .n_ctx = sw->n_ctx };
    /* Several sessions share acts when every worker runs them (PROTO_CAP_SEGS); from then on
     * a worker that joins must too (llm_pipe.c s_on_hello), so no act meets one that would
     * run every row as the first session's. */
    pthread_mutex_lock(&sw->mu);
    int all = sw->o.sessions > 1;
    for (uint32_t i = 0; i < sw->n; i++)
        if (sw->w[i].state == LW_LIVE && !(sw->w[i].caps & PROTO_CAP_SEGS))
            all = 0;
    if (all) {
        sw->segs_on = 1;
        h->segs = s_segs;
    }
    /* Pipelined prefill overlaps stages: on one machine that needs cores for two stages at
     * once. Workers that already use every core each (threads = cores) gain nothing from
     * overlapping and contend (docs/measurements/2026-12-02-batching.md). Listed workers
     * run elsewhere. */
    cpu_set_t cs;
    int threads = sw->o.threads > 0 ? sw->o.threads : 1;
    int cores = sw->cpu >= 0 ? CPU_COUNT(&sw->cpus0)
                             : !sched_getaffinity(0, sizeof cs, &cs) ? CPU_COUNT(&cs) : 1;
    int overlap = sw->o.n_hosts || 2 * threads <= cores;
    if (!sw->o.no_pipeline && overlap && sw->n > 1) {
        h->prefill = s_prefill;
        /* a call of 4 batches a worker: in chunks of a batch, fill and drain (workers - 1
         * chunks' time each) cost at most about a quarter of it; smaller chunks, less */
        h->prefill_span = 4 * sw->n * sw->max_batch;
    }
    log_info("prompts %s (%u workers x %d threads, %d cores here)",
             h->prefill ? "pipelined: several chunks in flight through the workers"
             : sw->o.no_pipeline ? "one batch at a time (--no-pipeline)"
                                 : "one batch at a time: overlapped stages would share cores",
             sw->n, threads, cores);
    pthread_mutex_unlock(&sw->mu);
}

const partition_llm_plan *llm_swarm_plan(const llm_swarm *sw) { return sw->plan; }

int llm_swarm_cpu(const llm_swarm *sw) { return sw->cpu; }

void llm_swarm_counts(llm_swarm *sw, uint64_t *acts, uint64_t *wire_bytes,
                      uint64_t *deadline_replays, uint64_t *prefill_chunks)
{
    pthread_mutex_lock(&sw->mu);
    *acts = sw->acts;
    *prefill_chunks = sw->prefill_chunks;
    *wire_bytes = sw->wire;
    *deadline_replays = sw->deadline_replays;
    pthread_mutex_unlock(&sw->mu);
}

const llm_failover *llm_swarm_failovers(llm_swarm *sw, uint32_t *n)
{
    pthread_mutex_lock(&sw->mu);
    *n = sw->n_fo;
    pthread_mutex_unlock(&sw->mu);
    return sw->fo;
}
