/* steps.c — the dense lab model's resident arm (`swarm run`, `swarm lab`) through the one
 * coordinator: its steps as independent passes through llm_pipe.c, with the failover policy a
 * stateless model allows. dist/
 *
 * A dense step is an act of one position, like a real model's token: the same workers, the
 * same slice on them (stateless: runtime/slice.h), the same routes, heartbeats, spawn and
 * fault model. What differs is what a stateless model allows and what the lab measures:
 *   - several steps in flight (--inflight K): each is its own pass (lp_start), any order;
 *   - a lost worker is detached, not killed: its layers run here (a copy under its cap,
 *     resident what fits and the rest streamed with the [ssd] settings), every step in flight
 *     runs again from its input (kept here) under a new epoch, and a process that froze or
 *     was cut off is said hello to again every ST_PROBE_MS: it answers once it can, takes the
 *     same layers back (still resident: it answers ready at once) and the route moves back.
 *     Nothing is replayed into it: there is no cache to rebuild. With respawn, a dead one is
 *     started afresh the same way.
 *   - a slow pipeline is told from a stuck one: the step deadline counts from the last sign of
 *     progress (a result, or a worker's echo saying it finished or is computing), replays only
 *     when every live worker has been heard since, and a worker whose one activation outlasts
 *     ST_STALL_FACTOR times its slowest so far is lost as stalled;
 *   - the lab's figures: stage times from the results' traces, latencies, bytes on the wire,
 *     the workers' stats at the end, storage reads for the cache gate.
 */
#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include <zmq.h>

#include "arch/kernel.h"
#include "base/exitcode.h"
#include "base/log.h"
#include "base/sec.h"
#include "base/util.h"
#include "dist/arm.h"
#include "dist/llm_cli.h"
#include "dist/llm_swarm_int.h"
#include "runtime/gate.h"

/* One activation longer than this many times a worker's slowest (or the step deadline, if
 * longer) means its compute is stuck, not slow: 3x slowdowns under a CPU hog stay inside. */
#define ST_STALL_FACTOR 8
#define ST_PROBE_MS 50             /* how often a lost worker is said hello to again */
#define ST_STATS_TIMEOUT_MS 2000
#define ST_QUEUE_CAP 256
#define ST_FREE UINT32_MAX         /* a slot with no step */

typedef struct {
    char worker[LLM_SWARM_ID_MAX];
    char how[64];
    uint64_t lost_step;            /* steps done when it was lost */
    double detection_ms;           /* fault injected (or last heard) -> declared lost */
    uint64_t replayed;             /* steps run again while it was out */
    uint64_t fallback_steps;       /* steps that ran its layers here */
    double fallback_ms_sum;
    double rejoin_ms;              /* its hello -> route moved back (< 0: did not) */
    uint64_t lost_ns;
} st_failover;

typedef struct {
    arm_ctx *a;
    run_result *r;
    const config_t *cfg;
    const model_t *m;
    llm_swarm *sw;
    uint32_t d, n, K;
    exec_opts fbx;                 /* a lost worker's copy here: the [ssd] settings */
    /* steps: K slots, each a pass in flight or free */
    ls_pass *slot;
    uint32_t *slot_step;
    float *xs;                     /* K x d: the slots' activations */
    uint8_t *done;
    uint64_t *sent_ns;
    double *lat_ms;
    uint32_t next_send, n_done;
    int restart_due;               /* the route changed: every step in flight runs again */
    uint64_t t_start;
    /* accounting */
    double st_wait, st_deser, st_compute, st_ser, st_send, st_net, st_e2e;
    uint64_t replays, deadline_replays, dup_results;
    int fo_of[LS_MAX_W];           /* each worker's open failover record, -1 none */
    st_failover fo[LS_MAX_W * 4];
    uint32_t n_fo;
    uint64_t fb_loaded;            /* bytes copies here loaded resident during the steps */
    uint64_t setup_read;
    int budget_fail;
    char budget_err[512];
} steps_t;

/* ------------------------------------------------------------ setup */

/* Contiguous ranges by layer count, each within what its worker's planner (the same rule)
 * accepts resident under its cap. */
static int s_plan(steps_t *c, char *err, size_t errlen)
{
    uint32_t maxl[LS_MAX_W], first[LS_MAX_W], last[LS_MAX_W];
    exec_opts o;
    char why[512], b1[32], b2[32];
    uint64_t per = exec_layer_bytes(c->d);
    for (uint32_t i = 0; i < c->n; i++) {
        exec_opts_worker(&o, c->sw->w[i].cap_bytes);
        uint32_t fit = exec_resident_fit(c->d, &o);
        maxl[i] = fit < c->m->n_layers ? fit : c->m->n_layers;
    }
    if (partition_layers(c->m->n_layers, c->n, maxl, first, last, why, sizeof why)) {
        size_t len = (size_t)snprintf(err, errlen, "cannot partition %u layers of %s each: %s;",
                                      c->m->n_layers, util_fmt_size(per, b1, sizeof b1), why);
        for (uint32_t i = 0; i < c->n && len < errlen; i++)
            len += (size_t)snprintf(err + len, errlen - len, " %s cap %s holds %u;",
                                    c->sw->w[i].id,
                                    util_fmt_size(c->sw->w[i].cap_bytes, b2, sizeof b2), maxl[i]);
        return -1;
    }
    for (uint32_t i = 0; i < c->n; i++) {
        c->sw->w[i].first = c->sw->plan->first[i] = first[i];
        c->sw->w[i].last = c->sw->plan->last[i] = last[i];
    }
    return 0;
}

/* The faults as the pipe fires them: at = the step whose pass is sent (its position). A
 * listed worker is a process on its own host: only its link can be cut from here. */
static int s_faults(steps_t *c, char *err, size_t errlen)
{
    llm_swarm *sw = c->sw;
    for (uint32_t k = 0; k < c->a->n_faults; k++) {
        const fault_t *f = &c->a->faults[k];
        uint32_t w = UINT32_MAX;
        for (uint32_t i = 0; i < c->n; i++)
            if (!strcmp(f->worker, sw->w[i].id))
                w = i;
        if (w == UINT32_MAX) {
            snprintf(err, errlen, "a fault for %s: the workers are %s..%s", f->worker,
                     sw->w[0].id, sw->w[c->n - 1].id);
            return -1;
        }
        if (sw->w[w].remote && f->kind != FAULT_CUT) {
            snprintf(err, errlen, "%s at %s is a process on its own host: the coordinator "
                     "cannot %s it (--cut-link can)", sw->w[w].id, sw->w[w].ctl_ep,
                     f->kind == FAULT_KILL ? "kill" : "stop");
            return -1;
        }
        sw->faults[k].f = *f;
        sw->faults[k].f.done = 0;
        sw->faults[k].w = w;
    }
    sw->o.n_faults = c->a->n_faults;
    return 0;
}

/* A host's strings into the worker's fixed fields, cut to fit. Not snprintf: both live in the
 * one swarm struct here, and GCC's -Wrestrict (at -O1, the sanitizer build) cannot tell the
 * fields apart and fails the build. */
static void s_copy(char *dst, size_t cap, const char *src)
{
    size_t n = strnlen(src, cap - 1);
    memmove(dst, src, n);
    dst[n] = 0;
}

/* The swarm's state for the dense model, built here rather than by llm_swarm_new: the plan is
 * by layer count under the workers' resident rule (the lab's predictions use it), the
 * assignment is stateless (n_ctx 0), and the control plane's settings are the config's. */
static int s_open(steps_t *c, char *err, size_t errlen)
{
    const config_t *cfg = c->cfg;
    const arm_ctx *a = c->a;
    char why[512];
    llm_swarm *sw = calloc(1, sizeof *sw);
    if (!sw || !(sw->plan = calloc(1, sizeof *sw->plan)) || !(sw->b = proto_buf_new()) ||
        !(sw->m = calloc(1, sizeof *sw->m)) || !(sw->assign = calloc(1, sizeof *sw->assign))) {
        free(sw);
        snprintf(err, errlen, "out of memory");
        return -1;
    }
    c->sw = sw;
    sw->cpu = -1;
    sw->fd = -1;
    pthread_mutex_init(&sw->mu, NULL); /* the pipe's functions take none; llm_swarm_free */
    pthread_cond_init(&sw->cv, NULL);  /* ends them */
    pthread_mutex_init(&sw->snap_mu, NULL);
    sw->mu_init = 1;
    for (uint32_t i = 0; i < LS_MAX_W; i++)
        sw->w[i].rep_fd = -1;
    snprintf(sw->model, sizeof sw->model, "%s", c->m->path);
    snprintf(sw->self, sizeof sw->self, "/proc/self/exe");
    sw->o.model = sw->model;
    sw->o.self_exe = sw->self;
    sw->o.cap_bytes = cfg->worker_cap_bytes;
    sw->o.threads = (int)cfg->worker_threads;
    sw->o.respawn = cfg->respawn;
    sw->o.slowdown = cfg->slowdown;
    sw->o.profile = a->profile;
    sw->o.seed = cfg->input_seed;
    sw->o.sessions = 1;
    sw->hb_ms = cfg->heartbeat_ms;
    sw->liveness = cfg->liveness;
    if (llm_cli_hosts_cfg(cfg, cfg->path[0] ? cfg->path : "the config", &sw->o, err, errlen))
        return -1;
    if (!sw->o.n_hosts)
        snprintf(sw->o.bind_host, sizeof sw->o.bind_host, "%s", cfg->host);
    c->n = sw->o.n_hosts ? sw->o.n_hosts : a->workers ? a->workers : cfg->workers;
    if (!c->n || c->n > LS_MAX_W) {
        snprintf(err, errlen, "%u workers: the resident arm takes 1..%d", c->n, LS_MAX_W);
        return -1;
    }
    sw->n = sw->o.workers = c->n;
    for (uint32_t i = 0; i < c->n; i++) {
        ls_worker *w = &sw->w[i];
        snprintf(w->id, sizeof w->id, "w%u", i);
        w->cap_bytes = cfg->worker_cap_bytes;
        if (i < sw->o.n_hosts) {
            const llm_swarm_host *h = &sw->o.hosts[i];
            w->remote = 1;
            s_copy(w->id, sizeof w->id, h->id);
            s_copy(w->ctl_ep, sizeof w->ctl_ep, h->endpoint);
            s_copy(w->pub, sizeof w->pub, h->pub);
            w->cap_bytes = h->cap_bytes;
        }
        w->routed_next = -2;
        w->fo = -1;
        c->fo_of[i] = -1;
    }
    /* partition first: a plan that cannot fit fails before anything is spawned */
    if (s_plan(c, err, errlen) || s_faults(c, err, errlen))
        return -1;
    if (!(sw->g = gguf_open(c->m->path, why, sizeof why))) {
        snprintf(err, errlen, "%s", why);
        return -1;
    }
    if ((sw->fd = open(c->m->path, O_RDONLY | O_CLOEXEC)) < 0) {
        util_errf(err, errlen, c->m->path, "%s", strerror(errno));
        return -1;
    }
    sw->n_layers = c->m->n_layers;
    sw->dim = c->d;
    sw->max_batch = 1;
    sw->n_ctx = 0; /* the worker's sign of a stateless range */
    sw->route_stop = -1;
    sw->frame_cap = proto_frame_limit(sw->dim, 1);
    if (!(sw->sums = calloc(sw->n_layers, sizeof *sw->sums)) ||
        !(sw->frame = malloc(sw->frame_cap)) || !(sw->ax = malloc(sizeof(float) * c->d)) ||
        !(sw->chunk = malloc(PROTO_MAX_CHUNK))) {
        snprintf(err, errlen, "out of memory");
        return -1;
    }
    for (uint32_t l = 0; l < sw->n_layers; l++)
        sw->sums[l] = c->m->layers[l].checksum;
    if (!netem_profile_is_none(&a->profile)) {
        if (!(sw->shaper = netem_shaper_new(&a->profile, cfg->input_seed * 977 + 3)) ||
            !(sw->rq = netem_queue_new(ST_QUEUE_CAP))) {
            snprintf(err, errlen, "out of memory");
            return -1;
        }
        if (a->profile.control_plane) {
            netem_profile rt = a->profile;
            rt.delay_ns *= 2; /* there and back, held at our end */
            rt.jitter_ns *= 2;
            sw->ctl_shaper = netem_shaper_new(&rt, cfg->input_seed * 977 + 11);
            sw->ctl_allow_ns = rt.delay_ns + 2 * rt.jitter_ns;
            for (uint32_t i = 0; i < c->n; i++)
                if (!(sw->w[i].ctlq = netem_queue_new(ST_QUEUE_CAP))) {
                    snprintf(err, errlen, "out of memory");
                    return -1;
                }
        }
    }
    sw->zctx = zmq_ctx_new();
    if (sw->o.key_pub[0] && !(sw->sec = sec_zap_start(sw->zctx, "coord", err, errlen)))
        return -1;
    sw->pull = zmq_socket(sw->zctx, ZMQ_PULL);
    if (sw->sec && sec_server(sw->pull, sw->o.key_secret)) {
        snprintf(err, errlen, "cannot enable CURVE on the result socket: %s",
                 zmq_strerror(errno));
        return -1;
    }
    for (uint32_t i = 0; sw->sec && i < sw->o.n_hosts; i++)
        sec_allow(sw->sec, sw->o.hosts[i].pub); /* their results arrive on our socket */
    char bind[128];
    size_t len = sizeof sw->pull_ep;
    snprintf(bind, sizeof bind, "tcp://%s:*",
             sw->o.bind_host[0] ? sw->o.bind_host : "127.0.0.1");
    if (zmq_bind(sw->pull, bind) ||
        zmq_getsockopt(sw->pull, ZMQ_LAST_ENDPOINT, sw->pull_ep, &len)) {
        snprintf(err, errlen, "cannot bind %s: %s", bind, zmq_strerror(errno));
        return -1;
    }
    if (lp_join_all(sw, err, errlen))
        return -1;
    /* a spawned worker that failed to join is the run's failure here, as a listed one's is
     * (the lab's setup is measured whole; lp_join_all leaves a real model's to its policy) */
    for (uint32_t i = 0; i < c->n; i++)
        if (sw->w[i].state != LW_LIVE) {
            snprintf(err, errlen, "%s: %s", sw->w[i].id, sw->w[i].why);
            return -1;
        }
    for (uint32_t i = 0; i < c->n; i++) {
        ls_worker *w = &sw->w[i];
        c->setup_read += w->ready.read_bytes;
        w->since_ns = util_now_ns();
        pirate_reset(&w->hb, util_now_ns());
        log_info("%s: layers [%u, %u) resident, %llu MiB loaded in %.0f ms, peak rss %llu MiB",
                 w->id, w->first, w->last, (unsigned long long)(w->ready.bytes_loaded >> 20),
                 w->ready.load_ns / 1e6, (unsigned long long)(w->ready.peak_rss_bytes >> 20));
    }
    return 0;
}

/* What is left of the swarm, in reverse; safe on a partial s_open. */
static void s_close(steps_t *c)
{
    llm_swarm *sw = c->sw;
    if (!sw)
        return;
    /* a lost or rejoining process may never hear its bye (stopped, cut off, or never said
     * hello to again): stop it now, so closing does not wait on it */
    for (uint32_t i = 0; i < sw->n; i++)
        if (sw->w[i].pid > 0 && sw->w[i].state != LW_LIVE) {
            if (sw->w[i].cont_at_ns)
                kill(sw->w[i].pid, SIGCONT);
            kill(sw->w[i].pid, SIGTERM);
        }
    /* one said hello to and not yet heard back may have taken us as its coordinator: it is
     * told bye too (lp_close_all tells the others), or a listed worker would refuse the next
     * coordinator as busy until its silence bound (seen in tests/e2e_swarm.sh: a run right
     * after one that failed at setup) */
    int linger = PIRATE_WORKER_SILENT_MS;
    msg_bye bye = { .reason = "done" };
    for (uint32_t i = 0; sw->b && i < sw->n; i++)
        if (sw->w[i].ctl && sw->w[i].state == LW_JOIN_HELLO &&
            proto_encode_bye(sw->b, &bye) == 0) {
            zmq_setsockopt(sw->w[i].ctl, ZMQ_LINGER, &linger, sizeof linger);
            zmq_send(sw->w[i].ctl, proto_buf_data(sw->b), proto_buf_len(sw->b), ZMQ_DONTWAIT);
        }
    if (sw->b && sw->zctx)
        lp_close_all(sw);
    for (uint32_t i = 0; i < LS_MAX_W; i++)
        netem_queue_free(&sw->w[i].ctlq); /* they hold zmq messages: before the context */
    netem_shaper_free(&sw->ctl_shaper);
    llm_swarm_free(&c->sw);
}

/* ------------------------------------------------------------ losses and rejoins */

/* Worker i's layers here under its cap, resident what fits and the rest streamed with the
 * [ssd] settings. 0, or -1 with c->budget_err. */
static int s_open_copy(steps_t *c, ls_worker *w)
{
    char err[512];
    slice_opts so = { .path = c->m->path, .first = w->first, .last = w->last, .n_ctx = 1,
                      .sessions = 1, .max_batch = 1, .cap_bytes = w->cap_bytes,
                      .expect_sums = c->sw->sums + w->first, .exec = &c->fbx };
    exec_opts *o = &c->fbx;
    o->budget_bytes = w->cap_bytes;
    if (!(w->fb = slice_new(&so, err, sizeof err))) {
        snprintf(c->budget_err, sizeof c->budget_err, "fallback for %s impossible: %s", w->id,
                 err);
        return -1;
    }
    const exec_plan *pl = slice_plan(w->fb);
    if (c->t_start) /* taken over during the steps: its load is in their reads too */
        c->fb_loaded += slice_loaded_bytes(w->fb);
    log_info("fallback for %s: %u layers resident, %u streamed per step", w->id,
             pl->n_resident, pl->n_streamed);
    return 0;
}

/* The route changes: every step in flight runs again under the new epoch. */
static void s_reroute(steps_t *c)
{
    for (uint32_t k = 0; k < c->sw->n; k++)
        c->sw->w[k].routed_next = -2;
    c->sw->route_stop = -1;
    c->restart_due = 1;
}

static void s_lose(steps_t *c, uint32_t i, const char *how)
{
    llm_swarm *sw = c->sw;
    ls_worker *w = &sw->w[i];
    uint64_t now = util_now_ns();
    if (w->state != LW_LIVE)
        return;
    st_failover *f = NULL;
    if (c->n_fo < sizeof c->fo / sizeof c->fo[0]) {
        f = &c->fo[c->n_fo];
        memset(f, 0, sizeof *f);
        snprintf(f->worker, sizeof f->worker, "%s", w->id);
        snprintf(f->how, sizeof f->how, "%s", how);
        f->lost_step = c->n_done;
        f->lost_ns = now;
        uint64_t since = w->fault_ns ? w->fault_ns : w->hb.heard_ns;
        f->detection_ms = since && now > since ? (now - since) / 1e6 : 0;
        f->rejoin_ms = -1;
        c->fo_of[i] = (int)c->n_fo++;
    }
    w->fault_ns = 0;
    /* a dead process is reaped; a live one is left running, to be said hello to again */
    if (w->pid > 0)
        lp_detach(sw, i);
    else
        lp_fence(sw, i);
    w->state = LW_LOST;
    w->probe_ns = w->since_ns = now;
    w->hb_busy_ns = w->hb_acts = 0; /* a new process starts counting afresh */
    snprintf(w->last_how, sizeof w->last_how, "%s", how);
    log_warn("%s lost (%s) at step %u after %.0f ms: layers [%u, %u) fall back to the "
             "coordinator", w->id, how, c->n_done, f ? f->detection_ms : 0.0, w->first, w->last);
    if (!w->fb && s_open_copy(c, w)) {
        c->budget_fail = 1;
        log_error("%s", c->budget_err);
        return;
    }
    s_reroute(c);
}

/* Its layers back in its process: the copy here goes, the route moves back. */
static void s_rejoin(steps_t *c, uint32_t i)
{
    ls_worker *w = &c->sw->w[i];
    uint64_t now = util_now_ns();
    w->state = LW_LIVE;
    w->since_ns = now;
    pirate_reset(&w->hb, now);
    if (c->fo_of[i] >= 0) {
        st_failover *f = &c->fo[c->fo_of[i]];
        f->rejoin_ms = w->hello_ns && now > w->hello_ns ? (now - w->hello_ns) / 1e6 : 0;
        log_info("%s rejoined: route moves back, fallback released (%.0f ms from hello)", w->id,
                 f->rejoin_ms);
    }
    c->fo_of[i] = -1;
    slice_free(&w->fb);
    s_reroute(c);
}

/* A lost worker asked back: a live process (frozen, cut off, a listed one) said hello to
 * again every ST_PROBE_MS once its link is up; a dead one respawned when the config says so.
 * A ready one rejoins. A stalled live one is lost. */
static void s_tick(steps_t *c)
{
    llm_swarm *sw = c->sw;
    uint64_t now = util_now_ns(), deadline = (uint64_t)c->cfg->step_deadline_ms * 1000000ull;
    for (uint32_t i = 0; i < c->n && !c->budget_fail; i++) {
        ls_worker *w = &sw->w[i];
        char err[256];
        /* before its first result, a busy worker is taken at its word */
        w->stall_ns = w->max_compute_ns ? ST_STALL_FACTOR * (w->max_compute_ns > deadline
                                                                 ? w->max_compute_ns : deadline)
                                        : 0;
        if (w->state == LW_LIVE && w->stall_ns && w->hb_busy_ns > w->stall_ns) {
            log_warn("%s has computed one activation for %.0f ms (its slowest so far %.0f ms): "
                     "stalled", w->id, w->hb_busy_ns / 1e6, w->max_compute_ns / 1e6);
            s_lose(c, i, "compute stalled");
        } else if (w->state == LW_READY) {
            s_rejoin(c, i);
        } else if (w->state == LW_LOST && !w->remote && w->pid <= 0) {
            if (!sw->o.respawn)
                continue;
            log_info("%s: respawning", w->id);
            if (lp_spawn(sw, i, err, sizeof err))
                log_error("%s: respawn failed: %s", w->id, err);
        } else if (w->state == LW_LOST && !w->cut_until_ns &&
                   now - w->probe_ns >= ST_PROBE_MS * 1000000ull) {
            w->probe_ns = now;
            if (lp_probe(sw, i, err, sizeof err))
                log_warn("%s: %s", w->id, err);
        }
    }
}

/* ------------------------------------------------------------ steps */

static double s_ms(uint64_t ns) { return ns / 1e6; }

/* Put slot k's step in flight (its input afresh). LP_OK, or LP_LOST (*lost, how) when a
 * route could not be set; a failure sets budget_fail. */
static int s_start(steps_t *c, uint32_t k, int *lost, char *how, size_t howlen)
{
    ls_pass *p = &c->slot[k];
    uint32_t s = c->slot_step[k];
    memset(p, 0, offsetof(ls_pass, tr));
    p->x = c->xs + (uint64_t)k * c->d;
    memcpy(p->x, c->a->inputs + (uint64_t)s * c->d, sizeof(float) * c->d);
    p->n = 1;
    p->pos0 = s; /* the faults name steps: the pipe fires them at the pass's position */
    p->stop = (int)c->n - 1;
    c->sent_ns[s] = util_now_ns();
    int rc = lp_start(c->sw, p, lost, how, howlen);
    if (rc < 0 || p->state == LP_FAIL) {
        snprintf(c->budget_err, sizeof c->budget_err, "%s", p->err);
        log_error("step %u: %s", s, p->err);
        c->budget_fail = 1;
    }
    return rc == LP_LOST ? LP_LOST : LP_OK;
}

/* Every step in flight again, lowest first (a loss on the way reroutes and starts over). */
static void s_restart(steps_t *c)
{
    char how[256];
    for (int round = 0; c->restart_due && !c->budget_fail && round < 64; round++) {
        c->restart_due = 0;
        lp_abort_all(c->sw, LP_RERUN, NULL);
        uint32_t from = 0;
        for (;;) {
            uint32_t k = UINT32_MAX;
            for (uint32_t j = 0; j < c->K; j++)
                if (c->slot_step[j] != ST_FREE && c->slot_step[j] >= from &&
                    c->slot[j].state != LP_DONE &&
                    (k == UINT32_MAX || c->slot_step[j] < c->slot_step[k]))
                    k = j;
            if (k == UINT32_MAX)
                break;
            from = c->slot_step[k] + 1;
            c->replays++;
            for (uint32_t i = 0; i < c->n; i++)
                if (c->fo_of[i] >= 0 && c->sw->w[i].state != LW_LIVE)
                    c->fo[c->fo_of[i]].replayed++;
            int lost;
            if (s_start(c, k, &lost, how, sizeof how) == LP_LOST) {
                s_lose(c, (uint32_t)lost, how);
                break;
            }
            if (c->budget_fail)
                break;
        }
    }
}

/* Slot k's pass is done: its output, latency and stage times. */
static void s_record(steps_t *c, uint32_t k)
{
    ls_pass *p = &c->slot[k];
    uint32_t s = c->slot_step[k];
    uint64_t now = util_now_ns();
    c->slot_step[k] = ST_FREE;
    if (c->done[s]) {
        c->dup_results++;
        return;
    }
    memcpy(c->a->outputs + (uint64_t)s * c->d, p->x, sizeof(float) * c->d);
    c->done[s] = 1;
    c->n_done++;
    c->sw->progress_ns = now;
    double e2e = s_ms(now - c->sent_ns[s]), work = 0;
    c->lat_ms[s] = c->r->step_ms[s] = e2e;
    for (uint32_t i = 0; i < p->n_tr; i++) {
        const msg_trace *t = &p->tr[i];
        c->st_wait += s_ms(t->wait_ns);
        c->st_deser += s_ms(t->deser_ns);
        c->st_compute += s_ms(t->compute_ns);
        c->st_ser += s_ms(t->ser_ns);
        c->st_send += s_ms(t->send_ns);
        work += s_ms(t->wait_ns + t->deser_ns + t->compute_ns + t->ser_ns + t->send_ns);
    }
    c->st_wait += s_ms(p->held_ns);
    work += s_ms(p->held_ns);
    c->st_e2e += e2e;
    c->st_net += e2e - work > 0 ? e2e - work : 0;
    if (p->here)
        for (uint32_t i = 0; i < c->n; i++)
            if (c->fo_of[i] >= 0 && c->sw->w[i].state != LW_LIVE) {
                c->fo[c->fo_of[i]].fallback_steps++;
                c->fo[c->fo_of[i]].fallback_ms_sum += e2e;
            }
}

/* A step out longer than the deadline, counted from when it was sent or from the pipeline's
 * last sign of progress, whichever is later, runs again with every step in flight under a new
 * epoch: a message lost on the way (nothing moves) is replayed, a slow pipeline that is
 * working is left alone. Progress is heard at heartbeat pace, so the deadline is at least one
 * liveness window (half a window replayed a busy pipeline on a loaded machine). */
static void s_check_deadlines(steps_t *c)
{
    uint64_t deadline = (uint64_t)c->cfg->step_deadline_ms * 1000000ull;
    uint64_t window = pirate_window_ns(c->cfg->heartbeat_ms, c->cfg->liveness,
                                       c->sw->ctl_allow_ns);
    uint64_t now = util_now_ns();
    if (deadline < window)
        deadline = window;
    for (uint32_t k = 0; k < c->K; k++) {
        uint32_t s = c->slot_step[k];
        if (s == ST_FREE || c->slot[k].state != LP_RUN)
            continue;
        uint64_t from = c->sent_ns[s] > c->sw->progress_ns ? c->sent_ns[s] : c->sw->progress_ns;
        if (now - from > deadline && lp_all_heard(c->sw, from)) {
            log_warn("step %u not back and no progress for %.0f ms: replaying the steps in "
                     "flight", s, deadline / 1e6);
            c->deadline_replays++;
            s_reroute(c);
            return;
        }
    }
}

/* Keep up to K steps in flight until every step is done, serving the control plane, the
 * emulated links, the deadlines and the losses between them. */
static void s_drive(steps_t *c)
{
    llm_swarm *sw = c->sw;
    char how[256];
    c->t_start = sw->progress_ns = util_now_ns();
    while (c->n_done < c->a->steps && !arm_stop && !c->budget_fail) {
        int lost = -1, moved = 0;
        for (uint32_t k = 0; k < c->K && !c->restart_due && !c->budget_fail &&
                             c->next_send < c->a->steps; k++) {
            if (c->slot_step[k] != ST_FREE)
                continue;
            c->slot_step[k] = c->next_send++;
            if (s_start(c, k, &lost, how, sizeof how) == LP_LOST)
                break;
        }
        if (lost < 0)
            lost = lp_collect(sw, how, sizeof how);
        if (lost < 0)
            lost = lp_poll(sw, how, sizeof how);
        if (lost >= 0)
            s_lose(c, (uint32_t)lost, how);
        for (uint32_t k = 0; k < c->K; k++)
            if (c->slot_step[k] != ST_FREE && c->slot[k].state == LP_DONE) {
                s_record(c, k);
                moved = 1;
            } else if (c->slot_step[k] != ST_FREE && c->slot[k].state == LP_FAIL &&
                       !c->budget_fail) {
                snprintf(c->budget_err, sizeof c->budget_err, "%s", c->slot[k].err);
                c->budget_fail = 1;
            }
        s_tick(c);
        if (!c->restart_due)
            s_check_deadlines(c);
        if (c->restart_due)
            s_restart(c);
        else if (!moved)
            lp_wait_any(sw);
        arm_progress(c->a, c->r->condition, c->n_done, c->a->steps,
                     (util_now_ns() - c->t_start) / 1e6);
    }
}

/* ------------------------------------------------------------ the report */

static void s_report_workers(steps_t *c, json_t *pw, uint64_t *agg, uint64_t *maxrss,
                             uint64_t *wire, uint64_t *wread, const uint64_t *io_before)
{
    for (uint32_t i = 0; i < c->n; i++) {
        ls_worker *w = &c->sw->w[i];
        json_t *o = json_object();
        uint64_t rss = w->have_stats ? w->stats.peak_rss_bytes : w->ready.peak_rss_bytes;
        json_object_set_new(o, "id", json_string(w->id));
        json_object_set_new(o, "endpoint", json_string(w->ctl_ep));
        json_object_set_new(o, "first", json_integer(w->first));
        json_object_set_new(o, "last", json_integer(w->last));
        json_object_set_new(o, "peak_rss_bytes", json_integer((json_int_t)rss));
        json_object_set_new(o, "cgroup_peak_bytes", json_integer((json_int_t)(
            w->have_stats ? w->stats.cgroup_peak_bytes : w->ready.cgroup_peak_bytes)));
        json_object_set_new(o, "cap_bytes", json_integer((json_int_t)w->cap_bytes));
        json_object_set_new(o, "load_ms", json_real(w->ready.load_ns / 1e6));
        json_object_set_new(o, "fetched_bytes", json_integer((json_int_t)w->ready.fetched_bytes));
        json_object_set_new(o, "fetch_ms", json_real(w->ready.fetch_ns / 1e6));
        json_object_set_new(o, "resumed_bytes", json_integer((json_int_t)w->ready.resumed_bytes));
        json_object_set_new(o, "bad_msgs", json_integer((json_int_t)w->stats.bad_msgs));
        json_object_set_new(o, "stale_msgs", json_integer((json_int_t)w->stats.stale_msgs));
        json_object_set_new(o, "state", json_string(w->state == LW_LIVE ? "ready" : "lost"));
        json_array_append_new(pw, o);
        *agg += rss;
        if (rss > *maxrss)
            *maxrss = rss;
        *wire += w->stats.bytes_out;
        if (w->hello_pid && w->state == LW_LIVE) {
            uint64_t now_io = util_io_read_bytes_pid((int)w->hello_pid);
            if (now_io > io_before[i])
                *wread += now_io - io_before[i];
        }
    }
}

static void s_report(steps_t *c, const uint64_t *io_before)
{
    run_result *r = c->r;
    json_t *pw = json_array(), *fo = json_array(), *bs = json_object();
    uint64_t agg = util_vmhwm_bytes(0), maxrss = 0, wread = 0, wire = c->sw->act_bytes;
    double n = c->n_done ? c->n_done : 1;
    s_report_workers(c, pw, &agg, &maxrss, &wire, &wread, io_before);
    for (uint32_t k = 0; k < c->n_fo; k++) {
        st_failover *f = &c->fo[k];
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
    json_object_set_new(bs, "wire", json_integer((json_int_t)wire));
    json_t *x = r->extra;
    json_object_set_new(x, "workers", json_integer(c->n));
    json_object_set_new(x, "inflight", json_integer(c->a->inflight));
    json_object_set_new(x, "hops", json_integer(hops));
    json_object_set_new(x, "per_worker", pw);
    json_object_set_new(x, "aggregate_peak_rss_bytes", json_integer((json_int_t)agg));
    json_object_set_new(x, "coordinator_peak_rss_bytes",
                        json_integer((json_int_t)util_vmhwm_bytes(0)));
    json_object_set_new(x, "bytes_sent", bs);
    json_object_set_new(x, "workers_read_bytes_during_steps", json_integer((json_int_t)wread));
    json_object_set_new(x, "failover", fo);
    json_object_set_new(x, "lost_steps", json_integer((json_int_t)(c->a->steps - c->n_done)));
    json_object_set_new(x, "duplicate_steps", json_integer(0));
    json_object_set_new(x, "duplicate_results_dropped",
                        json_integer((json_int_t)c->dup_results));
    json_object_set_new(x, "stale_msgs_dropped",
                        json_integer((json_int_t)c->sw->stale_results));
    json_object_set_new(x, "bad_msgs", json_integer((json_int_t)c->sw->bad_msgs));
    json_object_set_new(x, "replays", json_integer((json_int_t)c->replays));
    json_object_set_new(x, "deadline_replays", json_integer((json_int_t)c->deadline_replays));
    json_object_set_new(x, "distributed_bytes", json_integer((json_int_t)c->sw->served_bytes));
    json_object_set_new(x, "transport", json_string(c->sw->sec ? "curve" : "plaintext"));
    json_object_set_new(x, "zap_refused", json_integer((json_int_t)sec_refused(c->sw->sec)));
    json_object_set_new(x, "link_delay_ms", json_real(c->a->profile.delay_ns / 1e6));
    r->peak_rss_bytes = maxrss;
    r->cap_bytes = c->cfg->worker_cap_bytes;
    r->setup_read_bytes = c->setup_read;
    json_object_set_new(r->stage_ms, "wait", json_real(c->st_wait / n));
    json_object_set_new(r->stage_ms, "deser",
                        json_real((c->st_deser + s_ms(c->sw->coord_deser_ns)) / n));
    json_object_set_new(r->stage_ms, "compute", json_real(c->st_compute / n));
    json_object_set_new(r->stage_ms, "ser", json_real((c->st_ser + s_ms(c->sw->coord_ser_ns)) / n));
    json_object_set_new(r->stage_ms, "send", json_real(c->st_send / n));
    json_object_set_new(r->stage_ms, "network", json_real(c->st_net / n));
    json_object_set_new(r->stage_ms, "e2e", json_real(c->st_e2e / n));
    /* per-request latency (several in flight) beside service throughput */
    double *v = malloc(sizeof(double) * (c->n_done ? c->n_done : 1));
    uint32_t k = 0;
    for (uint32_t s = 0; v && s < c->a->steps; s++)
        if (c->done[s])
            v[k++] = c->lat_ms[s];
    if (v) {
        util_sort_doubles(v, k);
        json_object_set_new(x, "latency_ms_p50", json_real(k ? util_percentile(v, k, 50) : 0));
        json_object_set_new(x, "latency_ms_p95", json_real(k ? util_percentile(v, k, 95) : 0));
        json_object_set_new(x, "latency_ms_p99", json_real(k ? util_percentile(v, k, 99) : 0));
    }
    free(v);
}

/* ------------------------------------------------------------ the arm */

/* After the steps: reads, stats, report, parity and gates; a partial run's completed steps
 * judged against the reference. 0, -EXIT_BUDGET or -1 with err. */
static int s_finish(steps_t *c, uint64_t io0, uint64_t reaped0, const uint64_t *io_before,
                    char *err, size_t errlen)
{
    arm_ctx *a = c->a;
    run_result *r = c->r;
    llm_swarm *sw = c->sw;
    r->total_ms = (util_now_ns() - c->t_start) / 1e6;
    for (uint32_t i = 0; i < c->n; i++) {
        if (c->fo_of[i] >= 0 && sw->w[i].state != LW_LIVE)
            log_info("%s did not rejoin before the end of the run", sw->w[i].id);
        slice_drain(sw->w[i].fb);
    }
    /* our own reads: the kernel adds a reaped child's I/O to its parent's count */
    r->ssd_read_bytes = util_io_read_bytes() - io0 - (sw->reaped_read_bytes - reaped0);
    r->streamed_bytes = sw->fb_stats.streamed_bytes;
    lp_collect_stats(sw, ST_STATS_TIMEOUT_MS);
    s_report(c, io_before);
    result_finish_stats(r);
    if (c->n_done == a->steps)
        arm_parity(a, r);
    /* gates: streaming happened only in fallback, whose load during the steps counts too */
    gate_cache_judge(r, r->ssd_read_bytes, sw->fb_stats.streamed_bytes, c->fb_loaded);
    gate_content_judge(r, &sw->fb_stats);
    if (c->budget_fail && a->ref_outputs) {
        /* partial run: what was completed must still be exactly the reference's */
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
        return -EXIT_BUDGET;
    }
    if (arm_stop) {
        snprintf(err, errlen, "interrupted after %u of %u steps", c->n_done, a->steps);
        return -1;
    }
    return 0;
}

int arm_run_resident(arm_ctx *a, run_result *r, char *err, size_t errlen)
{
    steps_t *c = calloc(1, sizeof *c);
    char how[256];
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
    c->K = a->inflight ? a->inflight : 1;
    c->fbx = (exec_opts){ .queue_depth = a->cfg->queue_depth, .chunk_bytes = a->cfg->chunk_bytes,
                          .overhead_bytes = a->cfg->overhead_bytes,
                          .buffered = a->cfg->buffered, .verify_resident = 1,
                          .buffers_4k = a->cfg->buffers_4k };
    c->slot = calloc(c->K, sizeof *c->slot);
    c->slot_step = malloc(c->K * sizeof *c->slot_step);
    c->xs = malloc((size_t)c->K * c->d * sizeof(float));
    c->done = calloc(a->steps, 1);
    c->sent_ns = calloc(a->steps, sizeof *c->sent_ns);
    c->lat_ms = calloc(a->steps, sizeof *c->lat_ms);
    if (!c->slot || !c->slot_step || !c->xs || !c->done || !c->sent_ns || !c->lat_ms) {
        snprintf(err, errlen, "out of memory");
        goto out;
    }
    for (uint32_t k = 0; k < c->K; k++)
        c->slot_step[k] = ST_FREE;
    signal(SIGPIPE, SIG_IGN);
    util_min_timerslack();
    kernel_set_threads((int)a->cfg->threads);
    snprintf(r->cap_mode, sizeof r->cap_mode, "per worker");
    util_reset_hwm();
    uint64_t t0 = util_now_ns();
    if (s_open(c, err, errlen))
        goto out;
    int lost = -1;
    rc = lp_route(c->sw, (int)c->n - 1, &lost, how, sizeof how, err, errlen);
    if (rc == LP_LOST) /* lost before the first step: its layers run here from the start */
        s_lose(c, (uint32_t)lost, how);
    else if (rc < 0)
        goto out;
    r->setup_ms = (util_now_ns() - t0) / 1e6;
    uint64_t io_before[LS_MAX_W] = { 0 };
    for (uint32_t i = 0; i < c->n; i++)
        io_before[i] = c->sw->w[i].hello_pid
                           ? util_io_read_bytes_pid((int)c->sw->w[i].hello_pid) : 0;
    uint64_t io0 = util_io_read_bytes(), reaped0 = c->sw->reaped_read_bytes;
    s_drive(c);
    rc = s_finish(c, io0, reaped0, io_before, err, errlen);
out:
    s_close(c);
    if (rc && rc != -EXIT_BUDGET && !err[0])
        snprintf(err, errlen, "resident arm failed");
    free(c->slot);
    free(c->slot_step);
    free(c->xs);
    free(c->done);
    free(c->sent_ns);
    free(c->lat_ms);
    free(c);
    return rc;
}
