/* llm_swarm_int.h — the one coordinator's state, shared by llm_pipe.c (the worker processes,
 * the control plane, the routes), llm_pass.c (the wire, the pass through the route) and the
 * two policies on them: llm_swarm.c (a real model's sessions, failover with cache rebuilds)
 * and steps.c (the dense lab's steps). They call llm_pipe/llm_pass, never the other way. Not
 * an API. dist/ */
#ifndef SWARM_LLM_SWARM_INT_H
#define SWARM_LLM_SWARM_INT_H

#include <pthread.h>
#include <sched.h>
#include <stdint.h>
#include <sys/types.h>

#include "arch/arch.h"
#include "gguf/gguf.h"
#include "base/sec.h"
#include "dist/chunk_plan.h"
#include "dist/llm_swarm.h"
#include "netem/netem.h"
#include "runtime/exec.h"
#include "dist/pirate.h"
#include "proto/proto.h"
#include "runtime/slice.h"

#define LS_MAX_W 8
#define LR_DEPTH 4          /* a rejoiner's catch-up passes in flight at once */
#define LS_RETRY_MS 1000    /* a lost listed worker is said hello to again this often */
/* A respawn (or a listed worker's hello) that failed is tried again after a backoff that
 * doubles from LS_BACKOFF_MIN_MS up to LS_BACKOFF_MAX_MS, for as long as the run lasts: a
 * worker that cannot start now (a host short of memory, a binary being replaced) may start
 * later, and a server must not stay degraded for good after one failure. */
#define LS_BACKOFF_MIN_MS 250
#define LS_BACKOFF_MAX_MS 30000
/* The joins' deadlines (a spawned worker reporting its endpoint; hello to ready: the load)
 * are LS_DEADLINE_X times what the same step took at start, plus LS_DEADLINE_PLUS_MS for a
 * machine that is busier now (a respawn loads while the coordinator computes the lost
 * layers): a worker past it is stopped, frozen or cut off, and is fenced and tried again.
 * Before anything was measured a spawn has SPAWN_REPORT_MS (dist/spawn.h). */
#define LS_BUSY_RETRY_MS 250 /* a listed worker still held by a coordinator: hello again */
#define LS_DEADLINE_X 10
#define LS_DEADLINE_PLUS_MS 2000

/* A worker's layers are served by its process (LIVE) or, after a loss, by a copy in the
 * coordinator (every other state) while a respawned process reports its endpoint
 * (JOIN_SPAWN: nothing waits on it), says hello and loads (JOIN_HELLO, JOIN_LOAD) and until
 * every live session has been replayed into it (READY). */
enum { LW_LIVE = 0, LW_LOST, LW_JOIN_HELLO, LW_JOIN_LOAD, LW_READY, LW_JOIN_SPAWN };

typedef struct {
    char id[LLM_SWARM_ID_MAX];
    pid_t pid;                    /* 0: no process (lost, or not yet respawned) */
    int remote;                   /* a listed worker: connected to, never spawned or killed */
    char ctl_ep[256];             /* its control endpoint (remote) */
    char pub[41];                 /* its CURVE key (remote; "" plaintext) */
    uint64_t cap_bytes;           /* its cap: its layers run here under it after a loss */
    uint64_t retry_ns;            /* remote, lost: when to say hello to it again */
    msg_ready ready;              /* its last load, as it reported it */
    uint64_t tr_acts, tr_wait_ns, tr_compute_ns, tr_io_ns; /* its stages, from the traces
                                   * of the results it took part in (io: deserialise +
                                   * serialise + send) */
    void *mon;                    /* remote: its control connection's monitor (drops) */
    uint32_t mon_gen;
    void *ctl, *push;
    char data_ep[PROTO_MAX_STR];
    uint32_t first, last;
    int state;
    slice_t *fb;                  /* its layers here, while it is not LIVE */
    int stale;                    /* fb's caches lack the live sessions (rebuild due) */
    pirate_t hb;                  /* its heartbeats and liveness (PIRATE_* defaults) */
    uint64_t cut_until_ns, cont_at_ns, fault_ns;
    uint64_t alive_ns;            /* the last poll that found its process running */
    uint64_t sign_ns;             /* a loss found by lp_poll: its first sign (the exit's
                                   * bound alive_ns, the silence's start), for detection_ms */
    uint64_t route_seq, echo_seq; /* the heartbeat confirming its route; the last echoed */
    char why[256];                /* why a start or rejoin failed */
    uint64_t since_ns;            /* when its state last changed (LIVE, or lost) */
    char last_how[64];            /* why it was last lost ("" never) */
    int fo;                       /* its open failover record (-1: none) */
    int respawn_due;              /* start a fresh process once the caches are whole */
    int rep_fd;                   /* JOIN_SPAWN: the pipe it reports its endpoint on (-1) */
    char rep_buf[PROTO_MAX_STR];
    size_t rep_got;
    uint64_t join_ns;             /* when its current join step began (spawn, hello) */
    uint64_t deadline_ns;         /* that step's deadline (0: none) */
    uint64_t hello_retry_ns;      /* JOIN_HELLO, it said busy: when to say hello again */
    uint32_t tries;               /* failed starts in a row (the backoff's exponent) */
    uint64_t took_spawn_ns, took_load_ns; /* its last join: fork to endpoint, hello to ready */
    uint32_t respawns, respawn_fails; /* starts of a fresh process (or hellos to a listed
                                   * one) after a loss, and those that failed */
    int drop_result;              /* --drop-result: its next result to us is discarded */
    int routed_next;              /* its route in force: next worker, -1 the coordinator,
                                   * -2 none */
    /* What its heartbeats' echoes and its stats say (the dense lab's steps use them: a slow
     * worker told from a stuck one, its figures at the end; dist/steps.c) */
    uint64_t hb_acts;             /* activations completed, as its last echo said */
    uint64_t hb_busy_ns;          /* time on its current activation, as its last echo said */
    uint64_t max_compute_ns;      /* its slowest activation so far (from result traces) */
    chunk_fit fit;                /* its acts of several positions (n, compute ns), from the
                                   * traces: the pipelined prefill's chunk size (chunk_plan.h) */
    uint64_t stall_ns;            /* busy longer than this is no progress (0: any busy is) */
    msg_stats stats;              /* its end-of-run stats (have_stats) */
    int have_stats;
    netem_queue *ctlq;            /* control messages held by an emulated control link */
    uint64_t probe_ns;            /* lost, kept alive (steps): when it was last said hello to */
    uint64_t hello_ns;            /* when it last answered hello */
    uint32_t hello_pid;           /* its process id, as that hello said */
    uint32_t caps;                /* PROTO_CAP_* its last hello announced */
    /* Rejoin without a second stall (llm_rejoin.c): while its layers run here, the input of
     * its first layer at every position of every live session is kept (rec, sessions x
     * n_ctx x dim; rec_n[k]: positions 0..rec_n[k]-1 of session slot k held), and a fresh
     * process, once ready, is sent them in the background (sent[k]: positions it holds),
     * in catch-up passes (cu), while the passes go on; the route switches once
     * what is left is at most one pass. rec NULL: the blocking re-prefill. */
    float *rec;
    uint32_t *rec_n, *sent;
    uint32_t *issued;             /* per slot: positions sent, answered or not (>= sent) */
    uint32_t *gen;                /* per slot: bumped when what is in flight turns stale */
    struct ls_pass *cu;           /* LR_DEPTH catch-up passes (several in flight: the worker
                                   * takes them in order, so the round trips overlap) */
    float *cu_x;                  /* LR_DEPTH x max_batch x dim: their activations */
    int cu_k[LR_DEPTH];           /* the session slot each carries (-1: free) */
    uint32_t cu_gen[LR_DEPTH];    /* gen[k] when it was sent */
    uint64_t *end_due;            /* per slot: a session that ended while catch-up passes of
                                   * it were in flight: its end is sent once they are back
                                   * (the data and control planes keep no order between them) */
    uint64_t cu_epoch;            /* the epoch its route was sent in (0: not sent) */
    uint64_t cu_tokens;           /* positions sent in the background since it was ready */
} ls_worker;

typedef struct {
    uint64_t id;                  /* 0: free slot */
    int32_t *tok;                 /* n_ctx: the tokens at each position */
    uint32_t cached;              /* positions 0..cached-1 are in every cache */
    int active;                   /* llm_layers_hook.active: 1 in a request, 0 idle (its caches
                                   * dropped, not replayed, by a rebuild), -1 never told (a
                                   * runner without requests: replayed) */
    float *xin;                   /* max_batch x dim: its pass's input, kept for a rerun */
} ls_session;

typedef struct {
    fault_t f;                    /* f.done: fired */
    uint32_t w;                   /* the worker it names */
} ls_fault;

/* A pass in flight: one session's n positions through units 0..stop. Its owner waits on it
 * (llm_swarm.c); whoever collects its result moves it on (llm_pipe.c). */
enum { LP_RUN = 0, LP_DONE, LP_RERUN, LP_FAIL };
#define LS_MAX_SPREAD 512         /* threads a prefill moves off the shared core */
typedef struct ls_pass {
    uint64_t session;
    float *x;
    uint32_t n, pos0;
    int stop, replay;
    int first;                    /* the unit it starts at (0, or a catch-up's rejoiner) */
    int rejoin;                   /* a catch-up: unit first on its (not yet LIVE) process */
    int unit;                     /* the next unit to run once the awaited result is in */
    uint64_t req;                 /* the act awaited (0: none) */
    int state;
    uint32_t *cached;             /* set to pos0 + n when it is done (NULL: replays) */
    /* n_segs > 0: several sessions' rows one after another in x (continuous batching: one
     * act, "sg", each weight read once for all); session/pos0 are the first's, n their sum,
     * and each segment's cached is set when the pass is done. 0: session/pos0/n alone. */
    uint32_t n_segs;
    struct {
        uint64_t session;
        uint32_t pos0, n;
        uint32_t *cached;
    } segs[PROTO_MAX_SEGS];
    /* what each stage did (the dense lab's stage times; dist/steps.c): the traces of every
     * result it took, its units run here appended */
    msg_trace tr[PROTO_MAX_TRACE];
    uint32_t n_tr;
    uint64_t held_ns;             /* its results' time held by the emulated link into us */
    /* the act awaited: when it left, the chain it went through, what each worker had
     * finished then (lp_check_deadline: which hop lost it), deadline replays of this pass */
    uint64_t sent_ns;
    int chain0, chain1;
    uint64_t acts0[LS_MAX_W];
    uint32_t deadline_tries;
    int here;                     /* a unit of it ran here (a lost worker's layers) */
    char err[512];
    struct ls_pass *next;
} ls_pass;

struct llm_swarm {
    llm_swarm_opts o;
    char model[4096], self[4096];
    uint32_t n;
    ls_worker w[LS_MAX_W];
    void *zctx, *pull;
    char pull_ep[PROTO_MAX_STR];
    proto_buf *b;
    proto_msg *m;
    msg_assign *assign;           /* scratch (its checksum array is large) */
    uint32_t dim, max_batch, n_ctx, n_layers;
    uint64_t req, epoch, acts, wire, stale_results;
    uint8_t *frame;
    size_t frame_cap;
    partition_llm_plan *plan;
    uint64_t *sums;               /* every layer's checksum (the workers verify theirs) */
    gguf_file *g;
    arch_model am;                /* for the embedding rows a replay needs */
    int am_open;
    float *rx;                    /* max_batch x dim: a replay's activations */
    float *ax;                    /* max_batch x dim: a result, before it is known ours */
    int fd;                       /* the model file: embedding rows, workers' fetches */
    uint8_t *chunk;               /* PROTO_MAX_CHUNK: a fetched range, read from fd */
    sec_t *sec;                   /* the ZAP handler when the links are CURVE */
    int route_stop;               /* the unit the routes end after (-1: none in force) */
    ls_session *ss;
    ls_fault faults[FAULT_MAX];
    llm_failover fo[LS_MAX_W * 4];
    uint32_t n_fo;
    /* Several sessions' passes at once, one caller thread each (llm.h: a model's sessions
     * may run on different threads). Everything here is under mu. The result socket is read
     * by one thread at a time, the poller, which waits on it without mu (nothing else
     * touches that socket); the control sockets are used only under mu. A failover or a
     * rejoin runs with nothing in flight and no poller (settling stops new passes). */
    pthread_mutex_t mu;
    pthread_cond_t cv;
    int mu_init, polling, settling;
    uint64_t prefills;            /* pipelined prefills run */
    pid_t spread[LS_MAX_SPREAD];  /* threads moved off the shared core for a prefill */
    uint32_t n_spread;
    uint32_t max_inflight;        /* the most passes in flight at once */
    uint32_t prefill_chunk;       /* the last pipelined prefill's chunk size (0: none yet) */
    uint64_t prefill_chunks;      /* chunks the pipelined prefills planned (a rerun: again) */
    uint64_t prefill_pos;         /* positions the pipelined prefills carried */
    uint32_t prefill_batch;       /* the last pipelined prefill's batch (its largest chunk) */
    double call_pred_ns;          /* the cost model's time for this call (0: none, no models) */
    char call_plan[384];          /* its choice, logged with what it took */
    double pred_ns, pred_took_ns; /* over the calls it predicted: predicted, taken (ns) */
    uint32_t pred_calls;
    int segs_on;                  /* the runner was given the segs hook: every worker that
                                   * joins must announce PROTO_CAP_SEGS */
    ls_pass *inflight;
    uint32_t n_inflight;
    char fatal[768];              /* a failover that could not be done: every pass fails */
    /* What the join steps took at start (the deadlines' base, LS_DEADLINE_X): the slowest
     * worker's fork-to-endpoint and hello-to-ready, ns (0: not measured). */
    uint64_t meas_spawn_ns, meas_load_ns;
    /* The snapshot a health check reads (llm_swarm_status): refreshed under mu whenever the
     * workers' states may have changed, read under snap_mu alone, which is never held while
     * anything blocks: /health and /metrics answer at once during a failover or a rejoin. */
    pthread_mutex_t snap_mu;
    llm_worker_status snap[LS_MAX_W];
    uint64_t snap_since_ns[LS_MAX_W], snap_retry_ns[LS_MAX_W];
    uint32_t snap_n, snap_fo;
    char snap_fatal[768];
    /* The monitor: between passes (a server waits for requests for minutes) someone must
     * still send heartbeats (a worker drops a coordinator silent for 3 s), find a lost
     * worker (a health check must not say ok over a dead one) and take a ready rejoiner
     * back. It pumps like any waiting caller (llm_swarm.c). */
    pthread_t monitor;
    int monitor_on, quit;
    int cpu;                      /* the shared core (s_colocate), or -1 */
    cpu_set_t cpus0;              /* the caller's cores before, given back at the end */
    netem_shaper *shaper;         /* the results' link into the coordinator (NULL: none) */
    netem_queue *rq;              /* results held by that link until their release */
    /* The control plane's settings and emulation (0 / NULL: PIRATE_* defaults, none). The
     * dense lab's configs set them ([swarm] heartbeat_ms, liveness; a profile with
     * control_plane): each control message is held for the link's round trip at our end. */
    uint32_t hb_ms, liveness;
    uint64_t ctl_allow_ns;        /* liveness allowance for the emulated control link */
    netem_shaper *ctl_shaper;
    /* Counters the dense lab reports (dist/steps.c) */
    exec_stats fb_stats;          /* what those copies' steps read and hashed */
    uint64_t progress_ns;         /* last sign of work: a worker finished or is computing */
    uint64_t act_bytes;           /* acts sent by the coordinator, bytes */
    uint64_t served_bytes;        /* model bytes served to fetching workers */
    uint64_t reaped_read_bytes;   /* storage reads of reaped workers (the kernel adds them
                                   * to ours) */
    uint64_t coord_ser_ns, coord_deser_ns;
    uint64_t transit_ns, transit_passes, transit_links; /* results' round trips less every
                                   * stage's traced work (queue, (de)serialise, compute,
                                   * send): the links and the wake-ups, summed (llm_pass.c) */
    uint64_t tr_all_ns;           /* those passes' traced work, summed */
    uint64_t bad_msgs;            /* undecodable control messages and results, dropped */
    uint64_t max_rt_ns;           /* the slowest act, sent to its result back, so far */
    uint64_t deadline_replays;    /* passes replayed because their result never came */
};

/* llm_pipe.c */
enum { LP_OK = 0, LP_LOST = 1 };
/* A pass whose result is this many deadlines late after as many replays: its hop is lost. */
#define LS_DEADLINE_REPLAYS 2
/* Has every LIVE worker said something since `from`? Only then does "nothing came back" mean
 * something was lost: a coordinator that was itself descheduled has not asked (seen under
 * ASan on a loaded machine). A worker never heard from is liveness's to judge. */
int lp_all_heard(const llm_swarm *sw, uint64_t from);
/* Issue 19's rule for the resident arm: a pass in flight whose result has not come within
 * LS_DEADLINE_X x the slowest act so far (never under one liveness window), counted from
 * when it left or the pipeline's last sign of work (sw->progress_ns: a worker finished an act
 * or is computing one), while every worker was heard since, is named and replayed under a new epoch (every route set
 * again, every worker on a fresh data socket): -2, the caller reruns what is in flight. After
 * LS_DEADLINE_REPLAYS replays of it, the worker on whose hop it was lost: its index (how
 * filled), a failover like a silent worker's. -1: nothing late. Under mu, no poller. */
int lp_check_deadline(llm_swarm *sw, char *how, size_t howlen);
/* fork + exec worker i (state JOIN_SPAWN; lp_poll connects and says hello once it reports
 * its endpoint), or a listed one's connection and hello (JOIN_HELLO). Nothing waits here. */
int lp_spawn(llm_swarm *sw, uint32_t i, char *err, size_t errlen);
/* Worker i failed to start or join: fenced, its layers stay here (LOST) and, with respawn,
 * it is tried again after the backoff (logged). why says what happened. */
void lp_join_failed(llm_swarm *sw, uint32_t i, const char *why);
/* Setup: every worker spawned (or connected to), hello answered, assign sent, ready
 * awaited, all at once (listed workers fetch their layers side by side); all LIVE, or -1
 * with err naming the first that failed. */
int lp_join_all(llm_swarm *sw, char *err, size_t errlen);
/* Heartbeats when due, every control message drained, the faults due released (SIGCONT, a
 * cut healed), a joining worker moved on (hello -> assign -> READY). Returns the index of a
 * LIVE worker found lost (how filled), or -1. */
int lp_poll(llm_swarm *sw, char *how, size_t howlen);
/* Routes for the LIVE workers in a new epoch, every chain ending at the coordinator after
 * unit stop or before a unit that runs here; each confirmed by a heartbeat's echo.
 * LP_OK, LP_LOST (*lost, how), or -1 with err. */
int lp_route(llm_swarm *sw, int stop, int *lost, char *how, size_t howlen, char *err,
             size_t errlen);
/* Put p (session, x, n, pos0, stop, replay set) in flight: local units run at once, the
 * first remote chain is sent (faults due at its positions fire then, unless replay); p is
 * LP_DONE when no unit was remote. LP_OK, LP_LOST (*lost, how: p is not in flight), or -1
 * (p->err, LP_FAIL). */
int lp_start(llm_swarm *sw, ls_pass *p, int *lost, char *how, size_t howlen);
/* Every result waiting on the result socket into its pass, each moved on (its next units
 * run or sent; LP_DONE at the end; LP_FAIL with err). A worker found lost on the way: its
 * index (how filled); else -1. */
int lp_collect(llm_swarm *sw, char *how, size_t howlen);
/* Wait up to LS_POLL_MS for a result (the poller, without mu: only the result socket). */
void lp_wait_results(llm_swarm *sw);
/* Every pass in flight to state (LP_RERUN after a loss, LP_FAIL with why), none left. */
void lp_abort_all(llm_swarm *sw, int state, const char *why);
/* A pass to the end with nothing else in flight (replays): lp_start, then the result socket
 * read here. LP_OK, LP_LOST (*lost, how), or -1 with err. */
int lp_run(llm_swarm *sw, uint64_t session, float *x, uint32_t n, uint32_t pos0, int stop,
           int replay, int *lost, char *how, size_t howlen, char *err, size_t errlen);
/* Kill and reap worker i's process, close its sockets (pid 0 after). */
void lp_fence(llm_swarm *sw, uint32_t i);
/* Bye to every worker with a process, wait for each to exit. */
void lp_close_all(llm_swarm *sw);
/* A session's end to every LIVE worker (a rejoiner's: lr_session_end). */
void lp_session_end(llm_swarm *sw, uint64_t session);
/* Worker i's sockets closed and its routes reset as lp_fence does, its process left
 * running (a stateless range's worker that froze or was cut off may come back: lp_probe). */
void lp_detach(llm_swarm *sw, uint32_t i);
/* Say hello to worker i again on a fresh control socket (its process, or a listed worker,
 * still at ctl_ep): JOIN_HELLO, then as a joining worker (lp_poll). -1 with err. */
int lp_probe(llm_swarm *sw, uint32_t i, char *err, size_t errlen);
/* Ask every LIVE worker for its stats and wait up to timeout_ms for their answers. */
void lp_collect_stats(llm_swarm *sw, uint32_t timeout_ms);
/* Wait up to LS_POLL_MS (less when a held message is due) for the result socket or a
 * control socket. */
void lp_wait_any(llm_swarm *sw);
void lp_session_end_one(llm_swarm *sw, uint32_t i, uint64_t session);
/* Worker i (READY) routed alone in the current epoch, its results to the coordinator: the
 * catch-up's route, confirmed by the heartbeat sent after it (route_seq). */
void lp_route_rejoiner(llm_swarm *sw, uint32_t i);

/* llm_rejoin.c: a returning worker re-prefilled while the passes go on */
/* Worker i was lost (its copy fb here is new): keep its first layer's inputs from now on.
 * Without the memory for them, the rejoin re-prefills the blocking way (logged). */
void lr_begin(llm_swarm *sw, uint32_t i);
void lr_free(ls_worker *w);
/* Unit's copy here is about to step session's positions pos0.. (x: their input). */
void lr_record(llm_swarm *sw, uint32_t unit, uint64_t session, uint32_t pos0, uint32_t n,
               const float *x);
/* A session ended: nothing of it is kept or sent any more. Before its slot is freed. */
void lr_session_end(llm_swarm *sw, uint64_t session);
/* Worker i (READY) said it could not compute an act: a catch-up pass's (text "act req N:
 * ..."), dropped and sent again if its session lives (1), or not one of those (0). */
int lr_act_failed(llm_swarm *sw, uint32_t i, const char *text);
/* A fresh process is ready: it holds nothing, its route is not set. */
void lr_reset(ls_worker *w);
/* Under mu, never waiting: every ready worker's catch-up moved on (its route sent, the next
 * catch-up pass started once the last is done). */
void lr_pump(llm_swarm *sw);
/* Is ready worker i's catch-up done but for at most one pass of every live session (the
 * switch is due)? 0 also when it has no catch-up (rec NULL: then it is always due). */
int lr_due(const llm_swarm *sw, uint32_t i);
/* The switch, with nothing in flight (settling): what the live sessions added since the
 * catch-up sent to worker i alone, synchronously. *tokens: positions sent (background and
 * now). LP_OK (whole: the caller puts it LIVE), LP_LOST (a LIVE worker lost: *lost, how),
 * 1 (i itself failed meanwhile: no longer READY), or -1 with err. */
int lr_finish(llm_swarm *sw, uint32_t i, uint64_t *tokens, int *lost, char *how,
              size_t howlen, char *err, size_t errlen);

#endif
