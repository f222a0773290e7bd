/* arch_int.h — what arch.c shares with each family's file (dense.c, llama.c): the table of
 * operations a family fills, the run's protocol state, and the helpers they share. arch/ */
#ifndef SWARM_ARCH_INT_H
#define SWARM_ARCH_INT_H

#include <stdarg.h>

#include "arch/arch.h"

/* One family's operations (arch.h "Families" says how to add one). arch.c calls them after
 * checking the arguments and the hooks' order, so a family checks only what is its own (its
 * hyper-parameters, tensor shapes, a KV cache's width). Every member is required. */
struct arch_ops {
    const char *name;             /* general.architecture as the file spells it */
    unsigned props;               /* ARCH_TOKENS | ARCH_KV */
    /* hp (hp.name is set) and the tensors outside the layers; layers are not allocated yet */
    int (*open)(arch_model *m, char *err, size_t errlen);
    /* layer l's tensors into ly (zeroed): t[], n_tensors, n_vectors; arch.c seals it */
    int (*layer)(const arch_model *m, uint32_t l, arch_layer *ly, char *err, size_t errlen);
    /* c is zeroed and l is a layer of m */
    void (*cost)(const arch_model *m, uint32_t l, arch_cost *c);
    /* the bytes run_init allocates for max_pos positions (the planner's count) */
    uint64_t (*run_bytes)(const arch_model *m, uint32_t max_pos);
    /* r->fam: the family's scratch for r->max_pos positions; run_free frees it (and copes
     * with a run_init that failed half way) */
    int (*run_init)(arch_run *r, char *err, size_t errlen);
    void (*run_free)(arch_run *r);
    /* the forward pass: arch.h's order, already checked */
    int (*begin)(arch_run *r, char *err, size_t errlen);
    int (*before)(arch_run *r, uint32_t tensor);
    int (*rows)(arch_run *r, uint32_t tensor, uint64_t r0, uint64_t n, const void *rows);
    int (*end)(arch_run *r);
    /* the experts the run's positions route to in the current layer, into used[0..n_expert)
     * (1 = routed); their count. Called only between before(the first expert tensor) and end
     * of a layer with experts (arch.c checks); a family without experts returns 0 */
    uint32_t (*experts)(const arch_run *r, uint8_t *used);
};

/* The families (arch.c's table lists them). */
extern const arch_ops arch_dense_ops; /* dense.c: "swarm-dense", the lab's layer */
extern const arch_ops arch_llama_ops; /* llama.c: "llama" */
extern const arch_ops arch_qwen2_ops; /* llama.c: "qwen2", llama with Q/K/V biases */
extern const arch_ops arch_qwen3_ops; /* qwen3.c: "qwen3", per-head q/k norms */
extern const arch_ops arch_qwen3moe_ops; /* qwen3.c: "qwen3moe", qwen3 with experts */
extern const arch_ops arch_gemma2_ops; /* gemma2.c: "gemma2", attention soft-capping */
extern const arch_ops arch_gemma3_ops; /* gemma3.c: "gemma3" */
extern const arch_ops arch_phi3_ops;  /* phi3.c: "phi3", fused qkv and gate/up, longrope */
extern const arch_ops arch_gptoss_ops; /* gptoss.c: "gpt-oss", sinks, biases, experts, yarn */

struct arch_run {
    const arch_model *m;
    uint32_t max_pos;
    int nthreads;
    char err[256];
    /* the layer being run (set by begin) */
    uint32_t layer, n, pos0;
    uint32_t cur;                 /* the matrix whose rows are expected (set by before); or
                                   * ARCH_MAX_LAYER_TENSORS between layers */
    uint64_t next_row;            /* rows of cur done, in order */
    int ready;                    /* before(cur) has run */
    float *x;                     /* (n, dim), borrowed */
    arch_kv *kv;                  /* borrowed; NULL for a family without ARCH_KV (segs[0]'s) */
    const arch_seg *segs;         /* the sessions' rows in x, in order (borrowed until end; a
                                   * single-session begin points it at seg1) */
    uint32_t n_segs;
    arch_seg seg1;
    const void *const *vectors;   /* borrowed until end */
    void *fam;                    /* the family's scratch (its run_init), owned */
};

/* "path: " + message into err. */
void arch_err(char *err, size_t errlen, const char *path, const char *fmt, ...)
    __attribute__((format(printf, 4, 5)));
/* The run's own error (for the hooks). Always returns -1. */
int arch_run_fail(arch_run *r, const char *fmt, ...) __attribute__((format(printf, 2, 3)));

/* Look up `name` in the model's file and check it: n_dims (1 for a vector, 2 for a matrix),
 * ne[0] = cols, ne[1] = rows, a supported type, a row a whole number of blocks. */
int arch_tensor_get(const gguf_file *g, const char *name, int is_matrix, uint64_t rows,
                    uint64_t cols, arch_tensor *t, char *err, size_t errlen);
/* A 3-D expert tensor [cols, rows, n_expert] as one matrix of n_expert x rows rows
 * (t->n_expert set); the checks of arch_tensor_get. */
int arch_tensor_get_experts(const gguf_file *g, const char *name, uint32_t n_expert,
                            uint64_t rows, uint64_t cols, arch_tensor *t, char *err,
                            size_t errlen);
/* The cost every family shares: the layer's weight bytes, and 2 flops a weight of each matrix
 * per position (every weight is used once a position; of an expert tensor, the share of the
 * n_expert_used experts a position routes to, which is also what routed_bytes counts). */
void arch_cost_matrices(const arch_layer *l, uint32_t n_expert_used, arch_cost *c);

#endif
