/* swarm_int.h — the resident arm's state, shared by swarm.c, peers.c and swarm_report.c; not an API. dist/ */
#ifndef SWARM_SWARM_INT_H
#define SWARM_SWARM_INT_H

#include <stdint.h>
#include <sys/types.h>
#include <zmq.h>

#include "runtime/exec.h"
#include "base/sec.h"
#include "dist/arm.h"
#include "dist/pirate.h"
#include "netem/netem.h"
#include "proto/proto.h"
#include "runtime/slice.h"

#define S_HELLO_TIMEOUT_MS 10000   /* spawn + hello; a worker is a fresh exec of bin/swarm */
#define S_LOAD_TIMEOUT_MS 300000   /* loading 512 MiB takes ~0.4 s here; remote disks are slower */
/* One activation longer than this many times a worker's slowest (or the step deadline, if
 * longer) means its compute is stuck, not slow: 3x slowdowns under a CPU hog stay inside. */
#define S_STALL_FACTOR 8
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
    pirate_t hb;               /* its heartbeats and liveness */
    uint64_t barrier_seq, probe_ns;
    uint64_t hb_acts;          /* activations completed, as its last heartbeat echo said */
    uint64_t hb_busy_ns;       /* time on its current activation, as its last echo said */
    uint64_t max_compute_ns;   /* its slowest activation so far (from result traces) */
    int barrier_ok;
    msg_ready ready;
    msg_stats stats;
    int have_stats;
    uint64_t io_before;        /* /proc/<pid>/io read_bytes when the steps started */
    slice_t *fb;               /* its layers here while it is lost (the llm swarm's kind) */
    int fo;                    /* index into failover records, -1 none */
    uint64_t cont_at_ns;       /* SIGCONT due (stop fault) */
    uint64_t fault_ns;         /* when we injected a fault into it */
    uint64_t cut_until_ns;     /* control link cut (coordinator side) until then */
    int local;                 /* spawned by this coordinator (may be respawned) */
    char pub[SEC_KEY_LEN];     /* its CURVE key ("" = plaintext) */
    void *mon;                 /* PAIR reading the control socket's monitor (disconnects) */
    uint32_t mon_gen;
    netem_queue *ctlq;         /* control messages held by an emulated control link */
} swarm_peer;

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
} swarm_failover;

typedef struct {
    arm_ctx *a;
    run_result *r;
    const config_t *cfg;
    const model_t *m;
    uint32_t d, n;
    swarm_peer p[CONFIG_MAX_WORKERS];
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
    uint64_t progress_ns;      /* last sign of work: a result, or a worker computing/finishing */
    uint64_t t_start;
    /* accounting */
    double st_wait, st_deser, st_compute, st_ser, st_send, st_net, st_e2e;
    double coord_ser, coord_deser;
    uint64_t bytes_wire, bad_msgs, stale_msgs, dup_results, replays, deadline_replays;
    double *lat_ms;
    swarm_failover fo[CONFIG_MAX_WORKERS * 4];
    uint32_t n_fo;
    exec_stats fb_stats;
    uint64_t fb_loaded;        /* bytes fallbacks loaded resident when they took over */
    uint64_t reaped_read_bytes;/* storage reads of reaped workers (added to ours by the kernel) */
    int budget_fail;
    char budget_err[512];
    uint64_t setup_read;
    int model_fd;              /* our copy, served to workers that fetch their layers */
    uint8_t *chunk;            /* PROTO_MAX_CHUNK bytes */
    uint64_t served_bytes;
    sec_t *sec;                /* ZAP handler for the result socket when CURVE is on */
    char pub[SEC_KEY_LEN], secret[SEC_KEY_LEN];
} swarm_t;

/* peers.c: sockets, processes and setup */
void *swarm_sock(swarm_t *c, int type);         /* linger, max message size, IMMEDIATE */
int swarm_connect_ctl(swarm_t *c, swarm_peer *p); /* fresh control socket + monitor */
void swarm_close_ctl(swarm_peer *p);
int swarm_ctl_dropped(swarm_peer *p);           /* did the connection drop since last asked? */
int swarm_ctl_send(swarm_t *c, swarm_peer *p);  /* c->out to p (nothing over a cut link) */
void swarm_send_hello(swarm_t *c, swarm_peer *p);
void swarm_send_assign(swarm_t *c, swarm_peer *p);
void swarm_send_heartbeat(swarm_t *c, swarm_peer *p);
int swarm_spawn(swarm_t *c, swarm_peer *p, char *err, size_t errlen); /* fork+exec a worker */
void swarm_reap(swarm_t *c, swarm_peer *p, int kill_it);  /* waitpid; remove its cgroup */
int swarm_setup(swarm_t *c, char *err, size_t errlen);    /* workers ready, routes in force */

/* swarm.c: control plane, routes, loss and fallback */
void swarm_handle_ctl(swarm_t *c, swarm_peer *p);
int swarm_send_routes(swarm_t *c);              /* new epoch, last hop first; 1 when in force */
void swarm_mark_lost(swarm_t *c, swarm_peer *p, const char *how); /* fallback + reroute */

/* swarm_report.c */
void swarm_collect_stats(swarm_t *c);
void swarm_teardown(swarm_t *c);                /* bye, reap, close: never hangs */
void swarm_report(swarm_t *c);                  /* resident fields into c->r */

#endif
