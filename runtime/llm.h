/* llm.h — a model runner for one process: a GGUF file's tensors resident, sessions with a KV
 * cache each, tokens in and logits out. runtime/
 *
 * The reference arm's way of holding a model: the whole file is mapped and faulted in once
 * (MAP_POPULATE), every tensor then read in place. A session owns its KV cache (f32, one
 * per layer, sized from the context length asked for) and a run for up to n_batch positions:
 * a prompt is processed n_batch positions at a time (matrix x matrix), generation one token
 * at a time, with the same bits either way (arch.h, "Determinism").
 */
/* The arms (llm_model_open_opts): LLM_ARM_REFERENCE is the mapping above (llm_model_open).
 * LLM_ARM_SSD runs the layers through the executor (runtime/exec.h): under cap_bytes the
 * leading layers are resident (each tensor in an aligned buffer, verified at load) and the
 * rest are streamed from the file for every forward pass with O_DIRECT, io_uring and
 * read-ahead, each streamed layer hashed for the content gate against the per-layer checksums
 * (arch/sums.h: computed on first use and cached for a published GGUF). The embedding, the
 * final norm and the head are read once into aligned buffers. The plan counts everything
 * against the cap: the KV caches and activations of n_sessions sessions (default one) of
 * n_ctx positions and n_batch positions per pass (and, for several, the batched passes'
 * buffers), the embedding and head, the layer scratch, the ring and the overhead; a cap that
 * cannot hold them is refused with the numbers. Under the SSD arm at most n_sessions sessions
 * exist at a time, none asking for more than the n_ctx / n_batch planned; several share the
 * executor through batched passes (llm_model_batching, turned on at open).
 * Token ids and logits are bit-identical to the reference arm's (same hooks, same order).
 * A command offering `--arm ssd` (generate, bench-llm) opens the model with
 * llm_model_open_opts(path, &(llm_opts){ .arm = LLM_ARM_SSD, .cap_bytes = cap, .n_ctx = ctx,
 * .n_batch = batch }, err, errlen) and then uses sessions and llm_eval exactly as with the
 * reference arm; llm_model_stats gives the counters its cache and content gates judge.
 */
#ifndef SWARM_LLM_H
#define SWARM_LLM_H

#include <stddef.h>
#include <stdint.h>

#include "arch/arch.h"
#include "runtime/exec.h"

typedef struct llm_model llm_model;
typedef struct llm_session llm_session;

typedef enum { LLM_ARM_REFERENCE = 0, LLM_ARM_SSD = 1, LLM_ARM_RESIDENT = 2 } llm_arm;

/* The resident arm's layers live elsewhere (the swarm's workers): the runner keeps the
 * embedding, the final norm and the head (mapped, not populated: only the rows a prompt uses
 * and the head are read) and hands every pass's activations to layers(), which runs all
 * layers over x (n x dim, in place) at positions pos0.. of session (ids from 1, one per
 * llm_session); end() frees a session's caches wherever they are. */
typedef struct {
    uint64_t session;
    const int32_t *tokens;        /* its n tokens (a rebuild replays them) */
    uint32_t pos0, n;
} llm_hook_seg;
typedef struct {
    int (*layers)(void *ctx, uint64_t session, const int32_t *tokens, float *x, uint32_t n,
                  uint32_t pos0, char *err, size_t errlen);
    void (*end)(void *ctx, uint64_t session);
    /* May be NULL. The session now keeps only positions 0..pos-1 (llm_session_rewind, or
     * reset with pos 0): the layers' owner counts no more than that as cached, so a rebuild
     * never replays what the runner has dropped. Positions beyond stay in the caches until
     * the next pass, which starts at pos and overwrites them (a step may start anywhere up
     * to the first uncached position: runtime/slice.h). */
    void (*trim)(void *ctx, uint64_t session, uint32_t pos);
    /* May be NULL (both). A session in a request (llm_session_active) keeps its caches through
     * a rebuild after a loss; an idle one's may be dropped there rather than replayed (the
     * failover's stall is the live sessions' only), and cached() then says how many positions
     * the layers' owner still holds for it: llm_session_pos never claims more, so a request
     * reusing an idle slot's prompt runs again what was dropped. */
    void (*active)(void *ctx, uint64_t session, int on);
    uint32_t (*cached)(void *ctx, uint64_t session);
    /* May be NULL. Several sessions' passes as one (continuous batching, llm_model_batching):
     * segs[i] is session i's n positions from pos0, its rows one segment after another in x
     * (their n summing to at most max_batch); every row's bits are those layers() would give
     * its session alone. */
    int (*segs)(void *ctx, const llm_hook_seg *segs, uint32_t k, float *x, char *err,
                size_t errlen);
    /* May be NULL. A prompt of n positions (x: n x dim, in place) from pos0 of session, in
     * acts of at most chunk positions that follow each other through the layers' owner at
     * once (pipelined prefill: while one stage runs chunk c another runs c + 1): every row's
     * bits are those layers() gives over the same positions in any batches. */
    int (*prefill)(void *ctx, uint64_t session, const int32_t *tokens, float *x, uint32_t n,
                   uint32_t pos0, uint32_t chunk, char *err, size_t errlen);
    uint32_t prefill_span;        /* with prefill: positions one call should carry (several
                                   * chunks, so the pipeline fills; llm_session_span) */
    void *ctx;
    uint32_t max_batch;           /* positions one call may carry */
    uint32_t n_ctx;               /* positions a session's caches hold */
} llm_layers_hook;

typedef struct {
    llm_arm arm;
    uint64_t cap_bytes;           /* SSD: the working-set cap; 0 = every layer resident through
                                   * the executor (no streaming) */
    uint32_t queue_depth;         /* SSD: reads in flight (0: 4) */
    uint64_t chunk_bytes;         /* SSD: target bytes per read (0: 4 MiB) */
    uint64_t overhead_bytes;      /* SSD: reserved for code, libraries, stacks (0: 16 MiB) */
    uint32_t n_ctx;               /* SSD: the session's context planned for (0: 512, at most the
                                   * model's context_length) */
    uint32_t n_batch;             /* SSD: positions per pass planned for (0: 32) */
    uint32_t n_sessions;          /* SSD: sessions at once planned for (0: 1); above 1, their
                                   * passes are batched (llm_model_batching: n_batch + n_sessions
                                   * - 1 positions a pass, each streamed layer read once for all) */
    int buffered;                 /* SSD: page-cache reads (labelled; the cache gate judges) */
    int experts_dense;            /* SSD: stream every expert with its layer (exec_opts) */
    uint64_t total_steps;         /* SSD: stop read-ahead after this many passes (0: never) */
    const llm_layers_hook *hook;  /* RESIDENT: where the layers run (copied; required) */
} llm_opts;

/* Open path: GGUF header, architecture (llama or qwen2: the dense lab model has no tokens),
 * tensors mapped and resident. NULL with err naming the file and the problem. */
llm_model *llm_model_open(const char *path, char *err, size_t errlen);
/* Open under an arm (o NULL: the reference arm, as llm_model_open). */
llm_model *llm_model_open_opts(const char *path, const llm_opts *o, char *err, size_t errlen);
void llm_model_free(llm_model **m);
/* The plan llm_model_open_opts would make for o (an SSD arm's), from the header alone: no
 * weight read, no checksum computed, nothing allocated beyond the header. A command checks a
 * cap with it before joining a memory cgroup of that size (where a refusal could otherwise be
 * the OOM killer's). 0, or -1 with err (the refusal with every term, as the open's). */
int llm_ssd_plan(const char *path, const llm_opts *o, exec_plan *p, char *err, size_t errlen);
llm_arm llm_model_arm(const llm_model *m);
/* SSD arm: its executor's plan, and the streaming counters since open (NULL / -1 otherwise).
 * llm_model_drain waits for reads in flight (before /proc/self/io is read for the cache
 * gate). */
const exec_plan *llm_model_plan(const llm_model *m);
/* SSD arm: the executor itself, read-only (how it reads: exec_is_direct, exec_uses_uring,
 * exec_io_buffers, for a result's labels); NULL otherwise. */
const exec_t *llm_model_exec(const llm_model *m);
int llm_model_stats(const llm_model *m, exec_stats *st);
void llm_model_drain(llm_model *m);
/* Bytes the SSD arm keeps beside its layers (embedding, norm, head), and where the per-layer
 * checksums came from ("metadata", "cache FILE", "computed, cached in FILE", ...). */
uint64_t llm_model_held_bytes(const llm_model *m);
/* SSD and reference arms: each layer's checksum (n_layers), NULL otherwise (the reference
 * arm verifies its mapped layers against them at open). */
const uint64_t *llm_model_layer_sums(const llm_model *m);
const char *llm_model_sums_source(const llm_model *m);
/* NULL, or why no pass runs any more: a streamed layer failed the content gate (the text
 * names the layer and carries SUMS_MISMATCH, arch/sums.h). Set once, for good; every eval
 * from then on fails with it. */
const char *llm_model_fault(const llm_model *m);
const arch_model *llm_model_arch(const llm_model *m);
const gguf_file *llm_model_gguf(const llm_model *m);
/* Tensor i of layer l's bytes, in the layer's consumption order (arch_layer); NULL under
 * the SSD arm (no layer is mapped). */
const void *const *llm_layer_data(const llm_model *m, uint32_t layer);
/* Bytes of every weight tensor (token_embd counted once, even when it is also the head). */
uint64_t llm_model_weight_bytes(const llm_model *m);
/* Bytes a forward pass reads per position-batch: every layer, the final norm and the head
 * (token_embd only when it is the head: otherwise one row per token, left out). */
uint64_t llm_model_pass_bytes(const llm_model *m);
/* The mapped file (read-only), for benchmarks that read the same memory; NULL under the
 * SSD arm. */
const uint8_t *llm_model_map(const llm_model *m, uint64_t *len);

/* A session with a KV cache of n_ctx positions (1..the model's context_length) that
 * processes up to n_batch positions per pass. */
llm_session *llm_session_new(llm_model *m, uint32_t n_ctx, uint32_t n_batch, char *err,
                             size_t errlen);
void llm_session_free(llm_session **s);
/* Threads for the products and attention (same bits for any count). */
void llm_session_set_threads(llm_session *s, int nthreads);
/* Positions already in the cache (the resident arm: at most what its layers' owner still
 * holds, llm_layers_hook.cached); forget them all. */
uint32_t llm_session_pos(const llm_session *s);
/* Prompt positions one llm_eval call should carry: the session's batch, or on a resident arm
 * that pipelines prompts (llm_layers_hook.prefill) the hook's span, several batches in flight
 * through the workers at once (a caller that checks for cancellation between calls does so
 * once a span). */
uint32_t llm_session_span(const llm_session *s);
void llm_session_reset(llm_session *s);
/* Keep only the first pos positions (pos <= llm_session_pos): what follows is run again over
 * them. A conversation whose re-tokenized history differs from the tokens generated keeps its
 * common prefix. A sliding-window layer's ring that no longer holds the window before pos
 * keeps nothing (arch_kv_resume): llm_session_pos says what was kept. */
void llm_session_rewind(llm_session *s, uint32_t pos);
/* Bytes of the session's KV cache. */
uint64_t llm_session_kv_bytes(const llm_session *s);

/* Continuous batching (the reference arm, the SSD arm planned for several sessions, and the
 * resident arm whose hook has segs: one act carries every session's rows). With it on, llm_eval calls of different sessions
 * made at once from different threads (a server's slots, generate --sessions) join one
 * forward pass: every active session's next position(s) ride together, up to max_rows rows,
 * each weight read once for all of them (arch_layer_forward_segs, and the head over every
 * session's last row), while each row's bits stay those of its session run alone. A pass is
 * run by one of the callers (the first to find none running); it first waits for the other
 * active sessions (llm_session_active) to queue their steps, at most a quarter of the last
 * pass's time, so a straggler costs the others little and is taken by the next pass. A
 * prompt comes in chunks of its session's n_batch, queued in turn with the others' steps: a
 * long prompt delays their next token by one chunk at most. While other sessions decode
 * (their last call was one position), a prompt's chunk is cut to the rows that cost one
 * decode-only pass more, so a pass carrying it costs at most about twice theirs: rows =
 * (decode-only pass time) / (one row's time), both measured in this process (moving averages
 * of the decode-only passes and of those that carried a larger chunk, then of the cut
 * passes themselves; until both are known the chunk is the full batch; at least one row).
 * A prompt alone goes in full n_batch chunks. A position's
 * bits do not depend on its chunk. Calls with every position's
 * logits (perplexity) run alone. On the SSD arm a pass holds at most the planned n_batch +
 * n_sessions - 1 positions (max_rows is cut to that) and streams each layer once for every
 * session in it; on the resident arm at most the hook's max_batch. -1 with err: a resident
 * arm without the segs hook, or out of memory. */
int llm_model_batching(llm_model *m, uint32_t max_rows, char *err, size_t errlen);
/* The session is in a request (1) or idle (0): a pass waits only for active sessions, and the
 * resident arm's rebuild after a loss replays only active sessions (llm_layers_hook.active). */
void llm_session_active(llm_session *s, int on);
/* Passes run and the rows they carried since batching was turned on (rows / passes: how
 * many positions shared each read of the weights). */
void llm_model_batch_counts(llm_model *m, uint64_t *passes, uint64_t *rows);
/* Prompt chunks cut below their session's batch because others were decoding. */
uint64_t llm_model_batch_cuts(llm_model *m);

/* Run n tokens at the next positions. logits: n_vocab floats for the last position, or
 * n x n_vocab (every position) when all; NULL for none. -1 with err when the tokens do not fit
 * the context (nothing is run then), a token id is outside the vocabulary, or a layer fails. */
int llm_eval(llm_session *s, const int32_t *tokens, uint32_t n, float *logits, int all,
             char *err, size_t errlen);

#endif
