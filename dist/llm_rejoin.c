/* llm_rejoin.c — a returning worker re-prefilled while the passes go on: the llm swarm's
 * rejoin without a second stall. dist/
 *
 * The blocking way (llm_swarm.c's s_settle) stops every pass and replays every live session's
 * positions through the units up to the returning worker: a stall as long as the failover's
 * rebuild (issue 19: 883 + 770 ms on one 400-token stream). Here, while a lost worker's layers
 * run in the coordinator, the input of its first layer at each position is kept as the copy
 * computes it (the rebuild's replay and every pass after it go through the copy). Once a
 * fresh process is ready it is routed alone (its results back to the coordinator, in the
 * current epoch) and sent those inputs in catch-up passes of up to max_batch positions
 * (LR_DEPTH in flight, in order), between and beside the ordinary passes, which the copy keeps serving. When what the
 * live sessions added since is at most one pass each, the switch is due: the passes in flight
 * drain (the settle's gate), the rest is sent to it alone, and the route moves back — a stall
 * of about one pass. Positions are written by index, so what the worker holds is bit for bit
 * what a blocking replay would have left (arch/slice.h); a rewind (a session's pass at an
 * earlier position) moves what it holds back with it.
 *
 * Memory: sessions x n_ctx x dim floats in the coordinator while the worker is away (LR_MAX
 * at most; above it the blocking way is used, and logged).
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/log.h"
#include "base/util.h"
#include "dist/llm_swarm_int.h"

#define LR_MAX (1ull << 30) /* bytes of kept inputs beyond which the rejoin blocks instead */

static int s_slot(const llm_swarm *sw, uint64_t session)
{
    for (uint32_t k = 0; k < sw->o.sessions; k++)
        if (sw->ss[k].id == session)
            return (int)k;
    return -1;
}

void lr_free(ls_worker *w)
{
    free(w->rec);
    free(w->rec_n);
    free(w->sent);
    free(w->issued);
    free(w->gen);
    free(w->end_due);
    free(w->cu);
    free(w->cu_x);
    w->rec = w->cu_x = NULL;
    w->rec_n = w->sent = w->issued = w->gen = NULL;
    w->end_due = NULL;
    w->cu = NULL;
}

void lr_begin(llm_swarm *sw, uint32_t i)
{
    ls_worker *w = &sw->w[i];
    uint64_t bytes = (uint64_t)sw->o.sessions * sw->n_ctx * sw->dim * sizeof(float);
    uint32_t ns = sw->o.sessions;
    lr_free(w);
    if (bytes > LR_MAX) {
        log_info("%s: its rejoin will re-prefill with the passes stopped (keeping its inputs "
                 "would take %.0f MiB here)", w->id, (double)bytes / 1048576.0);
        return;
    }
    w->rec = malloc(bytes);
    w->rec_n = calloc(ns, sizeof *w->rec_n);
    w->sent = calloc(ns, sizeof *w->sent);
    w->issued = calloc(ns, sizeof *w->issued);
    w->gen = calloc(ns, sizeof *w->gen);
    w->end_due = calloc(ns, sizeof *w->end_due);
    w->cu = calloc(LR_DEPTH, sizeof *w->cu);
    w->cu_x = malloc((size_t)LR_DEPTH * sw->max_batch * sw->dim * sizeof(float));
    if (!w->rec || !w->rec_n || !w->sent || !w->issued || !w->gen || !w->end_due || !w->cu ||
        !w->cu_x) {
        log_warn("%s: no memory to keep its inputs (%.0f MiB): its rejoin will stop the passes",
                 w->id, (double)bytes / 1048576.0);
        lr_free(w);
        return;
    }
    for (int j = 0; j < LR_DEPTH; j++) {
        w->cu_k[j] = -1;
        w->cu[j].state = LP_DONE;
    }
    w->cu_epoch = 0;
}

/* What is in flight for slot k is stale: ignored when it comes back, sent again. */
static void s_stale(ls_worker *w, int k)
{
    w->gen[k]++;
    w->issued[k] = w->sent[k];
}

void lr_record(llm_swarm *sw, uint32_t unit, uint64_t session, uint32_t pos0, uint32_t n,
               const float *x)
{
    ls_worker *w = &sw->w[unit];
    int k = w->rec ? s_slot(sw, session) : -1;
    if (k < 0)
        return;
    if (pos0 > w->rec_n[k]) /* a gap: positions before it were never seen here */
        return;
    memcpy(w->rec + ((size_t)k * sw->n_ctx + pos0) * sw->dim, x,
           (size_t)n * sw->dim * sizeof(float));
    w->rec_n[k] = pos0 + n; /* a rewind drops what was kept beyond it */
    if (w->issued[k] > pos0) { /* and what the rejoiner holds or is sent beyond it is stale */
        if (w->sent[k] > pos0)
            w->sent[k] = pos0;
        s_stale(w, k);
    }
}

/* Is a catch-up pass of slot k in flight to w? */
static int s_inflight(const ls_worker *w, int k)
{
    for (int j = 0; j < LR_DEPTH; j++)
        if (w->cu_k[j] == k && w->cu[j].state == LP_RUN)
            return 1;
    return 0;
}

void lr_session_end(llm_swarm *sw, uint64_t session)
{
    int k = s_slot(sw, session);
    for (uint32_t i = 0; k >= 0 && i < sw->n; i++) {
        ls_worker *w = &sw->w[i];
        if (!w->rec)
            continue;
        w->rec_n[k] = 0;
        w->sent[k] = 0;
        s_stale(w, k);
        if (w->state != LW_READY)
            continue;
        /* its end after every act of it already sent (else one arriving later would hold a
         * slot on the worker for a session that no longer lives) */
        if (s_inflight(w, k) && !w->end_due[k]) /* (with one due, none of this is sent) */
            w->end_due[k] = session;
        else
            lp_session_end_one(sw, i, session);
    }
}

int lr_act_failed(llm_swarm *sw, uint32_t i, const char *text)
{
    ls_worker *w = &sw->w[i];
    unsigned long long req;
    if (!w->rec || sscanf(text, "act req %llu", &req) != 1)
        return 0;
    for (int j = 0; j < LR_DEPTH; j++)
        if (w->cu_k[j] >= 0 && w->cu[j].state == LP_RUN && w->cu[j].req == req) {
            ls_pass *p = &w->cu[j];
            for (ls_pass **pp = &sw->inflight; *pp; pp = &(*pp)->next)
                if (*pp == p) {
                    *pp = p->next;
                    sw->n_inflight--;
                    break;
                }
            p->state = LP_FAIL;
            log_info("%s: a catch-up act not taken (%s): sent again if its session lives",
                     w->id, text);
            return 1;
        }
    return 0;
}

void lr_reset(ls_worker *w)
{
    /* its sent[] is cleared when its route is first sent (lr_pump: cu_epoch 0) */
    w->cu_epoch = 0;
    w->cu_tokens = 0;
}

/* What a fresh process holds: nothing; nothing of ours is in flight to it. */
static void s_forget(const llm_swarm *sw, ls_worker *w)
{
    for (uint32_t k = 0; k < sw->o.sessions; k++) {
        w->sent[k] = 0;
        s_stale(w, (int)k);
    }
    for (int j = 0; j < LR_DEPTH; j++)
        if (w->cu[j].state != LP_RUN)
            w->cu_k[j] = -1;
    memset(w->end_due, 0, sw->o.sessions * sizeof *w->end_due);
}

/* The catch-up passes back: taken in order (each extends what slot k holds), a stale or
 * aborted one dropped (an abort makes the rest of its slot stale too). 1 when one is still
 * in flight. */
static int s_account(ls_worker *w)
{
    int busy = 0, moved = 1;
    while (moved) {
        moved = 0;
        for (int j = 0; j < LR_DEPTH; j++) {
            ls_pass *p = &w->cu[j];
            int k = w->cu_k[j];
            if (k < 0 || p->state == LP_RUN)
                continue;
            if (w->cu_gen[j] != w->gen[k]) {
                w->cu_k[j] = -1;
            } else if (p->state != LP_DONE) {
                s_stale(w, k);
                w->cu_k[j] = -1;
            } else if (p->pos0 == w->sent[k]) {
                w->sent[k] = p->pos0 + p->n;
                w->cu_tokens += p->n;
                w->cu_k[j] = -1;
                moved = 1;
            }
        }
    }
    for (int j = 0; j < LR_DEPTH; j++)
        busy |= w->cu_k[j] >= 0 && w->cu[j].state == LP_RUN;
    return busy;
}

/* Ends held back while a session's catch-up passes were in flight, sent once they are not. */
static void s_ends(llm_swarm *sw, uint32_t i)
{
    ls_worker *w = &sw->w[i];
    for (uint32_t k = 0; k < sw->o.sessions; k++)
        if (w->end_due[k] && !s_inflight(w, (int)k)) {
            lp_session_end_one(sw, i, w->end_due[k]);
            w->end_due[k] = 0;
        }
}

/* Send catch-up passes for worker i into every free place, slot by slot. */
static void s_issue(llm_swarm *sw, uint32_t i)
{
    ls_worker *w = &sw->w[i];
    char how[64];
    int lost;
    for (int j = 0; j < LR_DEPTH; j++) {
        if (w->cu_k[j] >= 0)
            continue;
        uint32_t k = 0;
        while (k < sw->o.sessions &&
               (!sw->ss[k].id || w->issued[k] >= w->rec_n[k] || w->end_due[k]))
            k++;
        if (k == sw->o.sessions)
            return;
        uint32_t pos0 = w->issued[k], n = w->rec_n[k] - pos0;
        if (n > sw->max_batch)
            n = sw->max_batch;
        float *x = w->cu_x + (size_t)j * sw->max_batch * sw->dim;
        memcpy(x, w->rec + ((size_t)k * sw->n_ctx + pos0) * sw->dim,
               (size_t)n * sw->dim * sizeof(float));
        w->cu[j] = (ls_pass){ .session = sw->ss[k].id, .x = x, .n = n, .pos0 = pos0,
                              .stop = (int)i, .replay = 1, .first = (int)i, .rejoin = 1 };
        w->cu_k[j] = (int)k;
        w->cu_gen[j] = w->gen[k];
        w->issued[k] = pos0 + n;
        log_debug("%s: catch-up slot %u [%u, +%u) gen %u", w->id, k, pos0, n, w->gen[k]);
        lp_start(sw, &w->cu[j], &lost, how, sizeof how); /* a catch-up sets no route */
    }
}

/* One step of worker i's catch-up: its route (again, in a new epoch), or the passes back
 * taken and the next sent. */
static void s_pump_one(llm_swarm *sw, uint32_t i)
{
    ls_worker *w = &sw->w[i];
    if (w->cu_epoch != sw->epoch) { /* a new epoch drops what was in flight: set again */
        if (w->cu_epoch == 0)
            s_forget(sw, w);
        else
            for (uint32_t k = 0; k < sw->o.sessions; k++)
                s_stale(w, (int)k);
        lp_route_rejoiner(sw, i);
        w->cu_epoch = sw->epoch;
        return;
    }
    if (w->echo_seq < w->route_seq)
        return;
    s_account(w);
    s_ends(sw, i);
    s_issue(sw, i);
}

void lr_pump(llm_swarm *sw)
{
    for (uint32_t i = 0; i < sw->n; i++) {
        ls_worker *w = &sw->w[i];
        if (w->rec && w->state == LW_READY && w->push)
            s_pump_one(sw, i);
    }
}

int lr_due(const llm_swarm *sw, uint32_t i)
{
    const ls_worker *w = &sw->w[i];
    if (!w->rec || w->state != LW_READY || w->cu_epoch != sw->epoch ||
        w->echo_seq < w->route_seq)
        return 0;
    for (uint32_t k = 0; k < sw->o.sessions; k++)
        if (sw->ss[k].id && sw->ss[k].cached > w->sent[k] + sw->max_batch)
            return 0;
    return 1;
}

int lr_finish(llm_swarm *sw, uint32_t i, uint64_t *tokens, int *lost, char *how,
              size_t howlen, char *err, size_t errlen)
{
    ls_worker *w = &sw->w[i];
    uint64_t t0 = util_now_ns(), before = w->cu_tokens;
    (void)err;
    (void)errlen;
    /* nothing else is in flight (settling): what the sessions added since is sent now */
    for (;;) {
        if (w->state != LW_READY)
            return 1;
        int busy = 0, all = 1;
        if (w->cu_epoch != sw->epoch || w->echo_seq < w->route_seq) {
            s_pump_one(sw, i);
            busy = 1;
        } else {
            busy = s_account(w);
            s_ends(sw, i);
            for (uint32_t k = 0; k < sw->o.sessions; k++)
                if (sw->ss[k].id && w->sent[k] < sw->ss[k].cached)
                    all = 0;
            if (all && !busy)
                break;
            s_issue(sw, i);
            busy = s_account(w);
            if (!busy && !all) { /* a session's inputs not all kept: the old way */
                log_warn("%s: its kept inputs miss positions: re-prefilled the blocking way",
                         w->id);
                lr_free(w);
                return 1;
            }
        }
        int l = lp_collect(sw, how, howlen);
        if (l < 0)
            l = lp_poll(sw, how, howlen);
        if (l >= 0) {
            lp_abort_all(sw, LP_RERUN, NULL);
            *lost = l;
            return LP_LOST;
        }
        if (busy)
            lp_wait_results(sw);
    }
    *tokens = w->cu_tokens;
    log_info("%s: caught up: %llu positions sent while serving, the last %llu with the passes "
             "held (%.1f ms)", w->id, (unsigned long long)before,
             (unsigned long long)(w->cu_tokens - before), (double)(util_now_ns() - t0) / 1e6);
    return LP_OK;
}
