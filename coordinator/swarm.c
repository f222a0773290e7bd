/* swarm.c — the resident arm: workers, partition, route, steps in flight, fallback, rejoin. coordinator/
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
 * emulated round trip) is lost. Default 100 ms x 5 = 0.5 s, under the 1 s target.
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

#include "common/cap.h"
#include "common/exec.h"
#include "common/kernel.h"
#include "common/log.h"
#include "common/sec.h"
#include "common/util.h"
#include "coordinator/arm.h"
#include "coordinator/cmd.h"
#include "coordinator/partition.h"
#include "proto/proto.h"
#include "worker/worker.h"

#define S_HELLO_TIMEOUT_MS 10000   /* spawn + hello; a worker is a fresh exec of bin/swarm */
#define S_LOAD_TIMEOUT_MS 300000   /* loading 512 MiB takes ~0.4 s here; remote disks are slower */
#define S_PROBE_MS 50              /* how often a lost worker is asked for hello again */
#define S_STATS_TIMEOUT_MS 2000
#define S_QUEUE_CAP 256
#define S_COORD_STAGE 0xffff

enum { P_NEW = 0, P_HELLO, P_LOADING, P_READY, P_LOST, P_REJOINING };

typedef struct {
    char id[64];
    char ctl_ep[256];
    char data_ep[PROTO_MAX_STR];
    uint64_t cap_bytes;
    pid_t spawned;             /* our child (0: remote, started by hand) */
    uint32_t pid;              /* the worker's pid from hello */
    void *dealer, *push;
    int state;
    uint32_t first, last;
    uint64_t last_heard_ns, hb_sent_ns, hb_seq, barrier_seq, probe_ns;
    uint32_t unanswered;       /* heartbeats sent since the worker last said anything */
    int barrier_ok;
    msg_ready ready;
    msg_stats stats;
    int have_stats;
    uint64_t io_before;        /* /proc/<pid>/io read_bytes when the steps started */
    exec_t *fb;                /* local fallback while lost */
    int fo;                    /* index into failover records, -1 none */
    uint64_t cont_at_ns;       /* SIGCONT due (stop fault) */
    uint64_t fault_ns;         /* when we injected a fault into it */
    uint64_t cut_until_ns;     /* control link cut (coordinator side) until then */
    int local;                 /* spawned by this coordinator (may be respawned) */
    char pub[SEC_KEY_LEN];     /* its CURVE key ("" = plaintext) */
    void *mon;                 /* PAIR reading the control socket's monitor (disconnects) */
    uint32_t mon_gen;
    netem_queue *ctlq;         /* control messages held by an emulated control link */
} s_peer;

typedef struct {
    char worker[64];
    uint64_t lost_step;
    double detection_ms;
    uint64_t replayed;
    uint64_t fallback_steps;
    double fallback_ms_sum;
    double rejoin_ms;          /* < 0: did not rejoin */
    uint64_t lost_ns, hello_ns;
    char how[32];
} s_failover;

typedef struct {
    arm_ctx *a;
    run_result *r;
    const config_t *cfg;
    const model_t *m;
    uint32_t d, n;
    s_peer p[CONFIG_MAX_WORKERS];
    void *ctx, *pull;
    char pull_ep[PROTO_MAX_STR];
    uint64_t epoch;
    proto_buf *out;
    proto_msg *msg;
    float *x;
    msg_act act;               /* outgoing act scratch */
    netem_shaper *shaper;
    netem_queue *queue;
    uint64_t ctl_allow_ns;     /* extra liveness allowance for an emulated control link */
    netem_shaper *ctl_shaper;  /* the control link's round trip, when the profile covers it */
    /* steps */
    uint64_t *sent_ns;
    uint8_t *done, *in_flight, *in_fallback;
    uint32_t next_send, n_done, n_inflight;
    uint32_t low;              /* lowest step not done: in-flight steps lie in [low, next_send) */
    uint64_t t_start;
    /* accounting */
    double st_wait, st_deser, st_compute, st_ser, st_send, st_net, st_e2e;
    double coord_ser, coord_deser;
    uint64_t bytes_wire, bad_msgs, stale_msgs, dup_results, replays, deadline_replays;
    double *lat_ms;
    s_failover fo[CONFIG_MAX_WORKERS * 4];
    uint32_t n_fo;
    exec_stats fb_stats;
    int budget_fail;
    char budget_err[512];
    uint64_t setup_read;
    int model_fd;              /* our copy, served to workers that fetch their layers */
    uint8_t *chunk;            /* PROTO_MAX_CHUNK bytes */
    uint64_t served_bytes;
    sec_t *sec;                /* ZAP handler for the result socket when CURVE is on */
    char pub[SEC_KEY_LEN], secret[SEC_KEY_LEN];
} s_coord;


/* ------------------------------------------------------------ sockets and messages */

static void *s_sock(s_coord *c, int type)
{
    char err[128];
    void *s = zsock_new(c->ctx, type, err, sizeof err);
    int one = 1;
    if (s && (type == ZMQ_DEALER || type == ZMQ_PUSH))
        zmq_setsockopt(s, ZMQ_IMMEDIATE, &one, sizeof one); /* never queue for a dead peer */
    return s;
}

static int s_ctl_send(s_coord *c, s_peer *p)
{
    if (!p->dealer || p->cut_until_ns)
        return -1; /* a cut link carries nothing */
    return zmq_send(p->dealer, proto_buf_data(c->out), proto_buf_len(c->out), ZMQ_DONTWAIT) < 0
               ? -1 : 0;
}

/* Close the control socket and its monitor. */
static void s_close_ctl(s_peer *p)
{
    if (p->mon) {
        zmq_close(p->mon);
        p->mon = NULL;
    }
    if (p->dealer) {
        zmq_socket_monitor(p->dealer, NULL, 0);
        zmq_close(p->dealer);
        p->dealer = NULL;
    }
}

/* A worker that is loading cannot answer heartbeats; the kernel still tells us when its
 * process dies (the TCP connection drops), which the control socket's monitor reports. */
static void s_monitor_ctl(s_coord *c, s_peer *p, uint32_t idx)
{
    char addr[64];
    int linger = 0;
    snprintf(addr, sizeof addr, "inproc://swarm-mon-%u-%u", idx, ++p->mon_gen);
    if (zmq_socket_monitor(p->dealer, addr, ZMQ_EVENT_DISCONNECTED))
        return;
    p->mon = zmq_socket(c->ctx, ZMQ_PAIR);
    if (p->mon) {
        zmq_setsockopt(p->mon, ZMQ_LINGER, &linger, sizeof linger);
        if (zmq_connect(p->mon, addr)) {
            zmq_close(p->mon);
            p->mon = NULL;
        }
    }
}

/* Did the control connection drop since we last looked? */
static int s_ctl_dropped(s_peer *p)
{
    int dropped = 0;
    zmq_msg_t m;
    if (!p->mon)
        return 0;
    zmq_msg_init(&m);
    while (zmq_msg_recv(&m, p->mon, ZMQ_DONTWAIT) >= 0) {
        if (zmq_msg_size(&m) >= 2) {
            uint16_t ev;
            memcpy(&ev, zmq_msg_data(&m), sizeof ev);
            dropped |= ev == ZMQ_EVENT_DISCONNECTED;
        }
        if (zmq_msg_more(&m)) /* the endpoint frame */
            zmq_msg_recv(&m, p->mon, ZMQ_DONTWAIT);
    }
    zmq_msg_close(&m);
    return dropped;
}

static int s_connect_ctl(s_coord *c, s_peer *p)
{
    char rid[64];
    s_close_ctl(p);
    p->dealer = s_sock(c, ZMQ_DEALER);
    if (!p->dealer)
        return -1;
    s_monitor_ctl(c, p, (uint32_t)(p - c->p));
    /* A fixed routing id: a worker that froze and woke up recognises its coordinator. */
    snprintf(rid, sizeof rid, "coord-%d", (int)getpid());
    zmq_setsockopt(p->dealer, ZMQ_ROUTING_ID, rid, strlen(rid));
    if (p->pub[0] && sec_client(p->dealer, c->pub, c->secret, p->pub)) {
        log_error("%s: cannot enable CURVE: %s", p->id, zmq_strerror(errno));
        return -1;
    }
    if (zmq_connect(p->dealer, p->ctl_ep)) {
        log_error("%s: cannot connect to %s: %s", p->id, p->ctl_ep, zmq_strerror(errno));
        return -1;
    }
    return 0;
}

static void s_send_hello(s_coord *c, s_peer *p)
{
    msg_hello h = { .proto_version = PROTO_VERSION, .pid = (uint32_t)getpid() };
    snprintf(h.id, sizeof h.id, "coord");
    snprintf(h.data_ep, sizeof h.data_ep, "%s", c->pull_ep);
    if (proto_encode_hello(c->out, &h) == 0)
        s_ctl_send(c, p);
}

static void s_send_assign(s_coord *c, s_peer *p)
{
    static msg_assign a;
    memset(&a, 0, sizeof a);
    snprintf(a.model_path, sizeof a.model_path, "%s", c->m->path);
    a.model_size = c->m->file_size;
    a.n_layers = c->m->n_layers;
    a.dim = c->d;
    a.first = p->first;
    a.last = p->last;
    for (uint32_t l = p->first; l < p->last; l++)
        a.checksums[l - p->first] = c->m->layers[l].checksum;
    a.threads = c->cfg->worker_threads;
    a.cap_bytes = p->cap_bytes;
    a.header_bytes = UINT64_MAX;
    for (uint32_t l = 0; l < c->m->n_layers; l++) {
        const model_layer *L = &c->m->layers[l];
        uint64_t lo = L->g_off < L->w_off ? L->g_off : L->w_off;
        if (lo < a.header_bytes)
            a.header_bytes = lo; /* everything before the first tensor: the GGUF header */
    }
    if (proto_encode_assign(c->out, &a) == 0)
        s_ctl_send(c, p);
    p->state = P_LOADING;
}

static void s_link_of(const netem_profile *pr, uint64_t seed, msg_link *l)
{
    memset(l, 0, sizeof *l);
    l->delay_ns = pr->delay_ns;
    l->jitter_ns = pr->jitter_ns;
    l->dist = pr->dist;
    l->loss_ppm = (uint32_t)(pr->loss * 1e6);
    l->rate_bps = pr->rate_bps;
    l->seed = seed;
}

static void s_send_heartbeat(s_coord *c, s_peer *p)
{
    msg_heartbeat hb = { .seq = ++p->hb_seq, .sent_ns = util_now_ns() };
    if (proto_encode_heartbeat(c->out, &hb) == 0)
        s_ctl_send(c, p);
    p->hb_sent_ns = hb.sent_ns;
    p->unanswered++;
}

/* ------------------------------------------------------------ spawning local workers */

static int s_spawn(s_coord *c, s_peer *p, char *err, size_t errlen)
{
    int fds[2];
    char cap[32], fd[16], listen[128];
    if (pipe(fds)) {
        snprintf(err, errlen, "pipe: %s", strerror(errno));
        return -1;
    }
    snprintf(cap, sizeof cap, "%llu", (unsigned long long)p->cap_bytes);
    snprintf(listen, sizeof listen, "tcp://%s:*", c->cfg->host);
    pid_t pid = fork();
    if (pid < 0) {
        snprintf(err, errlen, "fork: %s", strerror(errno));
        close(fds[0]);
        close(fds[1]);
        return -1;
    }
    if (pid == 0) {
        /* Die with the coordinator, whatever kills it (Ctrl-C, SIGKILL). */
        prctl(PR_SET_PDEATHSIG, SIGTERM);
        close(fds[0]);
        if (fds[1] != 3) {
            dup2(fds[1], 3);
            close(fds[1]);
        }
        snprintf(fd, sizeof fd, "3");
        char *argv[] = { "swarm", "worker", "--listen", listen, "--cap", cap, "--id", p->id,
                         "--once", "--report-fd", fd, NULL };
        execv("/proc/self/exe", argv);
        _exit(127);
    }
    close(fds[1]);
    p->spawned = pid;
    /* Read the bound endpoint ("tcp://127.0.0.1:PORT\n"). */
    struct pollfd pfd = { .fd = fds[0], .events = POLLIN };
    size_t got = 0;
    uint64_t deadline = util_now_ns() + S_HELLO_TIMEOUT_MS * 1000000ull;
    while (got < sizeof p->ctl_ep - 1) {
        uint64_t now = util_now_ns();
        if (now >= deadline || poll(&pfd, 1, (int)((deadline - now) / 1000000) + 1) <= 0)
            break;
        ssize_t k = read(fds[0], p->ctl_ep + got, sizeof p->ctl_ep - 1 - got);
        if (k <= 0)
            break;
        got += (size_t)k;
        if (memchr(p->ctl_ep, '\n', got))
            break;
    }
    close(fds[0]);
    p->ctl_ep[got] = 0;
    char *nl = strchr(p->ctl_ep, '\n');
    if (!nl) {
        snprintf(err, errlen, "%s: spawned worker (pid %d) did not report its endpoint", p->id,
                 (int)pid);
        return -1;
    }
    *nl = 0;
    return 0;
}

static void s_reap(s_coord *c, s_peer *p, int kill_it)
{
    char dir[256];
    int status;
    if (!p->spawned)
        return;
    if (kill_it)
        kill(p->spawned, SIGKILL);
    if (waitpid(p->spawned, &status, kill_it ? 0 : WNOHANG) == p->spawned) {
        /* A SIGKILLed worker cannot remove its own cgroup. */
        snprintf(dir, sizeof dir, "/sys/fs/cgroup/memory/swarm-worker-%d", (int)p->spawned);
        cap_remove_dir(dir);
        snprintf(dir, sizeof dir, "/sys/fs/cgroup/swarm-worker-%d", (int)p->spawned);
        cap_remove_dir(dir);
        p->spawned = 0;
    }
    (void)c;
}

/* ------------------------------------------------------------ routes and epochs */

static int s_is_local(const s_peer *p)
{
    return p->state != P_READY;
}

static void s_mark_lost(s_coord *c, s_peer *p, const char *how);
static void s_handle_ctl(s_coord *c, s_peer *p);

/* Worker i's next hop under the current epoch, followed by a heartbeat: its echo proves the
 * route is in force (control messages are processed in order). */
static void s_route_peer(s_coord *c, uint32_t i)
{
    s_peer *p = &c->p[i];
    msg_route rt = { .epoch = c->epoch, .hop = i };
    int next_remote = i + 1 < c->n && !s_is_local(&c->p[i + 1]);
    snprintf(rt.next_ep, sizeof rt.next_ep, "%s", next_remote ? c->p[i + 1].data_ep : c->pull_ep);
    snprintf(rt.next_key, sizeof rt.next_key, "%s", next_remote ? c->p[i + 1].pub : c->pub);
    rt.last = i + 1 == c->n;
    if (i > 0 && !s_is_local(&c->p[i - 1]))
        snprintf(rt.prev_key, sizeof rt.prev_key, "%s", c->p[i - 1].pub);
    else
        snprintf(rt.prev_key, sizeof rt.prev_key, "%s", c->pub);
    s_link_of(&c->a->profile, c->cfg->input_seed * 131 + i * 7 + c->epoch, &rt.link);
    if (proto_encode_route(c->out, &rt) == 0)
        s_ctl_send(c, p);
    s_send_heartbeat(c, p);
    p->barrier_seq = p->hb_seq;
    p->barrier_ok = 0;
}

/* Wait for worker i's route echo; a worker that does not answer within its liveness is lost
 * (which reroutes). 0 when acknowledged. */
static int s_barrier_one(s_coord *c, uint32_t i)
{
    s_peer *p = &c->p[i];
    uint64_t limit = (uint64_t)c->cfg->liveness * c->cfg->heartbeat_ms * 1000000ull +
                     c->ctl_allow_ns;
    uint64_t t0 = util_now_ns();
    while (p->state == P_READY && !p->barrier_ok) {
        if (util_now_ns() - t0 > limit) {
            s_mark_lost(c, p, "no route ack");
            return -1;
        }
        zmq_pollitem_t it = { p->dealer, 0, ZMQ_POLLIN, 0 };
        if (p->dealer)
            zmq_poll(&it, 1, 10);
        s_handle_ctl(c, p);
    }
    return p->state == P_READY ? 0 : -1;
}

/* A new epoch's routes, the last hop first, each acknowledged before its predecessor hears of
 * it: with CURVE a receiver must allow the sender's key before the sender connects, or its
 * ZAP handler refuses the handshake (seen on the namespace hosts, 2026-11-30). Returns 1 when
 * this epoch's routes are all in force, 0 when a worker was lost meanwhile (the nested
 * reroute then set up a newer epoch). */
static int s_send_routes(s_coord *c)
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

static void s_send_step(s_coord *c, uint32_t s);

static void s_replay_inflight(s_coord *c)
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

static void s_reroute(s_coord *c)
{
    if (s_send_routes(c))
        s_replay_inflight(c); /* (a nested reroute already replayed under its epoch) */
}

static void s_mark_lost(s_coord *c, s_peer *p, const char *how)
{
    char err[512];
    uint64_t now = util_now_ns();
    if (p->state == P_LOST)
        return;
    int was_setup = p->state != P_READY && p->state != P_REJOINING;
    s_failover *f = NULL;
    if (c->n_fo < sizeof c->fo / sizeof c->fo[0]) {
        f = &c->fo[c->n_fo];
        memset(f, 0, sizeof *f);
        snprintf(f->worker, sizeof f->worker, "%s", p->id);
        snprintf(f->how, sizeof f->how, "%s", how);
        f->lost_step = c->n_done;
        f->lost_ns = now;
        uint64_t since = p->fault_ns ? p->fault_ns : p->last_heard_ns;
        f->detection_ms = since && now > since ? (now - since) / 1e6 : 0;
        f->rejoin_ms = -1;
        p->fo = (int)c->n_fo++;
    }
    p->state = P_LOST;
    p->probe_ns = now;
    s_close_ctl(p);
    if (p->push) {
        zmq_close(p->push);
        p->push = NULL;
    }
    log_warn("%s lost (%s) at step %u%s after %.0f ms: layers [%u, %u) fall back to the "
             "coordinator", p->id, how, c->n_done, was_setup ? " (during setup)" : "",
             f ? f->detection_ms : 0.0, p->first, p->last);
    /* Fallback under the lost worker's budget: resident what fits, stream the rest. */
    if (!p->fb) {
        exec_opts o = { .budget_bytes = p->cap_bytes, .queue_depth = c->cfg->queue_depth,
                        .chunk_bytes = c->cfg->chunk_bytes,
                        .overhead_bytes = c->cfg->overhead_bytes,
                        .buffered = c->cfg->buffered, .verify_resident = 1 };
        p->fb = exec_new(c->m, p->first, p->last, &o, err, sizeof err);
        if (!p->fb) {
            c->budget_fail = 1;
            snprintf(c->budget_err, sizeof c->budget_err, "fallback for %s impossible: %s",
                     p->id, err);
            log_error("%s", c->budget_err);
            return;
        }
        const exec_plan *pl = exec_get_plan(p->fb);
        log_info("fallback for %s: %u layers resident, %u streamed per step", p->id,
                 pl->n_resident, pl->n_streamed);
    }
    s_reroute(c);
}

/* ------------------------------------------------------------ data plane */

static void s_record_result(s_coord *c, msg_act *a, uint64_t arrival_ns, uint64_t t_deser)
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
    c->lat_ms[s] = e2e;
    c->r->step_ms[s] = e2e;
    double work = 0;
    for (uint32_t i = 0; i < a->n_trace; i++) {
        const msg_trace *t = &a->trace[i];
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
static void s_deliver(s_coord *c, msg_act *a, uint32_t h, uint64_t arrival_ns)
{
    char err[512];
    while (h < c->n && s_is_local(&c->p[h])) {
        s_peer *p = &c->p[h];
        uint64_t t = util_now_ns();
        if (!p->fb) {
            /* Budget failure: cannot serve this segment; the run stops. */
            return;
        }
        if (exec_step(p->fb, a->x, &c->fb_stats, err, sizeof err)) {
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
    s_peer *p = &c->p[h];
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

static void s_send_step(s_coord *c, uint32_t s)
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

static void s_handle_data(s_coord *c, zmq_msg_t *m, uint64_t arrival_ns)
{
    char err[256];
    uint64_t t0 = util_now_ns();
    msg_act *a = &c->msg->u.act;
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

static void s_on_pull(s_coord *c)
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

static void s_release_due(s_coord *c)
{
    zmq_msg_t m;
    uint64_t arrival;
    zmq_msg_init(&m);
    while (netem_queue_pop_due(c->queue, util_now_ns(), &m, &arrival))
        s_handle_data(c, &m, arrival);
    zmq_msg_close(&m);
}

/* ------------------------------------------------------------ control plane */

static void s_rejoin_done(s_coord *c, s_peer *p)
{
    uint64_t now = util_now_ns();
    if (p->fo >= 0) {
        s_failover *f = &c->fo[p->fo];
        f->rejoin_ms = f->hello_ns ? (now - f->hello_ns) / 1e6 : 0;
        log_info("%s rejoined: route moves back, fallback released (%.0f ms from hello)", p->id,
                 f->rejoin_ms);
    }
    exec_free(&p->fb);
    p->fo = -1;
    s_reroute(c);
}

/* One control message from worker p, once its (emulated) control link has delivered it. */
static void s_ctl_one(s_coord *c, s_peer *p, zmq_msg_t *m)
{
    char err[256];
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
    p->last_heard_ns = util_now_ns();
    p->unanswered = 0;
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
        p->push = s_sock(c, ZMQ_PUSH);
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
            s_send_assign(c, p);
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
    case MSG_HEARTBEAT:
        if (c->msg->u.hb.seq >= p->barrier_seq)
            p->barrier_ok = 1;
        break;
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
        if (proto_encode_chunk(c->out, &ch) == 0 && s_ctl_send(c, p) == 0)
            c->served_bytes += f.len;
        break;
    }
    case MSG_ERROR:
        log_error("%s: %s", p->id, c->msg->u.error.text);
        if (c->msg->u.error.code == PERR_STATE && p->state != P_LOST) {
            /* The worker forgot us (a cut longer than its coordinator timeout): say
             * hello again. In setup it is re-assigned; in a run it is lost and rejoins. */
            if (p->state == P_READY)
                s_mark_lost(c, p, "worker released us");
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
static void s_handle_ctl(s_coord *c, s_peer *p)
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
static void s_tick(s_coord *c)
{
    uint64_t now = util_now_ns();
    uint64_t hb = (uint64_t)c->cfg->heartbeat_ms * 1000000ull;
    uint64_t dead = (uint64_t)c->cfg->liveness * hb + c->ctl_allow_ns;
    for (uint32_t i = 0; i < c->n; i++) {
        s_peer *p = &c->p[i];
        if (p->cont_at_ns && now >= p->cont_at_ns) {
            if (p->spawned || p->pid)
                kill(p->spawned ? p->spawned : (pid_t)p->pid, SIGCONT);
            log_info("%s: SIGCONT (stop fault over)", p->id);
            p->cont_at_ns = 0;
        }
        if (p->cut_until_ns && now >= p->cut_until_ns) {
            p->cut_until_ns = 0;
            log_info("%s: link restored", p->id);
        }
        s_reap(c, p, 0);
        if (p->state == P_LOST && p->local && !p->spawned && c->cfg->respawn) {
            char err[256];
            log_info("%s: respawning", p->id);
            if (s_spawn(c, p, err, sizeof err))
                log_error("%s: respawn failed: %s", p->id, err);
            else
                s_close_ctl(p); /* the new process listens on a new port */
            p->probe_ns = 0;
        }
        if (p->state == P_REJOINING && s_ctl_dropped(p)) {
            s_mark_lost(c, p, "connection dropped while rejoining");
            now = util_now_ns();
            continue;
        }
        if (p->state == P_READY || p->state == P_REJOINING) {
            if (now - p->hb_sent_ns >= hb)
                s_send_heartbeat(c, p);
            /* Silence counts only if we kept asking: while the coordinator itself was busy
             * (a long fallback step), unsent heartbeats cannot have gone unanswered. Read
             * whatever arrived meanwhile before judging. */
            if (now - p->last_heard_ns > dead && p->state == P_READY)
                s_handle_ctl(c, p);
            if (now - p->last_heard_ns > dead && p->state == P_READY &&
                p->unanswered >= c->cfg->liveness) {
                s_mark_lost(c, p, p->fault_ns ? "fault injected" : "heartbeats stopped");
                now = util_now_ns();
            }
        } else if (p->state == P_LOST && !p->cut_until_ns &&
                   now - p->probe_ns >= S_PROBE_MS * 1000000ull) {
            /* Ask again. The socket was made fresh when the worker was lost, so nothing
             * stale is queued towards it; ZMQ_IMMEDIATE drops hellos until it connects. */
            p->probe_ns = now;
            if (p->dealer || s_connect_ctl(c, p) == 0)
                s_send_hello(c, p);
        }
    }
}

static void s_inject_faults(s_coord *c, uint32_t step)
{
    for (uint32_t k = 0; k < c->a->n_faults; k++) {
        arm_fault *f = &c->a->faults[k];
        if (f->done || f->step != step)
            continue;
        for (uint32_t i = 0; i < c->n; i++) {
            s_peer *p = &c->p[i];
            pid_t pid = p->spawned ? p->spawned : (pid_t)p->pid;
            if (strcmp(p->id, f->worker))
                continue;
            f->done = 1;
            p->fault_ns = util_now_ns();
            if (f->kind == FAULT_KILL) {
                log_info("fault: SIGKILL %s (pid %d) at step %u", p->id, (int)pid, step);
                kill(pid, SIGKILL);
            } else if (f->kind == FAULT_STOP) {
                log_info("fault: SIGSTOP %s for %.1f s at step %u", p->id, f->seconds, step);
                kill(pid, SIGSTOP);
                p->cont_at_ns = util_now_ns() + (uint64_t)(f->seconds * 1e9);
            } else {
                /* The coordinator's end of the link goes dark both ways: nothing sent to the
                 * worker, nothing it sends accepted, as if the cable were pulled here. */
                log_info("fault: cutting %s's link for %.1f s at step %u", p->id, f->seconds,
                         step);
                p->cut_until_ns = util_now_ns() + (uint64_t)(f->seconds * 1e9);
            }
        }
    }
}

/* ------------------------------------------------------------ setup */

static int s_wait_states(s_coord *c, int want, uint64_t timeout_ms, char *err, size_t errlen)
{
    uint64_t deadline = util_now_ns() + timeout_ms * 1000000ull;
    for (;;) {
        int pending = 0;
        for (uint32_t i = 0; i < c->n; i++) {
            if (c->p[i].state == P_NEW && c->budget_err[0] && want == P_READY) {
                snprintf(err, errlen, "%s", c->budget_err);
                return -1;
            }
            if (c->p[i].state < want && c->p[i].state != P_LOST)
                pending++;
        }
        if (!pending)
            return 0;
        if (arm_stop) {
            snprintf(err, errlen, "interrupted");
            return -1;
        }
        if (util_now_ns() > deadline) {
            for (uint32_t i = 0; i < c->n; i++)
                if (c->p[i].state < want) {
                    snprintf(err, errlen, "%s (%s) did not answer %s in %llu s", c->p[i].id,
                             c->p[i].ctl_ep, want == P_HELLO ? "hello" : "ready",
                             (unsigned long long)(timeout_ms / 1000));
                    return -1;
                }
            return -1;
        }
        zmq_pollitem_t it[CONFIG_MAX_WORKERS];
        for (uint32_t i = 0; i < c->n; i++)
            it[i] = (zmq_pollitem_t){ c->p[i].dealer, 0, c->p[i].dealer ? ZMQ_POLLIN : 0, 0 };
        zmq_poll(it, (int)c->n, 20);
        for (uint32_t i = 0; i < c->n; i++) {
            s_peer *p = &c->p[i];
            if ((it[i].revents & ZMQ_POLLIN) || p->ctlq)
                s_handle_ctl(c, p);
            /* A worker that said hello again during setup (it had forgotten us) is assigned
             * again; a resumable fetch picks up where it stopped. */
            if (want == P_READY && p->state == P_HELLO)
                s_send_assign(c, p);
            /* ZMQ_IMMEDIATE drops a hello sent before the TCP connection is up: repeat it. */
            if (p->state == P_NEW && util_now_ns() - p->probe_ns > 100000000ull) {
                p->probe_ns = util_now_ns();
                s_send_hello(c, p);
            }
            /* Workers that are ready (or waiting for others to load) hear from us, so none
             * takes a long setup for a vanished coordinator. */
            if (p->state >= P_HELLO && p->state != P_LOST &&
                util_now_ns() - p->hb_sent_ns > (uint64_t)c->cfg->heartbeat_ms * 1000000ull)
                s_send_heartbeat(c, p);
            s_reap(c, p, 0);
            if ((p->state == P_LOADING || p->state == P_HELLO) && s_ctl_dropped(p)) {
                s_mark_lost(c, p, "connection dropped during setup");
                continue;
            }
            if (c->p[i].state < want && c->p[i].state != P_LOST && c->p[i].spawned == 0 &&
                c->p[i].local && c->p[i].state != P_NEW) {
                s_mark_lost(c, &c->p[i], "died during setup");
            }
        }
    }
}

static int s_plan(s_coord *c, char *err, size_t errlen)
{
    uint32_t maxl[CONFIG_MAX_WORKERS], first[CONFIG_MAX_WORKERS], last[CONFIG_MAX_WORKERS];
    exec_opts o = { .queue_depth = 1, .chunk_bytes = 4u << 20, .overhead_bytes = 16u << 20,
                    .resident_only = 1 };
    exec_plan pl;
    char why[512], b1[32], b2[32];
    /* Per-layer cost with the worker's overhead, from a one-layer plan. */
    o.budget_bytes = 0;
    if (exec_plan_make(c->m, 0, 1, &o, &pl, why, sizeof why)) {
        snprintf(err, errlen, "%s", why);
        return -1;
    }
    uint64_t fixed = 16u << 20, per = pl.layer_alloc;
    for (uint32_t i = 0; i < c->n; i++) {
        uint64_t cap = c->p[i].cap_bytes;
        maxl[i] = cap == 0 ? c->m->n_layers
                  : cap > fixed + 2 * c->d * 4 + 2 * EXEC_ALIGN
                      ? (uint32_t)((cap - fixed - 2 * c->d * 4 - 2 * EXEC_ALIGN) / per) : 0;
    }
    if (partition_layers(c->m->n_layers, c->n, maxl, first, last, why, sizeof why)) {
        size_t len = (size_t)snprintf(err, errlen, "cannot partition %u layers of %s each: %s;",
                                      c->m->n_layers, util_fmt_size(per, b1, sizeof b1), why);
        for (uint32_t i = 0; i < c->n && len < errlen; i++)
            len += (size_t)snprintf(err + len, errlen - len, " %s cap %s holds %u;", c->p[i].id,
                                    util_fmt_size(c->p[i].cap_bytes, b2, sizeof b2), maxl[i]);
        return -1;
    }
    for (uint32_t i = 0; i < c->n; i++) {
        c->p[i].first = first[i];
        c->p[i].last = last[i];
    }
    return 0;
}

static int s_setup(s_coord *c, char *err, size_t errlen)
{
    size_t len = sizeof c->pull_ep;
    char ep[128];
    if (c->cfg->key[0]) {
        if (sec_load_key(c->cfg->key, c->pub, c->secret, err, errlen))
            return -1;
        c->sec = sec_zap_start(c->ctx, "coord", err, errlen);
        if (!c->sec)
            return -1;
    }
    c->pull = s_sock(c, ZMQ_PULL);
    snprintf(ep, sizeof ep, "tcp://%s:*", c->cfg->host);
    if (c->pull && c->sec && sec_server(c->pull, c->secret)) {
        snprintf(err, errlen, "cannot enable CURVE on the result socket: %s", zmq_strerror(errno));
        return -1;
    }
    if (!c->pull || zmq_bind(c->pull, ep)) {
        snprintf(err, errlen, "cannot bind %s: %s", ep, zmq_strerror(errno));
        return -1;
    }
    zmq_getsockopt(c->pull, ZMQ_LAST_ENDPOINT, c->pull_ep, &len);
    /* Workers: listed ones, or spawned locally. */
    if (c->cfg->n_workers) {
        c->n = c->cfg->n_workers;
        for (uint32_t i = 0; i < c->n; i++) {
            const config_worker *cw = &c->cfg->worker[i];
            s_peer *p = &c->p[i];
            snprintf(p->id, sizeof p->id, "%s", cw->name);
            snprintf(p->ctl_ep, sizeof p->ctl_ep, "%s", cw->endpoint);
            p->cap_bytes = cw->cap_bytes ? cw->cap_bytes : c->cfg->worker_cap_bytes;
            if (!cw->endpoint[0]) {
                snprintf(err, errlen, "[worker.%s] has no endpoint", cw->name);
                return -1;
            }
            if (cw->public_key[0] && sec_parse_pub(cw->public_key, p->pub, err, errlen))
                return -1;
            if (c->sec && !p->pub[0]) {
                snprintf(err, errlen, "[security] key is set but [worker.%s] has no public_key: "
                         "every link must be CURVE", cw->name);
                return -1;
            }
            if (p->pub[0] && !c->sec) {
                snprintf(err, errlen, "[worker.%s] has a public_key but [security] key is not "
                         "set: the coordinator needs its own key pair", cw->name);
                return -1;
            }
            if (!p->pub[0] && !c->cfg->plaintext && !sec_endpoint_is_local(p->ctl_ep)) {
                snprintf(err, errlen, "[worker.%s] %s is not loopback: refusing plaintext (set "
                         "[security] key and public_key, or [swarm] plaintext = 1)", cw->name,
                         p->ctl_ep);
                return -1;
            }
            if (p->pub[0])
                sec_allow(c->sec, p->pub); /* its results arrive on our result socket */
        }
    } else {
        c->n = c->a->workers ? c->a->workers : c->cfg->workers;
        for (uint32_t i = 0; i < c->n; i++) {
            snprintf(c->p[i].id, sizeof c->p[i].id, "w%u", i);
            c->p[i].cap_bytes = c->cfg->worker_cap_bytes;
            c->p[i].local = 1;
        }
    }
    for (uint32_t i = 0; i < c->n; i++)
        c->p[i].fo = -1;
    /* Partition first: a plan that cannot fit fails before anything is spawned. */
    if (s_plan(c, err, errlen))
        return -1;
    for (uint32_t i = 0; i < c->n; i++) {
        if (!c->cfg->n_workers && s_spawn(c, &c->p[i], err, errlen))
            return -1;
        if (s_connect_ctl(c, &c->p[i]))
            return -1;
        s_send_hello(c, &c->p[i]);
        c->p[i].last_heard_ns = util_now_ns();
    }
    if (s_wait_states(c, P_HELLO, S_HELLO_TIMEOUT_MS, err, errlen))
        return -1;
    for (uint32_t i = 0; i < c->n; i++)
        if (c->p[i].state == P_HELLO)
            s_send_assign(c, &c->p[i]);
    if (s_wait_states(c, P_READY, S_LOAD_TIMEOUT_MS, err, errlen))
        return -1;
    for (uint32_t i = 0; i < c->n; i++) {
        s_peer *p = &c->p[i];
        c->setup_read += p->ready.read_bytes;
        p->last_heard_ns = util_now_ns();
        log_info("%s: layers [%u, %u) resident, %llu MiB loaded in %.0f ms, peak rss %llu MiB",
                 p->id, p->first, p->last, (unsigned long long)(p->ready.bytes_loaded >> 20),
                 p->ready.load_ns / 1e6, (unsigned long long)(p->ready.peak_rss_bytes >> 20));
    }
    s_send_routes(c);
    return 0;
}

/* ------------------------------------------------------------ teardown and report */

static void s_collect_stats(s_coord *c)
{
    uint64_t deadline = util_now_ns() + S_STATS_TIMEOUT_MS * 1000000ull;
    for (uint32_t i = 0; i < c->n; i++) {
        if (c->p[i].state != P_READY)
            continue;
        msg_stats q = { 0 };
        if (proto_encode_stats(c->out, &q) == 0)
            s_ctl_send(c, &c->p[i]);
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
                s_handle_ctl(c, &c->p[i]);
    }
}

static void s_teardown(s_coord *c)
{
    msg_bye bye;
    snprintf(bye.reason, sizeof bye.reason, "run over");
    for (uint32_t i = 0; i < c->n; i++) {
        s_peer *p = &c->p[i];
        if (p->dealer && proto_encode_bye(c->out, &bye) == 0)
            s_ctl_send(c, p);
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
        s_peer *p = &c->p[i];
        while (p->spawned && util_now_ns() < deadline) {
            s_reap(c, p, 0);
            if (p->spawned)
                usleep(5000);
        }
        if (p->spawned && p->cont_at_ns)
            kill(p->spawned, SIGCONT);
        s_reap(c, p, 1);
        exec_free(&p->fb);
        s_close_ctl(p);
        if (p->push)
            zmq_close(p->push);
        p->push = NULL;
    }
    if (c->pull)
        zmq_close(c->pull);
    c->pull = NULL;
}

static void s_report(s_coord *c)
{
    run_result *r = c->r;
    json_t *pw = json_array(), *fo = json_array(), *bs = json_object();
    uint64_t agg = util_vmhwm_bytes(0), maxrss = 0, wread = 0;
    double n = c->n_done ? c->n_done : 1;
    for (uint32_t i = 0; i < c->n; i++) {
        s_peer *p = &c->p[i];
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
        s_failover *f = &c->fo[k];
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

/* ------------------------------------------------------------ the arm */

int arm_run_resident(arm_ctx *a, run_result *r, char *err, size_t errlen)
{
    s_coord *c = calloc(1, sizeof *c);
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
    if (s_setup(c, err, errlen))
        goto out;
    r->setup_ms = (util_now_ns() - t0) / 1e6;
    for (uint32_t i = 0; i < c->n; i++)
        c->p[i].io_before = c->p[i].pid ? util_io_read_bytes_pid((int)c->p[i].pid) : 0;
    uint64_t io0 = util_io_read_bytes();

    /* Drive: keep up to `inflight` steps in the pipeline; results recorded by step. */
    uint32_t K = a->inflight ? a->inflight : 1;
    uint64_t deadline_ns = (uint64_t)a->cfg->step_deadline_ms * 1000000ull;
    c->t_start = util_now_ns();
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
        long timeout = (long)a->cfg->heartbeat_ms / 2;
        for (uint32_t i = 0; c->ctl_shaper && i < c->n; i++) {
            uint64_t cn = netem_queue_next(c->p[i].ctlq);
            if (cn < next)
                next = cn;
        }
        if (next != UINT64_MAX)
            timeout = next > now ? (long)((next - now) / 1000000) : 0;
        if (timeout > (long)a->cfg->heartbeat_ms / 2)
            timeout = (long)a->cfg->heartbeat_ms / 2;
        zmq_poll(it, (int)c->n + 1, timeout);
        if (it[0].revents & ZMQ_POLLIN)
            s_on_pull(c);
        for (uint32_t i = 0; i < c->n; i++)
            if ((it[i + 1].revents & ZMQ_POLLIN) || c->p[i].ctlq)
                s_handle_ctl(c, &c->p[i]);
        next = netem_queue_next(c->queue);
        if (next != UINT64_MAX) {
            now = util_now_ns();
            if (next > now && next - now < 1000000)
                util_sleep_until_ns(next);
            s_release_due(c);
        }
        s_tick(c);
        /* Per-step deadline: a step that is not back in time is replayed (new epoch). */
        now = util_now_ns();
        for (uint32_t s = c->low; s < c->next_send; s++) {
            if (c->in_flight[s] && !c->done[s] && now - c->sent_ns[s] > deadline_ns) {
                log_warn("step %u not back after %u ms: replaying the steps in flight", s,
                         a->cfg->step_deadline_ms);
                c->deadline_replays++;
                s_reroute(c);
                break;
            }
        }
        arm_progress(a, r->condition, c->n_done, a->steps, (util_now_ns() - c->t_start) / 1e6);
    }
    r->total_ms = (util_now_ns() - c->t_start) / 1e6;
    for (uint32_t i = 0; i < c->n; i++)
        if (c->p[i].fo >= 0 && c->p[i].state != P_READY)
            log_info("%s did not rejoin before the end of the run", c->p[i].id);
    for (uint32_t i = 0; i < c->n; i++)
        exec_drain(c->p[i].fb);
    r->ssd_read_bytes = util_io_read_bytes() - io0;
    r->streamed_bytes = c->fb_stats.streamed_bytes;
    s_collect_stats(c);
    s_report(c);
    result_finish_stats(r);
    if (c->n_done == a->steps)
        arm_parity(a, r);
    /* Gates: streaming happened only in fallback; it must have come from the disk. */
    if (c->fb_stats.streamed_bytes) {
        double lo = 0.99 * (double)c->fb_stats.streamed_bytes;
        if ((double)r->ssd_read_bytes >= lo)
            r->gate_cache = GATE_PASS;
        else
            result_void(r, &r->gate_cache, "cache: fallback streamed %llu bytes, storage served "
                        "%llu", (unsigned long long)c->fb_stats.streamed_bytes,
                        (unsigned long long)r->ssd_read_bytes);
    }
    r->gate_content = c->fb_stats.content_fail ? GATE_VOID : GATE_PASS;
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
        s_teardown(c);
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
