/* predict.h — the lab's cost model: machine figures measured first, then steps/s per condition. lab/
 *
 * Predict before measuring ("Measurement rules and gates" in docs/design.md). predict_measure_machine fills the figures the model is
 * fed with (disk bandwidth in the SSD arm's own pattern, resident layer compute, content-hash
 * cost, a bare ZeroMQ hop); predict_condition turns them plus the config into steps/s and time
 * to first result for one condition, with the binding term. The lab stores every prediction in
 * the JSONL before the first arm runs; predict_blame names the term that was wrong afterwards.
 * Nothing here ever reads a measurement of an arm: predictions are never tuned after the fact.
 */
#ifndef SWARM_PREDICT_H
#define SWARM_PREDICT_H

#include <jansson.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

#include "dist/config.h"
#include "arch/arch.h"
#include "arch/model.h"
#include "runtime/exec.h"

/* Stated tolerance of every prediction (steps/s and TTFR): +-15%. A measured value outside
 * [pred / 1.15, pred * 1.15] is a miss (relative error |meas - pred| / pred > 0.15). */
#define PREDICT_TOLERANCE 0.15

/* Bare transport hop: round trips measured per figure (median), and warm-up round trips. */
#define PREDICT_HOP_REPS 200
#define PREDICT_HOP_WARMUP 20

typedef struct {
    /* disk: bench_disk_run over the model's layers at the SSD arm's depth and chunk */
    double disk_gbps;          /* 1e9 bytes/s, O_DIRECT (or buffered if the config says so) */
    uint32_t disk_qd;          /* queue depth used (= [ssd] queue_depth) */
    uint64_t disk_chunk_bytes; /* bytes per read actually used (whole 4-row blocks) */
    uint32_t disk_passes;      /* passes over the file (more for tiny models) */
    uint64_t disk_bytes;       /* bytes read by the benchmark */
    int disk_cache_pass;       /* storage served the bytes (no page cache) */
    char disk_io_buffers[200]; /* what backed the read buffers: "thp", "4k-pages (fallback: ..)" */
    int disk_has_device;       /* 0: disk_device holds why no block device was found */
    char disk_device[256];     /* block device whose stat was read, or the reason for none */
    uint64_t disk_avg_request_bytes; /* sectors x 512 / reads at the device during the benchmark */
    double disk_busy_util;     /* device busy time / benchmark time, 0..1 */
    /* compute: bench_layer_ms on one resident layer, median */
    double layer_ms;           /* with [run] threads (single-process arms), ms */
    uint32_t threads;
    double layer_ms_worker;    /* with [swarm] threads (each worker), ms */
    uint32_t worker_threads;
    /* content gate: XXH3-64 of one layer's bytes (the SSD arm hashes streamed layers) */
    double verify_ms;          /* ms per layer, median */
    /* transport: bare ZeroMQ PUSH/PULL round trip of dim*4 bytes on loopback TCP */
    double hop_rtt_ms;         /* median round trip, ms */
    double hop_rtt_p99_ms;
    double hop_ms;             /* one way = hop_rtt_ms / 2 */
    uint64_t hop_bytes;
    long cpus;                 /* online CPUs (bounds resident throughput with inflight > 1) */
    /* the quantized arm (predict_measure_quant; 0 when the lab has no such condition):
     * bench_layers_ms over quant_layers resident layers of the quantized file (at least 256
     * MiB, so the weights come from DRAM as in the arm), as bytes per second */
    double quant_layer_ms;     /* per layer, with [run] threads, ms */
    uint32_t quant_layers;
    double quant_gbps;         /* one quantized layer's bytes / quant_layer_ms, 1e9 B/s */
    uint64_t quant_layer_bytes;
    char quant_type[16];
} predict_machine;

typedef enum {
    PREDICT_REFERENCE = 0,
    PREDICT_SSD = 1,
    PREDICT_RESIDENT = 2,
    PREDICT_QUANTIZED = 3,     /* m is the quantized file: step = weight bytes / quant_gbps */
} predict_kind;

typedef struct {
    predict_kind kind;
    /* inputs taken from the config and the plan */
    uint32_t layers;           /* L */
    uint32_t n_resident, n_streamed; /* SSD arm's plan (exec_plan_make); reference: L, 0 */
    uint64_t streamed_bytes;   /* bytes requested from the file per step */
    uint32_t workers, inflight, hops; /* resident: hops = workers + 1 */
    double profile_ms;         /* one-way delay added per hop (measured if known, else config) */
    /* terms, ms per step */
    double compute_ms;         /* layers * layer_ms (worker layer_ms for resident) */
    double verify_ms;          /* n_streamed * verify_ms (SSD), on the hasher thread */
    double verify_wait_ms;     /* the part of it the step waits for (hash slower than the rest) */
    double disk_ms;            /* streamed_bytes / disk bandwidth (SSD) */
    double read_wait_ms;       /* disk time not hidden behind streamed compute (and hash) */
    double network_ms;         /* hops * (hop_ms + profile_ms) (resident) */
    /* results */
    double step_ms;            /* steady step time (ms) */
    double ttfr_ms;            /* time to first result (ms) */
    double steps_per_s;        /* 1000 / step_ms */
    const char *binding;       /* "disk" | "compute" | "network" (static string) */
    char formula[256];         /* the arithmetic with numbers, for the printed table */
} prediction;

/* Measure every figure the model needs (prints nothing; the caller prints). Takes seconds on
 * the lab model: one disk pass of the file, ~30 layer runs, 200 round trips. 0 / -1. */
int predict_measure_machine(const config_t *cfg, const model_t *m, predict_machine *pm,
                            char *err, size_t errlen);
/* The quantized arm's figure: one resident layer of qm (the quantized file) through the same
 * executor and row products the arm uses, median time and its bandwidth. 0 / -1. */
int predict_measure_quant(const config_t *cfg, const model_t *qm, predict_machine *pm,
                          char *err, size_t errlen);
/* Bare ZeroMQ PUSH/PULL round trip of `bytes` on tcp://127.0.0.1 to an echo thread: median and
 * p99 over `reps` after PREDICT_HOP_WARMUP warm-up trips (ms). 0 / -1. */
int predict_hop_rtt(size_t bytes, int reps, double *median_ms, double *p99_ms, char *err,
                    size_t errlen);

/* Predict one condition. profile_ms: per-hop added one-way delay (resident only; 0 otherwise).
 * The SSD plan comes from exec_plan_make with the SSD arm's own options. 0 / -1. */
int predict_condition(predict_kind kind, const config_t *cfg, const model_t *m,
                      const predict_machine *pm, double profile_ms, prediction *out, char *err,
                      size_t errlen);

/* Terms and results as a JSON object (new reference) for the JSONL. */
json_t *predict_to_json(const prediction *p);
/* Machine figures as text lines, to f. */
void predict_print_machine(FILE *f, const predict_machine *pm);

/* After the fact: which term was wrong? Compares the prediction's terms (as stored in the JSONL by
 * predict_to_json) with the measured per-step stage means (stage_ms medians across repeats) and
 * the measured steady step; writes e.g. "disk (predicted 447.1 ms/step, measured 601.3)". */
void predict_blame(const json_t *pred, const json_t *stage_ms, double measured_step_ms,
                   char *buf, size_t len);

/* ---------------------------------------------------------------- the text lab's SSD arm
 *
 * Per generated token (lab/lab_llm.c): the reference arm's time (every weight resident, only
 * the routed experts computed), plus what the SSD arm's reads add to it:
 *   ms = ref_ms + max(0, ring_bytes / ring_disk - ref_ms x ring_bytes / pass_bytes)
 *               + miss_bytes / disk + miss_bytes / hash
 *   miss_bytes = (1 - hit) x routed_read_bytes,  hit = min(1, cache_slots / cache_experts)
 *   (or the hit rate given: the reference arm's routing of the same tokens replayed through
 *   the cache's policy)
 * The ring's reads (a dense model's streamed layers, a MoE model's streamed attention) overlap
 * the compute of the layers they feed (their share of the reference's time); the experts'
 * reads do not: they start once the router has run, all of a layer's together, and the
 * layer waits for them, then hashes each slice on the step's thread. hit is the LRU cache's
 * hit rate under uniform, independent routing (the independent reference model: exactly the
 * fraction of experts the cache holds), a lower bound where routing repeats itself. */
typedef struct {
    double ref_ms;             /* the reference arm's ms per generated token */
    double disk_gbps;          /* the arm's expert reads (a dense model's: its ring), 1e9 B/s */
    double ring_gbps;          /* the ring's reads where measured apart (0: disk_gbps) */
    double hash_gbps;          /* XXH3 over the expert slices read; 0: not counted */
    uint64_t pass_bytes;       /* weight bytes one token's compute reads (routed share only) */
    uint64_t ring_bytes;       /* bytes through the ring per token */
    uint64_t routed_read_bytes;/* the routed experts' reads per token, every layer that reads
                                * them (aligned supersets), with no cache */
    uint64_t cache_slots;      /* the expert cache's slots */
    uint64_t cache_experts;    /* the experts that come through it (those layers x n_expert) */
    double read_ms, hash_ms;   /* > 0: a generated token's expert reads and hashes as measured
                                * by replaying its misses (bench_experts_replay), used for the
                                * misses' terms in place of miss_bytes / disk and / hash */
    int has_hit;               /* 1: hit is known (the reference's routing replayed through the
                                * cache's policy, runtime/xsim.h), not uniform routing's */
    double hit;
} predict_llm_in;

typedef struct {
    double hit_rate;           /* predicted expert cache hit rate */
    double read_bytes;         /* predicted bytes read per token: ring + the misses */
    double ring_ms;            /* the ring's time not hidden behind compute */
    double expert_ms;          /* the misses' reads and hashes: read_ms + hash_ms */
    double read_ms, hash_ms;
    double ms;                 /* per token */
    char formula[320];
} predict_llm_out;

void predict_llm_ssd(const predict_llm_in *in, predict_llm_out *out);

/* The routed experts' reads per token under the SSD arm's plan p of model am (whole-resident
 * layers read none): k experts a layer, each expert's slices of every expert tensor as the
 * arm reads them (4096-aligned supersets, averaged over the layer's experts); the experts
 * those layers hold; and the weight bytes one token's compute reads (arch_cost.routed_bytes
 * summed over the layers). */
void predict_llm_routed(const arch_model *am, const exec_plan *p, uint64_t *routed_read_bytes,
                        uint64_t *cache_experts, uint64_t *pass_bytes);

/* XXH3-64's speed over a buffer of `bytes` (1e9 B/s, median of reps): the content gate's cost
 * per expert slice read. 0 / -1. */
int predict_hash_gbps(uint64_t bytes, int reps, double *gbps, char *err, size_t errlen);

#endif
