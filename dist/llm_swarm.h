/* llm_swarm.h — a real model's layers in worker processes, for the resident arm of the llm
 * runner (arch/llm.h): spawn the workers, partition by bytes, assign, route, run every pass's
 * activations through them, and keep going when one is lost. dist/
 *
 * Failover with the caches: the coordinator keeps every live session's tokens. When a worker
 * is lost (its process exited, or its control plane stopped answering heartbeats for
 * liveness x heartbeat period: 500 ms), it is fenced (killed and reaped, so a frozen one
 * can never deliver a late result), its layers open in the coordinator under its cap (what
 * fits resident, the rest streamed), and every live session's KV cache for those layers is
 * rebuilt by replaying that session's tokens through the layers up to them; the pass that
 * was in flight then runs again on the new route. With respawn, a fresh worker for the same
 * layers is started at once; when it is ready, every live session is replayed through it
 * (re-prefill) before the route moves back and the local copy is freed. Positions are
 * written by index (arch/slice.h), so a replay rewrites the caches it passes with the same
 * bits: each session's tokens equal a healthy run's.
 */
#ifndef SWARM_LLM_SWARM_H
#define SWARM_LLM_SWARM_H

#include <stddef.h>
#include <stdint.h>

#include "runtime/llm.h"
#include "dist/fault.h"
#include "dist/partition.h"
#include "netem/netem.h"

#define LLM_SWARM_ID_MAX 32       /* a worker's name, NUL included */

/* A worker already running somewhere (`swarm worker --listen ...` on another host, or in a
 * test host's namespace), listed in a config's [worker.NAME] sections. The coordinator
 * connects to it instead of spawning one; it reads its layers from its own copy of the file
 * or, without one (or started with --fetch), takes exactly its layers' tensors from the
 * coordinator, resumably, verified against the coordinator's checksums. */
typedef struct {
    char id[LLM_SWARM_ID_MAX];    /* NAME */
    char endpoint[256];           /* its control endpoint, tcp://HOST:PORT */
    char pub[41];                 /* its CURVE public key (Z85), "" for plaintext */
    uint64_t cap_bytes;           /* its cap (0: the swarm's cap_bytes) */
} llm_swarm_host;

typedef struct {
    const char *model;            /* the GGUF file (the workers read their local copy) */
    const char *self_exe;         /* the swarm binary the workers run */
    uint32_t workers;             /* 1..8, spawned on loopback (n_hosts set: ignored) */
    llm_swarm_host hosts[8];      /* listed workers instead of spawned ones */
    uint32_t n_hosts;
    char key_pub[41], key_secret[41]; /* the coordinator's CURVE key pair ("": plaintext);
                                   * set when any host has a key (every link is then CURVE) */
    char bind_host[64];           /* where the result socket binds ("": 127.0.0.1) */
    uint64_t cap_bytes;           /* each worker's cap (0 = none); a lost worker's layers run
                                   * in the coordinator under the same cap */
    uint32_t sessions, n_ctx, max_batch;
    int threads;                  /* each worker's compute threads */
    int respawn;                  /* start a fresh worker for a lost one's layers (a listed
                                   * one: say hello to it again until it answers) */
    uint32_t slowdown;            /* test knob: workers compute every activation N times */
    int no_pipeline;              /* a prompt's batches one after another, each awaited (else
                                   * pipelined: several in flight through the route) */
    fault_t faults[FAULT_MAX];    /* worker "wI" (the I-th, listed or spawned) or a listed
                                   * worker's name; at = the first position of the pass that
                                   * injects it (the caller maps generated tokens to positions) */
    uint32_t n_faults;
    netem_profile profile;        /* every data link's emulated delay, jitter, loss and rate
                                   * (zero: none): each worker holds what comes in, the
                                   * coordinator holds the results; hops = workers + 1 */
    uint64_t seed;                /* the links' random draws */
} llm_swarm_opts;

/* One failover, as the result reports it. */
typedef struct {
    char worker[LLM_SWARM_ID_MAX];
    char how[64];                 /* "killed by signal 9", "heartbeats stopped", ... */
    uint32_t at_pos;              /* the first position of the pass in flight (LLM_NO_POS:
                                   * found between passes) */
    double detection_ms;          /* its first sign -> declared lost: our injected fault's
                                   * moment, else for a fault from outside the last poll that
                                   * found the process alive (an exit: an upper bound) or the
                                   * last word heard (silence); < 0: not known (at start) */
    uint32_t sessions_replayed;
    uint64_t tokens_replayed;     /* positions replayed to rebuild the caches */
    double rebuild_ms;            /* declared lost -> caches whole (layers opened + replay) */
    uint64_t degraded_tokens;     /* positions run while its layers ran here */
    double degraded_ms;
    double rejoin_ms;             /* declared lost -> route moved back (< 0: did not) */
    uint64_t reprefill_tokens;    /* positions replayed into the rejoined worker */
    double reprefill_ms;
    uint64_t lost_ns;
} llm_failover;

#define LLM_NO_POS UINT32_MAX     /* a failover found between passes: no pass in flight */

/* A worker as a health check shows it. */
typedef struct {
    char id[LLM_SWARM_ID_MAX];
    char endpoint[256];           /* a listed worker's control endpoint ("" spawned) */
    uint32_t first, last;         /* its layers */
    uint64_t fetched_bytes, resumed_bytes; /* its layers' bytes taken from the coordinator
                                   * at its last load, and those already in its cache */
    double fetch_ms, load_ms;     /* that load's transfer, and assign -> ready */
    uint64_t acts;                /* activations it computed (from the results' traces) */
    double wait_ms, compute_ms, io_ms; /* their totals: queued or held by link emulation;
                                   * its layers; deserialise + serialise + send */
    int live;                     /* 1: its process serves them */
    const char *state;            /* "serving", "lost: its layers run in the coordinator",
                                   * "rejoining" (a fresh process loading or re-prefilled) */
    double since_s;               /* in this state for so long */
    char last_how[64];            /* why it was last lost ("" never) */
    uint32_t respawns;            /* fresh processes started (or hellos) after losses */
    uint32_t respawn_fails;       /* of those, the ones that did not start or join */
    double retry_in_s;            /* the next attempt, in so long (< 0: none scheduled) */
    char last_join_error[160];    /* why the last failed attempt failed ("" none) */
} llm_worker_status;

typedef struct llm_swarm llm_swarm;

/* Spawn, plan (partition_llm), assign and route. NULL with err: the plan's refusal with its
 * numbers, or the worker that refused or failed, named. */
llm_swarm *llm_swarm_new(const llm_swarm_opts *o, char *err, size_t errlen);
/* Say bye to every worker and wait for it to exit. */
void llm_swarm_free(llm_swarm **sw);
/* The hook the llm runner's resident arm calls (valid while sw lives). Its calls may come
 * from several threads at once, one session each: their passes are in flight together,
 * which is what fills the pipeline. */
void llm_swarm_hook(llm_swarm *sw, llm_layers_hook *h);
const partition_llm_plan *llm_swarm_plan(const llm_swarm *sw);
/* The core the coordinator and its spawned workers share (one session, one thread each: see
 * llm_swarm.c), or -1 where they are left to the scheduler. */
int llm_swarm_cpu(const llm_swarm *sw);
/* Activations sent, bytes on the wire (both directions), passes replayed because their
 * result never came (lp_check_deadline) and the pipelined prompts' chunks so far. */
void llm_swarm_counts(llm_swarm *sw, uint64_t *acts, uint64_t *wire_bytes,
                      uint64_t *deadline_replays, uint64_t *prefill_chunks);
/* The failovers so far (valid while sw lives; read them once no pass is running). */
const llm_failover *llm_swarm_failovers(llm_swarm *sw, uint32_t *n);
/* The peak resident set (VmHWM) of every worker process alive now, summed. */
uint64_t llm_swarm_workers_rss(llm_swarm *sw);
/* Every worker's state (up to max), how many there are; *failovers: losses so far. From a
 * snapshot the swarm refreshes as states change (at least every poll, 20 ms, while anything
 * runs or waits): never waits on the swarm's lock, so a health check answers at once during
 * a failover, a rebuild or a rejoin. */
uint32_t llm_swarm_status(llm_swarm *sw, llm_worker_status *out, uint32_t max,
                          uint32_t *failovers);
/* NULL, or why the swarm can serve no more (a failover that could not be done: every pass
 * fails with it). From the snapshot, like llm_swarm_status. */
const char *llm_swarm_fault(llm_swarm *sw);
#endif
