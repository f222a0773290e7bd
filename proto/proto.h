/* proto.h — swarm's wire format: msgpack maps with a version and a pinned type. proto/
 *
 * The only code that includes msgpack.h lives in proto/. Every message is one ZeroMQ frame
 * holding one msgpack map with at least "v" (PROTO_VERSION) and "t" (msg_type). Activations
 * travel as `bin` of little-endian f32, never an array of floats.
 *
 * Decoding trusts nothing (msgpack-c 4.0 enforces no limits: "Trusting no input" in
 * docs/design.md): the frame must be at most PROTO_MAX_FRAME bytes, every container/str/bin
 * length is bounded by the bytes remaining before anything is allocated, each known key must
 * have the right type and a value in range, required keys must be present, the activation
 * length must equal 4*dim*n_pos for the dimension the caller expects and at most the
 * positions it allows (proto_decode_n), and the whole frame must be
 * consumed (no trailing bytes). Unknown keys are skipped and keys added later are optional
 * (forward and backward compatibility within a version). A failing decode returns -1 with a
 * one-line reason in err and leaves the output untouched except for scratch fields.
 *
 * Ownership: decoders copy everything into the caller's struct (fixed-size fields), and the
 * activation into the caller's float buffer; nothing points into the frame afterwards.
 * Encoders append into a caller-owned proto_buf that is reused across messages (no
 * allocation on the per-step hot path once it has grown).
 */
#ifndef SWARM_PROTO_H
#define SWARM_PROTO_H

#include <stddef.h>
#include <stdint.h>

#define PROTO_VERSION 1
#define PROTO_MAX_FRAME (16u << 20)   /* bytes; also ZMQ_MAXMSGSIZE on every socket */
#define PROTO_MAX_DIM 65536           /* floats in one activation */
#define PROTO_MAX_LAYERS 4096
#define PROTO_MAX_TRACE 64            /* stage entries in one act trace */
#define PROTO_MAX_STR 256             /* bytes in ids, endpoints, error text (incl. NUL) */
#define PROTO_MAX_PATH 1024           /* bytes in a model path (incl. NUL) */
#define PROTO_KEY_LEN 41              /* Z85 CURVE key (40 chars) + NUL */
#define PROTO_MAX_CHUNK (1u << 20)    /* bytes of model file in one chunk */
#define PROTO_MAX_BATCH 4096          /* positions in one act (a prompt's batch) */
#define PROTO_MAX_SEGS 64             /* sessions in one act ("sg") */
/* Bytes an act frame may hold beside its x: the keys, a full trace (64 stages x 6 uints of at
 * most 9 bytes: 3.5 KiB) and slack for keys a later version adds. */
#define PROTO_FRAME_HEADROOM (64u << 10)

/* Message types: values are pinned; never renumber, only append. */
typedef enum {
    MSG_HELLO = 1,
    MSG_ASSIGN = 2,
    MSG_READY = 3,
    MSG_ROUTE = 4,
    MSG_ACT = 5,
    MSG_RESULT = 6,
    MSG_HEARTBEAT = 7,
    MSG_STATS = 8,
    MSG_ERROR = 9,
    MSG_BYE = 10,
    MSG_FETCH = 11,       /* worker -> coordinator: send me these bytes of the model file */
    MSG_CHUNK = 12,       /* coordinator -> worker: the bytes, with their hash */
    MSG_SESSION_END = 13, /* coordinator -> every worker: free this session's KV caches */
    MSG_TYPE_MAX_ = 14
} msg_type;
_Static_assert(MSG_HELLO == 1 && MSG_ACT == 5 && MSG_BYE == 10 && MSG_CHUNK == 12 &&
                   MSG_SESSION_END == 13,
               "wire enum values are pinned");

/* Error codes carried by MSG_ERROR (pinned). */
typedef enum {
    PERR_NONE = 0,
    PERR_VERSION = 1,     /* peer speaks another protocol version */
    PERR_BAD_MSG = 2,     /* malformed message */
    PERR_CAP = 3,         /* assignment does not fit the worker's cap */
    PERR_MODEL = 4,       /* model file missing / corrupt / checksum mismatch */
    PERR_BUSY = 5,        /* worker serves another coordinator */
    PERR_STATE = 6,       /* message not valid in the current state */
    PERR_INTERNAL = 7,
} proto_err;
_Static_assert(PERR_VERSION == 1 && PERR_INTERNAL == 7, "error codes are pinned");

/* Capability bits in hello. */
#define PROTO_CAP_RESIDENT 0x1u  /* can hold layers resident */
#define PROTO_CAP_NETEM 0x2u     /* applies a link profile to its incoming data link */
/* Runs a real model's layers (llama, qwen2) with a KV cache per session, acts of several
 * positions and session ends. A worker without it is never assigned a real model: the act's
 * "np" and the assign's "ctx"/"ns"/"mb" are optional keys an older worker would skip, so it
 * would take a batch for one position (its x-length check refuses that) or keep no caches. */
#define PROTO_CAP_LLM 0x4u
/* Runs an act carrying several sessions' positions ("sg": continuous batching on the resident
 * arm). An older worker would skip "sg" and run every row as the first session's, so a
 * coordinator sends such an act only to workers that announce this bit. */
#define PROTO_CAP_SEGS 0x8u

typedef struct {
    char id[PROTO_MAX_STR];        /* worker id, e.g. "w0" */
    uint64_t cap_bytes;            /* working-set cap (0 = none) */
    uint32_t proto_version;        /* the sender's PROTO_VERSION */
    uint32_t caps;                 /* PROTO_CAP_* */
    char data_ep[PROTO_MAX_STR];   /* where the worker's data-plane PULL listens */
    uint32_t pid;                  /* worker process id (for local peak-RSS reads) */
    char pubkey[PROTO_KEY_LEN];    /* CURVE public key, Z85 ("" = plaintext) */
} msg_hello;

typedef struct {
    char model_path[PROTO_MAX_PATH];
    uint64_t model_size;           /* bytes; must match the worker's file */
    uint32_t n_layers;             /* in the model */
    uint32_t dim;
    uint32_t first, last;          /* layer range [first, last) */
    uint64_t checksums[PROTO_MAX_LAYERS]; /* for layers first..last-1 (count last-first) */
    uint32_t threads;              /* BLAS threads the worker should use */
    uint64_t cap_bytes;            /* the cap the coordinator planned with */
    uint64_t header_bytes;         /* file bytes before the first tensor (fetch starts there) */
    /* A real model (optional keys, 0 for the dense lab model): the KV cache each of the
     * worker's layers keeps per session, how many sessions at once, and the most positions
     * one act carries (the worker sizes its frame limit and scratch from it). */
    uint32_t n_ctx;                /* positions per session's cache; 0 = dense, no caches */
    uint32_t sessions;             /* 1.. when n_ctx > 0 */
    uint32_t max_batch;            /* 1..PROTO_MAX_BATCH when n_ctx > 0 */
} msg_assign;

typedef struct {
    uint64_t bytes_loaded;
    uint64_t peak_rss_bytes;       /* VmHWM after load */
    uint64_t cgroup_peak_bytes;    /* 0 if no cgroup */
    uint64_t load_ns;
    uint64_t read_bytes;           /* /proc/self/io read_bytes during load */
    uint64_t fetched_bytes;        /* model bytes received from the coordinator (0: local copy) */
    uint64_t fetch_ns;             /* time spent receiving them */
    uint64_t resumed_bytes;        /* bytes already in the cache from an interrupted transfer */
} msg_ready;

/* Link profile applied by the receiver of a data link ("Link emulation semantics" in
 * docs/design.md). */
typedef struct {
    uint64_t delay_ns;             /* one-way mean delay */
    uint64_t jitter_ns;            /* spread; meaning depends on dist */
    uint32_t dist;                 /* 0 none, 1 uniform, 2 normal, 3 pareto */
    uint32_t loss_ppm;             /* parts per million, emulated as retransmission delay */
    uint64_t rate_bps;             /* bytes per second, 0 = unlimited */
    uint64_t seed;
} msg_link;

typedef struct {
    uint64_t epoch;
    char next_ep[PROTO_MAX_STR];   /* data endpoint of the next hop */
    uint32_t hop;                  /* this worker's position in the route (0 = first worker) */
    uint32_t last;                 /* 1 if next hop is the coordinator (send MSG_RESULT) */
    msg_link link;                 /* profile for this worker's incoming data link */
    char next_key[PROTO_KEY_LEN];  /* next hop's CURVE public key, Z85 ("" = plaintext) */
    char prev_key[PROTO_KEY_LEN];  /* key the previous hop sends with: allowed on the data plane */
} msg_route;

/* One stage's entry in an act's trace; durations in ns on the stage's own clock. */
typedef struct {
    uint32_t stage;                /* hop index (coordinator = 0xffff) */
    uint64_t wait_ns;              /* held by link emulation + queued before processing */
    uint64_t deser_ns;
    uint64_t compute_ns;
    uint64_t ser_ns;
    uint64_t send_ns;
} msg_trace;

typedef struct {
    uint64_t req;                  /* request id (monotonic per run) */
    uint64_t step;                 /* step index */
    uint64_t epoch;                /* route epoch it was sent under */
    uint32_t hop;                  /* position in the route of the receiver */
    uint64_t session;              /* a real model's session id (0 = none: the dense model) */
    uint64_t pos;                  /* the first position x holds */
    uint32_t n_pos;                /* positions in x (optional "np"; 0 and 1 both mean one) */
    uint32_t dim;                  /* floats per position */
    float *x;                      /* n_pos x dim floats, row-major. encode: source; decode:
                                    * caller's buffer of >= dim x the positions it allows */
    uint32_t n_trace;
    msg_trace trace[PROTO_MAX_TRACE];
    /* Optional "sg" (PROTO_CAP_SEGS): the act carries several sessions' rows, one segment
     * after another in x, each n positions of its session from pos; their n sum to n_pos,
     * and session/pos above are the first segment's. n = 0 (absent): one session, as ever. */
    struct {
        uint32_t n;
        struct {
            uint64_t session;      /* >= 1 */
            uint32_t pos, n;       /* n >= 1 */
        } s[PROTO_MAX_SEGS];
    } segs;
} msg_act;                         /* MSG_ACT and MSG_RESULT share this body */

/* The coordinator sends seq and sent_ns; the worker echoes them with its progress, so the
 * coordinator can tell a worker that is alive but slow (answering, busy computing) from one
 * that is dead or frozen (silent). The progress keys are optional on the wire (0 if absent). */
typedef struct {
    uint64_t seq;
    uint64_t sent_ns;              /* sender's monotonic clock */
    uint64_t busy_ns;              /* echo: time spent on the current activation so far, 0 idle */
    uint64_t acts;                 /* echo: activations completed since the worker started */
    uint32_t queued;               /* echo: activations received and waiting for compute */
} msg_heartbeat;

typedef struct {
    uint64_t off;                  /* byte offset in the model file */
    uint32_t len;                  /* 1..PROTO_MAX_CHUNK */
    uint64_t seq;                  /* echoed in the chunk */
} msg_fetch;

typedef struct {
    uint64_t off;
    uint64_t seq;
    uint64_t hash;                 /* XXH3-64 of the bytes (checked before they are written) */
    uint32_t len;                  /* decode: set from the frame */
    uint8_t *data;                 /* encode: source; decode: caller's buffer of PROTO_MAX_CHUNK */
} msg_chunk;

typedef struct {
    uint64_t acts;                 /* activations served */
    uint64_t bad_msgs;             /* frames dropped as malformed */
    uint64_t stale_msgs;           /* frames dropped for an old epoch */
    uint64_t peak_rss_bytes;
    uint64_t cgroup_peak_bytes;
    uint64_t bytes_in, bytes_out;  /* data-plane frame bytes */
} msg_stats;

/* The coordinator ends a session: every worker frees its KV caches for it. */
typedef struct {
    uint64_t session;              /* >= 1 */
    uint64_t epoch;                /* route epoch it was sent under */
} msg_session_end;

typedef struct {
    uint32_t code;                 /* proto_err */
    char text[PROTO_MAX_STR];
} msg_error;

typedef struct {
    char reason[PROTO_MAX_STR];
} msg_bye;

/* A decoded message of any type. */
typedef struct {
    uint32_t type;                 /* msg_type */
    uint32_t version;
    union {
        msg_hello hello;
        msg_assign assign;
        msg_ready ready;
        msg_route route;
        msg_act act;               /* also MSG_RESULT */
        msg_heartbeat hb;
        msg_stats stats;
        msg_error error;
        msg_bye bye;
        msg_fetch fetch;
        msg_chunk chunk;           /* set u.chunk.data before every decode, like act.x */
        msg_session_end send;
    } u;
} proto_msg;

/* Reusable output buffer (wraps a msgpack sbuffer; grows, never shrinks). */
typedef struct proto_buf proto_buf;
proto_buf *proto_buf_new(void);
void proto_buf_free(proto_buf **b);
const void *proto_buf_data(const proto_buf *b);
size_t proto_buf_len(const proto_buf *b);

/* Encoders: clear b, then write one message. 0 / -1 (only on bad arguments, e.g. dim 0). */
int proto_encode_hello(proto_buf *b, const msg_hello *m);
int proto_encode_assign(proto_buf *b, const msg_assign *m);
int proto_encode_ready(proto_buf *b, const msg_ready *m);
int proto_encode_route(proto_buf *b, const msg_route *m);
int proto_encode_act(proto_buf *b, uint32_t type /* MSG_ACT or MSG_RESULT */, const msg_act *m);
int proto_encode_heartbeat(proto_buf *b, const msg_heartbeat *m);
int proto_encode_stats(proto_buf *b, const msg_stats *m);
int proto_encode_error(proto_buf *b, const msg_error *m);
int proto_encode_bye(proto_buf *b, const msg_bye *m);
int proto_encode_fetch(proto_buf *b, const msg_fetch *m);
int proto_encode_chunk(proto_buf *b, const msg_chunk *m);
int proto_encode_session_end(proto_buf *b, const msg_session_end *m);

/* The largest frame a peer must accept for acts of up to max_pos positions of dim floats:
 * PROTO_MAX_FRAME, or the batch's bytes plus PROTO_FRAME_HEADROOM when larger. What the
 * sockets' ZMQ_MAXMSGSIZE is set to, so the limit follows from the configured batch. */
size_t proto_frame_limit(uint32_t dim, uint32_t max_pos);

/* May this assignment go to the worker that said hello? 0, or -1 with err naming the worker
 * when a real model (n_ctx > 0) would go to a worker without PROTO_CAP_LLM. */
int proto_assign_check(const msg_assign *a, const msg_hello *peer, char *err, size_t errlen);

/* Peek: version and type only, without full validation; -1 if not a map with v and t. */
int proto_peek(const void *frame, size_t len, uint32_t *version, uint32_t *type);

/* Decode one frame into out. For MSG_ACT/MSG_RESULT the caller sets out->u.act.x to a buffer
 * of at least expect_dim floats before the call; the activation's length must be exactly
 * expect_dim floats (expect_dim 0: any dim up to PROTO_MAX_DIM, and x may be NULL to skip the
 * copy). A wrong version is reported as -2 (with out->version set) so the caller can answer
 * PERR_VERSION; any other failure is -1. err names what was wrong ("act: key 'x' has 16000
 * bytes, expected 16384"). */
int proto_decode(const void *frame, size_t len, uint32_t expect_dim, proto_msg *out, char *err,
                 size_t errlen);
/* The same, allowing acts of up to max_pos positions (1..PROTO_MAX_BATCH): the caller's x
 * holds max_pos x expect_dim floats (x PROTO_MAX_DIM when expect_dim is 0), and a frame may be
 * proto_frame_limit(expect_dim, max_pos) bytes. proto_decode is max_pos 1: an act of several
 * positions is refused, naming its count. */
int proto_decode_n(const void *frame, size_t len, uint32_t expect_dim, uint32_t max_pos,
                   proto_msg *out, char *err, size_t errlen);

const char *proto_type_name(uint32_t type);

#endif
