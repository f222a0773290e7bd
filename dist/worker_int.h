/* worker_int.h — the worker's state, shared by worker.c and fetch.c; not an API. dist/ */
#ifndef SWARM_WORKER_INT_H
#define SWARM_WORKER_INT_H

#include <limits.h>
#include <stddef.h>
#include <stdint.h>

#include "base/cap.h"
#include "base/sec.h"
#include "netem/netem.h"
#include "proto/proto.h"
#include "dist/compute.h"
#include "dist/pirate.h"
#include "runtime/slice.h"

#define WORKER_LINGER_MS 100      /* bounded close: shutdown never hangs */
#define WORKER_QUEUE_CAP 256      /* activations held by link emulation at once */
/* Weight distribution: 4 x 1 MiB requests in flight keep a LAN link busy (one round trip
 * per 4 MiB); progress is made durable every 16 MiB, the most a crash can cost. */
#define WORKER_FETCH_WINDOW 4
#define WORKER_SYNC_BYTES (16ull << 20)
#define WORKER_MAX_RANGES (2 * PROTO_MAX_LAYERS + 1)
/* Session ends that arrive while the compute thread runs an activation wait here (the thread
 * borrows the slice); more than this and the loop waits for the activation instead. */
#define WORKER_PEND_ENDS 64

enum { W_WAITING = 0, W_LOADED = 1, W_SERVING = 2 };

typedef struct {
    char id[PROTO_MAX_STR];
    uint64_t cap_bytes;
    int once;                     /* exit after the first coordinator (spawned workers) */
    void *ctx, *ctl, *pull, *push;
    char ctl_ep[PROTO_MAX_STR];
    char data_ep[PROTO_MAX_STR];
    char push_ep[PROTO_MAX_STR];
    char push_key[SEC_KEY_LEN];
    /* the current coordinator */
    uint8_t peer[256];
    size_t peer_len;
    pid_t parent;                 /* spawned (--once --report-fd): its coordinator (0: none) */
    char peer_key[48];            /* its CURVE key (the ZAP handler's User-Id; "" plaintext) */
    int state;
    uint64_t last_heard_ns;
    /* assignment */
    slice_t *slice;               /* the assigned range (a real model's, or the dense model's:
                                   * stateless, assign's n_ctx 0) */
    char path[PATH_MAX];          /* the file it was loaded from, and that file's size as */
    uint64_t model_size;          /* the coordinator said (a re-adoption's same assignment) */
    uint32_t max_batch;           /* positions per act (1 for the dense model) */
    uint64_t pend_end[WORKER_PEND_ENDS];
    uint32_t n_pend_end;
    uint32_t first, last, dim;
    msg_ready ready;
    /* route */
    msg_route route;
    netem_shaper *shaper;
    netem_queue *queue;
    /* buffers reused on the hot path */
    proto_buf *out;
    proto_msg *msg;               /* control messages (decoded on the loop) */
    proto_msg *amsg;              /* the activation being computed: its header and trace */
    float *x;                     /* (max_batch x dim) its vectors, owned by the compute thread
                                   * meanwhile */
    /* compute, off the loop so heartbeats are answered during any activation */
    compute_t *comp;
    uint32_t slowdown;            /* test knob: compute every activation this many times */
    uint64_t cur_arrival_ns, cur_t0, cur_t1; /* the job's arrival, decode start and end */
    cap_t cap;
    sec_t *sec;                   /* ZAP handler when CURVE is on */
    char pub[SEC_KEY_LEN], secret[SEC_KEY_LEN];
    int plaintext;                /* allowed off loopback by --plaintext */
    msg_stats stats;
    uint64_t bad_seen[2];         /* bad frames per plane, for the log rate limit */
    uint64_t last_ser_ns, last_send_ns; /* previous message's, for the trace */
    /* weight distribution (the model fetched from the coordinator into the cache) */
    char cache_dir[PATH_MAX];
    int force_fetch;
    int fetching, fetch_fd;
    char fetch_path[PATH_MAX + 64], prog_path[PATH_MAX + 80];
    msg_assign *pend;             /* the assignment being fetched for */
    uint64_t r_off[WORKER_MAX_RANGES], r_len[WORKER_MAX_RANGES];
    uint32_t n_ranges;
    int ranges_full;              /* header parsed, layer ranges known */
    uint64_t s_total, s_done, s_req, since_sync;
    uint64_t fetched, resumed, fetch_t0, assign_t0;
    uint8_t *chunk_buf;
} worker_t;

/* worker.c */
int worker_send_ctl(worker_t *w);          /* out buffer to the current coordinator */
enum { WORKER_PLANE_CTL = 0, WORKER_PLANE_DATA = 1 };
int worker_log_bad(worker_t *w, int plane); /* rate limit for bad-frame log lines */
/* Load [a->first, a->last) of the model at path (a local copy or the fetched cache), verify
 * it against the coordinator's checksums, answer ready (or an error). t0: when assign came. */
void worker_load_assign(worker_t *w, const msg_assign *a, const char *path, uint64_t t0);

/* fetch.c: the model's bytes from the coordinator, into the cache, resumable */
int worker_fetch_begin(worker_t *w, const msg_assign *a, char *err, size_t errlen);
void worker_fetch_on_chunk(worker_t *w, const msg_chunk *c);
void worker_fetch_stop(worker_t *w, const char *why); /* keep the progress; no-op when idle */

#endif
