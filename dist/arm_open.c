/* arm_open.c — open a real model's arm (reference, ssd, resident) for any command, judge it
 * after the run, close it. dist/ */
#include "dist/arm_open.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "arch/sums.h"
#include "base/cpu.h"
#include "base/exitcode.h"
#include "base/util.h"

/* The context when the command's size() does not set one: --ctx, else the file's, at most
 * ctx_max (a 128k-context file would otherwise ask for a KV cache it never uses). */
static int s_ctx(const arm_open_opts *o, arm_handle *h, char *err, size_t errlen)
{
    uint32_t train = h->lm.n_ctx_train;
    if (o->n_ctx > train) {
        snprintf(err, errlen, "--ctx %u: %s was trained for %u positions at most", o->n_ctx,
                 h->lm.path, train);
        return -1;
    }
    h->n_ctx = o->n_ctx ? o->n_ctx : train < o->ctx_max ? train : o->ctx_max;
    return 0;
}

/* The file's trained context from its header: the reference arm maps the file first (its
 * tokenizer comes from the mapping), the others read the header alone. */
static int s_tokenizer(const arm_open_opts *o, arm_handle *h, char *err, size_t errlen)
{
    if (h->arm != LLM_ARM_REFERENCE)
        return llm_cli_open_tok(&h->lm, o->model, err, errlen);
    if (llm_cli_open(&h->lm, o->model, err, errlen))
        return -1;
    h->lm.n_ctx_train = llm_model_arch(h->lm.m)->hp.n_ctx_train;
    return 0;
}

static int s_open_ssd(const arm_open_opts *o, arm_handle *h, char *err, size_t errlen)
{
    /* a run_result and paths: not for the stack */
    if (!(h->ssd = calloc(1, sizeof *h->ssd))) {
        snprintf(err, errlen, "out of memory");
        return -1;
    }
    h->ssd->on = 1;
    h->ssd->tag = o->cmd;
    if (llm_cli_ssd_opts(&o->flags->ssd, o->model, &h->ssd->lo, h->ssd->from,
                         sizeof h->ssd->from, err, errlen)) {
        h->refused = 1;
        return -1;
    }
    char why[768];
    /* several sessions: each one's KV cache under the cap, their passes batched */
    h->ssd->lo.n_sessions = o->sessions ? o->sessions : 1;
    if (llm_ssd_open(h->ssd, &h->lm, h->n_ctx, o->n_batch, why, sizeof why)) {
        snprintf(err, errlen, "ssd arm: %s", why);
        return -1;
    }
    return 0;
}

/* The resident arm's swarm options from the flags and the command's sizes. */
static void s_swarm_opts(const arm_open_opts *o, arm_handle *h, const char *self,
                         llm_swarm_opts *so)
{
    const arm_flags *f = o->flags;
    memset(so, 0, sizeof *so);
    so->model = h->lm.path;
    so->self_exe = self;
    so->workers = f->workers;
    so->cap_bytes = f->worker_cap;
    so->sessions = o->sessions ? o->sessions : 1;
    so->n_ctx = h->n_ctx;
    so->max_batch = o->n_batch < h->n_ctx ? o->n_batch : h->n_ctx;
    so->threads = h->worker_threads;
    so->respawn = f->respawn >= 0 ? f->respawn : o->respawn;
    so->slowdown = f->slowdown;
    so->no_pipeline = f->no_pipeline;
    so->profile = f->profile;
    so->seed = o->seed;
    /* generated token t > 1 is drawn from the pass over position pos0 + t - 1 (the first from
     * the prompt's last position, pos0); a fault at token 1 lands on the pass that carries it,
     * pos0 + 1, so it never fires inside the prompt's batches (as generate always mapped it) */
    so->n_faults = f->n_faults;
    for (uint32_t k = 0; k < f->n_faults; k++) {
        so->faults[k] = f->faults[k];
        so->faults[k].at = h->pos0 + f->faults[k].at - 1 + (f->faults[k].at == 1);
    }
}

static int s_open_resident(const arm_open_opts *o, arm_handle *h, char *err, size_t errlen)
{
    char self[4096], why[768];
    ssize_t sl = readlink("/proc/self/exe", self, sizeof self - 1);
    self[sl > 0 ? sl : 0] = 0;
    llm_swarm_opts so;
    s_swarm_opts(o, h, self, &so);
    /* a config that lists workers: those, at their endpoints, not spawned ones */
    if (llm_cli_hosts(o->model, &so, why, sizeof why) ||
        !(h->swarm = llm_swarm_new(&so, why, sizeof why))) {
        snprintf(err, errlen, "resident arm: %s", why);
        h->refused = 1;
        return -1;
    }
    h->transport = !so.n_hosts ? "loopback" : so.key_pub[0] ? "curve" : "plaintext";
    h->curve = so.n_hosts && so.key_pub[0];
    h->shared_core = llm_swarm_cpu(h->swarm);
    const partition_llm_plan *pl = llm_swarm_plan(h->swarm);
    uint32_t n_fo;
    h->n_wst = llm_swarm_status(h->swarm, h->wst, 8, &n_fo);
    for (uint32_t i = 0; i < pl->n_workers; i++)
        fprintf(stderr, "%s%s%s%s: layers [%u, %u), %.1f MiB planned%s\n", o->log_prefix,
                i < h->n_wst ? h->wst[i].id : "w",
                i < h->n_wst && h->wst[i].endpoint[0] ? " at " : "",
                i < h->n_wst ? h->wst[i].endpoint : "", pl->first[i], pl->last[i],
                pl->need[i] / 1048576.0, h->curve ? " (CURVE)" : "");
    llm_layers_hook hook;
    llm_swarm_hook(h->swarm, &hook);
    llm_opts lo = { .arm = LLM_ARM_RESIDENT, .hook = &hook };
    /* held past the swarm (its hook is not called once no session lives) */
    if (!(h->lm.m = llm_model_open_opts(h->lm.path, &lo, why, sizeof why))) {
        snprintf(err, errlen, "resident arm: %s", why);
        return -1;
    }
    return 0;
}

/* Threads: --threads, else the machine's physical cores (base/cpu.h), in the coordinator and
 * in each resident worker alike. One session's pass visits the workers in turn, so their
 * threads do not compete. Measured on this 2-vCPU VM shared with other builds (load average
 * 3.6 to 12), TinyLlama-shaped F16 (22 layers), 3 spawned workers, 64 greedy tokens,
 * alternating runs (2026-12-02): 2 threads each, unpinned, 8.92 13.15 11.25 12.57 10.11 9.44
 * 7.53 tok/s (mean 10.4); 1 thread each with coordinator and workers kept to one core
 * (llm_swarm.c's shared core, which applies to 1 thread only) 6.24 3.94 3.40 4.52 11.98 6.25
 * 6.06 6.70 6.09 3.54 (mean 5.9). 2 threads won 6 of 7 neighbouring pairs; the one core won
 * only on the quietest (load 3.6: 11.98 against 10.11), as docs/design.md's 1-thread figures
 * on a quiet machine say: on a busy machine a core of its own is worth more than the hops
 * saved by sharing one. Several sessions in flight (--sessions, serve's slots) keep several
 * workers computing at once: then each worker takes 1 thread (3 workers x 2 threads on 2
 * cores would oversubscribe), as serve's always did. */
static void s_threads(const arm_open_opts *o, arm_handle *h)
{
    int given = (int)o->flags->threads;
    h->threads = given ? given : cpu_physical_cores();
    h->worker_threads = given ? given : o->sessions > 1 ? 1 : h->threads;
}

int arm_open_exit_code(const arm_handle *h, const char *err)
{
    return sums_err_is_mismatch(err) ? EXIT_VOID : h->refused ? EXIT_USAGE : EXIT_FAIL;
}

int arm_open(const arm_open_opts *o, arm_handle *h, char *err, size_t errlen)
{
    memset(h, 0, sizeof *h);
    h->arm = o->flags->arm;
    h->arm_name = o->flags->arm_name;
    h->shared_core = -1;
    h->transport = "loopback";
    h->profile = o->flags->profile;
    h->worker_cap = o->flags->worker_cap;
    h->io0 = util_io_read_bytes();
    uint64_t t0 = util_now_ns();
    s_threads(o, h);
    if (s_tokenizer(o, h, err, errlen))
        return -1;
    if ((o->size && o->size(o->user, h, err, errlen)) || (!h->n_ctx && s_ctx(o, h, err, errlen)))
        return -1;
    if (h->arm == LLM_ARM_SSD && s_open_ssd(o, h, err, errlen))
        return -1;
    if (h->arm == LLM_ARM_RESIDENT && s_open_resident(o, h, err, errlen))
        return -1;
    h->setup_ms = (double)(util_now_ns() - t0) / 1e6;
    return 0;
}

static void s_failover_line(const llm_failover *f)
{
    double deg_s = f->degraded_ms / 1e3;
    char det[48] = "a loss not injected here";
    if (f->detection_ms >= 0)
        snprintf(det, sizeof det, "detected %.1f ms after the fault", f->detection_ms);
    char at[32] = "between passes";
    if (f->at_pos != LLM_NO_POS)
        snprintf(at, sizeof at, "at position %u", f->at_pos);
    fprintf(stderr, "failover %s (%s) %s: %s; %u sessions, %llu positions "
                    "replayed, caches whole %.1f ms after the loss; %llu positions degraded at "
                    "%.2f tok/s",
            f->worker, f->how, at, det, f->sessions_replayed,
            (unsigned long long)f->tokens_replayed, f->rebuild_ms,
            (unsigned long long)f->degraded_tokens, deg_s > 0 ? f->degraded_tokens / deg_s : 0);
    if (f->rejoin_ms >= 0)
        fprintf(stderr, "; rejoined %.1f ms after the loss (%llu positions re-prefilled in "
                        "%.1f ms)", f->rejoin_ms, (unsigned long long)f->reprefill_tokens,
                f->reprefill_ms);
    fputc('\n', stderr);
}

/* The swarm ends before anything else runs (a parity reference): the workers' memory is not
 * its to sit beside. Peaks first, the workers' before they exit. */
static void s_judge_resident(arm_handle *h)
{
    uint32_t n_fo_st;
    h->workers_rss = llm_swarm_workers_rss(h->swarm);
    h->n_wst = llm_swarm_status(h->swarm, h->wst, 8, &n_fo_st);
    for (uint32_t i = 0; i < h->n_wst; i++)
        if (h->wst[i].acts)
            fprintf(stderr, "%s: %llu acts: compute %.2f ms an act, waiting %.3f, "
                    "(de)serialising and sending %.3f\n", h->wst[i].id,
                    (unsigned long long)h->wst[i].acts, h->wst[i].compute_ms / h->wst[i].acts,
                    h->wst[i].wait_ms / h->wst[i].acts, h->wst[i].io_ms / h->wst[i].acts);
    if ((h->plan = malloc(sizeof *h->plan)))
        *h->plan = *llm_swarm_plan(h->swarm);
    llm_swarm_counts(h->swarm, &h->acts, &h->wire, &h->deadline_replays, &h->prefill_chunks);
    uint32_t n_fo;
    const llm_failover *fo = llm_swarm_failovers(h->swarm, &n_fo);
    if (n_fo && (h->fos = malloc(n_fo * sizeof *h->fos))) {
        memcpy(h->fos, fo, n_fo * sizeof *h->fos);
        h->n_fo = n_fo;
    }
    for (uint32_t k = 0; k < h->n_fo; k++)
        s_failover_line(&h->fos[k]);
    llm_swarm_free(&h->swarm);
}

void arm_open_judge(arm_handle *h)
{
    if (h->swarm)
        s_judge_resident(h);
    if (h->ssd && h->lm.m) {
        llm_ssd_judge(h->ssd, h->lm.m);
        /* anything after (a parity reference) maps the whole file: not under the cap */
        llm_ssd_leave(h->ssd);
    }
}

void arm_open_close(arm_handle *h)
{
    if (h->ssd)
        llm_ssd_leave(h->ssd); /* safe twice, and on an advisory cap */
    free(h->ssd);
    h->ssd = NULL;
    if (h->swarm) { /* a failure before the swarm ended: the model's sessions end on it first */
        llm_model_free(&h->lm.m);
        llm_swarm_free(&h->swarm);
    }
    llm_cli_close(&h->lm);
    free(h->plan);
    h->plan = NULL;
    free(h->fos);
    h->fos = NULL;
    h->n_fo = 0;
}
