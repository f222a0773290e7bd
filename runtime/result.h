/* result.h — one run's figures and gates, and their JSON Lines form (jansson). runtime/
 *
 * Field names are stable and documented in docs/results.md. Arm-specific fields
 * (per_worker, failover, lab fields) go into `extra`, merged into the same JSON object.
 */
#ifndef SWARM_RESULT_H
#define SWARM_RESULT_H

#include <jansson.h>
#include <stdint.h>

typedef enum { GATE_NA = 0, GATE_PASS = 1, GATE_VOID = 2 } gate_state;

typedef struct {
    char arm[32];              /* reference | ssd | resident */
    char condition[64];        /* e.g. resident/wan (lab); defaults to arm */
    char profile[32];
    uint32_t steps;
    double setup_ms;           /* spawn + load, before the first step starts */
    double ttfr_ms;            /* first step: start to its result */
    double total_ms;           /* all steps, first start to last result */
    double *step_ms;           /* (steps,) per-step latency, owned */
    double steps_per_s;        /* steps / total_ms */
    double step_ms_p50, step_ms_p95, step_ms_p99; /* over steps 2..N (steady state) */
    double step_ms_mean_steady;
    uint64_t ssd_read_bytes;   /* storage reads during the steps (/proc/<pid>/io) */
    uint64_t streamed_bytes;   /* bytes the arm asked the disk for during the steps */
    uint64_t setup_read_bytes; /* storage reads while loading */
    uint64_t peak_rss_bytes;   /* VmHWM of the arm's process (max over workers for resident) */
    uint64_t cgroup_peak_bytes;/* memory cgroup peak, 0 if none */
    uint64_t cap_bytes;
    char cap_mode[96];         /* "enforced (cgroup v1)" / "advisory (...)" / "none" */
    char output_digest[65];    /* sha256 over every step's output, in order */
    int has_max_abs_diff;
    double max_abs_diff;
    gate_state gate_cache, gate_content, gate_parity;
    gate_state gate_quality;   /* the quantized arm's gate instead of parity (n/a elsewhere) */
    char void_reason[512];     /* why a gate failed ("" when none) */
    char model[1024];
    char config[1024];
    json_t *stage_ms;          /* object: stage -> ms per step (mean), owned */
    json_t *extra;             /* object: merged into the JSON, owned */
} run_result;

void result_init(run_result *r, const char *arm, uint32_t steps);
void result_free(run_result *r);
/* Fill p50/p95/p99/steady mean/steps_per_s from step_ms and total_ms. */
void result_finish_stats(run_result *r);
/* Set a gate to void and append its reason. */
void result_void(run_result *r, gate_state *gate, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));
int result_is_void(const run_result *r);
const char *result_gate_name(gate_state g);
/* Build the JSON object (new reference). */
json_t *result_to_json(const run_result *r);
/* Append one line to path (created if missing). 0 / -1. */
int result_append_jsonl(const char *path, json_t *obj, char *err, size_t errlen);
/* Human table row(s) to stdout. */
void result_print(const run_result *r);

#endif
