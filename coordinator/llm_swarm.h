/* llm_swarm.h — a real model's layers in worker processes, for the resident arm of the llm
 * runner (arch/llm.h): spawn the workers, partition by bytes, assign, route, and run every
 * pass's activations through them. coordinator/ */
#ifndef SWARM_LLM_SWARM_H
#define SWARM_LLM_SWARM_H

#include <stddef.h>
#include <stdint.h>

#include "arch/llm.h"
#include "coordinator/partition.h"

typedef struct {
    const char *model;            /* the GGUF file (the workers read their local copy) */
    const char *self_exe;         /* the swarm binary the workers run */
    uint32_t workers;             /* 1..8, spawned on loopback */
    uint64_t cap_bytes;           /* each worker's cap (0 = none) */
    uint32_t sessions, n_ctx, max_batch;
    int threads;                  /* each worker's compute threads */
} llm_swarm_opts;

typedef struct llm_swarm llm_swarm;

/* Spawn, plan (partition_llm), assign and route. NULL with err: the plan's refusal with its
 * numbers, or the worker that refused or failed, named. */
llm_swarm *llm_swarm_new(const llm_swarm_opts *o, char *err, size_t errlen);
/* Say bye to every worker and wait for it to exit. */
void llm_swarm_free(llm_swarm **sw);
/* The hook the llm runner's resident arm calls (valid while sw lives). */
void llm_swarm_hook(llm_swarm *sw, llm_layers_hook *h);
const partition_llm_plan *llm_swarm_plan(const llm_swarm *sw);
/* Activations sent and bytes on the wire (both directions) so far. */
void llm_swarm_counts(const llm_swarm *sw, uint64_t *acts, uint64_t *wire_bytes);

#endif
