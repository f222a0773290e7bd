/* arch.h — a model architecture: its hyper-parameters, a layer's tensors, what a layer costs,
 * and how a layer runs over a batch of positions for one session. arch/
 *
 * Every arm runs layers through this interface: the executor (runtime/exec.c) asks the
 * architecture which tensors a layer has and in which order they are consumed, streams or
 * keeps them resident, and drives the layer with them. The lab's dense layer is one
 * architecture ("swarm-dense", arch/dense.c); "llama" and "qwen2" (arch/llama.c), "qwen3",
 * "gemma2", "gemma3" and "phi3" (arch/NAME.c) are others, all on the decoder layer they share
 * (arch/decoder.c).
 *
 * Families. Each family is one table of operations (arch_ops, arch/arch_int.h), found once by
 * general.architecture when the file is opened and kept in the model (arch_model.ops); every
 * call below goes through that table, nothing branches on the family's name. Adding a family
 * is one file and one table entry:
 *   1. arch/NAME.c defines `const arch_ops arch_NAME_ops` (declared in arch/arch_int.h):
 *        name      general.architecture as the file spells it
 *        props     ARCH_TOKENS, ARCH_KV: what the layers above may ask of it (arch_model_has)
 *        open      the hyper-parameters (`NAME.*` keys, validated) and the tensors outside the
 *                  layers (embedding, output head)
 *        layer     one layer's tensors in consumption order, vectors first, each checked by
 *                  arch_tensor_get (the executor streams them in this order)
 *        cost      what the layer costs (arch_cost_matrices for the products, plus attention)
 *        run_bytes, run_init, run_free   the run's scratch (its own struct behind arch_run.fam)
 *        begin, before, rows, end        the forward pass, in the order below
 *   2. arch/arch.c lists &arch_NAME_ops in its table of families.
 * A variant that differs only in data (qwen2: llama with Q/K/V biases and NEOX RoPE) is its own
 * entry in the same file, reusing the family's functions and deciding the difference at open
 * (the layer's tensor list, arch_hparams.rope_type), so the hot path never asks which it is.
 * The decoder families go further: their forward pass is one (arch/decoder.c, with RoPE and
 * attention in arch/attn.c), and each family's file is its open (the hyper-parameters that are
 * its own, into arch_hparams) and its layer's tensors by role (arch/decoder.h); ARCH_DEC_OPS
 * makes the table entry. A family whose steps the decoder lacks adds them there as a role or a
 * hyper-parameter, decided at open.
 *
 * A layer is an ordered list of tensors in *consumption order*. Vector tensors (norm weights,
 * biases: one row) come first and are always whole in memory before the layer starts. Matrix
 * tensors are consumed row range by row range, so a streamed layer is computed as its rows
 * arrive from disk (the executor's chunks are (tensor, row range) pairs; a row of a quantized
 * type is a whole number of blocks, so a row range is always block-aligned):
 *
 *     arch_layer_begin(run)                       the layer's vectors are available
 *     for each matrix tensor t, in order:
 *         arch_layer_before(run, t)               prepare t's input (norms, attention, ...)
 *         arch_layer_rows(run, t, r0, n, rows)    y_t[r0 : r0+n] = W_t[r0 : r0+n] . input_t
 *                                                 (any row ranges that cover t, in order)
 *     arch_layer_end(run)                         residuals: x is the layer's output
 *
 * Hooks out of this order (rows before their before, a gap or overlap between row ranges, the
 * next matrix before the last one's final row, end before every row) are refused with -1 and
 * arch_run_error, never computed.
 *
 * arch_layer_forward does exactly that with every tensor resident. Determinism: each output
 * row's dot product has one fixed order whatever the row ranges and thread count, so a
 * streamed layer gives the bits of a resident one (for the dense layer, which uses OpenBLAS,
 * row ranges start on multiples of ARCH_ROW_ALIGN, the rule docs/design.md "Determinism"
 * gives).
 *
 * Ownership: an arch_model borrows its gguf_file; an arch_run borrows the layer's vectors,
 * the KV cache and the positions' activations from its caller and owns only its scratch.
 */
#ifndef SWARM_ARCH_H
#define SWARM_ARCH_H

#include <stddef.h>
#include <stdint.h>

#include "gguf/gguf.h"

#define ARCH_MAX_LAYER_TENSORS 24 /* gpt-oss: 11 vectors (biases, sinks) + 8 matrices */
#define ARCH_ROW_ALIGN 4          /* row ranges start on multiples of this (OpenBLAS, dense) */
#define ARCH_NAME_MAX 64

/* A family's table of operations (arch/arch_int.h); the layers above see only its
 * properties, through arch_model_has. */
typedef struct arch_ops arch_ops;

/* Properties of a family, for the layers above that treat families differently (a property,
 * never a name). */
#define ARCH_TOKENS 1u            /* a token embedding and an output head: text in, logits out */
#define ARCH_KV 2u                /* a KV cache per session: a position reads the earlier ones
                                   * (without it positions are independent: stateless) */

typedef enum {
    ARCH_ROPE_NONE = 0,
    ARCH_ROPE_LINEAR = 1,
    ARCH_ROPE_LLAMA3 = 2,
    ARCH_ROPE_YARN = 3            /* gpt-oss: ggml's rope_yarn with ext_factor 1 */
} arch_rope_scaling;
/* Which dimensions RoPE rotates together, as llama.cpp's llama_model_rope_type gives it per
 * family: NORM pairs (2i, 2i+1) (llama), NEOX pairs (i, i + rope_dim/2) (qwen2). */
typedef enum { ARCH_ROPE_NORM = 0, ARCH_ROPE_NEOX = 1 } arch_rope_type;
/* The feed-forward's gate activation: SwiGLU's silu (llama, qwen, phi3) or Gemma's GELU (tanh
 * form, through ggml's f16 table: arch/decoder.c). */
/* ARCH_ACT_SWIGLU_OAI: gpt-oss's clamped SwiGLU (ggml_swiglu_oai, alpha 1.702, limit 7):
 * min(g, 7) sigmoid(1.702 min(g, 7)) (clamp(u, -7, 7) + 1). */
typedef enum { ARCH_ACT_SILU = 0, ARCH_ACT_GELU = 1, ARCH_ACT_SWIGLU_OAI = 2 } arch_ffn_act;
/* How the router's logits become the top k's weights (llama.cpp's expert gating):
 * SOFTMAX: softmax over every expert, the top k of it, normalised to sum 1 (llama, qwen3moe);
 * SOFTMAX_WEIGHT: the top k of the logits, then a softmax over those k (gpt-oss). */
typedef enum { ARCH_GATING_SOFTMAX = 0, ARCH_GATING_SOFTMAX_WEIGHT = 1 } arch_gating;

/* Hyper-parameters, from the file's metadata (`<arch>.*` keys), validated before use. */
typedef struct {
    char name[ARCH_NAME_MAX];     /* general.architecture */
    uint32_t n_layers;            /* <arch>.block_count */
    uint32_t dim;                 /* <arch>.embedding_length */
    uint32_t n_ff;                /* <arch>.feed_forward_length (0 for dense) */
    uint32_t n_head, n_head_kv;   /* <arch>.attention.head_count(_kv) */
    uint32_t head_dim;            /* <arch>.attention.key_length (default dim / n_head): Q and
                                   * the output projection are n_head * head_dim wide */
    uint32_t rope_dim;            /* <arch>.rope.dimension_count (default head_dim) */
    float rope_freq_base;         /* <arch>.rope.freq_base (default 10000) */
    arch_rope_type rope_type;     /* the family's */
    arch_rope_scaling rope_scaling;
    float rope_scale_factor;      /* <arch>.rope.scaling.factor */
    float rope_low_freq_factor, rope_high_freq_factor; /* llama3 */
    uint32_t rope_orig_ctx;       /* <arch>.rope.scaling.original_context_length */
    float yarn_beta_fast, yarn_beta_slow; /* YaRN's correction range (llama.cpp: 32, 1) */
    float yarn_attn_factor;       /* YaRN: cos and sin times this (llama.cpp's cparams) */
    float norm_eps;               /* <arch>.attention.layer_norm_rms_epsilon */
    uint32_t n_ctx_train;         /* <arch>.context_length */
    uint32_t n_vocab;             /* rows of token_embd.weight */
    int tied_output;              /* no output.weight: token_embd.weight is the head */
    /* what some families add (each family's file says where it reads them; the defaults are
     * llama's: no effect) */
    float attn_scale;             /* attention's scale (default 1/sqrt(head_dim)) */
    int attn_scale_q;             /* 1: scale q before the dot products (gemma3, phi3 graphs),
                                   * 0: scale the dot products (llama's soft_max scale) */
    uint32_t n_swa;               /* sliding window: a local layer's position p attends to the
                                   * positions > p - n_swa (0: none) */
    uint32_t swa_pattern;         /* layer l is local unless l % swa_pattern == swa_pattern - 1
                                   * (gemma3: 6; 0 with n_swa: every layer local) */
    float rope_freq_base_swa;     /* the local layers' RoPE base (gemma3: 10000) */
    int rope_scaling_local;       /* 1: the local layers use the file's rope scaling too
                                   * (gemma2); 0: they rotate unscaled (gemma3) */
    float attn_softcap;           /* attention scores = c tanh(scores / c) when > 0 (gemma2) */
    float rope_mscale;            /* cos and sin times this (phi3's rope.scaling.attn_factor) */
    float embd_scale;             /* the embedding rows times this (gemma: sqrt(dim); else 1) */
    float logit_softcap;          /* logits = c tanh(logits / c) when > 0 */
    arch_ffn_act ffn_act;
    /* Mixture-of-Experts (arch/moe.c): 0 experts = a dense feed-forward */
    uint32_t n_expert;            /* <arch>.expert_count */
    uint32_t n_expert_used;       /* <arch>.expert_used_count: the top k a position routes to */
    uint32_t n_ff_exp;            /* an expert's feed-forward width (llama: feed_forward_length;
                                   * qwen3moe: expert_feed_forward_length) */
    float expert_weights_scale;   /* <arch>.expert_weights_scale: the routing weights times
                                   * this (0 or 1: none) */
    arch_gating gating;           /* the family's */
} arch_hparams;

/* One tensor of a layer as the file has it. A matrix has `rows` rows of `cols` elements
 * (ggml ne[1] x ne[0]); a vector has rows = 1. */
typedef struct {
    char name[ARCH_NAME_MAX];     /* "blk.3.attn_q.weight" */
    uint32_t type;                /* ggml type (quant/quant.h) */
    uint64_t rows, cols;
    uint64_t off, nbytes;         /* absolute file offset and size */
    uint64_t row_bytes;           /* bytes of one row of this type */
    int is_matrix;
    uint32_t role;                /* the family's tag for the tensor's part in its layer */
    uint32_t n_expert;            /* a 3-D expert tensor (ggml [cols, rows / n_expert,
                                   * n_expert]) seen as one matrix: expert e's rows are
                                   * [e rows / n_expert, (e + 1) rows / n_expert); 0 otherwise */
} arch_tensor;

typedef struct {
    uint32_t n_tensors;
    arch_tensor t[ARCH_MAX_LAYER_TENSORS]; /* consumption order: vectors first */
    uint32_t n_vectors;           /* t[0 .. n_vectors) are the vectors */
    uint64_t weight_bytes;        /* sum of nbytes */
} arch_layer;

/* What one layer costs, for the partitioner, the planner and the predictions. */
typedef struct {
    uint64_t weight_bytes;        /* read once per forward pass (per batch) */
    double flops_per_pos;         /* multiply-adds x 2, excluding attention over the cache */
    double attn_flops_per_pos_ctx;/* attention flops per position per cached position */
    uint64_t kv_bytes_per_pos;    /* KV cache bytes one position adds (0 for dense) */
    uint64_t routed_bytes;        /* the weight bytes one position reads: every tensor but the
                                   * experts', and n_expert_used of n_expert experts
                                   * (= weight_bytes for a dense layer) */
} arch_cost;

/* A model: hyper-parameters and every layer's tensors, from one GGUF file. */
typedef struct {
    const gguf_file *g;           /* borrowed; NULL for a model built by hand (arch_model_bind) */
    const arch_ops *ops;          /* the family, chosen once by arch_model_open / _bind */
    arch_hparams hp;
    arch_layer *layers;           /* n_layers, owned */
    /* outside the layers (absent for dense): token_embd, output_norm, output (or tied) */
    arch_tensor tok_embd, out_norm, output;
    /* llama3 rope scaling as published files carry it: `rope_freqs.weight` (rope_dim / 2 f32
     * divisors of each pair's frequency, written by llama.cpp's converter). Owned; NULL when
     * the file has none. */
    float *rope_freqs;
    /* phi3's longrope (rope_factors_long/short.weight, rope_dim / 2 f32 each): the long ones
     * when a session's context exceeds rope_orig_ctx, as llama.cpp's get_rope_factors picks.
     * Owned; NULL when the file has none. */
    float *rope_long, *rope_short;
} arch_model;

/* The KV cache of one session for one layer: K and V of every cached position, in a ring of
 * n_rows rows: position p in row p % n_rows. A layer that attends to all positions has a row
 * for each (n_rows = n_ctx: the ring never wraps); a sliding-window layer only its window and
 * a pass's positions (arch_kv_rows), as llama.cpp keeps for its SWA layers, so a long
 * context costs its memory only in the global layers. */
typedef struct {
    uint32_t n_ctx;               /* positions it can hold */
    uint32_t kv_dim;              /* n_head_kv * head_dim */
    float *k, *v;                 /* (n_rows, kv_dim) each, owned by the caller */
    uint32_t n_rows;              /* rows in k and v; 0 means n_ctx */
} arch_kv;

/* Positions layer l attends back to (its sliding window: position p sees p - window + 1 .. p),
 * 0 when it sees them all. From the hyper-parameters, whatever the family. */
uint32_t arch_layer_window(const arch_model *m, uint32_t l);
/* Rows of layer l's KV cache for a session of n_ctx positions run max_batch at most per pass:
 * n_ctx, or for a sliding-window layer min(n_ctx, window + max_batch) (a pass writes all its
 * positions before attending, and its first one still needs the window before it). */
uint32_t arch_kv_rows(const arch_model *m, uint32_t l, uint32_t n_ctx, uint32_t max_batch);
/* KV cache bytes of layers first..last-1 for one such session (K and V in f32). */
uint64_t arch_kv_bytes(const arch_model *m, uint32_t first, uint32_t last, uint32_t n_ctx,
                       uint32_t max_batch);
/* Where a session can resume after writing positions up to high - 1 (the most it ever held
 * since it was empty) and being cut back to pos: pos when every sliding-window layer's ring
 * still holds the window before pos, else 0 (the prompt runs again, as llama.cpp does when its
 * SWA cache lacks the positions). */
uint32_t arch_kv_resume(const arch_model *m, uint32_t n_ctx, uint32_t max_batch, uint32_t high,
                        uint32_t pos);

/* One layer's run over n positions of one session (n = 1 when generating), or of several
 * sessions at once (arch_layer_begin_segs: continuous batching). */
typedef struct arch_run arch_run;

/* A pass's rows that belong to one session: n positions from pos0 over its cache kv. A batch
 * of several sessions is their segments in order, their rows one after another in x. */
typedef struct {
    arch_kv *kv;
    uint32_t pos0, n;
} arch_seg;

/* Open the architecture of g: hyper-parameters and tensors, all validated (shapes against
 * the hyper-parameters, types against the supported list, extents against the file). An
 * unsupported architecture or tensor type is one clear error naming it. */
int arch_model_open(arch_model *m, const gguf_file *g, char *err, size_t errlen);
void arch_model_close(arch_model *m);
/* Choose m's family by its general.architecture name and set hp.name, nothing else: for a
 * model whose hyper-parameters and layers its caller fills by hand (the lab's dense model
 * loaded by arch/model.c, tests). An unknown name is an error listing the known ones. */
int arch_model_bind(arch_model *m, const char *name, char *err, size_t errlen);
/* 1 when m's family has every property in props (ARCH_TOKENS, ARCH_KV), else 0. */
int arch_model_has(const arch_model *m, unsigned props);
void arch_layer_cost(const arch_model *m, uint32_t layer, arch_cost *c);

/* A run for up to max_pos positions at once (its scratch is sized for that). */
arch_run *arch_run_new(const arch_model *m, uint32_t max_pos, char *err, size_t errlen);
void arch_run_free(arch_run **r);
/* Bytes of scratch arch_run_new allocates for max_pos positions (the planner counts them
 * against a cap), excluding attention's scores (n_threads x n_ctx floats, sized per session). */
uint64_t arch_run_bytes(const arch_model *m, uint32_t max_pos);
/* Set up layer `layer` over x (n positions x dim, row-major, updated in place) at positions
 * pos0 .. pos0+n-1 of a session whose cache is kv (NULL for dense). vectors[i] points at
 * tensor i's bytes for i < n_vectors. */
int arch_layer_begin(arch_run *r, uint32_t layer, const void *const *vectors, arch_kv *kv,
                     float *x, uint32_t n, uint32_t pos0, char *err, size_t errlen);
/* The same over n_segs sessions' rows (segs[i].n of them each, in order; their sum <= the
 * run's max_pos): every weight is read once for all of them, and each row's result has the
 * bits of its session's rows run alone (products row by row, attention per (position, head)
 * over that row's own cache). A family without a KV cache takes one segment only. */
int arch_layer_begin_segs(arch_run *r, uint32_t layer, const void *const *vectors,
                          const arch_seg *segs, uint32_t n_segs, float *x, char *err,
                          size_t errlen);
int arch_layer_before(arch_run *r, uint32_t tensor);
int arch_layer_rows(arch_run *r, uint32_t tensor, uint64_t r0, uint64_t n, const void *rows);
int arch_layer_end(arch_run *r);
/* A layer with experts: the experts the run's positions route to (used[0..n_expert) = 1), and
 * their count, once before(the first expert tensor) has run (0 before, and for a layer without
 * experts). The SSD arm reads only those experts' rows and passes NULL rows for the others
 * (arch_layer_rows refuses NULL where a position routes). */
uint32_t arch_layer_experts(const arch_run *r, uint8_t *used);
/* All of the above with every tensor resident: data[i] is tensor i's bytes. */
int arch_layer_forward(arch_run *r, uint32_t layer, const void *const *data, arch_kv *kv,
                       float *x, uint32_t n, uint32_t pos0, char *err, size_t errlen);

int arch_layer_forward_segs(arch_run *r, uint32_t layer, const void *const *data,
                            const arch_seg *segs, uint32_t n_segs, float *x, char *err,
                            size_t errlen);

/* The hooks (before, rows, end) return -1 without an err buffer: the reason is kept here
 * until the next begin ("" when none). */
const char *arch_run_error(const arch_run *r);
/* Threads the run's matrix products and attention use (1..QUANT_MAX_THREADS; default 1).
 * Results have the same bits for every count. The dense layer uses it for a quantized W only
 * (an f32 W is OpenBLAS's, threads from kernel_set_threads). */
void arch_run_set_threads(arch_run *r, int nthreads);

/* What the family does to the embedding rows of n positions (x: n x dim, in place) before
 * the first layer, and to the logits of n positions (n x n_vocab) after the head: gemma's
 * sqrt(dim) scale and final soft-capping; nothing for the others. Every arm calls them. */
void arch_embed_finish(const arch_model *m, float *x, uint32_t n);
void arch_logits_finish(const arch_model *m, float *logits, uint32_t n);

/* out = x / sqrt(mean(x^2) + eps) * w, the sum of squares in double, left to right (as
 * ggml's rms_norm accumulates): the final norm of a model uses it too. */
void arch_rmsnorm(const float *x, const float *w, float *out, uint32_t dim, float eps);
/* arch_rmsnorm of n rows (x and out n x dim, out == x allowed), the same bits: on AVX-512, 8
 * rows' sums of squares at once, one row a lane (each lane's sum still left to right). */
void arch_rmsnorm_rows(const float *x, const float *w, float *out, uint32_t dim, float eps,
                       uint32_t n);

#endif
