/* hopbench.c — one data-plane hop measured bare: PUSH/PULL ping-pong and streaming, plaintext or CURVE. tests/tools/
 *
 * The same socket pattern as swarm's data plane (PUSH connects, PULL binds), without the model:
 * what a hop costs by itself, and what CURVE adds to it. Used by experiments/bench_hosts.sh
 * between namespace hosts.
 *
 *   hopbench serve tcp://IP:PORT [--curve] [--idle S]
 *       PULL binds PORT, PUSH binds PORT+1. Echoes frames that start with 'P', counts the rest,
 *       and answers an 'E' frame with "bytes received since the last E". Exits after --idle
 *       seconds without traffic (default 60) or on SIGTERM.
 *   hopbench ping tcp://IP:PORT [--curve] [--size 16K] [--count 2000] [--warmup 200]
 *       round trips of --size byte frames: prints median / p99 / mean in microseconds.
 *   hopbench stream tcp://IP:PORT [--curve] [--size 1M] [--bytes 1G]
 *       pushes --bytes in --size frames, then waits for the count: prints MB/s (1e6 bytes/s).
 * CURVE uses fixed test key pairs (the ZeroMQ RFC 26 examples): this measures cost, not trust.
 * Output: one line "hopbench MODE plaintext|curve size N: ...".
 */
#include <errno.h>
#include <signal.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <zmq.h>

static const char s_srv_pub[] = "rq:rM>}U?@Lns47E1%kR.o@n%FcmmsL/@{H8]yf7";
static const char s_srv_sec[] = "JTKVSB%%)wK0E.X)V>+}o?pNmC{O&4W4b!Ni{Lh6";
static const char s_cli_pub[] = "Yne@$w-vo<fVvi]a<NY6T1ed:M$fCG*[IaLV{hID";
static const char s_cli_sec[] = "D:)Q[IlAW!ahhC2ac:9*A}h:p?([4%wOTJ%JR%cs";

static volatile sig_atomic_t s_stop;
static void s_on_signal(int sig)
{
    (void)sig;
    s_stop = 1;
}

static uint64_t s_now_ns(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
}

static size_t s_size(const char *v) /* 16K, 1M, 1G, or bytes */
{
    char *end;
    double x = strtod(v, &end);
    switch (*end) {
    case 'K': case 'k': x *= 1024; break;
    case 'M': case 'm': x *= 1024 * 1024; break;
    case 'G': case 'g': x *= 1024.0 * 1024 * 1024; break;
    }
    return (size_t)x;
}

static int s_cmp(const void *a, const void *b)
{
    uint64_t x = *(const uint64_t *)a, y = *(const uint64_t *)b;
    return x < y ? -1 : x > y;
}

/* ep with its port moved by +delta (the reply socket's port). */
static void s_port(const char *ep, int delta, char *out, size_t len)
{
    const char *colon = strrchr(ep, ':');
    snprintf(out, len, "%.*s:%d", (int)(colon - ep), ep, atoi(colon + 1) + delta);
}

static void *s_sock(void *ctx, int type, int curve, int server)
{
    void *s = zmq_socket(ctx, type);
    int linger = 0, one = 1;
    zmq_setsockopt(s, ZMQ_LINGER, &linger, sizeof linger);
    if (curve && server) {
        zmq_setsockopt(s, ZMQ_CURVE_SERVER, &one, sizeof one);
        zmq_setsockopt(s, ZMQ_CURVE_SECRETKEY, s_srv_sec, 40);
    } else if (curve) {
        zmq_setsockopt(s, ZMQ_CURVE_SERVERKEY, s_srv_pub, 40);
        zmq_setsockopt(s, ZMQ_CURVE_PUBLICKEY, s_cli_pub, 40);
        zmq_setsockopt(s, ZMQ_CURVE_SECRETKEY, s_cli_sec, 40);
    }
    return s;
}

static int s_serve(void *ctx, const char *ep, int curve, int idle_s)
{
    char back[256];
    void *in = s_sock(ctx, ZMQ_PULL, curve, 1), *out = s_sock(ctx, ZMQ_PUSH, curve, 1);
    s_port(ep, 1, back, sizeof back);
    if (zmq_bind(in, ep) || zmq_bind(out, back)) {
        fprintf(stderr, "hopbench: bind %s / %s: %s\n", ep, back, zmq_strerror(errno));
        return 1;
    }
    fprintf(stderr, "hopbench: serving on %s (replies %s), %s\n", ep, back,
            curve ? "curve" : "plaintext");
    uint64_t got = 0, last = s_now_ns();
    zmq_msg_t m;
    zmq_msg_init(&m);
    while (!s_stop && s_now_ns() - last < (uint64_t)idle_s * 1000000000ull) {
        zmq_pollitem_t it = { in, 0, ZMQ_POLLIN, 0 };
        if (zmq_poll(&it, 1, 200) <= 0)
            continue;
        while (zmq_msg_recv(&m, in, ZMQ_DONTWAIT) >= 0) {
            const char *d = zmq_msg_data(&m);
            size_t n = zmq_msg_size(&m);
            last = s_now_ns();
            if (n && d[0] == 'P') {
                zmq_msg_send(&m, out, 0); /* echo: the frame moves back, no copy */
            } else if (n && d[0] == 'E') {
                zmq_send(out, &got, sizeof got, 0);
                got = 0;
            } else {
                got += n;
            }
        }
    }
    zmq_msg_close(&m);
    zmq_close(in);
    zmq_close(out);
    return 0;
}

/* Connect both directions and wait until a round trip works (the CURVE handshake is done). */
static int s_client(void *ctx, const char *ep, int curve, void **push, void **pull)
{
    char back[256];
    s_port(ep, 1, back, sizeof back);
    *push = s_sock(ctx, ZMQ_PUSH, curve, 0);
    *pull = s_sock(ctx, ZMQ_PULL, curve, 0);
    int tmo = 5000;
    zmq_setsockopt(*pull, ZMQ_RCVTIMEO, &tmo, sizeof tmo);
    if (zmq_connect(*push, ep) || zmq_connect(*pull, back)) {
        fprintf(stderr, "hopbench: connect %s: %s\n", ep, zmq_strerror(errno));
        return -1;
    }
    char p = 'P', r;
    if (zmq_send(*push, &p, 1, 0) < 0 || zmq_recv(*pull, &r, 1, 0) != 1) {
        fprintf(stderr, "hopbench: no answer from %s within 5 s\n", ep);
        return -1;
    }
    return 0;
}

static int s_ping(void *ctx, const char *ep, int curve, size_t size, int count, int warmup)
{
    void *push, *pull;
    if (s_client(ctx, ep, curve, &push, &pull))
        return 1;
    char *buf = calloc(1, size < 1 ? 1 : size);
    uint64_t *rtt = calloc((size_t)count, sizeof *rtt);
    buf[0] = 'P';
    for (int i = -warmup; i < count; i++) {
        uint64_t t0 = s_now_ns();
        if (zmq_send(push, buf, size, 0) < 0 || zmq_recv(pull, buf, size, 0) < 0) {
            fprintf(stderr, "hopbench: round trip %d failed: %s\n", i, zmq_strerror(errno));
            return 1;
        }
        if (i >= 0)
            rtt[i] = s_now_ns() - t0;
    }
    double mean = 0;
    for (int i = 0; i < count; i++)
        mean += (double)rtt[i] / count;
    qsort(rtt, (size_t)count, sizeof *rtt, s_cmp);
    printf("hopbench ping %s size %zu: rtt_us p50 %.1f p99 %.1f mean %.1f (n %d)\n",
           curve ? "curve" : "plaintext", size, rtt[count / 2] / 1e3,
           rtt[(size_t)(count * 0.99)] / 1e3, mean / 1e3, count);
    free(rtt);
    free(buf);
    zmq_close(push);
    zmq_close(pull);
    return 0;
}

static int s_stream(void *ctx, const char *ep, int curve, size_t size, size_t total)
{
    void *push, *pull;
    if (s_client(ctx, ep, curve, &push, &pull))
        return 1;
    char *buf = calloc(1, size);
    buf[0] = 'S';
    size_t frames = (total + size - 1) / size;
    uint64_t t0 = s_now_ns(), got = 0;
    for (size_t i = 0; i < frames; i++)
        if (zmq_send(push, buf, size, 0) < 0)
            return 1;
    char e = 'E';
    zmq_send(push, &e, 1, 0);
    if (zmq_recv(pull, &got, sizeof got, 0) != sizeof got) {
        fprintf(stderr, "hopbench: no count back\n");
        return 1;
    }
    double s = (double)(s_now_ns() - t0) / 1e9;
    printf("hopbench stream %s size %zu: %.1f MB/s (%llu bytes in %.3f s)\n",
           curve ? "curve" : "plaintext", size, (double)got / s / 1e6, (unsigned long long)got, s);
    free(buf);
    zmq_close(push);
    zmq_close(pull);
    return got == frames * size ? 0 : 1;
}

int main(int argc, char **argv)
{
    if (argc < 3) {
        fprintf(stderr, "usage: hopbench serve|ping|stream tcp://IP:PORT [--curve] [--size N] "
                        "[--count N] [--warmup N] [--bytes N] [--idle S]\n");
        return 2;
    }
    const char *mode = argv[1], *ep = argv[2];
    int curve = 0, count = 2000, warmup = 200, idle = 60;
    size_t size = 0, total = 1ull << 30;
    for (int i = 3; i < argc; i++) {
        const char *v = i + 1 < argc ? argv[i + 1] : "0";
        if (!strcmp(argv[i], "--curve")) curve = 1;
        else if (!strcmp(argv[i], "--size")) size = s_size(v), i++;
        else if (!strcmp(argv[i], "--count")) count = atoi(v), i++;
        else if (!strcmp(argv[i], "--warmup")) warmup = atoi(v), i++;
        else if (!strcmp(argv[i], "--bytes")) total = s_size(v), i++;
        else if (!strcmp(argv[i], "--idle")) idle = atoi(v), i++;
        else {
            fprintf(stderr, "hopbench: unknown option %s\n", argv[i]);
            return 2;
        }
    }
    if (strncmp(ep, "tcp://", 6) || !strrchr(ep + 6, ':') || count < 1) {
        fprintf(stderr, "hopbench: endpoint must be tcp://IP:PORT\n");
        return 2;
    }
    signal(SIGTERM, s_on_signal);
    signal(SIGINT, s_on_signal);
    void *ctx = zmq_ctx_new();
    int rc;
    if (!strcmp(mode, "serve"))
        rc = s_serve(ctx, ep, curve, idle);
    else if (!strcmp(mode, "ping"))
        rc = s_ping(ctx, ep, curve, size ? size : 16384, count, warmup);
    else if (!strcmp(mode, "stream"))
        rc = s_stream(ctx, ep, curve, size ? size : 1u << 20, total);
    else {
        fprintf(stderr, "hopbench: mode must be serve, ping or stream\n");
        rc = 2;
    }
    zmq_ctx_term(ctx);
    return rc;
}
