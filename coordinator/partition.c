/* partition.c — balance contiguous layer ranges across workers within their caps. coordinator/ */
#include "coordinator/partition.h"

#include <stdio.h>
#include <string.h>

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
