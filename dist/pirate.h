/* pirate.h — the one heartbeat and liveness: the zguide's Paranoid Pirate on a coordinator's
 * control plane, one state per worker. dist/
 *
 * The coordinator sends every worker a heartbeat each period and the worker echoes it. A
 * worker answers on its control loop whatever it computes (dist/compute.c runs activations
 * on a thread of their own), so silence means dead, frozen or cut off, never busy. A worker
 * is lost when `liveness` heartbeats in a row went unanswered and it has been silent for
 * liveness x period (plus what an emulated control link adds): 100 ms x 5 = 0.5 s by
 * default, half the 1 s detection target. Silence counts only while we kept asking: a
 * coordinator that was itself busy (a long fallback step) sent no heartbeats meanwhile, so
 * none of them can have gone unanswered. Both arms use these defaults; the dense lab's
 * configs may change them ([swarm] heartbeat_ms, liveness, within the ranges below).
 */
#ifndef SWARM_PIRATE_H
#define SWARM_PIRATE_H

#include <stdint.h>

#define PIRATE_HEARTBEAT_MS 100       /* period, ms */
#define PIRATE_HEARTBEAT_MS_MIN 5     /* below this the heartbeats are most of the traffic */
#define PIRATE_HEARTBEAT_MS_MAX 60000
#define PIRATE_LIVENESS 5             /* unanswered periods before a worker is lost */
#define PIRATE_LIVENESS_MIN 2         /* one late echo must not lose a worker */
#define PIRATE_LIVENESS_MAX 100
/* The other end: a worker drops a coordinator that has sent nothing for this long (30 of
 * the default periods) and waits for the next one (dist/worker.c). */
#define PIRATE_WORKER_SILENT_MS 3000

typedef struct {
    uint64_t seq;                 /* the last heartbeat's sequence number (never reset) */
    uint64_t sent_ns;             /* when it was sent */
    uint64_t heard_ns;            /* when the worker last said anything */
    uint32_t unanswered;          /* heartbeats sent since then */
} pirate_t;

/* A new connection (hello sent, or a fresh process): heard now, nothing unanswered. */
void pirate_reset(pirate_t *p, uint64_t now_ns);
/* Is a heartbeat due (period_ms since the last)? */
int pirate_due(const pirate_t *p, uint64_t now_ns, uint32_t period_ms);
/* A heartbeat goes out now (or would: over a cut link it is lost): its sequence number. */
uint64_t pirate_sent(pirate_t *p, uint64_t now_ns);
/* The worker said something. */
void pirate_heard(pirate_t *p, uint64_t now_ns);
/* liveness x period + allow_ns: the silence that loses a worker, in ns. */
uint64_t pirate_window_ns(uint32_t period_ms, uint32_t liveness, uint64_t allow_ns);
/* Silent for the window with `liveness` heartbeats unanswered? */
int pirate_lost(const pirate_t *p, uint64_t now_ns, uint32_t period_ms, uint32_t liveness,
                uint64_t allow_ns);

#endif
