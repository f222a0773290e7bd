/* llm_int.h — what the runner's two files share: the model and session structs, one pass of a
 * session, and continuous batching's entry points. runtime/llm.c holds the model, sessions and
 * llm_eval; runtime/llm_batch.c the shared passes (llm_model_batching). Not for other modules:
 * they see runtime/llm.h. runtime/ */
#ifndef SWARM_LLM_INT_H
#define SWARM_LLM_INT_H

#include <limits.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdio.h>

#include "runtime/llm.h"
#include "runtime/xsim.h"
#include "arch/arch_int.h"

#define LLM_BATCH_MAX_SESSIONS 32 /* steps in one pass (the head's logits buffer holds them) */

typedef struct llm_batch llm_batch;

struct llm_model {
    gguf_file *g;
    arch_model am;
    uint8_t *map;                 /* the whole file, read-only */
    size_t map_len;
    const void **data;            /* (n_layers, ARCH_MAX_LAYER_TENSORS) pointers into map */
    const void *tok_embd, *out_norm, *output;
    /* the SSD arm: layers through the executor; embedding, norm and head in aligned buffers */
    llm_arm arm;
    llm_opts o;
    exec_t *ex;
    exec_stats st;
    void *buf[3];                 /* tok_embd, out_norm, output (NULL when tied) */
    uint64_t held;                /* their aligned bytes */
    int n_sessions;
    llm_layers_hook hook;         /* the resident arm's layers */
    uint64_t next_session;
    uint64_t *sums;               /* per-layer checksums (arch/sums.h) */
    char sums_src[PATH_MAX + 64];
    /* Known-bad weights: once a layer failed its checksum (the SSD arm's content gate), no
     * pass runs again: nothing computed from those bytes, or after them, goes out as good.
     * fault is written once, before faulted is set. */
    atomic_int faulted;
    char fault[384];
    llm_batch *batch;             /* continuous batching (llm_model_batching), NULL when off */
    /* the reference arm's routing replayed through the SSD arm's expert cache policy
     * (SWARM_EXPERT_SIM=SLOTS: the lab's calibration), printed when the model is freed */
    xsim *xsim;
    uint32_t xsim_slots;
    uint8_t *xused;
    uint32_t *xmissed;            /* a layer's missed experts, for the log */
    FILE *xlog;                   /* SWARM_EXPERT_SIM_LOG: "ONEPOS LAYER EXPERT..." a layer's
                                   * misses, "pass POS N" before each pass */
    uint64_t xhits[2], xmisses[2], xsteps1; /* [0] every pass, [1] one-position passes */
};

struct llm_session {
    llm_model *m;
    uint64_t id;                  /* the resident arm's session id */
    uint32_t n_ctx, n_batch, n_past;
    uint32_t n_high;              /* the most positions held since it was empty: what its
                                   * sliding-window rings may still hold (arch_kv_resume) */
    int nthreads;
    arch_kv *kv;                  /* n_layers, over one allocation */
    float *kv_mem;
    arch_run *run;
    float *x;                     /* (n_batch, dim) */
    float *xn;                    /* (n_batch, dim) final norm */
    float *norm_w;                /* (dim) output_norm in f32 */
    int active;                   /* in a request (llm_session_active) */
    int stream;                   /* active, and its last call was one decode position */
    int mixed;                    /* its last call was a prompt chunk beside others' decode
                                   * steps (llm_batch_chunk's allowance sized it) */
};

/* llm.c: one pass of s over n <= n_batch positions from its n_past (logits: the last
 * position's, or every one's when all; NULL for none). */
int llm_run_pass(llm_session *s, const int32_t *tokens, uint32_t n, float *logits, int all,
                  char *err, size_t errlen);
/* llm.c: the SSD arm's content gate failed: the model is faulted for good (err says why). */
int llm_content_fault(llm_model *m, char *err, size_t errlen);
/* llm.c: an SSD arm's positions per pass (a prompt chunk and every other session's step). */
uint32_t llm_ssd_max_pos(const llm_opts *o);

/* llm_batch.c: continuous batching, called by llm_eval when m->batch is on. */
void llm_batch_free(llm_batch **bp);
/* s's n positions (a decode step, or a prompt chunk) in the next shared pass. */
int llm_batch_step(llm_session *s, const int32_t *tok, uint32_t n, float *logits, char *err,
                   size_t errlen);
/* How many of a prompt's left positions go in s's next chunk (n_batch, or fewer while others
 * decode). */
uint32_t llm_batch_chunk(llm_session *s, uint32_t n, uint32_t left);
/* A call that cannot share a pass (every position's logits) run alone, between passes. */
int llm_batch_alone(llm_session *s, const int32_t *tok, uint32_t n, float *logits, int all,
                    char *err, size_t errlen);

#endif
