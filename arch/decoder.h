/* decoder.h — the decoder layer the token families share (llama, qwen2, qwen3, gemma3, phi3): its
 * hyper-parameters, a layer's tensors by role (a Mixture-of-Experts feed-forward among them:
 * arch/moe.c), and the forward hooks a family's table points
 * at. arch/ (internal: the family files include it; nothing above arch/ does)
 *
 * A family is data here: which tensors its layers carry (a list of roles, in consumption
 * order, vectors first) and what its open sets in arch_hparams (RoPE pairing, q/k norms are
 * roles, post-norms are roles, the activation, a sliding window, the attention scale). The
 * hooks read the roles once a layer and never ask which family runs.
 */
#ifndef SWARM_ARCH_DECODER_H
#define SWARM_ARCH_DECODER_H

#include "arch/arch_int.h"

/* A tensor's part in a decoder layer (arch_tensor.role). Vectors first, then matrices. */
typedef enum {
    DEC_ATTN_NORM = 0,   /* attn_norm.weight (dim) */
    DEC_FFN_NORM,        /* ffn_norm.weight (dim) */
    DEC_BQ,              /* attn_q.bias (n_head * head_dim): qwen2 */
    DEC_BK,              /* attn_k.bias (kv_dim) */
    DEC_BV,              /* attn_v.bias (kv_dim) */
    DEC_Q_NORM,          /* attn_q_norm.weight (head_dim), every head: qwen3, gemma3 */
    DEC_K_NORM,          /* attn_k_norm.weight (head_dim) */
    DEC_POST_ATTN_NORM,  /* post_attention_norm.weight (dim): gemma3 */
    DEC_POST_FFN_NORM,   /* post_ffw_norm.weight (dim): gemma3 */
    DEC_FFN_NORM_PA,     /* post_attention_norm.weight (dim) as the feed-forward's input norm
                          * (gpt-oss: llama.cpp's attn_post_norm, applied to x + o) */
    DEC_BO,              /* attn_output.bias (dim): gpt-oss */
    DEC_SINKS,           /* attn_sinks.weight (n_head): gpt-oss's per-head sink logits */
    DEC_GATE_INP_B,      /* ffn_gate_inp.bias (n_expert): gpt-oss's router bias */
    DEC_GATE_EXPS_B,     /* ffn_gate_exps.bias [n_ff_exp, n_expert]: one row per expert */
    DEC_UP_EXPS_B,       /* ffn_up_exps.bias [n_ff_exp, n_expert] */
    DEC_DOWN_EXPS_B,     /* ffn_down_exps.bias [dim, n_expert] */
    DEC_N_VECTORS,
    DEC_Q = DEC_N_VECTORS, /* attn_q.weight */
    DEC_K,               /* attn_k.weight */
    DEC_V,               /* attn_v.weight */
    DEC_O,               /* attn_output.weight */
    DEC_GATE,            /* ffn_gate.weight */
    DEC_UP,              /* ffn_up.weight */
    DEC_DOWN,            /* ffn_down.weight */
    DEC_QKV,             /* attn_qkv.weight: q, k, v rows in one matrix (phi3) */
    DEC_GATE_UP,         /* ffn_up.weight of 2 n_ff rows: gate then up (phi3) */
    DEC_GATE_INP,        /* ffn_gate_inp.weight: the router, n_expert rows (arch/moe.c) */
    DEC_GATE_EXPS,       /* ffn_gate_exps.weight: [dim, n_ff_exp, n_expert] */
    DEC_UP_EXPS,         /* ffn_up_exps.weight: [dim, n_ff_exp, n_expert] */
    DEC_DOWN_EXPS,       /* ffn_down_exps.weight: [n_ff_exp, dim, n_expert] */
    DEC_N_ROLES
} dec_role;

/* The family's choices that its open passes to arch_dec_open. */
typedef struct {
    arch_rope_type rope_type;
    int rope_freqs_ok;            /* Llama 3.1's rope_freqs.weight may be present (llama only) */
    int experts;                  /* 0: no experts; 1: `<arch>.expert_count` may make the
                                   * feed-forward a Mixture-of-Experts of feed_forward_length
                                   * wide experts (llama); 2: it must, the experts
                                   * expert_feed_forward_length wide (qwen3moe) */
} dec_family;

/* Read the hyper-parameters every decoder family shares (`<arch>.*`, validated; the extras in
 * arch_hparams get their neutral defaults) and the tensors outside the layers. */
int arch_dec_open(arch_model *m, const dec_family *f, char *err, size_t errlen);
/* Read `<arch>.key` as u32 / f32 into out (dflt when absent and not required). */
int arch_dec_u32(const gguf_file *g, const char *arch, const char *key, int required,
                 uint32_t dflt, uint32_t *out, char *err, size_t errlen);
int arch_dec_f32(const gguf_file *g, const char *arch, const char *key, int required,
                 float dflt, float *out, char *err, size_t errlen);
/* Read an f32 vector tensor of n values into *out (malloc'd; every value finite and > 0). */
int arch_dec_factors(const gguf_file *g, const char *name, uint32_t n, float **out, char *err,
                     size_t errlen);
/* Layer l's tensors: roles[0..n) in consumption order (vectors first), each checked. */
int arch_dec_layer(const arch_model *m, uint32_t l, arch_layer *ly, const dec_role *roles,
                   size_t n, char *err, size_t errlen);
/* The roles of a Mixture-of-Experts feed-forward, in consumption order (after DEC_O); its
 * biases (gpt-oss) are vectors, listed with the layer's vectors. */
#define DEC_MOE_ROLES DEC_GATE_INP, DEC_GATE_EXPS, DEC_UP_EXPS, DEC_DOWN_EXPS
/* 1 when layer l attends through the sliding window. */
int arch_dec_is_local(const arch_hparams *hp, uint32_t l);

/* The table's hooks (arch_int.h says what each does). */
void arch_dec_cost(const arch_model *m, uint32_t l, arch_cost *c);
uint64_t arch_dec_run_bytes(const arch_model *m, uint32_t max_pos);
int arch_dec_run_init(arch_run *r, char *err, size_t errlen);
void arch_dec_run_free(arch_run *r);
int arch_dec_begin(arch_run *r, char *err, size_t errlen);
int arch_dec_before(arch_run *r, uint32_t tensor);
int arch_dec_rows(arch_run *r, uint32_t tensor, uint64_t r0, uint64_t n, const void *rows);
int arch_dec_end(arch_run *r);
uint32_t arch_dec_experts(const arch_run *r, uint8_t *used);

/* A table entry of a decoder family: its name, open and layer; the rest is the decoder's. */
#define ARCH_DEC_OPS(NAME, OPEN, LAYER)                                                    \
    { .name = NAME, .props = ARCH_TOKENS | ARCH_KV, .open = OPEN, .layer = LAYER,           \
      .cost = arch_dec_cost, .run_bytes = arch_dec_run_bytes, .run_init = arch_dec_run_init, \
      .run_free = arch_dec_run_free, .begin = arch_dec_begin, .before = arch_dec_before,    \
      .rows = arch_dec_rows, .end = arch_dec_end, .experts = arch_dec_experts }

#endif
