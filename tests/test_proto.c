/* test_proto.c — wire codec tests: round trips, every rejection path, garbage, timing. tests/
 *
 * Frames are mutated at the msgpack level with a tiny trusted splitter (t_split/t_join) so
 * each key can be dropped, duplicated, retyped or replaced. `test_proto --corpus DIR` writes
 * one valid frame per message type as the fuzzer's seed corpus.
 */
#include "base/util.h"
#include "proto/proto.h"
#include "tests/check.h"

#include <stdint.h>
#include <dirent.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define T_MAX_FRAME (1u << 20) /* test frames: act of dim 4096 plus room */
#define T_MAX_ENT 32

static uint8_t t_frame[T_MAX_FRAME]; /* scratch for mutated frames */
static float t_x[PROTO_MAX_DIM * 64], t_y[PROTO_MAX_DIM * 64]; /* acts of up to 64 positions */
static char t_err[512];
static proto_msg t_in, t_out;

/* ---- a trusted msgpack splitter for frames we built ourselves ---- */

static size_t t_be(const uint8_t *p, int w)
{
    size_t v = 0;
    for (int i = 0; i < w; i++)
        v = (v << 8) | p[i];
    return v;
}

/* Length in bytes of the (well-formed) value at p. */
static size_t t_skip(const uint8_t *p)
{
    uint8_t b = p[0];
    size_t n = 0, hdr = 1, items = 0;
    if (b <= 0x7f || b >= 0xe0 || b == 0xc0 || b == 0xc2 || b == 0xc3)
        return 1;
    if ((b & 0xe0) == 0xa0)
        return 1 + (b & 0x1f);
    if ((b & 0xf0) == 0x90 || (b & 0xf0) == 0x80) {
        items = (size_t)(b & 0x0f) * ((b & 0xf0) == 0x80 ? 2 : 1);
    } else if (b >= 0xcc && b <= 0xd3) {
        return 1 + ((size_t)1 << ((b - 0xcc) & 3));
    } else if (b == 0xca || b == 0xcb) {
        return b == 0xca ? 5 : 9;
    } else if (b >= 0xc4 && b <= 0xc6) {
        int w = 1 << (b - 0xc4);
        return 1 + (size_t)w + t_be(p + 1, w);
    } else if (b >= 0xd9 && b <= 0xdb) {
        int w = 1 << (b - 0xd9);
        return 1 + (size_t)w + t_be(p + 1, w);
    } else if (b == 0xdc || b == 0xdd || b == 0xde || b == 0xdf) {
        int w = (b == 0xdc || b == 0xde) ? 2 : 4;
        hdr = 1 + (size_t)w;
        items = t_be(p + 1, w) * (b >= 0xde ? 2 : 1);
    } else {
        fprintf(stderr, "t_skip: unexpected byte 0x%02x\n", b);
        abort();
    }
    n = hdr;
    for (size_t i = 0; i < items; i++)
        n += t_skip(p + n);
    return n;
}

typedef struct {
    const uint8_t *k, *v;
    size_t kn, vn;
    char name[16];
} t_ent;

static size_t t_split(const uint8_t *f, t_ent *e)
{
    size_t n, off;
    if ((f[0] & 0xf0) == 0x80) {
        n = f[0] & 0x0f;
        off = 1;
    } else {
        n = t_be(f + 1, 2);
        off = 3;
    }
    for (size_t i = 0; i < n; i++) {
        e[i].k = f + off;
        e[i].kn = t_skip(f + off);
        off += e[i].kn;
        e[i].v = f + off;
        e[i].vn = t_skip(f + off);
        off += e[i].vn;
        size_t sl = e[i].kn - 1 < sizeof(e[i].name) - 1 ? e[i].kn - 1 : sizeof(e[i].name) - 1;
        memcpy(e[i].name, e[i].k + 1, sl);
        e[i].name[sl] = 0;
    }
    return n;
}

/* Write a map16 of the n entries into t_frame; returns its length. */
static size_t t_join(const t_ent *e, size_t n)
{
    size_t off = 3;
    t_frame[0] = 0xde;
    t_frame[1] = (uint8_t)(n >> 8);
    t_frame[2] = (uint8_t)n;
    for (size_t i = 0; i < n; i++) {
        memcpy(t_frame + off, e[i].k, e[i].kn);
        off += e[i].kn;
        memcpy(t_frame + off, e[i].v, e[i].vn);
        off += e[i].vn;
    }
    return off;
}

static size_t t_find(const t_ent *e, size_t n, const char *name)
{
    for (size_t i = 0; i < n; i++)
        if (strcmp(e[i].name, name) == 0)
            return i;
    fprintf(stderr, "t_find: no key %s\n", name);
    abort();
}

/* ---- valid messages ---- */

static void t_fill(uint32_t type, proto_msg *m, uint32_t dim, uint32_t n_trace)
{
    memset(m, 0, sizeof(*m));
    m->type = type;
    m->version = PROTO_VERSION;
    switch (type) {
    case MSG_HELLO:
        snprintf(m->u.hello.id, sizeof(m->u.hello.id), "w3");
        m->u.hello.cap_bytes = 600ull << 20;
        m->u.hello.proto_version = PROTO_VERSION;
        m->u.hello.caps = PROTO_CAP_RESIDENT | PROTO_CAP_NETEM;
        snprintf(m->u.hello.data_ep, sizeof(m->u.hello.data_ep), "tcp://127.0.0.1:5555");
        m->u.hello.pid = 123456;
        break;
    case MSG_ASSIGN: {
        msg_assign *a = &m->u.assign;
        snprintf(a->model_path, sizeof(a->model_path), "/tmp/lab/model.gguf");
        a->model_size = 0x123456789ull;
        a->n_layers = 24;
        a->dim = 4096;
        a->first = 8;
        a->last = 16;
        for (uint32_t i = 0; i < a->last - a->first; i++)
            a->checksums[i] = 0xfedcba9876543210ull ^ (i * 0x9e3779b97f4a7c15ull);
        a->threads = 2;
        a->cap_bytes = UINT64_MAX;
        a->header_bytes = 8192;
        break;
    }
    case MSG_READY:
        m->u.ready = (msg_ready){1ull << 33, 2, 3, 4000000000ull, 5, 6, 7, 8};
        break;
    case MSG_ROUTE:
        m->u.route.epoch = 7;
        snprintf(m->u.route.next_ep, sizeof(m->u.route.next_ep), "tcp://10.0.0.2:6000");
        m->u.route.hop = 2;
        m->u.route.last = 1;
        m->u.route.link = (msg_link){.delay_ns = 5000000, .jitter_ns = 1000000, .dist = 2,
                                     .loss_ppm = 1000, .rate_bps = 12500000, .seed = 42};
        break;
    case MSG_ACT:
    case MSG_RESULT: {
        msg_act *a = &m->u.act;
        a->req = 1ull << 40;
        a->step = 99;
        a->epoch = 3;
        a->hop = 1;
        a->session = 0xabcdef;
        a->pos = 17;
        a->dim = dim;
        a->x = t_x;
        for (uint32_t i = 0; i < dim; i++)
            t_x[i] = (float)i * 0.25f - 3.0f;
        a->n_trace = n_trace;
        for (uint32_t i = 0; i < n_trace; i++)
            a->trace[i] = (msg_trace){i == 0 ? 0xffff : i - 1, 1000 + i, 200, 3000000 + i, 400,
                                      50000 + i};
        break;
    }
    case MSG_HEARTBEAT:
        m->u.hb = (msg_heartbeat){.seq = 12, .sent_ns = 987654321012ull, .busy_ns = 3000000000ull,
                                  .acts = 77, .queued = 5};
        break;
    case MSG_STATS:
        m->u.stats = (msg_stats){10, 1, 2, 3, 4, 5, 6};
        break;
    case MSG_ERROR:
        m->u.error.code = PERR_CAP;
        snprintf(m->u.error.text, sizeof(m->u.error.text), "assignment needs 700 MiB, cap 600 MiB");
        break;
    case MSG_BYE:
        snprintf(m->u.bye.reason, sizeof(m->u.bye.reason), "shutdown");
        break;
    case MSG_FETCH:
        m->u.fetch = (msg_fetch){.off = 1ull << 32, .len = PROTO_MAX_CHUNK, .seq = 9};
        break;
    case MSG_CHUNK:
        m->u.chunk = (msg_chunk){.off = 4096, .seq = 9, .hash = 0x1234, .len = dim * 4u,
                                 .data = (uint8_t *)t_x};
        for (uint32_t i = 0; i < dim; i++)
            t_x[i] = (float)i;
        break;
    case MSG_SESSION_END:
        m->u.send = (msg_session_end){.session = 0xabcdef, .epoch = 4};
        break;
    }
}

static int t_encode(proto_buf *b, const proto_msg *m)
{
    switch (m->type) {
    case MSG_HELLO: return proto_encode_hello(b, &m->u.hello);
    case MSG_ASSIGN: return proto_encode_assign(b, &m->u.assign);
    case MSG_READY: return proto_encode_ready(b, &m->u.ready);
    case MSG_ROUTE: return proto_encode_route(b, &m->u.route);
    case MSG_ACT:
    case MSG_RESULT: return proto_encode_act(b, m->type, &m->u.act);
    case MSG_HEARTBEAT: return proto_encode_heartbeat(b, &m->u.hb);
    case MSG_STATS: return proto_encode_stats(b, &m->u.stats);
    case MSG_ERROR: return proto_encode_error(b, &m->u.error);
    case MSG_BYE: return proto_encode_bye(b, &m->u.bye);
    case MSG_FETCH: return proto_encode_fetch(b, &m->u.fetch);
    case MSG_CHUNK: return proto_encode_chunk(b, &m->u.chunk);
    case MSG_SESSION_END: return proto_encode_session_end(b, &m->u.send);
    }
    return -1;
}

static size_t t_body_size(uint32_t type)
{
    switch (type) {
    case MSG_HELLO: return sizeof(msg_hello);
    case MSG_ASSIGN: return sizeof(msg_assign);
    case MSG_READY: return sizeof(msg_ready);
    case MSG_ROUTE: return sizeof(msg_route);
    case MSG_HEARTBEAT: return sizeof(msg_heartbeat);
    case MSG_STATS: return sizeof(msg_stats);
    case MSG_ERROR: return sizeof(msg_error);
    case MSG_BYE: return sizeof(msg_bye);
    case MSG_FETCH: return sizeof(msg_fetch);
    case MSG_SESSION_END: return sizeof(msg_session_end);
    }
    return 0;
}

/* Zero a string buffer past its NUL (t_decode's x pointer lands inside other bodies). */
static void t_norm_str(char *s, size_t size)
{
    size_t l = strnlen(s, size);
    memset(s + l, 0, size - l);
}

static void t_norm(proto_msg *m)
{
    switch (m->type) {
    case MSG_HELLO:
        t_norm_str(m->u.hello.id, sizeof(m->u.hello.id));
        t_norm_str(m->u.hello.data_ep, sizeof(m->u.hello.data_ep));
        break;
    case MSG_ASSIGN: t_norm_str(m->u.assign.model_path, sizeof(m->u.assign.model_path)); break;
    case MSG_ROUTE: t_norm_str(m->u.route.next_ep, sizeof(m->u.route.next_ep)); break;
    case MSG_ERROR: t_norm_str(m->u.error.text, sizeof(m->u.error.text)); break;
    case MSG_BYE: t_norm_str(m->u.bye.reason, sizeof(m->u.bye.reason)); break;
    }
}

/* Do a and b (decoded with b->u.act.x = t_y) carry the same message? */
static int t_same(const proto_msg *a, const proto_msg *b)
{
    static proto_msg na, nb;
    if (a->type != b->type || b->version != PROTO_VERSION)
        return 0;
    if (a->type == MSG_CHUNK) {
        const msg_chunk *x = &a->u.chunk, *y = &b->u.chunk;
        return x->off == y->off && x->seq == y->seq && x->hash == y->hash && x->len == y->len &&
               (!y->data || memcmp(x->data, y->data, x->len) == 0);
    }
    if (a->type != MSG_ACT && a->type != MSG_RESULT) {
        na = *a;
        nb = *b;
        t_norm(&na);
        t_norm(&nb);
        return memcmp(&na.u, &nb.u, t_body_size(a->type)) == 0;
    }
    const msg_act *x = &a->u.act, *y = &b->u.act;
    if (x->req != y->req || x->step != y->step || x->epoch != y->epoch || x->hop != y->hop ||
        x->session != y->session || x->pos != y->pos || x->dim != y->dim ||
        x->n_pos != y->n_pos || x->n_trace != y->n_trace || x->segs.n != y->segs.n)
        return 0;
    for (uint32_t i = 0; i < x->segs.n; i++)
        if (x->segs.s[i].session != y->segs.s[i].session || x->segs.s[i].pos != y->segs.s[i].pos ||
            x->segs.s[i].n != y->segs.s[i].n)
            return 0;
    if (y->x && memcmp(x->x, y->x, (size_t)x->dim * (x->n_pos ? x->n_pos : 1) * sizeof(float)))
        return 0;
    for (uint32_t i = 0; i < x->n_trace; i++) {
        const msg_trace *s = &x->trace[i], *t = &y->trace[i];
        if (s->stage != t->stage || s->wait_ns != t->wait_ns || s->deser_ns != t->deser_ns ||
            s->compute_ns != t->compute_ns || s->ser_ns != t->ser_ns || s->send_ns != t->send_ns)
            return 0;
    }
    return 1;
}

/* Decode into t_out (x -> t_y). */
static int t_decode(const void *f, size_t n, uint32_t expect_dim)
{
    memset(&t_out, 0, sizeof(t_out));
    t_out.u.act.x = t_y;
    t_err[0] = 0;
    return proto_decode(f, n, expect_dim, &t_out, t_err, sizeof(t_err));
}

/* Encode a valid message of type into b and split it into e; returns the entry count. */
static size_t t_valid(proto_buf *b, uint32_t type, t_ent *e)
{
    t_fill(type, &t_in, 16, 3);
    if (t_encode(b, &t_in) != 0) {
        fprintf(stderr, "t_valid: encode %u failed\n", type);
        abort();
    }
    return t_split(proto_buf_data(b), e);
}

static uint64_t t_rng = 0x243f6a8885a308d3ull;
static uint64_t t_rand(void) { return util_splitmix64(&t_rng); }

/* ---- tests ---- */

static void test_round_trip(proto_buf *b)
{
    for (uint32_t type = MSG_HELLO; type < MSG_TYPE_MAX_; type++) {
        t_fill(type, &t_in, 16, 3);
        CHECK(t_encode(b, &t_in) == 0, "encode %s", proto_type_name(type));
        uint32_t v = 0, t = 0;
        CHECK(proto_peek(proto_buf_data(b), proto_buf_len(b), &v, &t) == 0 && v == PROTO_VERSION &&
                  t == type,
              "peek %s", proto_type_name(type));
        int rc = t_decode(proto_buf_data(b), proto_buf_len(b), 0);
        CHECK(rc == 0, "decode %s: %s", proto_type_name(type), t_err);
        CHECK(t_same(&t_in, &t_out), "round trip %s", proto_type_name(type));
    }
    /* Acts at the edges: dim 1 and 4096 with expect_dim, full trace, no trace, x NULL. */
    uint32_t dims[] = {1, 16, 4096, PROTO_MAX_DIM};
    uint32_t traces[] = {0, 1, PROTO_MAX_TRACE, 5};
    for (int i = 0; i < 4; i++) {
        t_fill(MSG_RESULT, &t_in, dims[i], traces[i]);
        CHECK(t_encode(b, &t_in) == 0, "encode act dim %u", dims[i]);
        CHECK(t_decode(proto_buf_data(b), proto_buf_len(b), dims[i]) == 0 && t_same(&t_in, &t_out),
              "act dim %u trace %u: %s", dims[i], traces[i], t_err);
    }
    memset(&t_out, 0, sizeof(t_out));
    CHECK(proto_decode(proto_buf_data(b), proto_buf_len(b), 0, &t_out, t_err, sizeof(t_err)) == 0 &&
              t_out.u.act.dim == PROTO_MAX_DIM && t_out.u.act.x == NULL,
          "act with x NULL decodes dim only: %s", t_err);
    /* Assign spanning every layer. */
    t_fill(MSG_ASSIGN, &t_in, 0, 0);
    t_in.u.assign.n_layers = PROTO_MAX_LAYERS;
    t_in.u.assign.first = 0;
    t_in.u.assign.last = PROTO_MAX_LAYERS;
    CHECK(t_encode(b, &t_in) == 0, "encode assign of %d layers", PROTO_MAX_LAYERS);
    CHECK(t_decode(proto_buf_data(b), proto_buf_len(b), 0) == 0 && t_same(&t_in, &t_out),
          "assign of %d layers: %s", PROTO_MAX_LAYERS, t_err);
    /* Strings at their limits. */
    t_fill(MSG_HELLO, &t_in, 0, 0);
    memset(t_in.u.hello.id, 'a', PROTO_MAX_STR - 1);
    CHECK(t_encode(b, &t_in) == 0 && t_decode(proto_buf_data(b), proto_buf_len(b), 0) == 0 &&
              t_same(&t_in, &t_out),
          "hello id of 255 bytes: %s", t_err);
    t_fill(MSG_ERROR, &t_in, 0, 0);
    t_in.u.error.text[0] = 0;
    CHECK(t_encode(b, &t_in) == 0 && t_decode(proto_buf_data(b), proto_buf_len(b), 0) == 0 &&
              t_same(&t_in, &t_out),
          "error with empty text: %s", t_err);
}

static void test_encode_args(proto_buf *b)
{
    t_fill(MSG_ACT, &t_in, 16, 0);
    CHECK(proto_encode_act(b, MSG_HELLO, &t_in.u.act) == -1, "act with type hello");
    t_in.u.act.dim = 0;
    CHECK(proto_encode_act(b, MSG_ACT, &t_in.u.act) == -1, "act dim 0");
    t_in.u.act.dim = PROTO_MAX_DIM + 1;
    CHECK(proto_encode_act(b, MSG_ACT, &t_in.u.act) == -1, "act dim max+1");
    t_in.u.act.dim = 16;
    t_in.u.act.x = NULL;
    CHECK(proto_encode_act(b, MSG_ACT, &t_in.u.act) == -1, "act x NULL");
    t_fill(MSG_ACT, &t_in, 16, 0);
    t_in.u.act.n_trace = PROTO_MAX_TRACE + 1;
    CHECK(proto_encode_act(b, MSG_ACT, &t_in.u.act) == -1, "act n_trace max+1");
    t_fill(MSG_ASSIGN, &t_in, 0, 0);
    t_in.u.assign.first = t_in.u.assign.last;
    CHECK(proto_encode_assign(b, &t_in.u.assign) == -1, "assign first == last");
    t_fill(MSG_ASSIGN, &t_in, 0, 0);
    t_in.u.assign.last = t_in.u.assign.n_layers + 1;
    CHECK(proto_encode_assign(b, &t_in.u.assign) == -1, "assign last > n_layers");
    t_fill(MSG_ASSIGN, &t_in, 0, 0);
    t_in.u.assign.dim = 0;
    CHECK(proto_encode_assign(b, &t_in.u.assign) == -1, "assign dim 0");
    t_fill(MSG_HELLO, &t_in, 0, 0);
    memset(t_in.u.hello.data_ep, 'x', sizeof(t_in.u.hello.data_ep));
    CHECK(proto_encode_hello(b, &t_in.u.hello) == -1, "hello with unterminated data_ep");
    t_fill(MSG_HELLO, &t_in, 0, 0);
    t_in.u.hello.id[0] = 0;
    CHECK(proto_encode_hello(b, &t_in.u.hello) == -1, "hello with empty id");
    t_fill(MSG_ROUTE, &t_in, 0, 0);
    t_in.u.route.link.dist = 4;
    CHECK(proto_encode_route(b, &t_in.u.route) == -1, "route with dist 4");
    t_fill(MSG_ERROR, &t_in, 0, 0);
    t_in.u.error.code = PERR_INTERNAL + 1;
    CHECK(proto_encode_error(b, &t_in.u.error) == -1, "error with unknown code");
    CHECK(proto_buf_len(b) == 0, "failed encode leaves the buffer empty");
}

static void test_truncations(proto_buf *b)
{
    uint32_t types[] = {MSG_ACT, MSG_ASSIGN, MSG_ROUTE, MSG_HELLO};
    for (int k = 0; k < 4; k++) {
        t_fill(types[k], &t_in, 16, 3);
        CHECK(t_encode(b, &t_in) == 0, "encode");
        size_t n = proto_buf_len(b);
        memcpy(t_frame, proto_buf_data(b), n);
        int bad = 0;
        for (size_t len = 0; len < n; len++) {
            /* a fresh heap copy so ASan catches any read past the prefix */
            uint8_t *p = malloc(len ? len : 1);
            memcpy(p, t_frame, len);
            if (t_decode(p, len, 0) != -1 || t_err[0] == 0)
                bad++;
            free(p);
        }
        CHECK(bad == 0, "%s: %d of %zu truncations not rejected", proto_type_name(types[k]), bad, n);
    }
}

static void test_oversized(proto_buf *b)
{
    t_ent e[T_MAX_ENT];
    size_t n = t_valid(b, MSG_ACT, e);
    size_t len = t_join(e, n);
    uint8_t *big = calloc(1, PROTO_MAX_FRAME + 1);
    memcpy(big, t_frame, len);
    CHECK(t_decode(big, PROTO_MAX_FRAME + 1, 0) == -1 && strstr(t_err, "max"),
          "frame of max+1 bytes: %s", t_err);
    uint32_t v, t;
    /* peek reads v and t of anything up to the largest batch's frame (the worker routes a
     * frame by its type before the decode that knows its limit) */
    CHECK(proto_peek(big, PROTO_MAX_FRAME + 1, &v, &t) == 0 && t == MSG_ACT,
          "peek of max+1 bytes");
    free(big);

    /* Headers that claim 4 GiB (or 4 G entries) where the frame has a few bytes left. */
    static const uint8_t bin4g[] = {0xc6, 0xff, 0xff, 0xff, 0xff, 0, 0, 0, 0};
    static const uint8_t arr4g[] = {0xdd, 0xff, 0xff, 0xff, 0xff, 0xc0, 0xc0};
    static const uint8_t str4g[] = {0xdb, 0xff, 0xff, 0xff, 0xff, 'a', 'b'};
    static const uint8_t map4g[] = {0xdf, 0xff, 0xff, 0xff, 0xff, 0xa1, 'a', 0xc0};
    static const uint8_t ext4g[] = {0xc9, 0xff, 0xff, 0xff, 0xff, 1, 2};
    struct { uint32_t type; const char *key; const uint8_t *v; size_t vn; } cases[] = {
        {MSG_ACT, "x", bin4g, sizeof(bin4g)},     {MSG_ACT, "tr", arr4g, sizeof(arr4g)},
        {MSG_ASSIGN, "ck", arr4g, sizeof(arr4g)}, {MSG_HELLO, "id", str4g, sizeof(str4g)},
        {MSG_ROUTE, "ln", map4g, sizeof(map4g)},  {MSG_ACT, "req", ext4g, sizeof(ext4g)},
    };
    for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
        n = t_valid(b, cases[i].type, e);
        size_t j = t_find(e, n, cases[i].key);
        e[j].v = cases[i].v;
        e[j].vn = cases[i].vn;
        len = t_join(e, n);
        CHECK(t_decode(t_frame, len, 0) == -1 && strstr(t_err, "overruns"), "%s '%s' of 4 GiB: %s",
              proto_type_name(cases[i].type), cases[i].key, t_err);
        /* the same claim as an unknown key's value (the bounded skip) */
        n = t_valid(b, cases[i].type, e);
        e[n] = e[0];
        e[n].k = (const uint8_t *)"\xa3zzz";
        e[n].kn = 4;
        e[n].v = cases[i].v;
        e[n].vn = cases[i].vn;
        len = t_join(e, n + 1);
        CHECK(t_decode(t_frame, len, 0) == -1 && strstr(t_err, "overruns"),
              "unknown key with 4 GiB value: %s", t_err);
    }
    /* A top-level map claiming 4 G entries. */
    uint8_t top[] = {0xdf, 0xff, 0xff, 0xff, 0xff, 0xa1, 'v', 0x01, 0xa1, 't', 0x05};
    CHECK(t_decode(top, sizeof(top), 0) == -1, "top-level map of 4 G entries: %s", t_err);
}

/* A value of another msgpack type for every key, and the wrong-version / missing / duplicate
 * cases, for every message type. */
static void test_keys(proto_buf *b)
{
    static const struct { const char *what; const uint8_t *v; size_t vn; } wrong[] = {
        {"nil", (const uint8_t *)"\xc0", 1},      {"true", (const uint8_t *)"\xc3", 1},
        {"-1", (const uint8_t *)"\xff", 1},       {"int8 -100", (const uint8_t *)"\xd0\x9c", 2},
        {"f32", (const uint8_t *)"\xca\0\0\0\0", 5}, {"bin1", (const uint8_t *)"\xc4\x01z", 3},
        {"fixext", (const uint8_t *)"\xd4\x01\x02", 3},
    };
    static const uint8_t s_zz[] = {0xa2, 'z', 'z'}, u7[] = {0x07};
    t_ent e[T_MAX_ENT + 2], m[T_MAX_ENT + 2];
    for (uint32_t type = MSG_HELLO; type < MSG_TYPE_MAX_; type++) {
        const char *tn = proto_type_name(type);
        size_t n = t_valid(b, type, e);
        CHECK(n >= 3 && strcmp(e[0].name, "v") == 0 && strcmp(e[1].name, "t") == 0,
              "%s: v, t come first", tn);
        /* the splitter/joiner itself round-trips (map16 instead of fixmap) */
        size_t len = t_join(e, n);
        CHECK(t_decode(t_frame, len, 0) == 0 && t_same(&t_in, &t_out), "%s rejoined: %s", tn, t_err);

        for (size_t i = 0; i < n; i++) {
            /* wrong types */
            for (size_t w = 0; w < sizeof(wrong) / sizeof(wrong[0]) + 1; w++) {
                memcpy(m, e, n * sizeof(*e));
                if (w < sizeof(wrong) / sizeof(wrong[0])) {
                    m[i].v = wrong[w].v;
                    m[i].vn = wrong[w].vn;
                } else if ((e[i].v[0] >= 0xa0 && e[i].v[0] <= 0xbf) ||
                           (e[i].v[0] >= 0xd9 && e[i].v[0] <= 0xdb)) { /* str -> uint */
                    m[i].v = u7;
                    m[i].vn = 1;
                } else {
                    m[i].v = s_zz;
                    m[i].vn = 3;
                }
                if (type == MSG_CHUNK && !strcmp(e[i].name, "d") &&
                    w < sizeof(wrong) / sizeof(wrong[0]) && !strcmp(wrong[w].what, "bin1"))
                    continue; /* a 1-byte chunk is a valid chunk */
                len = t_join(m, n);
                int rc = t_decode(t_frame, len, 0);
                char quoted[24];
                snprintf(quoted, sizeof(quoted), "'%s'", e[i].name);
                CHECK(rc == -1 && strstr(t_err, quoted), "%s: '%s' = %s: rc %d, %s", tn, e[i].name,
                      w < sizeof(wrong) / sizeof(wrong[0]) ? wrong[w].what : "str/uint", rc, t_err);
            }
            /* missing */
            memcpy(m, e, i * sizeof(*e));
            memcpy(m + i, e + i + 1, (n - i - 1) * sizeof(*e));
            len = t_join(m, n - 1);
            int rc = t_decode(t_frame, len, 0);
            /* The heartbeat's progress keys came later: absent, they decode as zero. So did
             * the real model's keys (an act's positions, an assign's caches). */
            int optional = type == MSG_HEARTBEAT && i >= 4;
            int later = !strcmp(e[i].name, "np") ||
                        (type == MSG_ASSIGN && (!strcmp(e[i].name, "ctx") ||
                                                !strcmp(e[i].name, "ns") ||
                                                !strcmp(e[i].name, "mb")));
            if (later)
                CHECK(rc == 0, "%s without optional '%s': rc %d, %s", tn, e[i].name, rc, t_err);
            else if (optional)
                CHECK(rc == 0 && t_out.u.hb.seq == 12 &&
                      (t_out.u.hb.busy_ns | t_out.u.hb.acts | t_out.u.hb.queued) ==
                          (i == 4 ? 77 | 5 : i == 5 ? 3000000000ull | 5 : 3000000000ull | 77),
                      "%s without optional '%s': rc %d, %s", tn, e[i].name, rc, t_err);
            else
                CHECK(rc == -1 && (i < 2 ? strstr(t_err, "key must be") != NULL
                                         : strstr(t_err, "missing key") != NULL),
                      "%s without '%s': rc %d, %s", tn, e[i].name, rc, t_err);
            /* duplicated (after the original) */
            memcpy(m, e, n * sizeof(*e));
            m[n] = e[i];
            len = t_join(m, n + 1);
            rc = t_decode(t_frame, len, 0);
            CHECK(rc == -1 && strstr(t_err, "duplicate key"), "%s with '%s' twice: rc %d, %s", tn,
                  e[i].name, rc, t_err);
        }
        /* wrong version: -2 with version (and type) reported */
        static const uint8_t v2[] = {0x02}, v_big[] = {0xce, 0x01, 0x00, 0x00, 0x00};
        memcpy(m, e, n * sizeof(*e));
        m[0].v = v2;
        len = t_join(m, n);
        int rc = t_decode(t_frame, len, 0);
        CHECK(rc == -2 && t_out.version == 2 && t_out.type == type && strstr(t_err, "version 2"),
              "%s v2: rc %d version %u type %u, %s", tn, rc, t_out.version, t_out.type, t_err);
        m[0].v = v_big;
        m[0].vn = sizeof(v_big);
        len = t_join(m, n);
        rc = t_decode(t_frame, len, 0);
        CHECK(rc == -2 && t_out.version == 0x01000000u, "%s v 2^24: rc %d, %s", tn, rc, t_err);
        /* version not first */
        m[0] = e[1];
        m[1] = e[0];
        len = t_join(m, n);
        CHECK(t_decode(t_frame, len, 0) == -1 && strstr(t_err, "first key must be 'v'"),
              "%s with t before v: %s", tn, t_err);
        /* trailing garbage */
        len = t_join(e, n);
        t_frame[len] = 0xc0;
        CHECK(t_decode(t_frame, len + 1, 0) == -1 && strstr(t_err, "trailing 1 bytes"),
              "%s + 1 byte: %s", tn, t_err);
        memset(t_frame + len, 0, 5);
        CHECK(t_decode(t_frame, len + 5, 0) == -1 && strstr(t_err, "trailing 5 bytes"),
              "%s + 5 bytes: %s", tn, t_err);
        /* unknown keys of every kind are skipped, before, between and after known keys */
        static const uint8_t nest7[] = {0x91, 0x91, 0x91, 0x91, 0x81, 0xa1, 'k', 0x91, 0x92,
                                        0xc0, 0xcb, 1, 2, 3, 4, 5, 6, 7, 8};
        /* [bin8 of 2, ext32 of 3, fixext16, negative fixint] */
        static const uint8_t junk[] = {0x94, 0xc4, 0x02, 0, 0, 0xc9, 0, 0, 0, 0x03, 7, 1, 2, 3,
                                       0xd8, 1, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0,
                                       0xe0};
        size_t pos[] = {2, n / 2 + 1, n};
        for (int p = 0; p < 3; p++) {
            memcpy(m, e, pos[p] * sizeof(*e));
            m[pos[p]] = e[0];
            m[pos[p]].k = (const uint8_t *)"\xa5xtra1";
            m[pos[p]].kn = 6;
            m[pos[p]].v = p == 1 ? junk : nest7;
            m[pos[p]].vn = p == 1 ? sizeof(junk) : sizeof(nest7);
            memcpy(m + pos[p] + 1, e + pos[p], (n - pos[p]) * sizeof(*e));
            len = t_join(m, n + 1);
            rc = t_decode(t_frame, len, 0);
            CHECK(rc == 0 && t_same(&t_in, &t_out), "%s with unknown key at %zu: rc %d, %s", tn,
                  pos[p], rc, t_err);
        }
        /* ...but not nested 8 deep below the top-level map, nor a 100000-deep bomb */
        static uint8_t bomb[100001];
        size_t depths[] = {8, 100000};
        for (int d = 0; d < 2; d++) {
            memset(bomb, 0x91, depths[d]);
            bomb[depths[d]] = 0xc0;
            memcpy(m, e, n * sizeof(*e));
            m[n] = e[0];
            m[n].k = (const uint8_t *)"\xa4" "bomb";
            m[n].kn = 5;
            m[n].v = bomb;
            m[n].vn = depths[d] + 1;
            len = t_join(m, n + 1);
            rc = t_decode(t_frame, len, 0);
            CHECK(rc == -1 && strstr(t_err, "nesting deeper"), "%s nesting bomb %zu: rc %d, %s", tn,
                  depths[d], rc, t_err);
        }
        /* unknown type numbers */
        static const uint8_t t0[] = {0x00}, t11[] = {MSG_TYPE_MAX_}, t99[] = {0xcc, 99};
        const uint8_t *bad_t[] = {t0, t11, t99};
        for (int k = 0; k < 3; k++) {
            memcpy(m, e, n * sizeof(*e));
            m[1].v = bad_t[k];
            m[1].vn = k == 2 ? 2 : 1;
            len = t_join(m, n);
            CHECK(t_decode(t_frame, len, 0) == -1 && strstr(t_err, "unknown message type"),
                  "%s with bad type %d: %s", tn, k, t_err);
        }
    }
    /* A v2 peer with an entirely different layout still gets -2. */
    static const uint8_t other[] = {0x83, 0xa1, 'v', 0x02, 0xa4, 'k', 'i', 'n', 'd',
                                    0xa5, 'h', 'e', 'l', 'l', 'o', 0xa1, 'x', 0xc0};
    CHECK(t_decode(other, sizeof(other), 0) == -2 && t_out.version == 2 && t_out.type == 0,
          "v2 of another layout: %s", t_err);
    uint32_t v = 0, t = 0;
    CHECK(proto_peek(other, sizeof(other), &v, &t) == -1 && v == 2, "peek without t");
    static const uint8_t only_v2[] = {0x81, 0xa1, 'v', 0x02}, only_v1[] = {0x81, 0xa1, 'v', 0x01};
    CHECK(t_decode(only_v2, sizeof(only_v2), 0) == -2 && t_out.version == 2, "{v:2}: %s", t_err);
    CHECK(t_decode(only_v1, sizeof(only_v1), 0) == -1 && strstr(t_err, "1 entry"), "{v:1}: %s",
          t_err);
    CHECK(t_decode("\x80", 1, 0) == -1 && strstr(t_err, "empty map"), "{}: %s", t_err);
    /* Not a map at all. */
    static const uint8_t arr[] = {0x92, 0x01, 0x05};
    CHECK(t_decode(arr, sizeof(arr), 0) == -1 && strstr(t_err, "expected a map"), "array: %s", t_err);
    CHECK(t_decode(arr, 0, 0) == -1 && strstr(t_err, "truncated"), "empty: %s", t_err);
}

/* Strings, ranges and cross-field rules. */
static void test_values(proto_buf *b)
{
    t_ent e[T_MAX_ENT];
    static uint8_t sv[3 + PROTO_MAX_PATH + 8];
    size_t n, len, j;
    struct { uint32_t type; const char *key; size_t max; } strs[] = {
        {MSG_HELLO, "id", PROTO_MAX_STR - 1},     {MSG_HELLO, "dep", PROTO_MAX_STR - 1},
        {MSG_ASSIGN, "mp", PROTO_MAX_PATH - 1},   {MSG_ROUTE, "nx", PROTO_MAX_STR - 1},
        {MSG_ERROR, "msg", PROTO_MAX_STR - 1},    {MSG_BYE, "why", PROTO_MAX_STR - 1},
    };
    for (size_t i = 0; i < sizeof(strs) / sizeof(strs[0]); i++) {
        for (size_t sl = strs[i].max; sl <= strs[i].max + 1; sl++) {
            n = t_valid(b, strs[i].type, e);
            j = t_find(e, n, strs[i].key);
            sv[0] = 0xda; /* str16 */
            sv[1] = (uint8_t)(sl >> 8);
            sv[2] = (uint8_t)sl;
            memset(sv + 3, 'q', sl);
            e[j].v = sv;
            e[j].vn = 3 + sl;
            len = t_join(e, n);
            int rc = t_decode(t_frame, len, 0);
            if (sl == strs[i].max)
                CHECK(rc == 0, "%s '%s' of %zu bytes: %s", proto_type_name(strs[i].type),
                      strs[i].key, sl, t_err);
            else
                CHECK(rc == -1 && strstr(t_err, "bytes, max"), "%s '%s' of %zu bytes: rc %d %s",
                      proto_type_name(strs[i].type), strs[i].key, sl, rc, t_err);
        }
        /* an embedded NUL */
        n = t_valid(b, strs[i].type, e);
        j = t_find(e, n, strs[i].key);
        static const uint8_t nul[] = {0xa3, 'a', 0, 'b'};
        e[j].v = nul;
        e[j].vn = sizeof(nul);
        len = t_join(e, n);
        CHECK(t_decode(t_frame, len, 0) == -1 && strstr(t_err, "NUL"), "'%s' with NUL: %s",
              strs[i].key, t_err);
    }
    /* required-non-empty strings */
    static const uint8_t empty[] = {0xa0};
    const char *nonempty[] = {"id", "dep"};
    for (int i = 0; i < 2; i++) {
        n = t_valid(b, MSG_HELLO, e);
        j = t_find(e, n, nonempty[i]);
        e[j].v = empty;
        e[j].vn = 1;
        len = t_join(e, n);
        CHECK(t_decode(t_frame, len, 0) == -1 && strstr(t_err, "empty"), "empty '%s': %s",
              nonempty[i], t_err);
    }

    /* Out-of-range numbers, as 0xcf (uint64) to also exercise the wide format. */
    struct { uint32_t type; const char *key; uint64_t v; int ok; } nums[] = {
        {MSG_ASSIGN, "dim", 0, 0},           {MSG_ASSIGN, "dim", PROTO_MAX_DIM + 1, 0},
        {MSG_ASSIGN, "dim", PROTO_MAX_DIM, 1}, {MSG_ASSIGN, "nl", 0, 0},
        {MSG_ASSIGN, "nl", PROTO_MAX_LAYERS + 1, 0}, {MSG_ASSIGN, "nl", 15, 0}, /* last 16 > 15 */
        {MSG_ASSIGN, "f", 16, 0},            {MSG_ASSIGN, "l", 8, 0},
        {MSG_ASSIGN, "l", 17, 0},             /* ck has 8, l-f = 9 */
        {MSG_ASSIGN, "f", 7, 0},              {MSG_ASSIGN, "th", 1025, 0},
        {MSG_ASSIGN, "ms", UINT64_MAX, 1},   {MSG_HELLO, "pid", 1ull << 32, 0},
        {MSG_HELLO, "pv", UINT32_MAX, 1},    {MSG_ROUTE, "last", 2, 0},
        {MSG_ROUTE, "hop", PROTO_MAX_LAYERS + 1, 0}, {MSG_ACT, "hop", PROTO_MAX_LAYERS + 1, 0},
        {MSG_ERROR, "code", PERR_INTERNAL + 1, 0},   {MSG_ERROR, "code", PERR_INTERNAL, 1},
    };
    for (size_t i = 0; i < sizeof(nums) / sizeof(nums[0]); i++) {
        n = t_valid(b, nums[i].type, e);
        j = t_find(e, n, nums[i].key);
        uint8_t u[9] = {0xcf};
        for (int k = 0; k < 8; k++)
            u[1 + k] = (uint8_t)(nums[i].v >> (56 - 8 * k));
        e[j].v = u;
        e[j].vn = 9;
        len = t_join(e, n);
        int rc = t_decode(t_frame, len, 0);
        CHECK(nums[i].ok ? rc == 0 : rc == -1, "%s '%s' = %llu: rc %d, %s",
              proto_type_name(nums[i].type), nums[i].key, (unsigned long long)nums[i].v, rc, t_err);
    }
    /* Link fields (nested map) out of range, missing, and with an unknown key. */
    static const uint8_t link_bad[] = {0x86, 0xa1, 'd', 1, 0xa1, 'j', 2, 0xa4, 'd', 'i', 's', 't', 4,
                                       0xa4, 'l', 'o', 's', 's', 0, 0xa4, 'r', 'a', 't', 'e', 0,
                                       0xa4, 's', 'e', 'e', 'd', 0};
    static const uint8_t link_miss[] = {0x81, 0xa1, 'd', 1};
    static const uint8_t link_extra[] = {0x87, 0xa1, 'd', 1, 0xa1, 'j', 2, 0xa4, 'd', 'i', 's', 't',
                                         3, 0xa4, 'l', 'o', 's', 's', 0, 0xa4, 'r', 'a', 't', 'e',
                                         0, 0xa4, 's', 'e', 'e', 'd', 0, 0xa1, 'z', 0x91, 0x91, 0x90};
    const uint8_t *links[] = {link_bad, link_miss, link_extra};
    size_t link_n[] = {sizeof(link_bad), sizeof(link_miss), sizeof(link_extra)};
    for (int i = 0; i < 3; i++) {
        n = t_valid(b, MSG_ROUTE, e);
        j = t_find(e, n, "ln");
        e[j].v = links[i];
        e[j].vn = link_n[i];
        len = t_join(e, n);
        int rc = t_decode(t_frame, len, 0);
        CHECK(i == 2 ? rc == 0 && t_out.u.route.link.dist == 3 : rc == -1, "link case %d: rc %d, %s",
              i, rc, t_err);
    }

    /* x of the wrong length. */
    t_fill(MSG_ACT, &t_in, 4000, 0);
    CHECK(t_encode(b, &t_in) == 0, "encode dim 4000");
    CHECK(t_decode(proto_buf_data(b), proto_buf_len(b), 4096) == -1 &&
              strcmp(t_err, "act: 'x' is 16000 bytes, expected 16384 (dim 4096)") == 0,
          "dim 4000 against 4096: %s", t_err);
    static const uint8_t x17[] = {0xc4, 17, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0};
    static const uint8_t x0[] = {0xc4, 0};
    const uint8_t *xs[] = {x17, x0};
    size_t xn[] = {sizeof(x17), sizeof(x0)};
    for (int i = 0; i < 2; i++) {
        n = t_valid(b, MSG_ACT, e);
        j = t_find(e, n, "x");
        e[j].v = xs[i];
        e[j].vn = xn[i];
        len = t_join(e, n);
        CHECK(t_decode(t_frame, len, 0) == -1 && strstr(t_err, "multiple of 4"), "x of %d bytes: %s",
              i ? 0 : 17, t_err);
    }
    /* A failing decode leaves the caller's x untouched (x is copied only once all is valid). */
    n = t_valid(b, MSG_ACT, e);
    len = t_join(e, n);
    t_frame[len] = 0;
    for (int i = 0; i < 16; i++)
        t_y[i] = -1.0f;
    memset(&t_out, 0, sizeof(t_out));
    t_out.u.act.x = t_y;
    CHECK(proto_decode(t_frame, len + 1, 16, &t_out, t_err, sizeof(t_err)) == -1 && t_y[5] == -1.0f,
          "x untouched on failure");
    CHECK(proto_decode(t_frame, len, 16, &t_out, NULL, 0) == 0 && t_y[5] == t_x[5],
          "NULL err buffer");
    char small[8];
    CHECK(proto_decode(t_frame, len + 1, 16, &t_out, small, sizeof(small)) == -1 &&
              strlen(small) == 7,
          "small err buffer truncates: '%s'", small);
    CHECK(proto_decode(t_frame, len, PROTO_MAX_DIM + 1, &t_out, t_err, sizeof(t_err)) == -1,
          "expect_dim over max");

    /* Trace: 64 entries fine, 65 not; entries of the wrong shape. */
    t_fill(MSG_ACT, &t_in, 16, PROTO_MAX_TRACE);
    CHECK(t_encode(b, &t_in) == 0, "encode full trace");
    n = t_split(proto_buf_data(b), e);
    j = t_find(e, n, "tr");
    static uint8_t tr[3 + (PROTO_MAX_TRACE + 1) * 7];
    tr[0] = 0xdc;
    tr[1] = 0;
    tr[2] = PROTO_MAX_TRACE + 1;
    for (int i = 0; i <= PROTO_MAX_TRACE; i++)
        memcpy(tr + 3 + 7 * i, "\x96\x01\x02\x03\x04\x05\x06", 7);
    e[j].v = tr;
    e[j].vn = sizeof(tr);
    len = t_join(e, n);
    CHECK(t_decode(t_frame, len, 0) == -1 && strstr(t_err, "'tr' has 65 entries, max 64"),
          "trace of 65: %s", t_err);
    tr[2] = PROTO_MAX_TRACE;
    e[j].vn = sizeof(tr) - 7;
    len = t_join(e, n);
    CHECK(t_decode(t_frame, len, 0) == 0 && t_out.u.act.n_trace == 64 &&
              t_out.u.act.trace[63].send_ns == 6,
          "trace of 64 (array16): %s", t_err);
    static const uint8_t tr5[] = {0x91, 0x95, 1, 2, 3, 4, 5};
    static const uint8_t tr_stage[] = {0x91, 0x96, 0xce, 0, 1, 0, 0, 2, 3, 4, 5, 6};
    static const uint8_t tr_str[] = {0x91, 0x96, 1, 2, 3, 0xa1, 'x', 5, 6};
    static const uint8_t tr_flat[] = {0x92, 1, 2};
    const uint8_t *trs[] = {tr5, tr_stage, tr_str, tr_flat};
    size_t trn[] = {sizeof(tr5), sizeof(tr_stage), sizeof(tr_str), sizeof(tr_flat)};
    for (int i = 0; i < 4; i++) {
        e[j].v = trs[i];
        e[j].vn = trn[i];
        len = t_join(e, n);
        CHECK(t_decode(t_frame, len, 0) == -1 && strstr(t_err, "'tr"), "bad trace %d: %s", i, t_err);
    }
    /* Checksums: a non-uint element, and more than PROTO_MAX_LAYERS of them. */
    n = t_valid(b, MSG_ASSIGN, e);
    j = t_find(e, n, "ck");
    static const uint8_t ck_str[] = {0x92, 0x01, 0xa0};
    e[j].v = ck_str;
    e[j].vn = sizeof(ck_str);
    len = t_join(e, n);
    CHECK(t_decode(t_frame, len, 0) == -1 && strstr(t_err, "'ck[]'"), "ck with a str: %s", t_err);
    static uint8_t ck_many[5 + PROTO_MAX_LAYERS + 1];
    ck_many[0] = 0xdd;
    ck_many[1] = 0;
    ck_many[2] = 0;
    ck_many[3] = (PROTO_MAX_LAYERS + 1) >> 8;
    ck_many[4] = (PROTO_MAX_LAYERS + 1) & 0xff;
    e[j].v = ck_many;
    e[j].vn = sizeof(ck_many);
    len = t_join(e, n);
    CHECK(t_decode(t_frame, len, 0) == -1 && strstr(t_err, "max 4096"), "ck of 4097: %s", t_err);
}

static int t_err_ok(int rc)
{
    return rc == 0 || ((rc == -1 || rc == -2) && t_err[0] && strlen(t_err) < sizeof(t_err));
}

static void test_garbage(proto_buf *b)
{
    t_ent e[T_MAX_ENT];
    size_t n = t_valid(b, MSG_ACT, e);
    size_t vlen = t_join(e, n);
    static uint8_t valid[4096];
    memcpy(valid, t_frame, vlen);
    int bad = 0, ok = 0;
    uint8_t *buf = malloc(1024);
    for (int i = 0; i < 6000; i++) {
        size_t len = t_rand() % 600;
        for (size_t k = 0; k < len; k++)
            buf[k] = (uint8_t)t_rand();
        switch (i % 3) {
        case 0: /* pure noise */
            break;
        case 1: /* a plausible header, then noise */
            if (len >= 7)
                memcpy(buf, (const uint8_t[]){0x80 | (uint8_t)(t_rand() % 16), 0xa1, 'v', 0x01,
                                              0xa1, 't', (uint8_t)(1 + t_rand() % 10)},
                       7);
            break;
        case 2: /* a valid frame with a few random bytes overwritten */
            len = vlen;
            memcpy(buf, valid, vlen);
            for (int k = 0; k < 1 + (int)(t_rand() % 4); k++)
                buf[t_rand() % vlen] = (uint8_t)t_rand();
            break;
        }
        uint8_t *p = malloc(len ? len : 1); /* exact-size copy: ASan sees overreads */
        memcpy(p, buf, len);
        int rc = t_decode(p, len, i % 2 ? 16 : 0);
        bad += !t_err_ok(rc);
        ok += rc == 0;
        uint32_t v, t;
        (void)proto_peek(p, len, &v, &t);
        free(p);
    }
    free(buf);
    CHECK(bad == 0, "%d random frames gave a bad rc or no error text", bad);
    printf("garbage: 6000 frames, %d decoded\n", ok);

    /* Flipped-byte sweep over a valid act: every bit, and a few special bytes, at every offset. */
    int outcome[3] = {0, 0, 0};
    bad = 0;
    uint8_t *p = malloc(vlen);
    static const uint8_t special[] = {0x00, 0xff, 0xc1, 0xdf, 0xdd, 0xc6, 0x7f, 0x80};
    for (size_t off = 0; off < vlen; off++) {
        for (int k = 0; k < 8 + (int)sizeof(special); k++) {
            memcpy(p, valid, vlen);
            p[off] = k < 8 ? (uint8_t)(p[off] ^ (1u << k)) : special[k - 8];
            for (uint32_t ed = 0; ed <= 16; ed += 16) {
                int rc = t_decode(p, vlen, ed);
                bad += !t_err_ok(rc);
                outcome[rc == 0 ? 0 : rc == -1 ? 1 : 2]++;
            }
        }
    }
    free(p);
    CHECK(bad == 0, "%d flipped frames gave a bad rc or no error text", bad);
    CHECK(outcome[0] > 0 && outcome[1] > 0 && outcome[2] > 0, "flips reach ok, -1 and -2");
    printf("flip sweep: %zu bytes x %zu variants x 2: %d ok, %d rejected, %d version\n", vlen,
           8 + sizeof(special), outcome[0], outcome[1], outcome[2]);
}

/* Acts of several positions (a prompt's batch), session ends, the real-model assign and the
 * capability it needs. */
static void test_batch(proto_buf *b)
{
    /* 4 positions of 16: round trip where 4 are allowed; refused by a one-position decoder */
    t_fill(MSG_ACT, &t_in, 16, 2);
    t_in.u.act.n_pos = 4;
    for (uint32_t i = 0; i < 64; i++)
        t_x[i] = (float)i * 0.5f - 7.0f;
    CHECK(t_encode(b, &t_in) == 0, "encode an act of 4 positions");
    memset(&t_out, 0, sizeof(t_out));
    t_out.u.act.x = t_y;
    int rc = proto_decode_n(proto_buf_data(b), proto_buf_len(b), 16, 4, &t_out, t_err,
                            sizeof t_err);
    CHECK(rc == 0 && t_same(&t_in, &t_out) && t_out.u.act.dim == 16 && t_out.u.act.n_pos == 4,
          "4 x 16 round trip: rc %d dim %u np %u %s", rc, t_out.u.act.dim, t_out.u.act.n_pos,
          t_err);
    rc = t_decode(proto_buf_data(b), proto_buf_len(b), 16);
    CHECK(rc == -1 && strstr(t_err, "4 positions ('np'), at most 1 expected"),
          "a one-position decoder refuses 4: rc %d %s", rc, t_err);
    rc = proto_decode_n(proto_buf_data(b), proto_buf_len(b), 16, 3, &t_out, t_err, sizeof t_err);
    CHECK(rc == -1 && strstr(t_err, "at most 3"), "max_pos 3 refuses 4: rc %d %s", rc, t_err);
    rc = proto_decode_n(proto_buf_data(b), proto_buf_len(b), 32, 4, &t_out, t_err, sizeof t_err);
    CHECK(rc == -1 && strstr(t_err, "(dim 32 x 4 positions)"), "4 x 16 where dim 32: rc %d %s",
          rc, t_err);
    rc = proto_decode_n(proto_buf_data(b), proto_buf_len(b), 0, 4, &t_out, t_err, sizeof t_err);
    CHECK(rc == 0 && t_out.u.act.dim == 16, "any dim: rc %d dim %u", rc, t_out.u.act.dim);
    /* np = 3 over 64 floats: not whole positions */
    t_ent e[T_MAX_ENT];
    size_t n = t_split(proto_buf_data(b), e);
    static const uint8_t three[] = {0x03}, zero[] = {0x00}, big[] = {0xcd, 0x10, 0x01};
    size_t j = t_find(e, n, "np");
    e[j].v = three;
    e[j].vn = 1;
    size_t len = t_join(e, n);
    rc = proto_decode_n(t_frame, len, 0, 4, &t_out, t_err, sizeof t_err);
    CHECK(rc == -1 && strstr(t_err, "not 3 whole positions"), "np 3 over 64 floats: rc %d %s",
          rc, t_err);
    e[j].v = big; /* 4097 */
    e[j].vn = sizeof big;
    len = t_join(e, n);
    rc = proto_decode_n(t_frame, len, 0, 4, &t_out, t_err, sizeof t_err);
    CHECK(rc == -1 && strstr(t_err, "'np'"), "np 4097: rc %d %s", rc, t_err);
    e[j].v = zero; /* 0 is one position: 64 floats of dim 64 */
    e[j].vn = 1;
    len = t_join(e, n);
    rc = proto_decode_n(t_frame, len, 0, 4, &t_out, t_err, sizeof t_err);
    CHECK(rc == 0 && t_out.u.act.dim == 64, "np 0: rc %d dim %u %s", rc, t_out.u.act.dim, t_err);
    t_in.u.act.n_pos = PROTO_MAX_BATCH + 1;
    CHECK(proto_encode_act(b, MSG_ACT, &t_in.u.act) == -1, "encode np max+1");

    /* The frame limit follows from the batch: 64 positions of PROTO_MAX_DIM is 16 MiB of x,
     * over PROTO_MAX_FRAME; a decoder allowing 64 takes it, one allowing 63 or 1 does not. */
    CHECK(proto_frame_limit(4096, 64) == PROTO_MAX_FRAME &&
              proto_frame_limit(PROTO_MAX_DIM, 64) ==
                  (size_t)PROTO_MAX_DIM * 64 * 4 + PROTO_FRAME_HEADROOM,
          "frame limits: %zu, %zu", proto_frame_limit(4096, 64),
          proto_frame_limit(PROTO_MAX_DIM, 64));
    t_fill(MSG_ACT, &t_in, PROTO_MAX_DIM, PROTO_MAX_TRACE);
    t_in.u.act.n_pos = 64;
    for (size_t i = 0; i < (size_t)PROTO_MAX_DIM * 64; i++)
        t_x[i] = (float)(i % 1000);
    CHECK(t_encode(b, &t_in) == 0 && proto_buf_len(b) > PROTO_MAX_FRAME &&
              proto_buf_len(b) <= proto_frame_limit(PROTO_MAX_DIM, 64),
          "encode 64 x %d: %zu bytes", PROTO_MAX_DIM, proto_buf_len(b));
    memset(&t_out, 0, sizeof(t_out));
    t_out.u.act.x = t_y;
    rc = proto_decode_n(proto_buf_data(b), proto_buf_len(b), PROTO_MAX_DIM, 64, &t_out, t_err,
                        sizeof t_err);
    CHECK(rc == 0 && t_same(&t_in, &t_out), "64 x %d round trip: rc %d %s", PROTO_MAX_DIM, rc,
          t_err);
    rc = proto_decode_n(proto_buf_data(b), proto_buf_len(b), PROTO_MAX_DIM, 63, &t_out, t_err,
                        sizeof t_err);
    CHECK(rc == -1 && strstr(t_err, "max"), "a decoder of 63 refuses the frame: %s", t_err);
    rc = t_decode(proto_buf_data(b), proto_buf_len(b), PROTO_MAX_DIM);
    CHECK(rc == -1 && strstr(t_err, "max 16777216"), "proto_decode refuses it: %s", t_err);
    rc = proto_decode_n(proto_buf_data(b), proto_buf_len(b), 0, PROTO_MAX_BATCH + 1, &t_out,
                        t_err, sizeof t_err);
    CHECK(rc == -1 && strstr(t_err, "max_pos"), "max_pos out of range: %s", t_err);

    /* session end: session 0 is not a session */
    t_fill(MSG_SESSION_END, &t_in, 0, 0);
    t_in.u.send.session = 0;
    CHECK(proto_encode_session_end(b, &t_in.u.send) == -1, "encode session_end of session 0");

    /* the real-model assign: ctx needs ns and mb; a worker without PROTO_CAP_LLM is refused */
    t_fill(MSG_ASSIGN, &t_in, 0, 0);
    t_in.u.assign.n_ctx = 2048;
    t_in.u.assign.sessions = 4;
    t_in.u.assign.max_batch = 64;
    CHECK(t_encode(b, &t_in) == 0 && t_decode(proto_buf_data(b), proto_buf_len(b), 0) == 0 &&
              t_same(&t_in, &t_out) && t_out.u.assign.n_ctx == 2048,
          "real-model assign round trip: %s", t_err);
    n = t_split(proto_buf_data(b), e);
    j = t_find(e, n, "ns");
    e[j].v = zero;
    e[j].vn = 1;
    len = t_join(e, n);
    CHECK(t_decode(t_frame, len, 0) == -1 && strstr(t_err, "'ns' >= 1"),
          "ctx without sessions: %s", t_err);
    t_in.u.assign.max_batch = 0;
    CHECK(proto_encode_assign(b, &t_in.u.assign) == -1, "encode ctx without mb");
    t_in.u.assign.max_batch = 64;
    msg_hello h;
    memset(&h, 0, sizeof h);
    snprintf(h.id, sizeof h.id, "w2");
    h.caps = PROTO_CAP_RESIDENT | PROTO_CAP_NETEM;
    char why[512];
    CHECK(proto_assign_check(&t_in.u.assign, &h, why, sizeof why) == -1 && strstr(why, "w2") &&
              strstr(why, "real-model"),
          "a real model to a worker without the bit: '%s'", why);
    h.caps |= PROTO_CAP_LLM;
    CHECK(proto_assign_check(&t_in.u.assign, &h, why, sizeof why) == 0, "with the bit");
    h.caps = PROTO_CAP_RESIDENT;
    t_in.u.assign.n_ctx = 0;
    CHECK(proto_assign_check(&t_in.u.assign, &h, why, sizeof why) == 0,
          "the dense model to an old worker");
}

/* Several sessions in one act ("sg", PROTO_CAP_SEGS): written only when there are segments
 * (a one-session act is what it was), round trip, and every refusal named. */
static void test_segs(proto_buf *b)
{
    t_fill(MSG_ACT, &t_in, 16, 1);
    t_in.u.act.n_pos = 4;
    for (uint32_t i = 0; i < 64; i++)
        t_x[i] = (float)i * 0.25f;
    CHECK(t_encode(b, &t_in) == 0, "encode a one-session act");
    t_ent e[T_MAX_ENT];
    size_t n = t_split(proto_buf_data(b), e), j;
    int has = 0;
    for (j = 0; j < n; j++)
        has |= !strcmp(e[j].name, "sg");
    CHECK(!has, "a one-session act carries no 'sg'");
    msg_act *a = &t_in.u.act;
    a->session = 7;
    a->pos = 10;
    a->segs.n = 3;
    a->segs.s[0].session = 7, a->segs.s[0].pos = 10, a->segs.s[0].n = 1;
    a->segs.s[1].session = 2, a->segs.s[1].pos = 0, a->segs.s[1].n = 2;
    a->segs.s[2].session = 9, a->segs.s[2].pos = 4000000000u, a->segs.s[2].n = 1;
    CHECK(t_encode(b, &t_in) == 0, "encode 3 segments");
    memset(&t_out, 0, sizeof(t_out));
    t_out.u.act.x = t_y;
    int rc = proto_decode_n(proto_buf_data(b), proto_buf_len(b), 16, 4, &t_out, t_err,
                            sizeof t_err);
    CHECK(rc == 0 && t_same(&t_in, &t_out) && t_out.u.act.segs.n == 3 &&
              t_out.u.act.segs.s[2].pos == 4000000000u,
          "3 segments round trip: rc %d %s", rc, t_err);
    /* the encoder refuses what the decoder would */
    a->segs.s[1].n = 1;
    CHECK(proto_encode_act(b, MSG_ACT, a) == -1, "encode: segments of 3 positions, np 4");
    a->segs.s[1].n = 2;
    a->segs.s[0].session = 8;
    CHECK(proto_encode_act(b, MSG_ACT, a) == -1, "encode: first segment is not sid/pos");
    a->segs.s[0].session = 7;
    a->segs.s[1].session = 0;
    CHECK(proto_encode_act(b, MSG_ACT, a) == -1, "encode: session 0");
    a->segs.s[1].session = 2;
    /* decoder refusals, each named: rewrite "sg" by hand */
    static const struct { const char *what; uint8_t v[32]; size_t vn; const char *want; } bad[] = {
        {"sum 3", {0x93, 0x93, 0x07, 0x0a, 0x01, 0x93, 0x02, 0x00, 0x01, 0x93, 0x09, 0x00, 0x01},
         13, "hold 3 positions, 'np' says 4"},
        {"twice", {0x93, 0x93, 0x07, 0x0a, 0x01, 0x93, 0x07, 0x00, 0x02, 0x93, 0x09, 0x00, 0x01},
         13, "names session 7 twice"},
        {"first", {0x92, 0x93, 0x02, 0x0a, 0x02, 0x93, 0x07, 0x00, 0x02}, 9, "'sg' starts at"},
        {"sid 0", {0x92, 0x93, 0x07, 0x0a, 0x02, 0x93, 0x00, 0x00, 0x02}, 9, "'sg[].sid'"},
        {"n 0", {0x92, 0x93, 0x07, 0x0a, 0x04, 0x93, 0x03, 0x00, 0x00}, 9, "'sg[].n'"},
        {"empty", {0x90}, 1, "0 segments"},
        {"pair", {0x91, 0x92, 0x07, 0x0a}, 4, "expected 3"},
        {"not array", {0x07}, 1, "'sg'"},
    };
    n = t_split(proto_buf_data(b), e);
    j = t_find(e, n, "sg");
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        t_ent m[T_MAX_ENT];
        memcpy(m, e, n * sizeof *e);
        m[j].v = bad[i].v;
        m[j].vn = bad[i].vn;
        size_t len = t_join(m, n);
        rc = proto_decode_n(t_frame, len, 16, 4, &t_out, t_err, sizeof t_err);
        CHECK(rc == -1 && strstr(t_err, bad[i].want), "sg %s: rc %d %s", bad[i].what, rc, t_err);
    }
    a->segs.n = PROTO_MAX_SEGS + 1;
    CHECK(proto_encode_act(b, MSG_ACT, a) == -1, "encode: %d segments", PROTO_MAX_SEGS + 1);
    CHECK(PROTO_CAP_SEGS == 0x8u && !(PROTO_CAP_SEGS & (PROTO_CAP_RESIDENT | PROTO_CAP_NETEM |
                                                        PROTO_CAP_LLM)),
          "PROTO_CAP_SEGS is its own bit");
}

static void test_speed(proto_buf *b)
{
    const int iters = 20000;
    t_fill(MSG_ACT, &t_in, 4096, 4);
    CHECK(t_encode(b, &t_in) == 0, "warm encode");
    const void *data = proto_buf_data(b);
    int fails = 0;
    uint64_t t0 = util_now_ns();
    for (int i = 0; i < iters; i++) {
        t_in.u.act.step = (uint64_t)i;
        fails += t_encode(b, &t_in) != 0;
        t_out.u.act.x = t_y;
        fails += proto_decode(proto_buf_data(b), proto_buf_len(b), 4096, &t_out, t_err,
                              sizeof(t_err)) != 0;
    }
    uint64_t dt = util_now_ns() - t0;
    CHECK(fails == 0 && t_out.u.act.step == (uint64_t)iters - 1 && t_same(&t_in, &t_out),
          "speed loop: %d failures", fails);
    CHECK(proto_buf_data(b) == data, "buffer reused without reallocation");
    printf("act dim 4096 (%zu-byte frame): %.0f ns per encode+decode\n", proto_buf_len(b),
           (double)dt / iters);
}

/* Write one valid frame per message type (act/result with dim 16) into dir. */
static int s_write_corpus(const char *dir)
{
    proto_buf *b = proto_buf_new();
    if (!b)
        return 1;
    for (uint32_t type = MSG_HELLO; type < MSG_TYPE_MAX_; type++) {
        char path[1024];
        t_fill(type, &t_in, 16, 2);
        if (type == MSG_ASSIGN) { /* keep the seed small: 4 layers */
            t_in.u.assign.first = 4;
            t_in.u.assign.last = 8;
        }
        if (type == MSG_ASSIGN) /* a real model's: the optional keys set */
            t_in.u.assign = (msg_assign){.n_ctx = 256, .sessions = 2, .max_batch = 4,
                                         .model_path = "m.gguf", .n_layers = 8, .dim = 16,
                                         .first = 4, .last = 8};
        if (type == MSG_ACT) /* an act of 2 positions of 8 */
            t_in.u.act.n_pos = 2;
        if (t_encode(b, &t_in) != 0)
            goto err;
        snprintf(path, sizeof(path), "%s/%s.msgpack", dir, proto_type_name(type));
        FILE *f = fopen(path, "wb");
        if (!f || fwrite(proto_buf_data(b), 1, proto_buf_len(b), f) != proto_buf_len(b)) {
            if (f)
                fclose(f);
            goto err;
        }
        fclose(f);
    }
    proto_buf_free(&b);
    return 0;
err:
    fprintf(stderr, "test_proto: cannot write corpus to %s\n", dir);
    proto_buf_free(&b);
    return 1;
}

/* Every committed fuzzer finding (proto/fuzz/regress) and seed (proto/fuzz/corpus) decodes to
 * a clean verdict, never a crash (the sanitizer build would catch a bad read). */
static void test_regressions(void)
{
    const char *dirs[] = { "proto/fuzz/regress", "proto/fuzz/corpus" };
    static uint8_t buf[1 << 20];
    for (int k = 0; k < 2; k++) {
        DIR *d = opendir(dirs[k]);
        struct dirent *de;
        int n = 0;
        if (!d) {
            CHECK(k == 0, "%s missing", dirs[k]);
            continue;
        }
        while ((de = readdir(d))) {
            char path[1024];
            if (de->d_name[0] == '.' || strstr(de->d_name, ".md"))
                continue;
            snprintf(path, sizeof path, "%s/%s", dirs[k], de->d_name);
            FILE *f = fopen(path, "rb");
            if (!f)
                continue;
            size_t len = fread(buf, 1, sizeof buf, f);
            fclose(f);
            uint8_t *copy = malloc(len ? len : 1); /* exact size: ASan sees any overread */
            memcpy(copy, buf, len);
            for (uint32_t dim = 0; dim <= 16; dim += 16) {
                int rc = t_decode(copy, len, dim);
                CHECK(rc == 0 || ((rc == -1 || rc == -2) && t_err[0]), "%s (dim %u): rc %d",
                      path, dim, rc);
            }
            free(copy);
            n++;
        }
        closedir(d);
        if (k == 1)
            CHECK(n >= 10, "seed corpus has %d files", n);
    }
}

int main(int argc, char **argv)
{
    if (argc == 3 && strcmp(argv[1], "--corpus") == 0)
        return s_write_corpus(argv[2]);
    proto_buf *b = proto_buf_new();
    CHECK(b != NULL, "proto_buf_new");
    if (!b)
        return 1;
    CHECK(strcmp(proto_type_name(MSG_ACT), "act") == 0 && strcmp(proto_type_name(0), "unknown") == 0 &&
              strcmp(proto_type_name(99), "unknown") == 0,
          "type names");
    test_round_trip(b);
    test_encode_args(b);
    test_truncations(b);
    test_oversized(b);
    test_keys(b);
    test_values(b);
    test_garbage(b);
    test_batch(b);
    test_segs(b);
    test_speed(b);
    test_regressions();
    proto_buf_free(&b);
    CHECK(b == NULL, "proto_buf_free clears the pointer");
    proto_buf_free(&b);
    return CHECK_DONE("test_proto");
}
