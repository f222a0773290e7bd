/* partition.h — contiguous layer ranges, one per worker, each within its cap. coordinator/ */
#ifndef SWARM_PARTITION_H
#define SWARM_PARTITION_H

#include <stddef.h>
#include <stdint.h>

/* max_layers[i]: how many layers worker i can hold resident under its cap. Produces ranges
 * [first[i], last[i]) covering [0, n_layers) in worker order, every worker at least one
 * layer, minimising the largest stage. -1 with err naming each short cap when impossible. */
int partition_layers(uint32_t n_layers, uint32_t n_workers, const uint32_t *max_layers,
                     uint32_t *first, uint32_t *last, char *err, size_t errlen);

#endif
