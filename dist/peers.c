/* peers.c — the resident arm's workers: spawning, control sockets and monitors, hello/assign/heartbeat, setup and the partition. dist/ */
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
#include "arch/kernel.h"
#include "base/log.h"
#include "base/sec.h"
#include "base/util.h"
#include "base/zmon.h"
#include "dist/arm.h"
#include "dist/partition.h"
#include "proto/proto.h"
#include "dist/spawn.h"
#include "dist/worker.h"
#include "dist/swarm_int.h"

/* ------------------------------------------------------------ sockets and messages */

void *swarm_sock(swarm_t *c, int type)
{
    char err[128];
    void *s = zsock_new(c->ctx, type, err, sizeof err);
    int one = 1;
    if (s && (type == ZMQ_DEALER || type == ZMQ_PUSH))
        zmq_setsockopt(s, ZMQ_IMMEDIATE, &one, sizeof one); /* never queue for a dead peer */
    return s;
}

int swarm_ctl_send(swarm_t *c, swarm_peer *p)
{
    if (!p->dealer || p->cut_until_ns)
        return -1; /* a cut link carries nothing */
    return zmq_send(p->dealer, proto_buf_data(c->out), proto_buf_len(c->out), ZMQ_DONTWAIT) < 0
               ? -1 : 0;
}

/* Close the control socket and its monitor. */
void swarm_close_ctl(swarm_peer *p)
{
    zmon_close(&p->mon, p->dealer);
    if (p->dealer) {
        zmq_close(p->dealer);
        p->dealer = NULL;
    }
}

/* A worker that is loading cannot answer heartbeats; the kernel still tells us when its
 * process dies (the TCP connection drops), which the control socket's monitor reports. */
static void s_monitor_ctl(swarm_t *c, swarm_peer *p, uint32_t idx)
{
    p->mon = zmon_open(c->ctx, p->dealer, "swarm-mon", idx, ++p->mon_gen,
                       ZMQ_EVENT_DISCONNECTED);
}

/* Did the control connection drop since we last looked? */
int swarm_ctl_dropped(swarm_peer *p)
{
    return (zmon_drain(p->mon) & ZMQ_EVENT_DISCONNECTED) != 0;
}

int swarm_connect_ctl(swarm_t *c, swarm_peer *p)
{
    char rid[64];
    swarm_close_ctl(p);
    p->dealer = swarm_sock(c, ZMQ_DEALER);
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

void swarm_send_hello(swarm_t *c, swarm_peer *p)
{
    msg_hello h = { .proto_version = PROTO_VERSION, .pid = (uint32_t)getpid() };
    snprintf(h.id, sizeof h.id, "coord");
    snprintf(h.data_ep, sizeof h.data_ep, "%s", c->pull_ep);
    if (proto_encode_hello(c->out, &h) == 0)
        swarm_ctl_send(c, p);
}

void swarm_send_assign(swarm_t *c, swarm_peer *p)
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
        swarm_ctl_send(c, p);
    p->state = P_LOADING;
}

void swarm_send_heartbeat(swarm_t *c, swarm_peer *p)
{
    uint64_t now = util_now_ns();
    msg_heartbeat hb = { .seq = pirate_sent(&p->hb, now), .sent_ns = now };
    if (proto_encode_heartbeat(c->out, &hb) == 0)
        swarm_ctl_send(c, p);
}

/* ------------------------------------------------------------ spawning local workers */

int swarm_spawn(swarm_t *c, swarm_peer *p, char *err, size_t errlen)
{
    /* Forked from the run's own thread, which outlives every worker: they die with it. */
    spawn_opts o = { .exe = "/proc/self/exe", .id = p->id, .host = c->cfg->host,
                     .cap_bytes = p->cap_bytes, .slowdown = c->cfg->slowdown,
                     .die_with_parent = 1 };
    return spawn_worker(&o, &p->spawned, p->ctl_ep, sizeof p->ctl_ep, err, errlen);
}

void swarm_reap(swarm_t *c, swarm_peer *p, int kill_it)
{
    uint64_t read = 0;
    if (p->spawned &&
        spawn_reap(p->spawned, kill_it ? SPAWN_KILL : SPAWN_POLL, &read, NULL, 0) == 1) {
        c->reaped_read_bytes += read;
        p->spawned = 0;
    }
}

/* ------------------------------------------------------------ setup */

static int s_wait_states(swarm_t *c, int want, uint64_t timeout_ms, char *err, size_t errlen)
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
            swarm_peer *p = &c->p[i];
            if ((it[i].revents & ZMQ_POLLIN) || p->ctlq)
                swarm_handle_ctl(c, p);
            /* A worker that said hello again during setup (it had forgotten us) is assigned
             * again; a resumable fetch picks up where it stopped. */
            if (want == P_READY && p->state == P_HELLO)
                swarm_send_assign(c, p);
            /* ZMQ_IMMEDIATE drops a hello sent before the TCP connection is up: repeat it. */
            if (p->state == P_NEW && util_now_ns() - p->probe_ns > 100000000ull) {
                p->probe_ns = util_now_ns();
                swarm_send_hello(c, p);
            }
            /* Workers that are ready (or waiting for others to load) hear from us, so none
             * takes a long setup for a vanished coordinator. */
            if (p->state >= P_HELLO && p->state != P_LOST &&
                pirate_due(&p->hb, util_now_ns(), c->cfg->heartbeat_ms))
                swarm_send_heartbeat(c, p);
            swarm_reap(c, p, 0);
            if ((p->state == P_LOADING || p->state == P_HELLO) && swarm_ctl_dropped(p)) {
                swarm_mark_lost(c, p, "connection dropped during setup");
                continue;
            }
            if (c->p[i].state < want && c->p[i].state != P_LOST && c->p[i].spawned == 0 &&
                c->p[i].local && c->p[i].state != P_NEW) {
                swarm_mark_lost(c, &c->p[i], "died during setup");
            }
        }
    }
}

static int s_plan(swarm_t *c, char *err, size_t errlen)
{
    uint32_t maxl[CONFIG_MAX_WORKERS], first[CONFIG_MAX_WORKERS], last[CONFIG_MAX_WORKERS];
    exec_opts o;
    char why[512], b1[32], b2[32];
    uint64_t per = exec_layer_bytes(c->d);
    /* Each worker holds what its own planner (the same rule) will accept. */
    for (uint32_t i = 0; i < c->n; i++) {
        exec_opts_worker(&o, c->p[i].cap_bytes);
        uint32_t fit = exec_resident_fit(c->d, &o);
        maxl[i] = fit < c->m->n_layers ? fit : c->m->n_layers;
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

int swarm_setup(swarm_t *c, char *err, size_t errlen)
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
    c->pull = swarm_sock(c, ZMQ_PULL);
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
            swarm_peer *p = &c->p[i];
            char why[512];
            snprintf(p->id, sizeof p->id, "%s", cw->name);
            snprintf(p->ctl_ep, sizeof p->ctl_ep, "%s", cw->endpoint);
            p->cap_bytes = cw->cap_bytes ? cw->cap_bytes : c->cfg->worker_cap_bytes;
            if (!cw->endpoint[0]) {
                snprintf(err, errlen, "[worker.%s] has no endpoint", cw->name);
                return -1;
            }
            if (cw->public_key[0] && sec_parse_pub(cw->public_key, p->pub, why, sizeof why)) {
                snprintf(err, errlen, "[worker.%s] public_key: %s", cw->name, why);
                return -1;
            }
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
        if (!c->cfg->n_workers && swarm_spawn(c, &c->p[i], err, errlen))
            return -1;
        if (swarm_connect_ctl(c, &c->p[i]))
            return -1;
        swarm_send_hello(c, &c->p[i]);
        pirate_reset(&c->p[i].hb, util_now_ns());
    }
    if (s_wait_states(c, P_HELLO, S_HELLO_TIMEOUT_MS, err, errlen))
        return -1;
    for (uint32_t i = 0; i < c->n; i++)
        if (c->p[i].state == P_HELLO)
            swarm_send_assign(c, &c->p[i]);
    if (s_wait_states(c, P_READY, S_LOAD_TIMEOUT_MS, err, errlen))
        return -1;
    for (uint32_t i = 0; i < c->n; i++) {
        swarm_peer *p = &c->p[i];
        c->setup_read += p->ready.read_bytes;
        pirate_reset(&p->hb, util_now_ns());
        log_info("%s: layers [%u, %u) resident, %llu MiB loaded in %.0f ms, peak rss %llu MiB",
                 p->id, p->first, p->last, (unsigned long long)(p->ready.bytes_loaded >> 20),
                 p->ready.load_ns / 1e6, (unsigned long long)(p->ready.peak_rss_bytes >> 20));
    }
    swarm_send_routes(c);
    return 0;
}

