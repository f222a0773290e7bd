/* sums.h — per-layer checksums of any GGUF, for the content gate and worker verification. arch/
 *
 * A layer's checksum is XXH3-64 (seed 0) over its tensors' bytes in consumption order
 * (arch_layer: vectors first, then the matrices), exactly the bytes the executor's streaming
 * hash sees. The lab's files carry them in metadata (swarm.layer_checksums: g then W, the
 * same order). A published file does not: they are computed on first use (one read of the
 * layers) and kept in a cache file, MODEL.gguf.swarm-sums beside the model, or
 * $XDG_CACHE_HOME/swarm/NAME-HEADERHASH.swarm-sums (~/.cache when unset) if that folder is not
 * writable. The cache is JSON, keyed by the file's size, its mtime (ns) and XXH3-64 of its
 * header (metadata and tensor table): a changed file is noticed, logged and recomputed.
 */
#ifndef SWARM_SUMS_H
#define SWARM_SUMS_H

#include <stddef.h>
#include <stdint.h>

#include "arch/arch.h"

typedef enum {
    SUMS_METADATA = 0,            /* from the file's own swarm.layer_checksums */
    SUMS_CACHED = 1,              /* from a valid cache file */
    SUMS_COMPUTED = 2,            /* computed now (and cached where possible) */
} sums_source;

/* Fill sums[0 .. n_layers) for am's file at path. *src says where they came from; cache_path
 * (if not NULL, cache_len bytes) gets the cache file used or written ("" for metadata or when
 * no cache could be written: logged, the sums are still returned). 0 / -1 with err (the file
 * cannot be read). */
int sums_get(const arch_model *am, const char *path, uint64_t *sums, sums_source *src,
             char *cache_path, size_t cache_len, char *err, size_t errlen);
/* Every message that says a layer's bytes do not match their checksum carries this phrase,
 * wherever it was found (a resident load here, a worker's refusal relayed by the coordinator,
 * the content gate on a streamed layer): a command maps such an error to EXIT_CORRUPT. */
#define SUMS_MISMATCH "checksum mismatch"
/* Does err say a layer failed its checksum (SUMS_MISMATCH)? */
int sums_err_is_mismatch(const char *err);
/* Layer l's checksum over its tensors in memory (data[t]: tensor t of arch_layer l). */
uint64_t sums_of_layer(const arch_model *am, uint32_t l, const void *const *data);
/* Per-expert checksums, for the SSD arm that reads only the routed experts of a layer with
 * experts (runtime/exec.c): per layer, at base[l] (sums_experts_layout), the XXH3-64 of its
 * tensors other than the experts' in consumption order, then of each expert's slice of each
 * expert tensor (tensor by tensor in consumption order, experts in order); a layer without
 * experts has its one layer checksum there. Cached as sums_get does (MODEL.gguf.swarm-esums),
 * computed on first use with one read of the layers. */
/* The count of sums, and base[0 .. n_layers] (base may be NULL). */
uint64_t sums_experts_layout(const arch_model *am, uint64_t *base);
int sums_get_experts(const arch_model *am, const char *path, uint64_t *sums, char *err,
                     size_t errlen);
/* Compute only (no cache): what the streaming hash of each layer must give. */
int sums_compute(const arch_model *am, const char *path, uint64_t *sums, char *err,
                 size_t errlen);

#endif
