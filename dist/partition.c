/* partition.c — balance contiguous layer ranges across workers within their caps: by layer
 * count (the dense lab's equal layers) or by bytes (a real model's layers, KV caches and
 * buffers). dist/ */
#include "dist/partition.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "runtime/slice.h"
#include "runtime/exec.h"
#include "base/util.h"

static uint64_t s_capacity(uint32_t n, const uint32_t *max_layers, uint32_t t)
{
    uint64_t sum = 0;
    for (uint32_t i = 0; i < n; i++)
        sum += max_layers[i] < t ? max_layers[i] : t;
    return sum;
}

int partition_layers(uint32_t n_layers, uint32_t n_workers, const uint32_t *max_layers,
                     uint32_t *first, uint32_t *last, char *err, size_t errlen)
{
    uint64_t total = 0;
    uint32_t stage[4096];
    if (!n_workers || n_workers > 4096) {
        snprintf(err, errlen, "no workers to partition %u layers across", n_layers);
        return -1;
    }
    if (n_workers > n_layers) {
        snprintf(err, errlen, "%u workers for %u layers: every worker needs at least one layer",
                 n_workers, n_layers);
        return -1;
    }
    for (uint32_t i = 0; i < n_workers; i++) {
        total += max_layers[i];
        if (max_layers[i] == 0) {
            snprintf(err, errlen, "worker %u's cap cannot hold even one layer", i);
            return -1;
        }
    }
    if (total < n_layers) {
        snprintf(err, errlen, "the workers' caps hold at most %llu of %u layers: short by %llu "
                 "layers", (unsigned long long)total, n_layers,
                 (unsigned long long)(n_layers - total));
        return -1;
    }
    /* Smallest largest-stage t with enough capacity (binary search). */
    uint32_t lo = (n_layers + n_workers - 1) / n_workers, hi = n_layers;
    while (lo < hi) {
        uint32_t mid = lo + (hi - lo) / 2;
        if (s_capacity(n_workers, max_layers, mid) >= n_layers)
            hi = mid;
        else
            lo = mid + 1;
    }
    uint64_t sum = 0;
    for (uint32_t i = 0; i < n_workers; i++) {
        stage[i] = max_layers[i] < lo ? max_layers[i] : lo;
        sum += stage[i];
    }
    /* Trim the excess from the largest stages, later workers first, keeping >= 1 each. */
    while (sum > n_layers) {
        uint32_t best = n_workers;
        for (uint32_t i = n_workers; i-- > 0;)
            if (stage[i] > 1 && (best == n_workers || stage[i] > stage[best]))
                best = i;
        if (best == n_workers)
            break;
        stage[best]--;
        sum--;
    }
    uint32_t at = 0;
    for (uint32_t i = 0; i < n_workers; i++) {
        first[i] = at;
        at += stage[i];
        last[i] = at;
    }
    return 0;
}

/* ---------------------------------------------------------------- by bytes */

/* Can the layers be cut into n contiguous non-empty stages, stage i at most
 * min(t, budget[i]) bytes? reach (n+1 rows of n_layers+1) marks the boundaries reachable
 * after i stages. From a boundary j a stage can end anywhere in [j+1, kmax(j)], and kmax
 * grows with j, so each row is a union of intervals: a difference array keeps a row O(L). */
static int s_reach(uint32_t L, const uint64_t *pre, uint32_t n, const uint64_t *budget,
                   uint64_t t, uint8_t *reach, int32_t *diff)
{
    memset(reach, 0, (size_t)(n + 1) * (L + 1));
    reach[0] = 1;
    for (uint32_t i = 0; i < n; i++) {
        const uint8_t *row = reach + (size_t)i * (L + 1);
        uint8_t *next = reach + (size_t)(i + 1) * (L + 1);
        uint64_t lim = budget[i] < t ? budget[i] : t;
        uint32_t k = 0;
        int32_t run = 0;
        memset(diff, 0, sizeof *diff * (L + 2));
        for (uint32_t j = 0; j < L; j++) {
            if (!row[j])
                continue;
            if (k < j)
                k = j;
            while (k < L && pre[k + 1] - pre[j] <= lim)
                k++;
            if (k > j) {
                diff[j + 1]++;
                diff[k + 1]--;
            }
        }
        for (uint32_t j = 0; j <= L; j++) {
            run += diff[j];
            next[j] = run > 0;
        }
    }
    return reach[(size_t)n * (L + 1) + L];
}

int partition_bytes(uint32_t n_layers, const uint64_t *layer_bytes, uint32_t n_workers,
                    const uint64_t *budget, uint32_t *first, uint32_t *last, char *err,
                    size_t errlen)
{
    uint64_t *pre = NULL, total = 0, held = 0, big = 0, small = UINT64_MAX;
    uint8_t *reach = NULL;
    int32_t *diff = NULL;
    char a[32], b[32], c[32];
    int rc = -1;
    if (!n_workers || n_workers > PARTITION_MAX_WORKERS || n_layers > PARTITION_MAX_LAYERS) {
        snprintf(err, errlen, "%u workers for %u layers: between 1 and %u workers, at most %u "
                 "layers", n_workers, n_layers, PARTITION_MAX_WORKERS, PARTITION_MAX_LAYERS);
        return -1;
    }
    if (n_workers > n_layers) {
        snprintf(err, errlen, "%u workers for %u layers: every worker needs at least one layer",
                 n_workers, n_layers);
        return -1;
    }
    pre = calloc(n_layers + 1, sizeof *pre);
    reach = calloc((size_t)(n_workers + 1) * (n_layers + 1), 1);
    diff = calloc(n_layers + 2, sizeof *diff);
    if (!pre || !reach || !diff) {
        snprintf(err, errlen, "out of memory partitioning %u layers", n_layers);
        goto err;
    }
    for (uint32_t l = 0; l < n_layers; l++) {
        pre[l + 1] = pre[l] + layer_bytes[l];
        if (layer_bytes[l] > big)
            big = layer_bytes[l];
        if (layer_bytes[l] < small)
            small = layer_bytes[l];
    }
    total = pre[n_layers];
    for (uint32_t i = 0; i < n_workers; i++) {
        held += budget[i];
        if (budget[i] < small) {
            snprintf(err, errlen, "worker %u's budget of %s cannot hold even the smallest layer "
                     "(%s)", i, util_fmt_size(budget[i], a, sizeof a),
                     util_fmt_size(small, b, sizeof b));
            goto err;
        }
    }
    if (held < total) {
        snprintf(err, errlen, "the %u layers need %s; the %u workers' budgets hold %s: short "
                 "by %s", n_layers, util_fmt_size(total, a, sizeof a), n_workers,
                 util_fmt_size(held, b, sizeof b), util_fmt_size(total - held, c, sizeof c));
        goto err;
    }
    /* Smallest largest-stage t that still cuts (binary search over bytes). */
    uint64_t lo = big > total / n_workers ? big : total / n_workers, hi = total;
    if (!s_reach(n_layers, pre, n_workers, budget, hi, reach, diff)) {
        snprintf(err, errlen, "no contiguous split of the %u layers (%s, largest %s) fits the "
                 "%u workers' budgets (%s together) with one layer or more each", n_layers,
                 util_fmt_size(total, a, sizeof a), util_fmt_size(big, b, sizeof b), n_workers,
                 util_fmt_size(held, c, sizeof c));
        goto err;
    }
    while (lo < hi) {
        uint64_t mid = lo + (hi - lo) / 2;
        if (s_reach(n_layers, pre, n_workers, budget, mid, reach, diff))
            hi = mid;
        else
            lo = mid + 1;
    }
    s_reach(n_layers, pre, n_workers, budget, lo, reach, diff);
    /* Walk back from the end: stage i ends at k and starts at the latest boundary j reachable
     * after i stages from which [j, k) fits. */
    uint32_t k = n_layers;
    for (uint32_t i = n_workers; i-- > 0;) {
        uint64_t lim = budget[i] < lo ? budget[i] : lo;
        uint32_t j = k;
        while (j-- > 0)
            if (reach[(size_t)i * (n_layers + 1) + j] && pre[k] - pre[j] <= lim)
                break;
        first[i] = j;
        last[i] = k;
        k = j;
    }
    rc = 0;
err:
    free(pre);
    free(reach);
    free(diff);
    return rc;
}

/* ---------------------------------------------------------------- real models */

uint64_t partition_layer_bytes(const arch_layer *l)
{
    uint64_t b = 0;
    for (uint32_t i = 0; i < l->n_tensors; i++)
        b += (l->t[i].nbytes + 3ull * EXEC_ALIGN - 1) / EXEC_ALIGN * EXEC_ALIGN;
    return b;
}

uint64_t partition_llm_held(const arch_model *am, const partition_llm_opts *o)
{
    return slice_held_bytes(am, o->max_batch, o->n_ctx, o->threads);
}

/* A worker's buffers besides its layers and caches: what the executor plans for a layer run
 * of max_batch positions (arch_run_bytes and two alignment pads: its own fixed bytes), plus
 * partition_llm_held. */
static uint64_t s_buffers(const arch_model *am, const partition_llm_opts *o)
{
    return arch_run_bytes(am, o->max_batch) + 2 * EXEC_ALIGN + partition_llm_held(am, o);
}

int partition_llm(const arch_model *am, const partition_llm_opts *o, uint32_t n_workers,
                  const uint64_t *caps, partition_llm_plan *p, char *err, size_t errlen)
{
    uint64_t budget[PARTITION_MAX_WORKERS];
    char why[512], a[32], b[32], c[32], d[32], e[32], f[32];
    uint32_t L = am->hp.n_layers;
    arch_cost cost;
    memset(p, 0, sizeof *p);
    if (!o->sessions || !o->n_ctx || !o->max_batch) {
        snprintf(err, errlen, "sessions (%u), context (%u) and batch (%u) must be >= 1",
                 o->sessions, o->n_ctx, o->max_batch);
        return -1;
    }
    if (L > PARTITION_MAX_LAYERS || !n_workers || n_workers > PARTITION_MAX_WORKERS) {
        snprintf(err, errlen, "%u workers for %u layers: between 1 and %u workers, at most %u "
                 "layers", n_workers, L, PARTITION_MAX_WORKERS, PARTITION_MAX_LAYERS);
        return -1;
    }
    p->n_layers = L;
    p->n_workers = n_workers;
    arch_layer_cost(am, 0, &cost);
    p->kv_per_pos = cost.kv_bytes_per_pos;
    p->overhead_bytes = EXEC_WORKER_OVERHEAD;
    p->buffer_bytes = s_buffers(am, o);
    p->embd_bytes = am->tok_embd.nbytes;
    p->head_bytes = am->hp.tied_output ? 0 : am->output.nbytes + am->out_norm.nbytes;
    p->embedding_at = p->head_at = "coordinator";
    uint64_t layers_all = 0;
    for (uint32_t l = 0; l < L; l++) {
        arch_layer_cost(am, l, &cost);
        p->layer_weight[l] = partition_layer_bytes(&am->layers[l]);
        /* a sliding-window layer's ring: its window and a message (arch_kv_rows), as the
         * worker's slice allocates it */
        p->layer_kv[l] = (uint64_t)o->sessions * arch_kv_bytes(am, l, l + 1, o->n_ctx,
                                                                o->max_batch);
        layers_all += p->layer_weight[l] + p->layer_kv[l];
    }
    uint64_t fixed = p->overhead_bytes + p->buffer_bytes;
    for (uint32_t i = 0; i < n_workers; i++) {
        p->cap[i] = caps[i];
        if (!caps[i])
            budget[i] = layers_all;
        else if (caps[i] <= fixed) {
            snprintf(err, errlen, "worker %u's cap of %s holds no layer: %s overhead + %s "
                     "buffers (%u positions per message) come first", i,
                     util_fmt_size(caps[i], a, sizeof a),
                     util_fmt_size(p->overhead_bytes, b, sizeof b),
                     util_fmt_size(p->buffer_bytes, c, sizeof c), o->max_batch);
            return -1;
        } else
            budget[i] = caps[i] - fixed;
    }
    uint64_t *price = calloc(L ? L : 1, sizeof *price);
    if (!price) {
        snprintf(err, errlen, "out of memory pricing %u layers", L);
        return -1;
    }
    for (uint32_t l = 0; l < L; l++)
        price[l] = p->layer_weight[l] + p->layer_kv[l];
    int rc = partition_bytes(L, price, n_workers, budget, p->first, p->last, why, sizeof why);
    free(price);
    if (rc) {
        snprintf(err, errlen, "%s (each worker: weights + KV for %u sessions x %u positions x "
                 "%s per layer, + %s overhead + %s buffers; layer 0: %s weights + %s KV; all "
                 "layers: %s)", why, o->sessions, o->n_ctx,
                 util_fmt_size(p->kv_per_pos, a, sizeof a),
                 util_fmt_size(p->overhead_bytes, b, sizeof b),
                 util_fmt_size(p->buffer_bytes, c, sizeof c),
                 util_fmt_size(L ? p->layer_weight[0] : 0, d, sizeof d),
                 util_fmt_size(L ? p->layer_kv[0] : 0, e, sizeof e),
                 util_fmt_size(layers_all, f, sizeof f));
        return -1;
    }
    for (uint32_t i = 0; i < n_workers; i++) {
        p->need[i] = fixed;
        for (uint32_t l = p->first[i]; l < p->last[i]; l++)
            p->need[i] += p->layer_weight[l] + p->layer_kv[l];
    }
    return 0;
}
