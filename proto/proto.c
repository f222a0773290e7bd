/* proto.c — swarm's wire codec: msgpack-c packer to encode, a bounded no-allocation cursor to decode. proto/
 *
 * Every frame is one msgpack map. The first key is "v" (PROTO_VERSION), the second "t"
 * (msg_type); the rest are the type's fields below, in any order. The encoder writes every
 * field; the decoder requires every field, rejects duplicates, and skips unknown keys
 * (bounded, nesting at most S_MAX_DEPTH) so a later version can add fields.
 *
 *   type       key    field                 wire   range / notes
 *   hello      id     id                    str    1..255 bytes
 *              cap    cap_bytes             uint
 *              pv     proto_version         uint   u32
 *              caps   caps                  uint   u32, PROTO_CAP_* bits
 *              dep    data_ep               str    1..255 bytes
 *              pid    pid                   uint   u32
 *              pk     pubkey                str    0..40 bytes: Z85 CURVE public key, "" = plaintext
 *   assign     mp     model_path            str    1..1023 bytes
 *              ms     model_size            uint
 *              nl     n_layers              uint   1..PROTO_MAX_LAYERS
 *              dim    dim                   uint   1..PROTO_MAX_DIM
 *              f      first                 uint   first < last <= n_layers
 *              l      last                  uint
 *              ck     checksums             array  of uint, exactly last-first entries
 *              th     threads               uint   0..S_MAX_THREADS
 *              cap    cap_bytes             uint
 *              hl     header_bytes          uint   bytes before the first tensor
 *              ctx    n_ctx                 uint   optional (0 = dense): positions per session
 *              ns     sessions              uint   optional; >= 1 when ctx > 0
 *              mb     max_batch             uint   optional; 1..PROTO_MAX_BATCH when ctx > 0
 *   ready      bl     bytes_loaded          uint
 *              rss    peak_rss_bytes        uint
 *              cg     cgroup_peak_bytes     uint
 *              lns    load_ns               uint
 *              rb     read_bytes            uint
 *              fb     fetched_bytes         uint   model bytes received from the coordinator
 *              fns    fetch_ns              uint
 *              rsb    resumed_bytes         uint   already cached by an interrupted transfer
 *   route      ep     epoch                 uint
 *              nx     next_ep               str    1..255 bytes
 *              hop    hop                   uint   0..PROTO_MAX_LAYERS
 *              last   last                  uint   0 or 1
 *              ln     link                  map    the link keys below
 *              nk     next_key              str    0..40 bytes: next hop's CURVE key, "" = plaintext
 *              pk     prev_key              str    0..40 bytes: previous hop's key, allowed on the data plane
 *     link     d      delay_ns              uint
 *              j      jitter_ns             uint
 *              dist   dist                  uint   0..3
 *              loss   loss_ppm              uint   0..1000000
 *              rate   rate_bps              uint
 *              seed   seed                  uint
 *   act/result req    req                   uint
 *              step   step                  uint
 *              ep     epoch                 uint
 *              hop    hop                   uint   0..PROTO_MAX_LAYERS
 *              sid    session               uint
 *              pos    pos                   uint   the first position
 *              np     n_pos                 uint   optional (0 = 1): positions, 0..PROTO_MAX_BATCH
 *              x      x (and dim)           bin    4*dim*np bytes of little-endian f32, dim
 *                                                  1..PROTO_MAX_DIM per position
 *              tr     trace, n_trace        array  0..PROTO_MAX_TRACE entries, each an array of 6
 *                                                  uints [stage, wait, deser, compute, ser, send],
 *                                                  stage <= 0xffff
 *              sg     segs                  array  optional (absent = one session; written only
 *                                                  when there are segments): 1..PROTO_MAX_SEGS
 *                                                  arrays [sid >= 1, pos < 2^32, n >= 1], the n
 *                                                  summing to np; sid/pos = the first's
 *   heartbeat  seq    seq                   uint
 *              ts     sent_ns               uint
 *              busy   busy_ns               uint   optional (0): how long the worker has been
 *                                                  computing its current activation, 0 = idle
 *              acts   acts                  uint   optional (0): activations completed so far
 *              q      queued                uint   optional (0): activations waiting to start
 *   stats      acts   acts                  uint
 *              bad    bad_msgs              uint
 *              stale  stale_msgs            uint
 *              rss    peak_rss_bytes        uint
 *              cg     cgroup_peak_bytes     uint
 *              bin    bytes_in              uint
 *              bout   bytes_out             uint
 *   error      code   code                  uint   0..PERR_INTERNAL
 *              msg    text                  str    0..255 bytes
 *   bye        why    reason                str    0..255 bytes
 *   fetch      off    off                   uint   offset in the model file
 *              len    len                   uint   1..PROTO_MAX_CHUNK
 *              seq    seq                   uint   echoed
 *   chunk      off    off                   uint
 *              seq    seq                   uint
 *              xh     hash                  uint   XXH3-64 of d
 *              d      data, len             bin    1..PROTO_MAX_CHUNK bytes
 *   session_end sid   session               uint   >= 1
 *              ep     epoch                 uint
 *
 * "uint" accepts any msgpack integer format holding a non-negative value (the packer writes
 * the shortest). Strings must fit their buffer with the NUL and hold no NUL; they are
 * rejected, never truncated.
 */
#include "proto/proto.h"

#include <msgpack.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* x travels as raw little-endian f32: a memcpy on this machine, so refuse to build elsewhere. */
#if !defined(__BYTE_ORDER__) || __BYTE_ORDER__ != __ORDER_LITTLE_ENDIAN__
#error "proto.c copies f32 activations as little-endian bytes; add byte swapping for this target"
#endif
_Static_assert(sizeof(float) == 4, "activations are 4-byte IEEE f32");

#define S_MAX_DEPTH 8      /* container nesting in a frame, the top-level map counting as 1 */
#define S_MAX_THREADS 1024 /* BLAS threads in an assign */
#define S_TRACE_ITEMS 6    /* [stage, wait, deser, compute, ser, send] */
#define S_MAX_STAGE 0xffffu

struct proto_buf {
    msgpack_sbuffer sb;
    msgpack_packer pk;
};

/* ---- field tables: one per message body, shared by the encoder and the decoder ---- */

typedef enum {
    S_UINT,  /* uint32_t or uint64_t (by size), range min..max */
    S_STR,   /* char[size], length min..max bytes without the NUL */
    S_X,     /* msg_act: x + dim */
    S_TRACE, /* msg_act: trace + n_trace */
    S_SEGS,  /* msg_act: segs (optional: written only when segs.n > 0) */
    S_CKSUM, /* msg_assign: checksums, count last-first */
    S_LINK,  /* msg_route: link, a nested map of s_link_f */
    S_BIN,   /* msg_chunk: data + len, at most PROTO_MAX_CHUNK bytes */
} s_kind;

typedef struct {
    const char *key;
    s_kind kind;
    size_t off;   /* offsetof the field in its body struct */
    size_t size;  /* sizeof the field */
    uint64_t min, max;
    int opt;      /* may be absent (then zero): keys added after a version shipped */
} s_field;

#define S_U(T, k, f, lo, hi) {k, S_UINT, offsetof(T, f), sizeof(((T *)0)->f), lo, hi, 0}
#define S_U64(T, k, f) S_U(T, k, f, 0, UINT64_MAX)
#define S_U32(T, k, f) S_U(T, k, f, 0, UINT32_MAX)
#define S_U64_OPT(T, k, f) {k, S_UINT, offsetof(T, f), sizeof(((T *)0)->f), 0, UINT64_MAX, 1}
#define S_U32_OPT(T, k, f) {k, S_UINT, offsetof(T, f), sizeof(((T *)0)->f), 0, UINT32_MAX, 1}
#define S_S(T, k, f, lo) {k, S_STR, offsetof(T, f), sizeof(((T *)0)->f), lo, sizeof(((T *)0)->f) - 1, 0}
#define S_SPECIAL(T, k, kind, f) {k, kind, offsetof(T, f), sizeof(((T *)0)->f), 0, 0, 0}
#define S_N(a) (sizeof(a) / sizeof((a)[0]))

static const s_field s_hello_f[] = {
    S_S(msg_hello, "id", id, 1),
    S_U64(msg_hello, "cap", cap_bytes),
    S_U32(msg_hello, "pv", proto_version),
    S_U32(msg_hello, "caps", caps),
    S_S(msg_hello, "dep", data_ep, 1),
    S_U32(msg_hello, "pid", pid),
    S_S(msg_hello, "pk", pubkey, 0),
};
static const s_field s_assign_f[] = {
    S_S(msg_assign, "mp", model_path, 1),
    S_U64(msg_assign, "ms", model_size),
    S_U(msg_assign, "nl", n_layers, 1, PROTO_MAX_LAYERS),
    S_U(msg_assign, "dim", dim, 1, PROTO_MAX_DIM),
    S_U(msg_assign, "f", first, 0, PROTO_MAX_LAYERS - 1),
    S_U(msg_assign, "l", last, 1, PROTO_MAX_LAYERS),
    S_SPECIAL(msg_assign, "ck", S_CKSUM, checksums),
    S_U(msg_assign, "th", threads, 0, S_MAX_THREADS),
    S_U64(msg_assign, "cap", cap_bytes),
    S_U64(msg_assign, "hl", header_bytes),
    S_U32_OPT(msg_assign, "ctx", n_ctx),
    S_U32_OPT(msg_assign, "ns", sessions),
    {"mb", S_UINT, offsetof(msg_assign, max_batch), sizeof(uint32_t), 0, PROTO_MAX_BATCH, 1},
};
static const s_field s_ready_f[] = {
    S_U64(msg_ready, "bl", bytes_loaded),      S_U64(msg_ready, "rss", peak_rss_bytes),
    S_U64(msg_ready, "cg", cgroup_peak_bytes), S_U64(msg_ready, "lns", load_ns),
    S_U64(msg_ready, "rb", read_bytes),
    S_U64(msg_ready, "fb", fetched_bytes),
    S_U64(msg_ready, "fns", fetch_ns),
    S_U64(msg_ready, "rsb", resumed_bytes),
};
static const s_field s_link_f[] = {
    S_U64(msg_link, "d", delay_ns),
    S_U64(msg_link, "j", jitter_ns),
    S_U(msg_link, "dist", dist, 0, 3),
    S_U(msg_link, "loss", loss_ppm, 0, 1000000),
    S_U64(msg_link, "rate", rate_bps),
    S_U64(msg_link, "seed", seed),
};
static const s_field s_route_f[] = {
    S_U64(msg_route, "ep", epoch),
    S_S(msg_route, "nx", next_ep, 1),
    S_U(msg_route, "hop", hop, 0, PROTO_MAX_LAYERS),
    S_U(msg_route, "last", last, 0, 1),
    S_SPECIAL(msg_route, "ln", S_LINK, link),
    S_S(msg_route, "nk", next_key, 0),
    S_S(msg_route, "pk", prev_key, 0),
};
static const s_field s_act_f[] = {
    S_U64(msg_act, "req", req),
    S_U64(msg_act, "step", step),
    S_U64(msg_act, "ep", epoch),
    S_U(msg_act, "hop", hop, 0, PROTO_MAX_LAYERS),
    S_U64(msg_act, "sid", session),
    S_U64(msg_act, "pos", pos),
    {"np", S_UINT, offsetof(msg_act, n_pos), sizeof(uint32_t), 0, PROTO_MAX_BATCH, 1},
    S_SPECIAL(msg_act, "x", S_X, x),
    S_SPECIAL(msg_act, "tr", S_TRACE, trace),
    {"sg", S_SEGS, offsetof(msg_act, segs), sizeof(((msg_act *)0)->segs), 0, 0, 1},
};
static const s_field s_hb_f[] = {
    S_U64(msg_heartbeat, "seq", seq),
    S_U64(msg_heartbeat, "ts", sent_ns),
    S_U64_OPT(msg_heartbeat, "busy", busy_ns),
    S_U64_OPT(msg_heartbeat, "acts", acts),
    S_U32_OPT(msg_heartbeat, "q", queued),
};
static const s_field s_stats_f[] = {
    S_U64(msg_stats, "acts", acts),
    S_U64(msg_stats, "bad", bad_msgs),
    S_U64(msg_stats, "stale", stale_msgs),
    S_U64(msg_stats, "rss", peak_rss_bytes),
    S_U64(msg_stats, "cg", cgroup_peak_bytes),
    S_U64(msg_stats, "bin", bytes_in),
    S_U64(msg_stats, "bout", bytes_out),
};
static const s_field s_error_f[] = {
    S_U(msg_error, "code", code, 0, PERR_INTERNAL),
    S_S(msg_error, "msg", text, 0),
};
static const s_field s_bye_f[] = {
    S_S(msg_bye, "why", reason, 0),
};
static const s_field s_fetch_f[] = {
    S_U64(msg_fetch, "off", off),
    S_U(msg_fetch, "len", len, 1, PROTO_MAX_CHUNK),
    S_U64(msg_fetch, "seq", seq),
};
static const s_field s_chunk_f[] = {
    S_U64(msg_chunk, "off", off),
    S_U64(msg_chunk, "seq", seq),
    S_U64(msg_chunk, "xh", hash),
    S_SPECIAL(msg_chunk, "d", S_BIN, data),
};
static const s_field s_send_f[] = {
    S_U(msg_session_end, "sid", session, 1, UINT64_MAX),
    S_U64(msg_session_end, "ep", epoch),
};

typedef struct {
    const s_field *f;
    size_t n;
} s_table;

static const s_table s_tables[MSG_TYPE_MAX_] = {
    [MSG_HELLO] = {s_hello_f, S_N(s_hello_f)},   [MSG_ASSIGN] = {s_assign_f, S_N(s_assign_f)},
    [MSG_READY] = {s_ready_f, S_N(s_ready_f)},   [MSG_ROUTE] = {s_route_f, S_N(s_route_f)},
    [MSG_ACT] = {s_act_f, S_N(s_act_f)},         [MSG_RESULT] = {s_act_f, S_N(s_act_f)},
    [MSG_HEARTBEAT] = {s_hb_f, S_N(s_hb_f)},     [MSG_STATS] = {s_stats_f, S_N(s_stats_f)},
    [MSG_ERROR] = {s_error_f, S_N(s_error_f)},   [MSG_BYE] = {s_bye_f, S_N(s_bye_f)},
    [MSG_FETCH] = {s_fetch_f, S_N(s_fetch_f)},   [MSG_CHUNK] = {s_chunk_f, S_N(s_chunk_f)},
    [MSG_SESSION_END] = {s_send_f, S_N(s_send_f)},
};
_Static_assert(S_N(s_assign_f) <= 64 && S_N(s_act_f) <= 64 && S_N(s_stats_f) <= 64,
               "the decoder tracks seen keys in a 64-bit mask");

const char *proto_type_name(uint32_t type)
{
    static const char *const names[MSG_TYPE_MAX_] = {
        [MSG_HELLO] = "hello", [MSG_ASSIGN] = "assign",       [MSG_READY] = "ready",
        [MSG_ROUTE] = "route", [MSG_ACT] = "act",             [MSG_RESULT] = "result",
        [MSG_HEARTBEAT] = "heartbeat", [MSG_STATS] = "stats", [MSG_ERROR] = "error",
        [MSG_BYE] = "bye", [MSG_FETCH] = "fetch", [MSG_CHUNK] = "chunk",
        [MSG_SESSION_END] = "session_end",
    };
    if (type == 0 || type >= MSG_TYPE_MAX_)
        return "unknown";
    return names[type];
}

/* ---- buffer ---- */

proto_buf *proto_buf_new(void)
{
    proto_buf *b = calloc(1, sizeof(*b));
    if (!b)
        return NULL;
    msgpack_sbuffer_init(&b->sb);
    msgpack_packer_init(&b->pk, &b->sb, msgpack_sbuffer_write);
    return b;
}

void proto_buf_free(proto_buf **b)
{
    if (!b || !*b)
        return;
    msgpack_sbuffer_destroy(&(*b)->sb);
    free(*b);
    *b = NULL;
}

const void *proto_buf_data(const proto_buf *b) { return b->sb.data; }
size_t proto_buf_len(const proto_buf *b) { return b->sb.size; }

/* ---- encoder ---- */

static uint64_t s_get_uint(const void *body, const s_field *f)
{
    const char *p = (const char *)body + f->off;
    if (f->size == sizeof(uint32_t)) {
        uint32_t v;
        memcpy(&v, p, sizeof(v));
        return v;
    }
    uint64_t v;
    memcpy(&v, p, sizeof(v));
    return v;
}

static int s_pack_str(msgpack_packer *pk, const char *s, size_t n)
{
    if (msgpack_pack_str(pk, n) < 0)
        return -1;
    return n ? msgpack_pack_str_body(pk, s, n) : 0;
}

static int s_pack_fields(msgpack_packer *pk, const s_field *f, size_t nf, const void *body);

/* One field's value. -1 on a value the decoder would reject (bad argument) or a write failure. */
static int s_pack_value(msgpack_packer *pk, const s_field *f, const void *body)
{
    const char *p = (const char *)body + f->off;
    switch (f->kind) {
    case S_UINT: {
        uint64_t v = s_get_uint(body, f);
        if (v < f->min || v > f->max)
            return -1;
        return msgpack_pack_uint64(pk, v);
    }
    case S_STR: {
        size_t n = strnlen(p, f->size);
        if (n >= f->size || n < f->min) /* unterminated, or empty where required */
            return -1;
        return s_pack_str(pk, p, n);
    }
    case S_X: {
        const msg_act *a = body;
        if (a->dim == 0 || a->dim > PROTO_MAX_DIM || !a->x || a->n_pos > PROTO_MAX_BATCH)
            return -1;
        size_t n = (size_t)a->dim * (a->n_pos ? a->n_pos : 1) * sizeof(float);
        if (msgpack_pack_bin(pk, n) < 0)
            return -1;
        return msgpack_pack_bin_body(pk, a->x, n);
    }
    case S_TRACE: {
        const msg_act *a = body;
        if (a->n_trace > PROTO_MAX_TRACE || msgpack_pack_array(pk, a->n_trace) < 0)
            return -1;
        for (uint32_t i = 0; i < a->n_trace; i++) {
            const msg_trace *t = &a->trace[i];
            if (t->stage > S_MAX_STAGE || msgpack_pack_array(pk, S_TRACE_ITEMS) < 0 ||
                msgpack_pack_uint64(pk, t->stage) < 0 || msgpack_pack_uint64(pk, t->wait_ns) < 0 ||
                msgpack_pack_uint64(pk, t->deser_ns) < 0 ||
                msgpack_pack_uint64(pk, t->compute_ns) < 0 ||
                msgpack_pack_uint64(pk, t->ser_ns) < 0 || msgpack_pack_uint64(pk, t->send_ns) < 0)
                return -1;
        }
        return 0;
    }
    case S_SEGS: {
        const msg_act *a = body;
        uint64_t sum = 0;
        if (!a->segs.n || a->segs.n > PROTO_MAX_SEGS || msgpack_pack_array(pk, a->segs.n) < 0)
            return -1;
        for (uint32_t i = 0; i < a->segs.n; i++) {
            if (!a->segs.s[i].session || !a->segs.s[i].n || msgpack_pack_array(pk, 3) < 0 ||
                msgpack_pack_uint64(pk, a->segs.s[i].session) < 0 ||
                msgpack_pack_uint64(pk, a->segs.s[i].pos) < 0 ||
                msgpack_pack_uint64(pk, a->segs.s[i].n) < 0)
                return -1;
            sum += a->segs.s[i].n;
        }
        /* as the decoder takes it: the segments tile x, the first is sid/pos */
        return sum == (a->n_pos ? a->n_pos : 1) && a->segs.s[0].session == a->session &&
                       a->segs.s[0].pos == a->pos ? 0 : -1;
    }
    case S_CKSUM: {
        const msg_assign *a = body; /* first < last <= PROTO_MAX_LAYERS checked by the caller */
        if (msgpack_pack_array(pk, a->last - a->first) < 0)
            return -1;
        for (uint32_t i = 0; i < a->last - a->first; i++)
            if (msgpack_pack_uint64(pk, a->checksums[i]) < 0)
                return -1;
        return 0;
    }
    case S_LINK:
        if (msgpack_pack_map(pk, S_N(s_link_f)) < 0)
            return -1;
        return s_pack_fields(pk, s_link_f, S_N(s_link_f), p);
    case S_BIN: {
        const msg_chunk *m = body;
        if (m->len == 0 || m->len > PROTO_MAX_CHUNK || !m->data)
            return -1;
        if (msgpack_pack_bin(pk, m->len) < 0)
            return -1;
        return msgpack_pack_bin_body(pk, m->data, m->len);
    }
    }
    return -1;
}

/* Is the field written? Every one but an act's "sg" without segments: a one-session act is
 * byte for byte what it was before "sg" existed. */
static int s_present(const s_field *f, const void *body)
{
    return f->kind != S_SEGS || ((const msg_act *)body)->segs.n > 0;
}

static int s_pack_fields(msgpack_packer *pk, const s_field *f, size_t nf, const void *body)
{
    for (size_t i = 0; i < nf; i++)
        if (s_present(&f[i], body) &&
            (s_pack_str(pk, f[i].key, strlen(f[i].key)) < 0 || s_pack_value(pk, &f[i], body) < 0))
            return -1;
    return 0;
}

size_t proto_frame_limit(uint32_t dim, uint32_t max_pos)
{
    if (dim > PROTO_MAX_DIM)
        dim = PROTO_MAX_DIM;
    if (max_pos > PROTO_MAX_BATCH)
        max_pos = PROTO_MAX_BATCH;
    size_t act = (size_t)dim * max_pos * sizeof(float) + PROTO_FRAME_HEADROOM;
    return act > PROTO_MAX_FRAME ? act : PROTO_MAX_FRAME;
}

/* Clear b and write {"v": PROTO_VERSION, "t": type, fields...}, at most max_frame bytes. */
static int s_encode_max(proto_buf *b, uint32_t type, const void *body, size_t max_frame)
{
    if (!b || !body)
        return -1;
    const s_table *t = &s_tables[type];
    b->sb.size = 0; /* reuse the grown buffer: no allocation once warm */
    size_t nk = 0;
    for (size_t i = 0; i < t->n; i++)
        nk += s_present(&t->f[i], body);
    if (msgpack_pack_map(&b->pk, 2 + nk) < 0 || s_pack_str(&b->pk, "v", 1) < 0 ||
        msgpack_pack_uint64(&b->pk, PROTO_VERSION) < 0 || s_pack_str(&b->pk, "t", 1) < 0 ||
        msgpack_pack_uint64(&b->pk, type) < 0 || s_pack_fields(&b->pk, t->f, t->n, body) < 0)
        goto err;
    if (b->sb.size > max_frame)
        goto err;
    return 0;
err:
    b->sb.size = 0;
    return -1;
}

static int s_encode(proto_buf *b, uint32_t type, const void *body)
{
    return s_encode_max(b, type, body, PROTO_MAX_FRAME);
}

int proto_encode_hello(proto_buf *b, const msg_hello *m) { return s_encode(b, MSG_HELLO, m); }
int proto_encode_ready(proto_buf *b, const msg_ready *m) { return s_encode(b, MSG_READY, m); }
int proto_encode_route(proto_buf *b, const msg_route *m) { return s_encode(b, MSG_ROUTE, m); }
int proto_encode_stats(proto_buf *b, const msg_stats *m) { return s_encode(b, MSG_STATS, m); }
int proto_encode_error(proto_buf *b, const msg_error *m) { return s_encode(b, MSG_ERROR, m); }
int proto_encode_bye(proto_buf *b, const msg_bye *m) { return s_encode(b, MSG_BYE, m); }
int proto_encode_fetch(proto_buf *b, const msg_fetch *m) { return s_encode(b, MSG_FETCH, m); }
int proto_encode_chunk(proto_buf *b, const msg_chunk *m) { return s_encode(b, MSG_CHUNK, m); }

int proto_encode_session_end(proto_buf *b, const msg_session_end *m)
{
    return s_encode(b, MSG_SESSION_END, m);
}

int proto_encode_heartbeat(proto_buf *b, const msg_heartbeat *m)
{
    return s_encode(b, MSG_HEARTBEAT, m);
}

int proto_encode_assign(proto_buf *b, const msg_assign *m)
{
    if (!m || m->first >= m->last || m->last > m->n_layers || m->n_layers > PROTO_MAX_LAYERS)
        return -1;
    if (m->n_ctx && (!m->sessions || !m->max_batch))
        return -1;
    return s_encode(b, MSG_ASSIGN, m);
}

int proto_encode_act(proto_buf *b, uint32_t type, const msg_act *m)
{
    if ((type != MSG_ACT && type != MSG_RESULT) || !m)
        return -1;
    return s_encode_max(b, type, m, proto_frame_limit(m->dim, m->n_pos ? m->n_pos : 1));
}

/* ---- decoder: a cursor over the frame that checks every length before it reads ---- */

typedef enum { K_NIL, K_BOOL, K_UINT, K_NINT, K_FLOAT, K_STR, K_BIN, K_ARRAY, K_MAP, K_EXT } s_tkind;

static const char *const s_tkind_name[] = {"nil", "bool", "uint", "negative int", "float",
                                           "str", "bin",  "array", "map", "ext"};
static const char *const s_tkind_a[] = {"a nil", "a bool", "a uint", "a negative int", "a float",
                                        "a str", "a bin",  "an array", "a map", "an ext"};

typedef struct {
    s_tkind kind;
    uint64_t n; /* K_UINT: value; K_STR/K_BIN/K_EXT: payload bytes; K_ARRAY/K_MAP: entries */
} s_tok;

typedef struct {
    const uint8_t *p;
    size_t len, off;
    char *err;
    size_t errlen;
    const char *what;     /* message type name that prefixes errors */
    uint32_t expect_dim;  /* 0 = any */
    uint32_t max_pos;     /* positions an act may carry */
    const uint8_t *x;     /* the activation's bytes in the frame, copied once all is valid */
    uint32_t x_dim;       /* act: floats in x (all positions); chunk: bytes */
    uint32_t n_ck;        /* checksums seen in an assign */
} s_cur;

__attribute__((format(printf, 2, 3))) static int s_fail(s_cur *c, const char *fmt, ...)
{
    if (!c->err || c->errlen == 0)
        return -1;
    int k = snprintf(c->err, c->errlen, "%s: ", c->what);
    if (k < 0 || (size_t)k >= c->errlen)
        return -1;
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(c->err + k, c->errlen - (size_t)k, fmt, ap);
    va_end(ap);
    return -1;
}

static size_t s_left(const s_cur *c) { return c->len - c->off; }

/* Big-endian unsigned of w bytes at the cursor; the caller checked w <= s_left. */
static uint64_t s_be(s_cur *c, size_t w)
{
    uint64_t v = 0;
    for (size_t i = 0; i < w; i++)
        v = (v << 8) | c->p[c->off + i];
    c->off += w;
    return v;
}

/* Read one token's header. Payloads (str, bin, ext) stay unread but are proven to fit; array
 * and map counts are proven plausible (each entry needs at least one byte). */
static int s_next(s_cur *c, s_tok *t)
{
    if (s_left(c) < 1)
        return s_fail(c, "truncated at byte %zu", c->off);
    uint8_t b = c->p[c->off++];
    size_t w = 0; /* width of the length / value that follows */
    t->n = 0;
    if (b <= 0x7f) {
        t->kind = K_UINT;
        t->n = b;
        return 0;
    }
    if (b >= 0xe0) {
        t->kind = K_NINT;
        return 0;
    }
    if ((b & 0xf0) == 0x80 || (b & 0xf0) == 0x90) {
        t->kind = (b & 0xf0) == 0x80 ? K_MAP : K_ARRAY;
        t->n = b & 0x0f;
        goto counted;
    }
    if ((b & 0xe0) == 0xa0) {
        t->kind = K_STR;
        t->n = b & 0x1f;
        goto payload;
    }
    switch (b) {
    case 0xc0: t->kind = K_NIL; return 0;
    case 0xc2: case 0xc3: t->kind = K_BOOL; t->n = b & 1; return 0;
    case 0xc4: case 0xc5: case 0xc6: t->kind = K_BIN; w = (size_t)1 << (b - 0xc4); break;
    case 0xc7: case 0xc8: case 0xc9: t->kind = K_EXT; w = (size_t)1 << (b - 0xc7); break;
    case 0xca: case 0xcb: t->kind = K_FLOAT; w = b == 0xca ? 4 : 8; break;
    case 0xcc: case 0xcd: case 0xce: case 0xcf: t->kind = K_UINT; w = (size_t)1 << (b - 0xcc); break;
    case 0xd0: case 0xd1: case 0xd2: case 0xd3: t->kind = K_NINT; w = (size_t)1 << (b - 0xd0); break;
    case 0xd4: case 0xd5: case 0xd6: case 0xd7: case 0xd8: t->kind = K_EXT; break;
    case 0xd9: case 0xda: case 0xdb: t->kind = K_STR; w = (size_t)1 << (b - 0xd9); break;
    case 0xdc: case 0xdd: t->kind = K_ARRAY; w = b == 0xdc ? 2 : 4; break;
    case 0xde: case 0xdf: t->kind = K_MAP; w = b == 0xde ? 2 : 4; break;
    default: return s_fail(c, "invalid format byte 0x%02x at byte %zu", b, c->off - 1);
    }
    if (s_left(c) < w)
        return s_fail(c, "truncated at byte %zu", c->off);
    if (b >= 0xd4 && b <= 0xd8) { /* fixext: type byte + 1..16 data bytes */
        t->n = 1 + ((size_t)1 << (b - 0xd4));
        goto payload;
    }
    switch (t->kind) {
    case K_FLOAT:
        c->off += w;
        return 0;
    case K_UINT:
        t->n = s_be(c, w);
        return 0;
    case K_NINT: { /* a signed format may still hold a non-negative value */
        uint64_t v = s_be(c, w);
        uint64_t sign = (uint64_t)1 << (8 * w - 1);
        if (v & sign)
            return 0;
        t->kind = K_UINT;
        t->n = v;
        return 0;
    }
    case K_EXT:
        t->n = s_be(c, w) + 1; /* the type byte counts as payload */
        goto payload;
    case K_STR:
    case K_BIN:
        t->n = s_be(c, w);
        goto payload;
    default:
        t->n = s_be(c, w);
        goto counted;
    }
payload:
    if (t->n > s_left(c))
        return s_fail(c, "%s of %llu bytes at byte %zu overruns the frame (%zu left)",
                      s_tkind_name[t->kind], (unsigned long long)t->n, c->off, s_left(c));
    return 0;
counted:
    if (t->n > s_left(c) / (t->kind == K_MAP ? 2 : 1))
        return s_fail(c, "%s of %llu entries at byte %zu overruns the frame (%zu bytes left)",
                      s_tkind_name[t->kind], (unsigned long long)t->n, c->off, s_left(c));
    return 0;
}

/* Skip one value of any type; depth is the nesting level the value sits at. */
static int s_skip(s_cur *c, int depth)
{
    s_tok t;
    if (s_next(c, &t) < 0)
        return -1;
    switch (t.kind) {
    case K_STR:
    case K_BIN:
    case K_EXT:
        c->off += t.n;
        return 0;
    case K_ARRAY:
    case K_MAP:
        if (depth > S_MAX_DEPTH)
            return s_fail(c, "nesting deeper than %d at byte %zu", S_MAX_DEPTH, c->off);
        for (uint64_t i = 0; i < t.n * (t.kind == K_MAP ? 2 : 1); i++)
            if (s_skip(c, depth + 1) < 0)
                return -1;
        return 0;
    default:
        return 0;
    }
}

static int s_want(s_cur *c, s_tok *t, s_tkind kind, const char *key)
{
    if (s_next(c, t) < 0)
        return -1;
    if (t->kind == kind)
        return 0;
    return s_fail(c, "'%s' is %s, expected %s", key, s_tkind_a[t->kind], s_tkind_name[kind]);
}

static int s_uint(s_cur *c, const char *key, uint64_t min, uint64_t max, uint64_t *v)
{
    s_tok t;
    if (s_want(c, &t, K_UINT, key) < 0)
        return -1;
    if (t.n < min || t.n > max)
        return s_fail(c, "'%s' is %llu, expected %llu..%llu", key, (unsigned long long)t.n,
                      (unsigned long long)min, (unsigned long long)max);
    *v = t.n;
    return 0;
}

static int s_decode_map(s_cur *c, uint32_t n, const s_field *f, size_t nf, void *body, int depth);

static int s_trace(s_cur *c, msg_act *a, int depth)
{
    s_tok t;
    if (s_want(c, &t, K_ARRAY, "tr") < 0)
        return -1;
    if (t.n > PROTO_MAX_TRACE)
        return s_fail(c, "'tr' has %llu entries, max %d", (unsigned long long)t.n, PROTO_MAX_TRACE);
    if (depth + 1 > S_MAX_DEPTH)
        return s_fail(c, "nesting deeper than %d", S_MAX_DEPTH);
    for (uint32_t i = 0; i < t.n; i++) {
        s_tok e;
        uint64_t v[S_TRACE_ITEMS] = {0};
        if (s_want(c, &e, K_ARRAY, "tr[]") < 0)
            return -1;
        if (e.n != S_TRACE_ITEMS)
            return s_fail(c, "'tr'[%u] has %llu items, expected %d", i, (unsigned long long)e.n,
                          S_TRACE_ITEMS);
        if (s_uint(c, "tr[].stage", 0, S_MAX_STAGE, &v[0]) < 0)
            return -1;
        for (int j = 1; j < S_TRACE_ITEMS; j++)
            if (s_uint(c, "tr[].ns", 0, UINT64_MAX, &v[j]) < 0)
                return -1;
        a->trace[i] = (msg_trace){.stage = (uint32_t)v[0], .wait_ns = v[1], .deser_ns = v[2],
                                  .compute_ns = v[3], .ser_ns = v[4], .send_ns = v[5]};
    }
    a->n_trace = (uint32_t)t.n;
    return 0;
}

static int s_segs(s_cur *c, msg_act *a, int depth)
{
    s_tok t;
    if (s_want(c, &t, K_ARRAY, "sg") < 0)
        return -1;
    if (t.n < 1 || t.n > PROTO_MAX_SEGS)
        return s_fail(c, "'sg' has %llu segments, expected 1..%d", (unsigned long long)t.n,
                      PROTO_MAX_SEGS);
    if (depth + 1 > S_MAX_DEPTH)
        return s_fail(c, "nesting deeper than %d", S_MAX_DEPTH);
    for (uint32_t i = 0; i < t.n; i++) {
        s_tok e;
        uint64_t sid, pos, n;
        if (s_want(c, &e, K_ARRAY, "sg[]") < 0)
            return -1;
        if (e.n != 3)
            return s_fail(c, "'sg'[%u] has %llu items, expected 3 [sid, pos, n]", i,
                          (unsigned long long)e.n);
        if (s_uint(c, "sg[].sid", 1, UINT64_MAX, &sid) < 0 ||
            s_uint(c, "sg[].pos", 0, UINT32_MAX, &pos) < 0 ||
            s_uint(c, "sg[].n", 1, PROTO_MAX_BATCH, &n) < 0)
            return -1;
        a->segs.s[i].session = sid;
        a->segs.s[i].pos = (uint32_t)pos;
        a->segs.s[i].n = (uint32_t)n;
    }
    a->segs.n = (uint32_t)t.n;
    return 0;
}

static int s_value(s_cur *c, const s_field *f, void *body, int depth)
{
    char *p = (char *)body + f->off;
    s_tok t;
    switch (f->kind) {
    case S_UINT: {
        uint64_t v = 0;
        if (s_uint(c, f->key, f->min, f->max, &v) < 0)
            return -1;
        if (f->size == sizeof(uint32_t)) {
            uint32_t v32 = (uint32_t)v; /* max <= UINT32_MAX for every 4-byte field */
            memcpy(p, &v32, sizeof(v32));
        } else {
            memcpy(p, &v, sizeof(v));
        }
        return 0;
    }
    case S_STR:
        if (s_want(c, &t, K_STR, f->key) < 0)
            return -1;
        if (t.n > f->max)
            return s_fail(c, "'%s' is %llu bytes, max %llu", f->key, (unsigned long long)t.n,
                          (unsigned long long)f->max);
        if (t.n < f->min)
            return s_fail(c, "'%s' is empty", f->key);
        if (memchr(c->p + c->off, 0, t.n))
            return s_fail(c, "'%s' contains a NUL byte", f->key);
        memcpy(p, c->p + c->off, t.n);
        p[t.n] = '\0';
        c->off += t.n;
        return 0;
    case S_X: {
        if (s_want(c, &t, K_BIN, f->key) < 0)
            return -1;
        uint64_t most = (uint64_t)PROTO_MAX_DIM * c->max_pos * sizeof(float);
        if (t.n % sizeof(float) != 0 || t.n == 0 || t.n > most)
            return s_fail(c, "'x' is %llu bytes, expected a multiple of 4 in 4..%llu",
                          (unsigned long long)t.n, (unsigned long long)most);
        /* dim is x's floats over the positions: known once "np" (any order) has been read */
        c->x = c->p + c->off;
        c->x_dim = (uint32_t)(t.n / sizeof(float));
        c->off += t.n;
        return 0;
    }
    case S_TRACE:
        return s_trace(c, body, depth);
    case S_SEGS:
        return s_segs(c, body, depth);
    case S_CKSUM: {
        msg_assign *a = body;
        if (s_want(c, &t, K_ARRAY, f->key) < 0)
            return -1;
        if (t.n > PROTO_MAX_LAYERS)
            return s_fail(c, "'ck' has %llu entries, max %d", (unsigned long long)t.n,
                          PROTO_MAX_LAYERS);
        for (uint32_t i = 0; i < t.n; i++)
            if (s_uint(c, "ck[]", 0, UINT64_MAX, &a->checksums[i]) < 0)
                return -1;
        c->n_ck = (uint32_t)t.n;
        return 0;
    }
    case S_BIN:
        if (s_want(c, &t, K_BIN, f->key) < 0)
            return -1;
        if (t.n == 0 || t.n > PROTO_MAX_CHUNK)
            return s_fail(c, "'%s' is %llu bytes, expected 1..%u", f->key, (unsigned long long)t.n,
                          PROTO_MAX_CHUNK);
        c->x = c->p + c->off; /* copied out only once the whole frame checks out */
        c->x_dim = (uint32_t)t.n;
        ((msg_chunk *)body)->len = (uint32_t)t.n;
        c->off += t.n;
        return 0;
    case S_LINK:
        if (s_want(c, &t, K_MAP, f->key) < 0)
            return -1;
        if (depth > S_MAX_DEPTH)
            return s_fail(c, "nesting deeper than %d", S_MAX_DEPTH);
        return s_decode_map(c, (uint32_t)t.n, s_link_f, S_N(s_link_f), p, depth);
    }
    return s_fail(c, "internal: bad field kind");
}

/* Decode n key/value pairs of a map at nesting level depth into body: known keys once each,
 * all of them present, unknown keys skipped. "v" and "t" were read by the caller and may not
 * appear again. */
static int s_decode_map(s_cur *c, uint32_t n, const s_field *f, size_t nf, void *body, int depth)
{
    uint64_t seen = 0;
    for (uint32_t i = 0; i < n; i++) {
        s_tok t;
        if (s_next(c, &t) < 0)
            return -1;
        if (t.kind != K_STR)
            return s_fail(c, "key at byte %zu is %s, expected str", c->off - 1,
                          s_tkind_a[t.kind]);
        const char *k = (const char *)c->p + c->off;
        size_t kn = (size_t)t.n;
        c->off += kn;
        size_t j = 0;
        while (j < nf && !(strlen(f[j].key) == kn && memcmp(f[j].key, k, kn) == 0))
            j++;
        if (j == nf) {
            if (depth == 1 && kn == 1 && (k[0] == 'v' || k[0] == 't'))
                return s_fail(c, "duplicate key '%c'", k[0]);
            if (s_skip(c, depth + 1) < 0)
                return -1;
            continue;
        }
        if (seen & ((uint64_t)1 << j))
            return s_fail(c, "duplicate key '%s'", f[j].key);
        seen |= (uint64_t)1 << j;
        if (s_value(c, &f[j], body, depth + 1) < 0)
            return -1;
    }
    for (size_t j = 0; j < nf; j++) {
        if (seen & ((uint64_t)1 << j))
            continue;
        if (!f[j].opt)
            return s_fail(c, "missing key '%s'", f[j].key);
        memset((char *)body + f[j].off, 0, f[j].size);
    }
    return 0;
}

/* Read a key that must be `want` (one character), then its uint value. */
static int s_fixed_key(s_cur *c, char want, const char *pos, uint64_t *v)
{
    s_tok t;
    if (s_next(c, &t) < 0)
        return -1;
    if (t.kind != K_STR || t.n != 1 || c->p[c->off] != (uint8_t)want)
        return s_fail(c, "%s key must be '%c'", pos, want);
    c->off += 1;
    char key[2] = {want, 0};
    return s_uint(c, key, 0, UINT32_MAX, v);
}

/* An act's x against its positions: whole positions of one dim, as many as the caller allows. */
static int s_act_x(s_cur *c, msg_act *a)
{
    uint32_t n = a->n_pos ? a->n_pos : 1;
    if (n > c->max_pos)
        return s_fail(c, "%u positions ('np'), at most %u expected", n, c->max_pos);
    if (c->x_dim % n != 0)
        return s_fail(c, "'x' is %llu bytes, not %u whole positions ('np')",
                      (unsigned long long)c->x_dim * sizeof(float), n);
    uint32_t dim = c->x_dim / n;
    if (dim > PROTO_MAX_DIM)
        return s_fail(c, "'x' is %llu bytes: %u floats a position, max %d",
                      (unsigned long long)c->x_dim * sizeof(float), dim, PROTO_MAX_DIM);
    if (c->expect_dim && dim != c->expect_dim) {
        if (n == 1)
            return s_fail(c, "'x' is %llu bytes, expected %llu (dim %u)",
                          (unsigned long long)c->x_dim * sizeof(float),
                          (unsigned long long)c->expect_dim * sizeof(float), c->expect_dim);
        return s_fail(c, "'x' is %llu bytes, expected %llu (dim %u x %u positions)",
                      (unsigned long long)c->x_dim * sizeof(float),
                      (unsigned long long)c->expect_dim * n * sizeof(float), c->expect_dim, n);
    }
    a->dim = dim;
    if (a->segs.n) { /* the segments tile x: each of its sessions, the first named by sid/pos */
        uint64_t sum = 0;
        for (uint32_t i = 0; i < a->segs.n; i++)
            sum += a->segs.s[i].n;
        if (sum != n)
            return s_fail(c, "'sg' segments hold %llu positions, 'np' says %u",
                          (unsigned long long)sum, n);
        if (a->segs.s[0].session != a->session || a->segs.s[0].pos != a->pos)
            return s_fail(c, "'sg' starts at session %llu position %u, 'sid'/'pos' say %llu/%llu",
                          (unsigned long long)a->segs.s[0].session, a->segs.s[0].pos,
                          (unsigned long long)a->session, (unsigned long long)a->pos);
        for (uint32_t i = 0; i < a->segs.n; i++)
            for (uint32_t j = 0; j < i; j++)
                if (a->segs.s[i].session == a->segs.s[j].session)
                    return s_fail(c, "'sg' names session %llu twice",
                                  (unsigned long long)a->segs.s[i].session);
    }
    return 0;
}

int proto_decode(const void *frame, size_t len, uint32_t expect_dim, proto_msg *out, char *err,
                 size_t errlen)
{
    return proto_decode_n(frame, len, expect_dim, 1, out, err, errlen);
}

int proto_decode_n(const void *frame, size_t len, uint32_t expect_dim, uint32_t max_pos,
                   proto_msg *out, char *err, size_t errlen)
{
    s_cur c = {.p = frame, .len = len, .err = err, .errlen = errlen, .what = "frame",
               .expect_dim = expect_dim, .max_pos = max_pos};
    s_tok t;
    uint64_t v = 0, type = 0;
    if (err && errlen)
        err[0] = '\0';
    if (!frame || !out)
        return s_fail(&c, "no frame");
    if (max_pos < 1 || max_pos > PROTO_MAX_BATCH)
        return s_fail(&c, "max_pos %u, expected 1..%d", max_pos, PROTO_MAX_BATCH);
    size_t limit = max_pos == 1 ? PROTO_MAX_FRAME
                                : proto_frame_limit(expect_dim ? expect_dim : PROTO_MAX_DIM,
                                                    max_pos);
    if (len > limit)
        return s_fail(&c, "%zu bytes, max %zu", len, limit);
    if (expect_dim > PROTO_MAX_DIM)
        return s_fail(&c, "expect_dim %u, max %d", expect_dim, PROTO_MAX_DIM);
    if (s_next(&c, &t) < 0)
        return -1;
    if (t.kind != K_MAP)
        return s_fail(&c, "%s, expected a map", s_tkind_a[t.kind]);
    if (t.n < 1)
        return s_fail(&c, "empty map, expected 'v' and 't'");
    if (s_fixed_key(&c, 'v', "first", &v) < 0)
        return -1;
    out->version = (uint32_t)v;
    if (v != PROTO_VERSION) {
        /* Best effort: report the type too when the peer kept "t" second. */
        out->type = 0;
        size_t off = c.off;
        if (t.n >= 2 && s_fixed_key(&c, 't', "second", &type) == 0)
            out->type = (uint32_t)type;
        c.off = off;
        s_fail(&c, "protocol version %llu, expected %d", (unsigned long long)v, PROTO_VERSION);
        return -2;
    }
    if (t.n < 2)
        return s_fail(&c, "map of 1 entry, expected 'v' and 't'");
    if (s_fixed_key(&c, 't', "second", &type) < 0)
        return -1;
    if (type == 0 || type >= MSG_TYPE_MAX_)
        return s_fail(&c, "unknown message type %llu", (unsigned long long)type);
    out->type = (uint32_t)type;
    c.what = proto_type_name(out->type);
    if (s_decode_map(&c, (uint32_t)t.n - 2, s_tables[type].f, s_tables[type].n, &out->u, 1) < 0)
        return -1;
    if (c.off != c.len)
        return s_fail(&c, "trailing %zu bytes", c.len - c.off);
    if (type == MSG_ASSIGN) {
        const msg_assign *a = &out->u.assign;
        if (a->first >= a->last || a->last > a->n_layers)
            return s_fail(&c, "layers [%u, %u) do not fit 0..%u", a->first, a->last, a->n_layers);
        if (c.n_ck != a->last - a->first)
            return s_fail(&c, "'ck' has %u entries, expected %u (layers %u..%u)", c.n_ck,
                          a->last - a->first, a->first, a->last);
        if (a->n_ctx && (!a->sessions || !a->max_batch))
            return s_fail(&c, "a real model ('ctx' %u) needs 'ns' >= 1 and 'mb' >= 1 "
                          "(got %u, %u)", a->n_ctx, a->sessions, a->max_batch);
    }
    if ((type == MSG_ACT || type == MSG_RESULT) && s_act_x(&c, &out->u.act) < 0)
        return -1;
    if (type == MSG_CHUNK && out->u.chunk.data)
        memcpy(out->u.chunk.data, c.x, c.x_dim);
    if ((type == MSG_ACT || type == MSG_RESULT) && out->u.act.x)
        memcpy(out->u.act.x, c.x, (size_t)c.x_dim * sizeof(float)); /* LE f32 on the wire */
    return 0;
}

int proto_peek(const void *frame, size_t len, uint32_t *version, uint32_t *type)
{
    s_cur c = {.p = frame, .len = len, .what = "peek"};
    s_tok t;
    int have_v = 0, have_t = 0;
    if (!frame || len > proto_frame_limit(PROTO_MAX_DIM, PROTO_MAX_BATCH) || s_next(&c, &t) < 0 ||
        t.kind != K_MAP)
        return -1;
    for (uint64_t i = 0; i < t.n && !(have_v && have_t); i++) {
        s_tok k;
        uint64_t v = 0;
        if (s_next(&c, &k) < 0 || k.kind != K_STR)
            return -1;
        char ch = k.n == 1 ? (char)c.p[c.off] : 0;
        c.off += k.n;
        if ((ch == 'v' && !have_v) || (ch == 't' && !have_t)) {
            if (s_uint(&c, "v/t", 0, UINT32_MAX, &v) < 0)
                return -1;
            if (ch == 'v' && version)
                *version = (uint32_t)v;
            if (ch == 't' && type)
                *type = (uint32_t)v;
            have_v |= ch == 'v';
            have_t |= ch == 't';
        } else if (s_skip(&c, 2) < 0) {
            return -1;
        }
    }
    return have_v && have_t ? 0 : -1;
}

int proto_assign_check(const msg_assign *a, const msg_hello *peer, char *err, size_t errlen)
{
    if (a->n_ctx && !(peer->caps & PROTO_CAP_LLM)) {
        snprintf(err, errlen, "worker %s does not announce real-model support (caps 0x%x, "
                 "PROTO_CAP_LLM 0x%x missing): cannot assign it layers %u..%u of %s with KV "
                 "caches", peer->id, peer->caps, PROTO_CAP_LLM, a->first, a->last,
                 a->model_path);
        return -1;
    }
    return 0;
}
