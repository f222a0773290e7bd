/* hostile.c — a hostile sender for tests: garbage, truncated, oversized and wrong-version frames at a worker. tests/tools/
 *
 * Fires a bounded number of bad frames (--frames, default 2000) for a bounded time (--seconds,
 * default 5) at a worker's control port (a DEALER, like a coordinator) and data port (a PUSH,
 * like a previous hop), paced at --rate frames per second so that they overlap a run. Frame kinds,
 * in turn:
 *   garbage     random bytes, 1..4096 of them
 *   truncated   a valid act (or hello) cut short at a random byte
 *   version     a valid hello / act whose "v" says protocol version 2 (the worker answers an
 *               error on the control plane: counted here as "version errors answered")
 *   wrongdim    a well-formed act whose activation has 3 floats instead of the worker's dim
 *   wrongtype   a well-formed heartbeat on the data port (only acts belong there)
 *   multipart   two garbage frames in one control message
 *   oversized   PROTO_MAX_FRAME + 1 MiB bytes (ZMQ_MAXMSGSIZE makes the worker drop the
 *               connection; the sockets here reconnect); at most --oversized of them (default 3)
 * Only loopback and 198.18.0.0/15 endpoints are accepted: this tool must never aim elsewhere.
 *
 *   hostile --ctl tcp://198.18.0.3:7000 --data tcp://198.18.0.3:41234 [--frames N]
 *           [--seconds S] [--rate R] [--oversized K] [--seed N]
 * Prints one summary line; exit 0 when every frame was handed to ZeroMQ, 1 on setup errors.
 */
#include <errno.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <zmq.h>

#include "proto/proto.h"

enum { K_GARBAGE, K_TRUNC, K_VERSION, K_WRONGDIM, K_WRONGTYPE, K_MULTIPART, K_OVERSIZED, K_N };
static const char *const s_kind_name[K_N] = { "garbage",   "truncated", "version", "wrongdim",
                                              "wrongtype", "multipart", "oversized" };

#define S_ACT_DIM 1024 /* dimension of the valid acts we cut short (any dim works for cutting) */

static uint64_t s_rng = 88172645463325252ull;
static uint64_t s_rand(void) /* xorshift64: reproducible with --seed */
{
    s_rng ^= s_rng << 13;
    s_rng ^= s_rng >> 7;
    s_rng ^= s_rng << 17;
    return s_rng;
}

static double s_now(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec / 1e9;
}

/* Only loopback (127/8) and the benchmark range 198.18.0.0/15 (198.18.x.x and 198.19.x.x). */
static int s_endpoint_ok(const char *ep)
{
    unsigned a, b;
    if (strncmp(ep, "tcp://", 6) || sscanf(ep + 6, "%u.%u.", &a, &b) != 2)
        return 0;
    return a == 127 || (a == 198 && (b == 18 || b == 19));
}

static void *s_sock(void *ctx, int type, const char *ep)
{
    void *s = zmq_socket(ctx, type);
    int linger = 0, hwm = 100000, imm = 0;
    zmq_setsockopt(s, ZMQ_LINGER, &linger, sizeof linger);
    zmq_setsockopt(s, ZMQ_SNDHWM, &hwm, sizeof hwm);
    zmq_setsockopt(s, ZMQ_IMMEDIATE, &imm, sizeof imm);
    if (zmq_connect(s, ep)) {
        fprintf(stderr, "hostile: connect %s: %s\n", ep, zmq_strerror(errno));
        zmq_close(s);
        return NULL;
    }
    return s;
}

/* A valid frame of the given type into b: an act (dim S_ACT_DIM) or a hello. */
static int s_valid(proto_buf *b, uint32_t type, float *x, uint32_t dim)
{
    if (type == MSG_ACT) {
        msg_act a = { .req = 1, .step = 0, .epoch = 1, .hop = 0, .dim = dim, .x = x };
        return proto_encode_act(b, MSG_ACT, &a);
    }
    if (type == MSG_HEARTBEAT) {
        msg_heartbeat hb = { .seq = 1, .sent_ns = 1 };
        return proto_encode_heartbeat(b, &hb);
    }
    msg_hello h = { .proto_version = PROTO_VERSION, .cap_bytes = 1 << 20 };
    snprintf(h.id, sizeof h.id, "hostile");
    snprintf(h.data_ep, sizeof h.data_ep, "tcp://127.0.0.1:1"); /* required non-empty */
    return proto_encode_hello(b, &h);
}

/* The encoder writes {"v": PROTO_VERSION, "t": ...} first: map header, a1 'v', fixint. Patch the
 * fixint, and check with the decoder that the frame now reads as another version (-2). */
static int s_wrong_version(uint8_t *f, size_t len)
{
    proto_msg *m = malloc(sizeof *m);
    static float x[S_ACT_DIM];
    char err[256];
    if (!m || len < 4 || f[1] != 0xa1 || f[2] != 'v' || f[3] != PROTO_VERSION) {
        free(m);
        return -1;
    }
    f[3] = PROTO_VERSION + 1;
    m->u.act.x = x;
    int rc = proto_decode(f, len, 0, m, err, sizeof err);
    free(m);
    return rc == -2 ? 0 : -1;
}

int main(int argc, char **argv)
{
    const char *ctl_ep = NULL, *data_ep = NULL;
    long frames = 2000, rate = 1000, max_over = 3;
    double seconds = 5;
    for (int i = 1; i < argc; i++) {
        const char *v = i + 1 < argc ? argv[i + 1] : NULL;
        if (!strcmp(argv[i], "--ctl") && v) ctl_ep = argv[++i];
        else if (!strcmp(argv[i], "--data") && v) data_ep = argv[++i];
        else if (!strcmp(argv[i], "--frames") && v) frames = atol(argv[++i]);
        else if (!strcmp(argv[i], "--seconds") && v) seconds = atof(argv[++i]);
        else if (!strcmp(argv[i], "--rate") && v) rate = atol(argv[++i]);
        else if (!strcmp(argv[i], "--oversized") && v) max_over = atol(argv[++i]);
        else if (!strcmp(argv[i], "--seed") && v) s_rng = strtoull(argv[++i], NULL, 10) | 1;
        else {
            fprintf(stderr, "usage: hostile --ctl EP --data EP [--frames N] [--seconds S] "
                            "[--rate R] [--oversized K] [--seed N]\n");
            return 2;
        }
    }
    if (!ctl_ep || !data_ep || frames < 1 || rate < 1 || seconds <= 0) {
        fprintf(stderr, "hostile: --ctl and --data are required; counts must be positive\n");
        return 2;
    }
    if (!s_endpoint_ok(ctl_ep) || !s_endpoint_ok(data_ep)) {
        fprintf(stderr, "hostile: only tcp:// endpoints on 127.0.0.0/8 or 198.18.0.0/15\n");
        return 2;
    }

    void *ctx = zmq_ctx_new();
    void *ctl = s_sock(ctx, ZMQ_DEALER, ctl_ep), *data = s_sock(ctx, ZMQ_PUSH, data_ep);
    proto_buf *b = proto_buf_new();
    size_t big = PROTO_MAX_FRAME + (1u << 20);
    uint8_t *buf = malloc(big);
    float *x = calloc(S_ACT_DIM, sizeof *x);
    proto_msg *reply = malloc(sizeof *reply);
    if (!ctl || !data || !b || !buf || !x || !reply) {
        fprintf(stderr, "hostile: setup failed\n");
        return 1;
    }
    for (size_t i = 0; i < big; i++)
        buf[i] = (uint8_t)s_rand();
    for (int i = 0; i < S_ACT_DIM; i++)
        x[i] = (float)i / S_ACT_DIM;

    long sent[K_N] = { 0 }, sent_ctl = 0, sent_data = 0, refused = 0, version_errs = 0, replies = 0;
    double t0 = s_now(), deadline = t0 + seconds;
    long n;
    for (n = 0; n < frames && s_now() < deadline; n++) {
        /* Pace: frame n leaves at t0 + n / rate. */
        double due = t0 + (double)n / (double)rate;
        while (s_now() < due)
            zmq_poll(NULL, 0, 1);
        int kind = (int)(n % K_N);
        if (kind == K_OVERSIZED && sent[K_OVERSIZED] >= max_over)
            kind = K_GARBAGE;
        int to_ctl = (n / K_N) % 2 == 0; /* alternate ports by round */
        if (kind == K_MULTIPART || kind == K_OVERSIZED)
            to_ctl = kind == K_MULTIPART ? 1 : sent[K_OVERSIZED] % 2 == 0;
        if (kind == K_WRONGTYPE)
            to_ctl = 0;
        void *s = to_ctl ? ctl : data;
        const void *f = buf;
        size_t len = 0;
        uint8_t cut[8192];
        switch (kind) {
        case K_GARBAGE:
            len = 1 + s_rand() % 4096;
            f = buf + s_rand() % (big - len);
            break;
        case K_TRUNC:
        case K_VERSION:
            if (s_valid(b, to_ctl && kind == K_VERSION ? MSG_HELLO : MSG_ACT, x, S_ACT_DIM))
                goto encode_err;
            len = proto_buf_len(b);
            if (kind == K_TRUNC) {
                len = 1 + s_rand() % (len - 1); /* at least one byte short */
                f = proto_buf_data(b);
            } else {
                if (len > sizeof cut)
                    goto encode_err;
                memcpy(cut, proto_buf_data(b), len);
                f = cut;
                if (s_wrong_version(cut, len)) {
                    fprintf(stderr, "hostile: cannot craft a wrong-version frame\n");
                    return 1;
                }
            }
            break;
        case K_WRONGDIM:
            if (s_valid(b, MSG_ACT, x, 3))
                goto encode_err;
            f = proto_buf_data(b);
            len = proto_buf_len(b);
            break;
        case K_WRONGTYPE:
            if (s_valid(b, MSG_HEARTBEAT, x, 0))
                goto encode_err;
            f = proto_buf_data(b);
            len = proto_buf_len(b);
            break;
        case K_MULTIPART:
            len = 1 + s_rand() % 64;
            memcpy(cut, buf + 100, len);
            if (zmq_send(ctl, cut, len, ZMQ_SNDMORE | ZMQ_DONTWAIT) < 0) {
                refused++;
                continue;
            }
            f = cut;
            break;
        case K_OVERSIZED:
            len = big;
            break;
        }
        if (zmq_send(s, f, len, ZMQ_DONTWAIT) < 0) {
            refused++; /* the high-water mark: a flooded socket; not counted as sent */
            continue;
        }
        sent[kind]++;
        *(to_ctl ? &sent_ctl : &sent_data) += 1;
        /* Answers on the control plane: the worker's errors (e.g. "protocol version 2 ..."). */
        zmq_msg_t m;
        zmq_msg_init(&m);
        while (zmq_msg_recv(&m, ctl, ZMQ_DONTWAIT) >= 0) {
            replies++;
            reply->u.act.x = NULL;
            if (proto_decode(zmq_msg_data(&m), zmq_msg_size(&m), 0, reply, (char[64]){ 0 }, 64) ==
                    0 &&
                reply->type == MSG_ERROR && reply->u.error.code == PERR_VERSION) {
                if (!version_errs)
                    printf("hostile: worker answered: %s\n", reply->u.error.text);
                version_errs++;
            }
        }
        zmq_msg_close(&m);
    }
    /* Give the last frames a moment to leave before the sockets close (linger 0). */
    zmq_poll(NULL, 0, 200);
    printf("hostile: sent %ld frames in %.2f s (ctl %ld, data %ld; send refused %ld):", n - refused,
           s_now() - t0, sent_ctl, sent_data, refused);
    for (int k = 0; k < K_N; k++)
        printf(" %s %ld", s_kind_name[k], sent[k]);
    printf("; replies %ld, version errors answered %ld\n", replies, version_errs);
    free(reply);
    free(x);
    free(buf);
    proto_buf_free(&b);
    zmq_close(ctl);
    zmq_close(data);
    zmq_ctx_term(ctx);
    return 0;
encode_err:
    fprintf(stderr, "hostile: cannot encode a %s frame\n", s_kind_name[n % K_N]);
    return 1;
}
