/* llm_rejoin.c — a returning worker re-prefilled while the passes go on: the llm swarm's
 * rejoin without a second stall. dist/
 *
 * The blocking way (llm_swarm.c's s_settle) stops every pass and replays every live session's
 * positions through the units up to the returning worker: a stall as long as the failover's
 * rebuild (issue 19: 883 + 770 ms on one 400-token stream). Here, while a lost worker's layers
 * run in the coordinator, the input of its first layer at each position is kept as the copy
 * computes it (the rebuild's replay and every pass after it go through the copy). Once a
 * fresh process is ready it is routed alone (its results back to the coordinator, in the
 * current epoch) and sent those inputs, one catch-up pass of up to max_batch positions at a
 * time, between and beside the ordinary passes, which the copy keeps serving. When what the
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
    free(w->cu);
    free(w->cu_x);
    w->rec = w->cu_x = NULL;
    w->rec_n = w->sent = NULL;
    w->cu = NULL;
}

void lr_begin(llm_swarm *sw, uint32_t i)
{
    ls_worker *w = &sw->w[i];
    uint64_t bytes = (uint64_t)sw->o.sessions * sw->n_ctx * sw->dim * sizeof(float);
    lr_free(w);
    if (bytes > LR_MAX) {
        log_info("%s: its rejoin will re-prefill with the passes stopped (keeping its inputs "
                 "would take %.0f MiB here)", w->id, (double)bytes / 1048576.0);
        return;
    }
    w->rec = malloc(bytes);
    w->rec_n = calloc(sw->o.sessions, sizeof *w->rec_n);
    w->sent = calloc(sw->o.sessions, sizeof *w->sent);
    w->cu = calloc(1, sizeof *w->cu);
    w->cu_x = malloc((size_t)sw->max_batch * sw->dim * sizeof(float));
    if (!w->rec || !w->rec_n || !w->sent || !w->cu || !w->cu_x) {
        log_warn("%s: no memory to keep its inputs (%.0f MiB): its rejoin will stop the passes",
                 w->id, (double)bytes / 1048576.0);
        lr_free(w);
        return;
    }
    w->cu->state = LP_DONE;
    w->cu_k = -1;
    w->cu_epoch = 0;
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
    if (w->sent[k] > pos0)
        w->sent[k] = pos0;  /* and what the rejoiner holds beyond it is stale */
}

void lr_session_end(llm_swarm *sw, uint64_t session)
{
    int k = s_slot(sw, session);
    for (uint32_t i = 0; k >= 0 && i < sw->n; i++)
        if (sw->w[i].rec)
            sw->w[i].rec_n[k] = sw->w[i].sent[k] = 0;
}

void lr_reset(ls_worker *w)
{
    /* its sent[] is cleared when its route is first sent (lr_pump: cu_epoch 0) */
    w->cu_k = -1;
    w->cu_epoch = 0;
    w->cu_tokens = 0;
}

/* What a fresh process holds: nothing. */
static void s_forget(const llm_swarm *sw, ls_worker *w)
{
    memset(w->sent, 0, sw->o.sessions * sizeof *w->sent);
}

/* The catch-up pass just done (or aborted: then sent again). */
static void s_account(ls_worker *w)
{
    ls_pass *p = w->cu;
    if (w->cu_k >= 0 && p->state == LP_DONE && w->sent[w->cu_k] == p->pos0) {
        w->sent[w->cu_k] = p->pos0 + p->n;
        w->cu_tokens += p->n;
    }
    w->cu_k = -1;
}

/* Start the next catch-up pass for worker i (its route confirmed, none in flight). */
static void s_next(llm_swarm *sw, uint32_t i)
{
    ls_worker *w = &sw->w[i];
    char how[64];
    int lost;
    for (uint32_t k = 0; k < sw->o.sessions; k++) {
        if (!sw->ss[k].id || w->sent[k] >= w->rec_n[k])
            continue;
        uint32_t pos0 = w->sent[k], n = w->rec_n[k] - pos0;
        if (n > sw->max_batch)
            n = sw->max_batch;
        memcpy(w->cu_x, w->rec + ((size_t)k * sw->n_ctx + pos0) * sw->dim,
               (size_t)n * sw->dim * sizeof(float));
        *w->cu = (ls_pass){ .session = sw->ss[k].id, .x = w->cu_x, .n = n, .pos0 = pos0,
                            .stop = (int)i, .replay = 1, .first = (int)i, .rejoin = 1 };
        w->cu_k = (int)k;
        lp_start(sw, w->cu, &lost, how, sizeof how); /* a catch-up sets no route: LP_OK */
        return;
    }
}

void lr_pump(llm_swarm *sw)
{
    for (uint32_t i = 0; i < sw->n; i++) {
        ls_worker *w = &sw->w[i];
        if (!w->rec || w->state != LW_READY || !w->push)
            continue;
        if (w->cu_epoch != sw->epoch) { /* a new epoch drops what was in flight: set again */
            if (w->cu_epoch == 0)
                s_forget(sw, w);
            lp_route_rejoiner(sw, i);
            w->cu_epoch = sw->epoch;
            continue;
        }
        if (w->echo_seq < w->route_seq || w->cu->state == LP_RUN)
            continue;
        s_account(w);
        s_next(sw, i);
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
    uint64_t t0 = util_now_ns(), now_sent = 0;
    /* nothing is in flight (settling): a catch-up pass aborted by the drain is sent again */
    for (;;) {
        if (w->state != LW_READY)
            return 1;
        if (w->cu_epoch != sw->epoch || w->echo_seq < w->route_seq) {
            lr_pump(sw); /* its route again (or its confirmation awaited) */
        } else if (w->cu->state != LP_RUN) {
            uint64_t before = w->cu_tokens;
            s_account(w);
            now_sent += w->cu_tokens - before;
            int all = 1;
            for (uint32_t k = 0; k < sw->o.sessions; k++)
                if (sw->ss[k].id && w->sent[k] < sw->ss[k].cached)
                    all = 0;
            if (all)
                break;
            s_next(sw, i);
            if (w->cu->state == LP_FAIL) {
                snprintf(err, errlen, "%s: %s", w->id, w->cu->err);
                return -1;
            }
            if (w->cu->state != LP_RUN) { /* a session's inputs not all kept: the old way */
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
        if (w->cu->state == LP_RUN || w->echo_seq < w->route_seq)
            lp_wait_results(sw);
    }
    *tokens = w->cu_tokens;
    log_info("%s: caught up: %llu positions sent while serving, the last %llu with the passes "
             "held (%.1f ms)", w->id, (unsigned long long)(w->cu_tokens - now_sent),
             (unsigned long long)now_sent, (double)(util_now_ns() - t0) / 1e6);
    return LP_OK;
}
