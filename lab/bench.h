/* bench.h — machine figures the cost model is fed with: disk bandwidth, layer compute, hop latency. lab/ */
#ifndef SWARM_BENCH_H
#define SWARM_BENCH_H

#include <stddef.h>
#include <stdint.h>

#include "base/devstat.h"
#include "arch/model.h"

typedef struct {
    uint32_t queue_depth;
    uint32_t ring_slots;       /* chunk buffers in the ring */
    uint32_t first_layer;      /* streamed layers [first_layer, L) */
    uint64_t chunk_bytes;
    uint64_t bytes;            /* requested */
    uint64_t read_bytes;       /* storage reads seen in /proc/self/io */
    double seconds;
    double gbps;               /* 1e9 bytes per second */
    int cache_pass;            /* read_bytes within 1% of bytes */
    char io_buffers[200];      /* what backed the read buffers (exec_io_buffers) */
    /* The block device's own view of the same interval (device-wide: other readers count) */
    int has_device;            /* 0: no block device (device_error says why) */
    char device[160];          /* devstat_dev.name */
    char device_error[256];
    devstat_delta dev;         /* requests, bytes, average request size, busy time */
    double hash_gbps;          /* bench_experts_replay: XXH3 over the timed reads' bytes just
                                * read, 1e9 B/s (the content gate's cost, as the arm pays it) */
    uint32_t timed_passes;     /* bench_experts_replay: the passes timed (0: one-position) */
    double read_ms, hash_ms;   /* ... and a timed pass's reads and hashes (ms) */
} bench_disk_result;

/* Stream layers [first, L) with the SSD arm's reader (O_DIRECT, io_uring, chunk, depth, ring)
 * without computing, `passes` times over. first = the SSD arm's resident count gives its
 * exact access pattern: the same bytes, read over and over (which matters here: the host
 * under this VM's disk caches a region that is re-read, not a longer sequential scan).
 * The read buffers are the arm's own kind (huge pages unless buffers_4k: exec.h). */
typedef struct {
    uint32_t first;            /* streamed layers [first, L) */
    uint64_t chunk_bytes;
    uint32_t queue_depth;
    uint32_t passes;
    uint32_t ring_slots;       /* the SSD arm's plan's (0: queue_depth + 1) */
    int buffers_4k;            /* 1: 4 KiB-page buffers (the arm's [ssd] buffers = 4k) */
} bench_disk_opts;

int bench_disk_run(const model_t *m, const bench_disk_opts *bo, bench_disk_result *out,
                   char *err, size_t errlen);

/* The same for a real model's file (GGUF, any supported architecture): its layers [first, L)
 * streamed through the SSD arm's reader; chunk_bytes in the result is the target (chunks are
 * whole rows, whose bytes differ between tensors). */
int bench_disk_run_gguf(const char *path, const bench_disk_opts *bo, bench_disk_result *out,
                        char *err, size_t errlen);
/* The SSD arm's expert reads as it makes them (runtime/exec.c): a visit reads `experts`
 * random experts of one random layer in [first, L), each expert's slice of every expert tensor
 * as its 4096-aligned superset, O_DIRECT, all in flight together on one io_uring, and waits
 * for them all; visits go on until `bytes` were read. Deterministic from seed. The result's
 * gbps is bytes over the visits' time; queue_depth the reads of a visit. 0 / -1. */
int bench_experts_gguf(const char *path, uint32_t first, uint32_t experts, uint64_t bytes,
                       uint32_t seed, bench_disk_result *out, char *err, size_t errlen);
/* The same reads as a given sequence of misses (runtime/llm.c's SWARM_EXPERT_SIM_LOG: lines
 * "ONEPOS LAYER EXPERT..."; one visit a line, its experts' slices all in flight, then a wait),
 * in order, into a cache as the arm's: `slots` slots of slot_bytes (exec_plan's
 * expert_slots, expert_slot_bytes) in one huge-page buffer touched first, each miss into the
 * next slot in turn (memory not touched since the slot's last read, as an LRU victim is),
 * its slices laid out as exec.c lays them; the whole log `passes` times over: every visit
 * read, timed only in the last `last_passes` passes of the log ("pass POS N" lines begin a
 * pass: those a generated token's time covers), or where the log has no pass lines or
 * last_passes is 0, in one-position passes. pass_gbps (passes entries, or NULL): each
 * pass's timed bytes over its time. out->gbps is the median of the passes after the first
 * (the first alone when passes is 1); bytes, read_bytes and seconds are all the passes';
 * queue_depth the largest visit's reads; hash_gbps each visit's reads hashed after it (XXH3,
 * as the content gate), over every pass's timed visits; with last_passes, read_ms the
 * median over the same passes as gbps of the timed reads' time a pass, hash_ms the hashes'
 * a pass (mean over every pass), timed_passes = last_passes. 0 / -1. */
int bench_experts_replay(const char *path, const char *log, uint32_t slots, uint64_t slot_bytes,
                         uint32_t last_passes, uint32_t passes, double *pass_gbps,
                         bench_disk_result *out, char *err, size_t errlen);
/* Per-layer compute time of a resident layer (median of reps, ms) with `threads` BLAS
 * threads; loads layer 0 of m. */
int bench_layer_ms(const model_t *m, int threads, int reps, double *ms, char *err,
                   size_t errlen);
/* The same over layers [0, n) resident (n <= m's layers), a step through all of them timed:
 * ms is the median step / n. With n layers larger than the last-level cache it is what a
 * layer costs when its weights come from DRAM (one layer that fits the cache is faster). */
int bench_layers_ms(const model_t *m, uint32_t n, int threads, int reps, double *ms, char *err,
                   size_t errlen);

/* Memory-bandwidth bound of one layer: median time to read d*d f32 (one thread, a plain
 * streaming read) beside the layer kernel's sgemv over the same bytes, and their ratio. */
int bench_mem(uint32_t dim, int reps, double *read_ms, double *sgemv_ms, char *err,
              size_t errlen);

#endif
