/* netem.h — link profiles and the user-space link shaper. netem/
 * Semantics: "Link emulation semantics" in docs/design.md.
 *
 * A profile describes one direction of one link: one-way mean delay, jitter around it with a
 * distribution, loss and a rate limit. This kernel has no sch_netem and no sch_fq, so delay is
 * emulated in user space by the *receiver* of a link: each message is released at
 *   release_i = max(release_{i-1}, arrival_i + d_i) + bytes_i / rate
 * (FIFO under jitter; never "sleep d after receiving", which would add processing time).
 * TCP never loses a message, so user-space "loss" is a retransmission delay (rto_ns added with
 * probability `loss`). Real packet loss and link cuts come from the BPF path (netem_kernel_*).
 */
#ifndef SWARM_NETEM_H
#define SWARM_NETEM_H

#include <stddef.h>
#include <stdint.h>

#include "proto/proto.h"

#define NETEM_NAME_MAX 32

typedef enum {
    NETEM_DIST_NONE = 0,
    NETEM_DIST_UNIFORM = 1,   /* d ~ U(delay - jitter, delay + jitter), clamped at 0 */
    NETEM_DIST_NORMAL = 2,    /* d ~ N(delay, jitter), clamped at 0 */
    NETEM_DIST_PARETO = 3,    /* heavy tail with mean `delay` and spread `jitter` */
} netem_dist;
_Static_assert(NETEM_DIST_PARETO == 3, "pinned: carried on the wire in msg_link.dist");

typedef struct {
    char name[NETEM_NAME_MAX];
    uint64_t delay_ns;        /* one-way mean delay (RTT / 2) */
    uint64_t jitter_ns;
    uint32_t dist;            /* netem_dist */
    double loss;              /* probability in [0, 1) */
    uint64_t rate_bps;        /* bytes per second; 0 = unlimited */
    uint64_t rto_ns;          /* retransmission delay charged per user-space "loss" */
    int control_plane;        /* 1: also delay control-plane messages (heartbeats) */
} netem_profile;

/* Built-in profiles: "none" (0), "lan" (RTT 0.4 ms), "wifi" (RTT 4.5 ms, normal jitter),
 * "wan" (RTT 60 ms). 0 / -1 if unknown. */
int netem_profile_builtin(const char *name, netem_profile *out);
/* Set one key of a profile from a config ("rtt_ms", "delay_ms", "jitter_ms", "jitter_dist",
 * "loss", "rate" (e.g. "100M" bytes/s or "1Gbit"), "rto_ms", "control_plane"). 0 / -1 with err
 * naming the key and why. */
int netem_profile_set(netem_profile *p, const char *key, const char *val, char *err, size_t errlen);
/* One line description, e.g. "wifi: one-way 2.250 ms, jitter normal 0.500 ms, loss 0, rate inf". */
const char *netem_profile_describe(const netem_profile *p, char *buf, size_t len);
/* Is this profile a no-op? */
int netem_profile_is_none(const netem_profile *p);
/* The link a route carries to its receiver (proto.h msg_link): p's delay, jitter, loss and
 * rate, and the seed of the receiver's draws. Both arms of the swarm route with it. */
void netem_profile_link(const netem_profile *p, uint64_t seed, msg_link *l);

/* ---- the shaper: release-time arithmetic for one link direction ---- */
typedef struct netem_shaper netem_shaper;
netem_shaper *netem_shaper_new(const netem_profile *p, uint64_t seed);
void netem_shaper_free(netem_shaper **s);
/* Sample this message's delay and return its absolute release time (CLOCK_MONOTONIC ns). */
uint64_t netem_release_at(netem_shaper *s, uint64_t arrival_ns, size_t bytes);
/* Total delay added so far (sum of release - arrival) and count, for "measured" figures. */
void netem_shaper_totals(const netem_shaper *s, uint64_t *added_ns, uint64_t *count);

/* ---- a FIFO of held ZeroMQ messages (for receivers and the forwarder) ---- */
typedef struct netem_queue netem_queue;
netem_queue *netem_queue_new(size_t capacity);
void netem_queue_free(netem_queue **q);
/* Takes ownership of *msg (a zmq_msg_t*, moved in; *msg is re-inited empty). -1 if full. */
int netem_queue_push(netem_queue *q, void *zmq_msg, uint64_t release_ns, uint64_t arrival_ns);
/* Release time of the head (UINT64_MAX if empty). */
uint64_t netem_queue_next(const netem_queue *q);
/* Move the head into *zmq_msg (caller's inited zmq_msg_t) if its release time <= now. 1/0. */
int netem_queue_pop_due(netem_queue *q, uint64_t now_ns, void *zmq_msg, uint64_t *arrival_ns);
size_t netem_queue_len(const netem_queue *q);

/* ---- subcommand entry (bin/swarm netem ...): forwarder, selftest, kernel link control ---- */
int netem_main(int argc, char **argv);

/* ---- kernel path: tc clsact + BPF on an interface (loss, blackhole; EDT delay where fq) ---- */
typedef struct netem_kernel netem_kernel;
typedef struct {
    int bpf_ok;               /* clsact + BPF program attach works */
    int fq_ok;                /* sch_fq exists, so EDT delay can be applied */
} netem_kernel_caps;
int netem_kernel_probe(netem_kernel_caps *caps, char *err, size_t errlen);
netem_kernel *netem_kernel_attach(const char *ifname, char *err, size_t errlen);
int netem_kernel_set(netem_kernel *k, uint32_t loss_ppm, int blackhole, uint64_t delay_ns,
                     char *err, size_t errlen);
void netem_kernel_detach(netem_kernel **k);

/* ---- additions (netem/ owners): config lookup, selftest, in-process forwarder, kernel handles ---- */

/* `name` is a built-in or a [profile.NAME] section of the INI file `config_path` (may be NULL); a
 * section named like a built-in starts from the built-in and overrides its keys. 0 / -1 with err
 * naming file, line and key. */
int netem_profile_resolve(const char *name, const char *config_path, netem_profile *out,
                          char *err, size_t errlen);

/* One loopback accuracy run of a profile (the `swarm netem --selftest` row). Times in ms. */
typedef struct {
    int count;                /* messages measured */
    double configured_ms;     /* delay + loss * rto: the mean the shaper should add */
    double sampled_ms;        /* mean of the delays the shaper actually drew this run */
    double added_mean_ms, added_p50_ms, added_p95_ms; /* release - arrival, measured */
    double e2e_ms, base_e2e_ms; /* mean one-way send -> release, with the profile and bare */
    double late_mean_ms, late_p50_ms; /* release time -> actual release: the host's lateness */
    double err_ms;            /* (sampled - configured) + late_p50: what the emulator got wrong */
    double tol_ms;            /* 5% of configured for >= 1 ms, else 0.050 */
    int pass;
} netem_selftest_result;
/* Sends `count` 16 KiB messages PUSH -> PULL over tcp://127.0.0.1 (ephemeral port), paced one at a
 * time, the receiver applying the shaper. count 0 picks one per profile. 0 / -1 (setup failed). */
int netem_selftest_run(const netem_profile *p, int count, uint64_t seed, netem_selftest_result *r,
                       char *err, size_t errlen);

/* The forwarder: PULL binds `listen`, PUSH connects `to`; each message leaves at its release
 * time. `control` (may be NULL) is a REP endpoint taking "cut", "cut SECONDS", "restore", "stats".
 * Runs until *stop is nonzero (noticed within 100 ms). 0 / -1 with err. */
typedef struct {
    const char *listen, *to, *control;
    netem_profile profile;
    uint64_t seed;
    size_t capacity;          /* messages held at most; 0 = 65536 */
} netem_forward_cfg;
int netem_forward_run(const netem_forward_cfg *c, const volatile int *stop, char *err, size_t errlen);

/* Free the handle but leave the program attached (tc keeps it; the maps stay pinned under
 * /sys/fs/bpf/swarm_IFACE) — what `swarm netem --link IFACE --loss P` does before it exits.
 * netem_kernel_detach instead removes the filters, the clsact qdisc and the pins. */
void netem_kernel_close(netem_kernel **k);
/* Packets passed / dropped by the program since it was first attached (pinned counters). */
int netem_kernel_stats(netem_kernel *k, uint64_t *passed, uint64_t *dropped);
/* The link's current config (as last set, possibly by an earlier process). 0 / -1. */
int netem_kernel_get(netem_kernel *k, uint32_t *loss_ppm, int *blackhole, uint64_t *delay_ns);

#endif
