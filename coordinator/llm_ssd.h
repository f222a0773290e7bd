/* llm_ssd.h — what a command running a llama/qwen2 file under the SSD arm shares (generate,
 * perplexity): the plan checked against the cap from the header, the memory cgroup, the
 * storage, executor and device counters around the run, the cache and content gates (gate.c's
 * rules) and the result's SSD fields (README, "generate"). coordinator/ */
#ifndef SWARM_LLM_SSD_H
#define SWARM_LLM_SSD_H

#include <jansson.h>
#include <stdint.h>

#include "common/cap.h"
#include "common/devstat.h"
#include "coordinator/llm_cli.h"
#include "coordinator/result.h"

/* What the SSD arm measured around a run: the plan, the gates, the device. */
typedef struct {
    int on;
    const char *tag;              /* the command, in the cgroup's name */
    llm_opts lo;
    char from[4200];              /* where the knobs came from */
    cap_t cap;
    char cap_mode[96];
    devstat_dev dv;
    devstat_sample d0;
    int has_dev;
    char dverr[256];
    exec_stats s0, s1;
    uint64_t io0, io1;
    uint64_t cgroup_peak;         /* taken before the group is left (0: advisory) */
    uint64_t peak_rss;            /* VmHWM after the SSD run, before any parity reference */
    run_result rr;                /* gate_cache, gate_content, void_reason (gate.c's rules) */
} llm_ssd;

/* x->lo and x->from set (llm_cli_ssd_opts), lm opened by llm_cli_open_tok: checks the plan
 * for n_ctx / n_batch from the header (a cap too small: -1 with every term, nothing joined),
 * joins a cgroup of x->lo.cap_bytes (or labels the cap advisory), opens lm->m under the SSD
 * arm, prints the plan, and takes the counters the gates start from. 0 / -1 with err. */
int llm_ssd_open(llm_ssd *x, llm_cli_model *lm, uint32_t n_ctx, uint32_t n_batch, char *err,
                 size_t errlen);
/* After the run: drain, the counters again, x->rr's cache and content gates (printed). */
void llm_ssd_judge(llm_ssd *x, llm_model *m);
/* Leave the cgroup (before anything that is not the SSD arm's runs). Safe twice. */
void llm_ssd_leave(llm_ssd *x);
/* The SSD fields of a result object. */
void llm_ssd_json(json_t *j, const llm_ssd *x, const llm_model *m);

#endif
