/* llm_swarm.c — a real model's layers in spawned worker processes, behind the llm runner's
 * resident-arm hook. coordinator/
 *
 * One pass at a time: an act of n positions goes to the first worker, comes back from the
 * last as a result, and the call returns; the workers keep each session's KV caches. No
 * waits are guessed: a reply is awaited until it comes or a worker process is gone (checked
 * every S_POLL_MS). The workers drop a coordinator that is silent on the control plane for
 * 3 s (S_SILENT_MS), so while a result is awaited a heartbeat goes to each every S_HB_MS
 * (a long prompt pass on a loaded machine takes seconds); between passes the caller must
 * not pause longer than that (generate frees the swarm before its parity run).
 */
#include "coordinator/llm_swarm.h"

#include <errno.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>
#include <zmq.h>

#include "arch/sums.h"
#include "common/gguf.h"
#include "common/util.h"
#include "proto/proto.h"

#define S_MAX_W 8
#define S_POLL_MS 200
#define S_HB_MS 100   /* the dense swarm's default heartbeat period */
#define S_SILENT_MS 3000 /* a worker drops a coordinator silent this long (worker_int.h) */

struct llm_swarm {
    uint32_t n;
    pid_t pid[S_MAX_W];
    void *zctx, *ctl[S_MAX_W], *pull, *push;
    char data_ep[S_MAX_W][PROTO_MAX_STR];
    proto_buf *b;
    proto_msg *m;
    uint32_t dim, max_batch, n_ctx;
    uint64_t req, epoch, last_hb_ns, acts, wire;
    uint8_t *frame;
    size_t frame_cap;
    partition_llm_plan *plan;
};

static int s_send(llm_swarm *sw, void *sock)
{
    sw->wire += proto_buf_len(sw->b);
    return zmq_send(sock, proto_buf_data(sw->b), proto_buf_len(sw->b), 0) < 0 ? -1 : 0;
}

/* A heartbeat to every worker when S_HB_MS have passed; echoes are drained as they come
 * (nothing waits for them: the workers answer on their loop whatever they compute). */
static void s_heartbeat(llm_swarm *sw)
{
    uint64_t now = util_now_ns();
    for (uint32_t i = 0; i < sw->n; i++)
        while (zmq_recv(sw->ctl[i], sw->frame, sw->frame_cap, ZMQ_DONTWAIT) >= 0)
            ;
    if (now - sw->last_hb_ns < S_HB_MS * 1000000ull)
        return;
    sw->last_hb_ns = now;
    msg_heartbeat hb = { .seq = now, .sent_ns = now };
    for (uint32_t i = 0; i < sw->n; i++)
        if (proto_encode_heartbeat(sw->b, &hb) == 0)
            zmq_send(sw->ctl[i], proto_buf_data(sw->b), proto_buf_len(sw->b), ZMQ_DONTWAIT);
}

/* One frame from sock into sw->m (an act's x into x), awaited until it comes or a worker
 * is gone; heartbeats go on meanwhile once the workers are routed (hb). */
static int s_recv_hb(llm_swarm *sw, void *sock, float *x, int hb, const char *what, char *err,
                     size_t errlen)
{
    zmq_pollitem_t it = { sock, 0, ZMQ_POLLIN, 0 };
    char why[256];
    while (zmq_poll(&it, 1, hb ? S_HB_MS : S_POLL_MS) <= 0) {
        if (hb)
            s_heartbeat(sw);
        for (uint32_t i = 0; i < sw->n; i++)
            if (kill(sw->pid[i], 0)) {
                snprintf(err, errlen, "worker w%u (pid %d) is gone while waiting for its %s",
                         i, (int)sw->pid[i], what);
                return -1;
            }
    }
    int n = zmq_recv(sock, sw->frame, sw->frame_cap, 0);
    memset(sw->m, 0, sizeof *sw->m);
    sw->m->u.act.x = x;
    if (n < 0 || (size_t)n > sw->frame_cap ||
        proto_decode_n(sw->frame, (size_t)n, x ? sw->dim : 0, x ? sw->max_batch : 1, sw->m, why,
                       sizeof why)) {
        snprintf(err, errlen, "bad %s: %s", what, n < 0 ? "receive failed" : why);
        return -1;
    }
    sw->wire += (size_t)n;
    return 0;
}

static int s_recv(llm_swarm *sw, void *sock, float *x, const char *what, char *err,
                  size_t errlen)
{
    return s_recv_hb(sw, sock, x, 0, what, err, errlen);
}

static int s_layers(void *ctx, uint64_t session, float *x, uint32_t n, uint32_t pos0, char *err,
                    size_t errlen)
{
    llm_swarm *sw = ctx;
    s_heartbeat(sw);
    msg_act a = { .req = ++sw->req, .step = sw->req, .epoch = sw->epoch, .hop = 0,
                  .session = session, .pos = pos0, .n_pos = n, .dim = sw->dim, .x = x };
    if (proto_encode_act(sw->b, MSG_ACT, &a) || s_send(sw, sw->push)) {
        snprintf(err, errlen, "session %llu: cannot send %u positions to w0",
                 (unsigned long long)session, n);
        return -1;
    }
    if (s_recv_hb(sw, sw->pull, x, 1, "result", err, errlen))
        return -1;
    if (sw->m->type != MSG_RESULT || sw->m->u.act.req != sw->req || sw->m->u.act.n_pos != n) {
        snprintf(err, errlen, "session %llu: a %s for request %llu (%u positions) where the "
                 "result of %llu (%u) was due", (unsigned long long)session,
                 proto_type_name(sw->m->type), (unsigned long long)sw->m->u.act.req,
                 sw->m->u.act.n_pos, (unsigned long long)sw->req, n);
        return -1;
    }
    sw->acts++;
    return 0;
}

static void s_end(void *ctx, uint64_t session)
{
    llm_swarm *sw = ctx;
    msg_session_end e = { .session = session, .epoch = sw->epoch };
    for (uint32_t i = 0; i < sw->n; i++)
        if (proto_encode_session_end(sw->b, &e) == 0)
            s_send(sw, sw->ctl[i]);
}

/* fork + exec a worker on loopback; its control endpoint comes back on a pipe (the worker
 * either writes it or exits: no deadline to guess). */
static int s_spawn(llm_swarm *sw, uint32_t i, const llm_swarm_opts *o, char *ep, size_t eplen,
                   char *err, size_t errlen)
{
    int fd[2];
    char id[16], cap[32], rfd[16];
    if (pipe(fd)) {
        snprintf(err, errlen, "pipe: %s", strerror(errno));
        return -1;
    }
    snprintf(id, sizeof id, "w%u", i);
    snprintf(cap, sizeof cap, "%llu", (unsigned long long)o->cap_bytes);
    snprintf(rfd, sizeof rfd, "%d", fd[1]);
    pid_t pid = fork();
    if (pid < 0) {
        snprintf(err, errlen, "fork: %s", strerror(errno));
        close(fd[0]);
        close(fd[1]);
        return -1;
    }
    if (pid == 0) {
        close(fd[0]);
        if (o->cap_bytes)
            execl(o->self_exe, o->self_exe, "worker", "--listen", "tcp://127.0.0.1:*", "--id",
                  id, "--cap", cap, "--once", "--report-fd", rfd, (char *)NULL);
        else
            execl(o->self_exe, o->self_exe, "worker", "--listen", "tcp://127.0.0.1:*", "--id",
                  id, "--once", "--report-fd", rfd, (char *)NULL);
        _exit(127);
    }
    close(fd[1]);
    sw->pid[i] = pid;
    size_t got = 0;
    ssize_t r;
    while (got + 1 < eplen && (r = read(fd[0], ep + got, eplen - got - 1)) > 0)
        got += (size_t)r;
    close(fd[0]);
    ep[got] = 0;
    char *nl = strchr(ep, '\n');
    if (nl)
        *nl = 0;
    if (!got || strncmp(ep, "tcp://", 6)) {
        snprintf(err, errlen, "worker %s (%s) did not start", id, o->self_exe);
        return -1;
    }
    return 0;
}

llm_swarm *llm_swarm_new(const llm_swarm_opts *o, char *err, size_t errlen)
{
    llm_swarm *sw = calloc(1, sizeof *sw);
    gguf_file *g = NULL;
    arch_model am;
    int am_open = 0, linger = 0;
    uint64_t *sums = NULL, caps[S_MAX_W];
    char ep[PROTO_MAX_STR], pull_ep[PROTO_MAX_STR], why[1024];
    size_t len = sizeof pull_ep;
    static msg_assign a;
    memset(&am, 0, sizeof am);
    if (!sw || !(sw->plan = calloc(1, sizeof *sw->plan)) || !(sw->b = proto_buf_new()) ||
        !(sw->m = calloc(1, sizeof *sw->m))) {
        snprintf(err, errlen, "out of memory");
        goto err;
    }
    if (!o->workers || o->workers > S_MAX_W) {
        snprintf(err, errlen, "%u workers: 1..%d", o->workers, S_MAX_W);
        goto err;
    }
    if (!(g = gguf_open(o->model, why, sizeof why)) || arch_model_open(&am, g, why, sizeof why)) {
        snprintf(err, errlen, "%s", why);
        goto err;
    }
    am_open = 1;
    partition_llm_opts po = { .sessions = o->sessions, .n_ctx = o->n_ctx,
                              .max_batch = o->max_batch,
                              .threads = o->threads > 0 ? (uint32_t)o->threads : 1 };
    for (uint32_t i = 0; i < o->workers; i++)
        caps[i] = o->cap_bytes;
    if (partition_llm(&am, &po, o->workers, caps, sw->plan, why, sizeof why)) {
        snprintf(err, errlen, "%s: %s", o->model, why);
        goto err;
    }
    if (!(sums = calloc(am.hp.n_layers, sizeof *sums))) {
        snprintf(err, errlen, "out of memory");
        goto err;
    }
    sums_source src;
    if (sums_get(&am, o->model, sums, &src, NULL, 0, why, sizeof why)) {
        snprintf(err, errlen, "%s", why);
        goto err;
    }
    sw->dim = am.hp.dim;
    sw->max_batch = o->max_batch;
    sw->n_ctx = o->n_ctx;
    sw->epoch = 1;
    sw->frame_cap = proto_frame_limit(sw->dim, sw->max_batch);
    if (!(sw->frame = malloc(sw->frame_cap))) {
        snprintf(err, errlen, "out of memory");
        goto err;
    }
    sw->zctx = zmq_ctx_new();
    sw->pull = zmq_socket(sw->zctx, ZMQ_PULL);
    sw->push = zmq_socket(sw->zctx, ZMQ_PUSH);
    zmq_setsockopt(sw->push, ZMQ_LINGER, &linger, sizeof linger);
    if (zmq_bind(sw->pull, "tcp://127.0.0.1:*")) {
        snprintf(err, errlen, "cannot bind the result socket: %s", zmq_strerror(errno));
        goto err;
    }
    zmq_getsockopt(sw->pull, ZMQ_LAST_ENDPOINT, pull_ep, &len);
    for (uint32_t i = 0; i < o->workers; i++) {
        sw->n = i + 1;
        if (s_spawn(sw, i, o, ep, sizeof ep, err, errlen))
            goto err;
        sw->ctl[i] = zmq_socket(sw->zctx, ZMQ_DEALER);
        zmq_setsockopt(sw->ctl[i], ZMQ_LINGER, &linger, sizeof linger);
        zmq_connect(sw->ctl[i], ep);
        msg_hello h = { .proto_version = PROTO_VERSION, .pid = (uint32_t)getpid() };
        snprintf(h.id, sizeof h.id, "coordinator");
        snprintf(h.data_ep, sizeof h.data_ep, "%s", pull_ep);
        if (proto_encode_hello(sw->b, &h) || s_send(sw, sw->ctl[i]) ||
            s_recv(sw, sw->ctl[i], NULL, "hello", err, errlen))
            goto err;
        if (sw->m->type != MSG_HELLO ||
            proto_assign_check(&(msg_assign){ .n_ctx = o->n_ctx, .first = sw->plan->first[i],
                                              .last = sw->plan->last[i] },
                               &sw->m->u.hello, why, sizeof why)) {
            snprintf(err, errlen, "w%u: %s", i, sw->m->type != MSG_HELLO ? "no hello" : why);
            goto err;
        }
        snprintf(sw->data_ep[i], PROTO_MAX_STR, "%s", sw->m->u.hello.data_ep);
        memset(&a, 0, sizeof a);
        snprintf(a.model_path, sizeof a.model_path, "%s", o->model);
        a.model_size = g->file_size;
        a.n_layers = am.hp.n_layers;
        a.dim = am.hp.dim;
        a.first = sw->plan->first[i];
        a.last = sw->plan->last[i];
        for (uint32_t l = a.first; l < a.last; l++)
            a.checksums[l - a.first] = sums[l];
        a.threads = (uint32_t)(o->threads > 0 ? o->threads : 1);
        a.cap_bytes = o->cap_bytes;
        a.n_ctx = o->n_ctx;
        a.sessions = o->sessions;
        a.max_batch = o->max_batch;
        if (proto_encode_assign(sw->b, &a) || s_send(sw, sw->ctl[i]) ||
            s_recv(sw, sw->ctl[i], NULL, "ready", err, errlen))
            goto err;
        if (sw->m->type != MSG_READY) {
            snprintf(err, errlen, "w%u refused layers [%u, %u): %s", i, a.first, a.last,
                     sw->m->type == MSG_ERROR ? sw->m->u.error.text : "no ready");
            goto err;
        }
    }
    /* routes, each confirmed by a heartbeat's echo (the control plane is in order) */
    for (uint32_t i = 0; i < sw->n; i++) {
        msg_route r = { .epoch = sw->epoch, .hop = i, .last = i + 1 == sw->n };
        snprintf(r.next_ep, sizeof r.next_ep, "%s", i + 1 < sw->n ? sw->data_ep[i + 1] : pull_ep);
        msg_heartbeat hb = { .seq = i + 1, .sent_ns = util_now_ns() };
        if (proto_encode_route(sw->b, &r) || s_send(sw, sw->ctl[i]) ||
            proto_encode_heartbeat(sw->b, &hb) || s_send(sw, sw->ctl[i]) ||
            s_recv(sw, sw->ctl[i], NULL, "heartbeat echo", err, errlen))
            goto err;
    }
    zmq_connect(sw->push, sw->data_ep[0]);
    sw->last_hb_ns = util_now_ns();
    free(sums);
    arch_model_close(&am);
    gguf_close(&g);
    return sw;
err:
    free(sums);
    if (am_open)
        arch_model_close(&am);
    gguf_close(&g);
    llm_swarm_free(&sw);
    return NULL;
}

void llm_swarm_free(llm_swarm **swp)
{
    if (!swp || !*swp)
        return;
    llm_swarm *sw = *swp;
    /* a bye not delivered within the workers' silence bound is moot: by then a worker has
     * released itself and (--once) exited; an unbounded linger would wait on a dead one */
    int linger = S_SILENT_MS;
    for (uint32_t i = 0; i < sw->n; i++) {
        msg_bye bye = { .reason = "done" };
        if (sw->ctl[i] && sw->b && proto_encode_bye(sw->b, &bye) == 0) {
            zmq_setsockopt(sw->ctl[i], ZMQ_LINGER, &linger, sizeof linger);
            s_send(sw, sw->ctl[i]);
        }
    }
    for (uint32_t i = 0; i < sw->n; i++) {
        if (sw->ctl[i])
            zmq_close(sw->ctl[i]);
        /* a worker told bye exits (--once); one that did not hear it is stopped */
        if (sw->pid[i] > 0 && !sw->ctl[i])
            kill(sw->pid[i], SIGTERM);
        if (sw->pid[i] > 0)
            waitpid(sw->pid[i], NULL, 0);
    }
    if (sw->pull)
        zmq_close(sw->pull);
    if (sw->push)
        zmq_close(sw->push);
    if (sw->zctx)
        zmq_ctx_term(sw->zctx);
    proto_buf_free(&sw->b);
    free(sw->m);
    free(sw->frame);
    free(sw->plan);
    free(sw);
    *swp = NULL;
}

void llm_swarm_hook(llm_swarm *sw, llm_layers_hook *h)
{
    *h = (llm_layers_hook){ .layers = s_layers, .end = s_end, .ctx = sw,
                            .max_batch = sw->max_batch, .n_ctx = sw->n_ctx };
}

const partition_llm_plan *llm_swarm_plan(const llm_swarm *sw) { return sw->plan; }

void llm_swarm_counts(const llm_swarm *sw, uint64_t *acts, uint64_t *wire_bytes)
{
    *acts = sw->acts;
    *wire_bytes = sw->wire;
}
