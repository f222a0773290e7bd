/* arch_int.h — what arch.c shares with each architecture's file (dense.c, llama.c). arch/ */
#ifndef SWARM_ARCH_INT_H
#define SWARM_ARCH_INT_H

#include <stdarg.h>

#include "arch/arch.h"

/* A llama layer's tensors, by position: vectors first (norms, then qwen2's biases), then the
 * matrices in the order the forward pass consumes them. */
enum { LL_V_ATTN_NORM = 0, LL_V_FFN_NORM = 1, LL_V_BQ = 2, LL_V_BK = 3, LL_V_BV = 4 };
enum { LL_M_Q = 0, LL_M_K, LL_M_V, LL_M_O, LL_M_GATE, LL_M_UP, LL_M_DOWN, LL_M_COUNT };

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
    arch_kv *kv;                  /* borrowed; NULL for dense */
    const void *const *vectors;   /* borrowed until end */
    /* dense: u = rmsnorm(x) . g and y = W u, per position */
    float *u, *y;                 /* (max_pos, dim) */
    /* llama: the layer's vectors in f32, then the activations of n positions */
    float *vec[5];                /* attn_norm, ffn_norm (dim); bq (dim), bk, bv (kv_dim) */
    float *xb;                    /* (max_pos, dim) normed input of q/k/v, then of gate/up */
    float *q, *att, *o, *down;    /* (max_pos, dim) */
    float *k, *v;                 /* (max_pos, kv_dim) */
    float *gate, *up;             /* (max_pos, n_ff); gate becomes silu(gate) . up */
    float *tmp;                   /* (max_pos, max rows of a matrix): a row range's products */
    float *scores;                /* (nthreads, scores_ctx) attention weights */
    uint32_t scores_ctx;
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
/* The layer's sums (weight_bytes) once its tensors are filled. */
void arch_layer_seal(arch_layer *l);

/* dense.c */
int dense_open(arch_model *m, char *err, size_t errlen);
int dense_run_init(arch_run *r, char *err, size_t errlen);
int dense_begin(arch_run *r, char *err, size_t errlen);
int dense_before(arch_run *r, uint32_t tensor);
int dense_rows(arch_run *r, uint32_t tensor, uint64_t r0, uint64_t n, const void *rows);
int dense_end(arch_run *r);

/* llama.c (llama and qwen2) */
int llama_open(arch_model *m, char *err, size_t errlen);
int llama_run_init(arch_run *r, char *err, size_t errlen);
void llama_run_free(arch_run *r);
int llama_begin(arch_run *r, char *err, size_t errlen);
int llama_before(arch_run *r, uint32_t tensor);
int llama_rows(arch_run *r, uint32_t tensor, uint64_t r0, uint64_t n, const void *rows);
int llama_end(arch_run *r);

#endif
