/* partition.h — contiguous layer ranges, one per worker, each within its cap. dist/ */
#ifndef SWARM_PARTITION_H
#define SWARM_PARTITION_H

#include <stddef.h>
#include <stdint.h>

#include "arch/arch.h"

#define PARTITION_MAX_WORKERS 256
#define PARTITION_MAX_LAYERS 4096

/* max_layers[i]: how many layers worker i can hold resident under its cap. Produces ranges
 * [first[i], last[i]) covering [0, n_layers) in worker order, every worker at least one
 * layer, minimising the largest stage. -1 with err naming each short cap when impossible. */
int partition_layers(uint32_t n_layers, uint32_t n_workers, const uint32_t *max_layers,
                     uint32_t *first, uint32_t *last, char *err, size_t errlen);

/* The same by bytes: layer l costs layer_bytes[l], worker i may hold at most budget[i] bytes
 * of layers. Ranges [first[i], last[i]) cover [0, n_layers) in worker order, every worker at
 * least one layer, the largest stage (in bytes) as small as it can be. -1 with err giving
 * the numbers (what the layers need, what the budgets hold, short by how much) otherwise. */
int partition_bytes(uint32_t n_layers, const uint64_t *layer_bytes, uint32_t n_workers,
                    const uint64_t *budget, uint32_t *first, uint32_t *last, char *err,
                    size_t errlen);

/* What a real model's swarm must hold: the sessions a worker keeps KV caches for at once,
 * their context, and the most positions one activation message carries. */
typedef struct {
    uint32_t sessions;            /* >= 1 */
    uint32_t n_ctx;               /* positions per session's cache, >= 1 */
    uint32_t max_batch;           /* positions per message (prompt processing), >= 1 */
    uint32_t threads;             /* a worker's compute threads (attention scratch per thread) */
} partition_llm_opts;

/* One real model's plan over n_workers workers. The token embedding and the output head stay
 * with the coordinator: it tokenizes and samples, so the first activation it sends and the
 * last it receives are the only ones that cross the wire, and a worker's cap holds layers
 * only (embedding_at / head_at say so in results). */
typedef struct {
    uint32_t n_layers, n_workers;
    uint64_t layer_weight[PARTITION_MAX_LAYERS]; /* resident bytes, aligned as the executor */
    uint64_t layer_kv[PARTITION_MAX_LAYERS];     /* sessions x n_ctx x kv bytes per position */
    uint64_t kv_per_pos;          /* one layer's K and V for one position (f32) */
    uint64_t overhead_bytes;      /* code, libraries, stacks (EXEC_WORKER_OVERHEAD) */
    uint64_t buffer_bytes;        /* the layer run's scratch + an in and an out message */
    uint64_t embd_bytes, head_bytes; /* head_bytes 0 when tied to the embedding */
    const char *embedding_at, *head_at; /* "coordinator" */
    uint32_t first[PARTITION_MAX_WORKERS], last[PARTITION_MAX_WORKERS];
    uint64_t cap[PARTITION_MAX_WORKERS];
    uint64_t need[PARTITION_MAX_WORKERS]; /* weights + KV + overhead + buffers of the range */
} partition_llm_plan;

/* Price every layer of am (weights as the executor keeps them resident, KV for o's sessions
 * and context) and the per-worker buffers, then partition by bytes under caps[i] (0 = no
 * cap). -1 with err giving every term of the refusal. */
int partition_llm(const arch_model *am, const partition_llm_opts *o, uint32_t n_workers,
                  const uint64_t *caps, partition_llm_plan *p, char *err, size_t errlen);

/* What a worker holds under its cap beside the executor's plan (its exec_opts.held_bytes
 * with the range's KV caches added): one message in and one out of max_batch x dim f32 with
 * 4 KiB of envelope each, and one attention row of the context per thread. */
uint64_t partition_llm_held(const arch_model *am, const partition_llm_opts *o);

/* Bytes one layer takes resident: each tensor in its own EXEC_ALIGN-aligned buffer with the
 * aligned read's slack, the executor's rule for resident tensors. */
uint64_t partition_layer_bytes(const arch_layer *l);

#endif
