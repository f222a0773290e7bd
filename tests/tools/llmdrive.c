/* llmdrive.c — a stand-in coordinator for tests: drives real-model workers over the wire and
 * checks every result against one process. tests/tools/
 *
 * Until the coordinator has a resident arm for real models, this is how the workers' side is
 * tested end to end: hello (the worker must announce PROTO_CAP_LLM), assign with the real
 * model's keys (ctx, ns, mb) and the layers' checksums, routes chaining the workers back to
 * here, then for S sessions interleaved a prompt in batches and single positions after it,
 * each result compared bit for bit with the same layers run in this process (the one-process
 * runner's mapped tensors, its own KV caches). Then every session ends (session_end to every
 * worker) and a new session reuses a slot. Loopback endpoints only.
 *
 *   llmdrive --model M.gguf --workers EP1,EP2[,...] [--sessions 2] [--ctx 32] [--batch 4]
 *            [--prompt 6] [--gen 6]
 * Exit 0: every result identical; 1: a mismatch, a missing result or a wire error; 2: a worker
 * refused its assignment (its error printed).
 */
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include <zmq.h>

#include "arch/arch.h"
#include "runtime/llm.h"
#include "arch/sums.h"
#include "base/util.h"
#include "proto/proto.h"

#define D_MAX_W 8 /* s_pid's size */
#define D_MAX_S 8
/* No deadline to guess on a loaded machine: a wait lasts until the answer comes or a worker
 * process (pid from its hello) is gone; this is only how often that is checked. */
#define D_POLL_MS 200

static proto_buf *s_b;
static proto_msg s_m;
static int s_pid[8], s_npid;

static int s_send(void *sock)
{
    return zmq_send(sock, proto_buf_data(s_b), proto_buf_len(s_b), 0) < 0 ? -1 : 0;
}

/* Receive one frame on sock within D_WAIT_MS, decoded into s_m (x into buf). */
static int s_recv(void *sock, float *buf, uint32_t dim, uint32_t max_pos, const char *what)
{
    zmq_pollitem_t it = { sock, 0, ZMQ_POLLIN, 0 };
    static uint8_t frame[1 << 22];
    char err[256];
    while (zmq_poll(&it, 1, D_POLL_MS) <= 0)
        for (int i = 0; i < s_npid; i++)
            if (kill(s_pid[i], 0)) {
                fprintf(stderr, "llmdrive: no %s, and worker pid %d is gone\n", what,
                        s_pid[i]);
                return -1;
            }
    int n = zmq_recv(sock, frame, sizeof frame, 0);
    memset(&s_m, 0, sizeof s_m);
    s_m.u.act.x = buf;
    if (n < 0 || proto_decode_n(frame, (size_t)n, dim, max_pos, &s_m, err, sizeof err)) {
        fprintf(stderr, "llmdrive: bad %s: %s\n", what, n < 0 ? "receive failed" : err);
        return -1;
    }
    return 0;
}

int main(int argc, char **argv)
{
    const char *model = NULL, *workers = NULL;
    uint32_t n_sess = 2, n_ctx = 32, batch = 4, prompt = 6, gen = 6;
    for (int i = 1; i + 1 < argc; i += 2) {
        if (!strcmp(argv[i], "--model")) model = argv[i + 1];
        else if (!strcmp(argv[i], "--workers")) workers = argv[i + 1];
        else if (!strcmp(argv[i], "--sessions")) n_sess = (uint32_t)atoi(argv[i + 1]);
        else if (!strcmp(argv[i], "--ctx")) n_ctx = (uint32_t)atoi(argv[i + 1]);
        else if (!strcmp(argv[i], "--batch")) batch = (uint32_t)atoi(argv[i + 1]);
        else if (!strcmp(argv[i], "--prompt")) prompt = (uint32_t)atoi(argv[i + 1]);
        else if (!strcmp(argv[i], "--gen")) gen = (uint32_t)atoi(argv[i + 1]);
    }
    if (!model || !workers || !n_sess || n_sess > D_MAX_S || !batch || !prompt ||
        prompt + gen + 1 > n_ctx) {
        fprintf(stderr, "usage: llmdrive --model M --workers EP1,EP2 [--sessions S<=8] [--ctx N] "
                "[--batch B] [--prompt P] [--gen G] (P + G + 1 <= N)\n");
        return 1;
    }
    char eps[D_MAX_W][PROTO_MAX_STR], data_ep[D_MAX_W][PROTO_MAX_STR], err[1024], buf[4096];
    uint32_t nw = 0;
    snprintf(buf, sizeof buf, "%s", workers);
    for (char *sv = NULL, *t = strtok_r(buf, ",", &sv); t && nw < D_MAX_W;
         t = strtok_r(NULL, ",", &sv)) {
        if (strncmp(t, "tcp://127.0.0.1:", 16)) {
            fprintf(stderr, "llmdrive: %s: loopback endpoints only\n", t);
            return 1;
        }
        snprintf(eps[nw++], PROTO_MAX_STR, "%s", t);
    }
    llm_model *m = llm_model_open(model, err, sizeof err);
    if (!m) {
        fprintf(stderr, "llmdrive: %s\n", err);
        return 1;
    }
    const arch_model *am = llm_model_arch(m);
    uint32_t L = am->hp.n_layers, dim = am->hp.dim, kvd = am->hp.n_head_kv * am->hp.head_dim;
    if (nw == 0 || nw > L) {
        fprintf(stderr, "llmdrive: %u workers for %u layers\n", nw, L);
        return 1;
    }
    uint64_t *sums = calloc(L, sizeof *sums);
    sums_source src;
    if (sums_get(am, model, sums, &src, NULL, 0, err, sizeof err)) {
        fprintf(stderr, "llmdrive: %s\n", err);
        return 1;
    }
    s_b = proto_buf_new();
    void *ctx = zmq_ctx_new(), *ctl[D_MAX_W] = { 0 }, *pull = zmq_socket(ctx, ZMQ_PULL),
         *push = zmq_socket(ctx, ZMQ_PUSH);
    char pull_ep[PROTO_MAX_STR];
    size_t len = sizeof pull_ep;
    int linger = 0, rc = 1;
    zmq_setsockopt(push, ZMQ_LINGER, &linger, sizeof linger);
    zmq_bind(pull, "tcp://127.0.0.1:*");
    zmq_getsockopt(pull, ZMQ_LAST_ENDPOINT, pull_ep, &len);
    float *x = calloc((size_t)batch * dim, 4), *y = calloc((size_t)batch * dim, 4);
    arch_run *run = arch_run_new(am, batch, err, sizeof err);
    arch_kv (*kv)[64] = calloc(D_MAX_S + 1, sizeof *kv);
    if (L > 64 || !x || !y || !run || !kv) {
        fprintf(stderr, "llmdrive: setup: %s\n", err);
        return 1;
    }
    for (uint32_t s = 0; s <= n_sess; s++)
        for (uint32_t l = 0; l < L; l++)
            kv[s][l] = (arch_kv){ .n_ctx = n_ctx, .kv_dim = kvd,
                                  .k = calloc((size_t)n_ctx * kvd, 4),
                                  .v = calloc((size_t)n_ctx * kvd, 4) };
    /* hello, assign (contiguous ranges, the remainder to the first workers), ready */
    for (uint32_t i = 0; i < nw; i++) {
        ctl[i] = zmq_socket(ctx, ZMQ_DEALER);
        zmq_setsockopt(ctl[i], ZMQ_LINGER, &linger, sizeof linger);
        zmq_connect(ctl[i], eps[i]);
        msg_hello h = { .proto_version = PROTO_VERSION, .pid = (uint32_t)getpid() };
        snprintf(h.id, sizeof h.id, "llmdrive");
        snprintf(h.data_ep, sizeof h.data_ep, "%s", pull_ep);
        if (proto_encode_hello(s_b, &h) || s_send(ctl[i]) ||
            s_recv(ctl[i], NULL, 0, 1, "hello") || s_m.type != MSG_HELLO)
            goto out;
        if (!(s_m.u.hello.caps & PROTO_CAP_LLM)) {
            fprintf(stderr, "llmdrive: worker %s does not announce PROTO_CAP_LLM\n",
                    s_m.u.hello.id);
            goto out;
        }
        snprintf(data_ep[i], PROTO_MAX_STR, "%s", s_m.u.hello.data_ep);
        s_pid[s_npid++] = (int)s_m.u.hello.pid;
    }
    static msg_assign a;
    for (uint32_t i = 0, at = 0; i < nw; i++) {
        uint32_t take = L / nw + (i < L % nw);
        memset(&a, 0, sizeof a);
        snprintf(a.model_path, sizeof a.model_path, "%s", model);
        a.model_size = llm_model_gguf(m)->file_size;
        a.n_layers = L;
        a.dim = dim;
        a.first = at;
        a.last = at + take;
        for (uint32_t l = a.first; l < a.last; l++)
            a.checksums[l - a.first] = sums[l];
        a.threads = 1;
        a.n_ctx = n_ctx;
        a.sessions = n_sess;
        a.max_batch = batch;
        at += take;
        if (proto_encode_assign(s_b, &a) || s_send(ctl[i]) || s_recv(ctl[i], NULL, 0, 1, "ready"))
            goto out;
        if (s_m.type == MSG_ERROR) {
            fprintf(stderr, "llmdrive: worker %u refused layers [%u, %u): code %u: %s\n", i,
                    a.first, a.last, s_m.u.error.code, s_m.u.error.text);
            rc = 2;
            goto out;
        }
        if (s_m.type != MSG_READY)
            goto out;
    }
    /* routes, each confirmed by a heartbeat's echo (the control plane is in order) */
    for (uint32_t i = 0; i < nw; i++) {
        msg_route r = { .epoch = 1, .hop = i, .last = i + 1 == nw };
        snprintf(r.next_ep, sizeof r.next_ep, "%s", i + 1 < nw ? data_ep[i + 1] : pull_ep);
        msg_heartbeat hb = { .seq = i + 1, .sent_ns = util_now_ns() };
        if (proto_encode_route(s_b, &r) || s_send(ctl[i]) || proto_encode_heartbeat(s_b, &hb) ||
            s_send(ctl[i]) || s_recv(ctl[i], NULL, 0, 1, "heartbeat echo"))
            goto out;
    }
    zmq_connect(push, data_ep[0]);
    /* sessions 1..S interleaved (reference slot s-1), then session S+1 in a freed slot */
    uint32_t at_pos[D_MAX_S + 1] = { 0 }, steps = 0, same = 0;
    uint64_t req = 0;
    for (uint32_t phase = 0; phase < 2; phase++) {
        uint32_t s_lo = phase ? n_sess : 0, s_hi = phase ? n_sess + 1 : n_sess;
        for (int more = 1; more;) {
            more = 0;
            for (uint32_t s = s_lo; s < s_hi; s++) {
                uint32_t p = at_pos[s], n;
                if (p >= prompt + gen)
                    continue;
                more = 1;
                n = p < prompt ? (prompt - p < batch ? prompt - p : batch) : 1;
                for (uint32_t k = 0; k < n; k++)
                    util_step_input(1000 * (s + 1), p + k, x + (size_t)k * dim, (int)dim);
                msg_act act = { .req = ++req, .step = req, .epoch = 1, .hop = 0,
                                .session = s + 1, .pos = p, .n_pos = n, .dim = dim, .x = x };
                if (proto_encode_act(s_b, MSG_ACT, &act) || s_send(push) ||
                    s_recv(pull, y, dim, batch, "result") || s_m.type != MSG_RESULT ||
                    s_m.u.act.req != req || s_m.u.act.n_pos != n)
                    goto out;
                for (uint32_t l = 0; l < L; l++)
                    if (arch_layer_forward(run, l, llm_layer_data(m, l), &kv[s][l], x, n, p, err,
                                           sizeof err)) {
                        fprintf(stderr, "llmdrive: reference: %s\n", err);
                        goto out;
                    }
                steps++;
                same += !memcmp(x, y, sizeof(float) * n * dim);
                at_pos[s] = p + n;
                msg_heartbeat hb = { .seq = 100 + req, .sent_ns = util_now_ns() };
                for (uint32_t i = 0; i < nw; i++) /* keep the workers' coordinator alive */
                    if (proto_encode_heartbeat(s_b, &hb) || s_send(ctl[i]) ||
                        s_recv(ctl[i], NULL, 0, 1, "heartbeat echo"))
                        goto out;
            }
        }
        /* every session ends on every worker; then one more takes a freed slot */
        for (uint32_t s = s_lo; s < s_hi; s++)
            for (uint32_t i = 0; i < nw; i++) {
                msg_session_end e = { .session = s + 1, .epoch = 1 };
                if (proto_encode_session_end(s_b, &e) || s_send(ctl[i]))
                    goto out;
            }
    }
    printf("llmdrive: %u workers, %u sessions + 1 in a freed slot, %u steps (prompt %u in "
           "batches of %u, %u single positions each): %u identical to one process\n", nw,
           n_sess, steps, prompt, batch, gen, same);
    rc = same == steps ? 0 : 1;
out:
    for (uint32_t i = 0; i < nw; i++) {
        msg_bye bye = { .reason = "llmdrive done" };
        if (ctl[i] && proto_encode_bye(s_b, &bye) == 0)
            s_send(ctl[i]);
    }
    linger = -1; /* the byes leave before the context ends (the workers are alive: checked) */
    for (uint32_t i = 0; i < nw; i++) {
        if (rc == 0)
            zmq_setsockopt(ctl[i], ZMQ_LINGER, &linger, sizeof linger);
        zmq_close(ctl[i]);
    }
    zmq_close(pull);
    zmq_close(push);
    zmq_ctx_term(ctx);
    for (uint32_t sl = 0; sl <= n_sess; sl++)
        for (uint32_t l = 0; l < L; l++) {
            free(kv[sl][l].k);
            free(kv[sl][l].v);
        }
    free(kv);
    arch_run_free(&run);
    free(x);
    free(y);
    free(sums);
    proto_buf_free(&s_b);
    llm_model_free(&m);
    return rc;
}
