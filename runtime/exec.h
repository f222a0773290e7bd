/* exec.h — runs a contiguous range of layers of any architecture: leading ones resident, the
 * rest streamed. runtime/
 *
 * The one layer executor behind every arm: the reference (budget 0: all resident), the SSD
 * arm (budget = the cap), workers (resident only), the coordinator's fallback for a lost
 * worker (budget = that worker's cap), and the one-process runner of a real model (arch/llm.h).
 * It asks the architecture (arch/arch.h) what a layer is: a resident layer is its tensors
 * loaded whole into aligned buffers; a streamed layer is a list of chunks, (tensor, row
 * range) pairs in consumption order: each vector one read (copied to a small stage, since
 * the layer needs them all at arch_layer_begin), each matrix cut into row ranges of about
 * chunk_bytes starting on multiples of 8 rows (a row of a quantized type is whole blocks, so
 * every range is block-aligned). The layer is computed through arch_layer_begin / before /
 * rows / end as its chunks arrive. Streamed layers are read on every step with O_DIRECT
 * through io_uring: a ring of at least queue_depth+1 chunk buffers, queue_depth reads in
 * flight, so the disk works while the layer computes. A chunk is read as the 4096-aligned
 * superset of its bytes and sliced (so any GGUF alignment works). Reads run ahead across step
 * boundaries (they do not depend on x) but never past total_steps.
 * Content gate: each streamed layer is hashed (XXH3-64 over its tensors' bytes in consumption
 * order, as read) on a thread of its own beside the compute (inline for small chunks), and
 * compared with the layer's checksum (the lab file's metadata; for any other GGUF the
 * checksum cache, arch/sums.h) before the step returns; both its cost and the step's wait for
 * it are reported.
 * Experts: a streamed layer with experts (arch_tensor.n_expert) streams everything but its
 * expert tensors through the ring; once its router has run (arch_layer_experts), the routed
 * experts' slices of each expert tensor are read (O_DIRECT, all of the layer's misses in
 * flight together on an io_uring of their own) into an expert cache of whole-expert slots,
 * least recently used evicted, and the layer is computed from them (NULL rows for the rest).
 * The content gate then hashes the layer's other tensors as one (against the per-expert
 * checksums' layer entry, arch/sums.h) and each expert slice as it is read (against its own);
 * a cached slice was checked when it was read. The plan keeps at least min(n_expert, max_pos x
 * n_expert_used) slots, then gives the cache what the resident layers and the ring leave.
 * Where the cap does not hold the whole range but experts stream, no layer is resident whole:
 * the leading layers are split (n_split: attention, norms and router resident, verified at
 * load against the per-expert checksums' layer entry; experts through the cache), as many as
 * fit beside the ring and the fewest slots, every layer when they all fit beside those slots
 * (then nothing goes through the ring); the cache takes the rest of the cap. A whole resident
 * layer would hold its own experts only, where the cache holds whichever any layer routes to.
 */
#ifndef SWARM_EXEC_H
#define SWARM_EXEC_H

#include <stddef.h>
#include <stdint.h>

#include "arch/arch.h"
#include "arch/model.h"

#define EXEC_ALIGN 4096u       /* O_DIRECT buffer/offset alignment (physical block here) */
/* Reserved in a worker's cap for code, libraries, BLAS buffers and stacks (bytes). The
 * partitioner and the worker both plan with it, so a range the coordinator assigns is a
 * range the worker accepts. */
#define EXEC_WORKER_OVERHEAD (16u << 20)

enum { EXEC_HASH_AUTO = 0, EXEC_HASH_THREAD = 1, EXEC_HASH_INLINE = 2 };

typedef struct {
    uint64_t budget_bytes;     /* working-set budget; 0 = no cap, everything resident */
    uint32_t queue_depth;      /* reads in flight (1..256) */
    uint64_t chunk_bytes;      /* target bytes per read */
    uint64_t overhead_bytes;   /* reserved inside the budget for code, libs, stacks */
    int buffered;              /* 1: no O_DIRECT (labelled; the cache gate judges it) */
    int resident_only;         /* 1: fail unless every layer fits resident (workers) */
    int stream_all;            /* 1: keep nothing resident (bench-disk) */
    int io_only;               /* 1: read and discard, no compute or hash (bench-disk) */
    uint64_t total_steps;      /* stop read-ahead after this many steps (0 = unlimited) */
    int verify_resident;       /* 1: hash resident layers at load (default on) */
    int buffers_4k;            /* 1: stream into 4 KiB pages, not huge pages (the fallback) */
    int hasher;                /* content-gate hashing: EXEC_HASH_AUTO (a thread of its own
                                * for chunks >= 1 MiB on >= 2 CPUs), _THREAD, _INLINE */
    uint32_t ring_slots;       /* chunk buffers in the ring; 0: the plan decides (bench-disk
                                * passes the SSD arm's so it reads through the same ring) */
    uint32_t max_pos;          /* positions one step may carry (0 = 1): sizes the layer run */
    uint64_t held_bytes;       /* what the caller holds under the same cap (a runner's KV
                                * caches, embedding, head, activations): planned, named in a
                                * refusal */
    int experts_dense;         /* 1: a streamed layer's experts stream with it, every expert
                                * every step; 0 (default): only the routed ones (see below) */
} exec_opts;

typedef struct {
    uint32_t n_layers;         /* last - first */
    uint32_t n_resident;       /* leading layers kept resident */
    uint32_t n_split;          /* then layers whose tensors but the experts are resident, their
                                * experts read after routing through the expert cache */
    uint32_t n_streamed;       /* the rest: through the ring (experts apart, as above) */
    uint32_t rows_per_chunk;   /* rows per read of the first layer's first matrix (mult. of 4) */
    uint32_t chunks_per_layer; /* reads of the first layer: one per vector, plus row ranges */
    uint64_t chunks_per_step;  /* reads of every streamed layer */
    uint64_t layer_alloc;      /* bytes the first layer takes resident (aligned buffers) */
    uint64_t slot_bytes;       /* one ring slot: the largest chunk's aligned superset */
    uint64_t stage_bytes;      /* a streamed layer's vectors, staged until the layer begins */
    uint64_t resident_bytes;
    uint32_t ring_slots;       /* queue_depth + 1, plus up to as many again from what the
                                * budget leaves after the resident layers */
    uint64_t ring_bytes;       /* ring_slots chunk buffers */
    uint64_t working_set;      /* resident + ring + stage + scratch + overhead + held: what
                                * the cap must hold */
    uint64_t streamed_per_step;/* bytes requested from the file per step (experts apart) */
    uint32_t expert_slots;     /* the expert cache (0: experts stream with their layers) */
    uint64_t expert_slot_bytes;/* one slot: an expert's slices of each expert tensor, aligned */
    uint64_t expert_cache_bytes;
} exec_plan;

typedef struct {
    uint64_t compute_ns;       /* in the layer kernel */
    uint64_t wait_ns;          /* blocked waiting for reads */
    uint64_t verify_ns;        /* hashing streamed layers (content gate), on the hasher thread */
    uint64_t verify_wait_ns;   /* the step blocked waiting for the hasher (its cost to the step) */
    uint64_t streamed_bytes;   /* bytes of reads submitted */
    uint64_t layers_streamed;  /* streamed layers hashed (content gate) */
    uint64_t layers_due;       /* streamed layers the steps used: each must have been hashed */
    uint64_t content_fail;     /* streamed layers whose hash did not match */
    uint32_t content_bad_layer;/* 1 + the last layer that failed (0: none yet) */
    uint64_t content_bad_hash; /* what its bytes hashed to */
    /* expert streaming */
    uint64_t expert_read_bytes;  /* bytes read for routed experts (aligned supersets) */
    uint64_t expert_dense_bytes; /* every expert of those layers: what streaming them whole reads */
    uint64_t expert_hits, expert_misses; /* the expert cache's lookups */
    uint64_t experts_hashed;     /* expert slices read and hashed (content gate) */
    uint64_t expert_layers;      /* streamed layers whose experts were routed and read */
    uint64_t expert_read_ns;     /* in expert reads: submitted to all completed (no hash) */
    uint64_t expert_hash_ns;     /* hashing the expert slices read (content gate, on the step) */
    /* the same over one-position steps only (a generated token's, not a prompt's pass) */
    uint64_t steps_1;            /* one-position steps */
    uint64_t expert_read_bytes_1, expert_hits_1, expert_misses_1;
    uint64_t expert_read_ns_1, expert_hash_ns_1, step_ns_1; /* step_ns_1: the steps' own time */
} exec_stats;

typedef struct exec exec_t;

/* The working-set rule, shared by exec_plan_make, the partitioner and the worker. */
/* Bytes one resident lab layer of width dim takes (g and W in EXEC_ALIGN-aligned buffers). */
uint64_t exec_layer_bytes(uint32_t dim);
/* How many resident layers of width dim fit in o->budget_bytes beside o->overhead_bytes and
 * the scratch vectors, with no streaming ring; UINT32_MAX when the budget is 0 (no cap). */
uint32_t exec_resident_fit(uint32_t dim, const exec_opts *o);
/* The same for any architecture, each layer priced by its own tensors: how many layers from
 * `first` on fit resident (what a partitioner of real models asks per worker). */
uint32_t exec_resident_fit_arch(const arch_model *am, uint32_t first, const exec_opts *o);
/* A worker's options: everything resident under cap_bytes (0 = no cap), verified at load. */
void exec_opts_worker(exec_opts *o, uint64_t cap_bytes);

/* Plan only (no I/O). Fails with a message saying which budget is short and by how much. */
int exec_plan_make(const model_t *m, uint32_t first, uint32_t last, const exec_opts *o,
                   exec_plan *p, char *err, size_t errlen);
int exec_plan_make_arch(const arch_model *am, uint32_t first, uint32_t last,
                        const exec_opts *o, exec_plan *p, char *err, size_t errlen);
/* Plan, open the file, load and verify resident layers. m must outlive the exec. */
exec_t *exec_new(const model_t *m, uint32_t first, uint32_t last, const exec_opts *o,
                 char *err, size_t errlen);
/* The same for any architecture: am (borrowed, must outlive the exec) from the file at path;
 * sums[l] is layer l's checksum (copied). */
exec_t *exec_new_arch(const arch_model *am, const char *path, const uint64_t *sums,
                      uint32_t first, uint32_t last, const exec_opts *o, char *err,
                      size_t errlen);
const exec_plan *exec_get_plan(const exec_t *e);
uint64_t exec_loaded_bytes(const exec_t *e);
/* Run layers [first, last) on x (dim floats) in place; adds to *st. 0 / -1 (I/O error). */
int exec_step(exec_t *e, float *x, exec_stats *st, char *err, size_t errlen);
/* The same over n positions (n <= max_pos; x is n x dim, row-major) at positions pos0.. of a
 * session whose per-layer KV caches are kv[0 .. last - first) (NULL for dense, which keeps
 * no state). */
int exec_step_n(exec_t *e, float *x, uint32_t n, uint32_t pos0, arch_kv *kv, exec_stats *st,
                char *err, size_t errlen);
/* One session's rows of a step of several (continuous batching): n positions from pos0 over
 * its per-layer caches kv[0 .. last - first). */
typedef struct {
    arch_kv *kv;
    uint32_t pos0, n;
} exec_seg;
#define EXEC_MAX_SEGS 64          /* sessions in one step */
/* The same over k sessions' rows, one after another in x (their sum <= max_pos): each layer,
 * resident or streamed, is read once for all of them (arch_layer_begin_segs) and each row's
 * bits are its session's alone. exec_step_n is the one-session case. */
int exec_step_segs(exec_t *e, float *x, const exec_seg *segs, uint32_t k, exec_stats *st,
                   char *err, size_t errlen);
/* Threads of the layer run's products and attention (arch_run_set_threads). */
void exec_set_threads(exec_t *e, int nthreads);
/* Wait for every read in flight (before reading /proc/self/io for the cache gate). */
void exec_drain(exec_t *e);
/* Is direct I/O in use (0 when buffered was asked for)? */
int exec_is_direct(const exec_t *e);
/* 1 if io_uring is used, 0 if the logged synchronous fallback is. */
int exec_uses_uring(const exec_t *e);
/* What backs the streaming ring: "hugetlb", "thp", "4k-pages (fallback: why)" (iobuf.h), or
 * "none (nothing streamed)". Owned by e. */
const char *exec_io_buffers(const exec_t *e);
void exec_free(exec_t **e);

/* Read [off, off+len) of fd into an EXEC_ALIGN-aligned buffer via the aligned superset.
 * Returns the buffer (free() it) and sets *data to the first requested byte. A buffer of 2 MiB
 * or more is huge-page aligned and advised MADV_HUGEPAGE (exec.c says why). */
void *exec_read_aligned(int fd, uint64_t off, uint64_t len, const void **data, char *err,
                        size_t errlen);

#endif
