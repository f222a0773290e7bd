/* decoder.c — the decoder layer llama, qwen2, qwen3, gemma2, gemma3 and phi3 share: the
 * hyper-parameters every one of them reads, a layer's tensors by role, and the forward pass.
 * arch/
 *
 * One layer, in the order its tensors are consumed (llama2.c's forward() is the model; a role
 * a layer lacks is skipped):
 *   before(q)    xb = rmsnorm(x) . attn_norm
 *   rows q,k,v   q, k, v = W xb for every position (quant_matmat over the n positions); or
 *                rows qkv, one matrix whose rows are q's, k's then v's (phi3)
 *   before(o)    (qkv split); + biases (qwen2); per-head rmsnorm of q and k (qwen3, gemma3); RoPE on q and
 *                k; k and v into the cache; attention (a sliding window on gemma's local
 *                layers, gemma2's scores soft-capped) -> att
 *   rows o       o = Wo att
 *   before(gate) o = rmsnorm(o) . post_attention_norm (gemma2, gemma3); x += o;
 *                xb = rmsnorm(x) . ffn_norm
 *   rows gate,up gate, up = W xb; or rows of one ffn_up of 2 n_ff rows, gate's then up's
 *                (phi3)
 *   before(down) gate = act(gate) . up (silu, or gemma's GELU)
 *   rows down    down = Wd gate
 *   end          down = rmsnorm(down) . post_ffw_norm (gemma2, gemma3); x += down
 * A layer with experts (llama with expert_count, qwen3moe) has, in place of gate, up and down,
 * the router then the experts (arch/moe.c): before(gate_inp) as before(gate); rows gate_inp,
 * the router's logits; before(gate_exps) routes each position; rows gate/up/down_exps compute
 * only the routed experts' rows; before(down_exps) their SwiGLU; end their weighted sum is down.
 * As llama.cpp's graphs (src/models/llama.cpp, qwen2.cpp, qwen3.cpp, gemma2.cpp, gemma3.cpp,
 * phi3.cpp) build it.
 * RoPE as llama.cpp's llama_model_rope_type gives it: NORM pairs (2i, 2i+1) for llama, NEOX
 * pairs (i, i + rope_dim/2) for the others (arch/attn.c makes the angles as ggml does).
 *
 * Determinism: every product row is one quant_vec_dot (fixed order, same bits for any row
 * range, thread count and batch: quant.h); norms, attention and softmax are fixed-order loops
 * per (position, head), and a position's attention reads only cache positions 0..pos, all
 * written before any attention runs. So a batch of n positions gives the bits of n single
 * steps, and a layer streamed by row ranges gives the bits of a resident one.
 */
#include "arch/decoder.h"

#include <math.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <fcntl.h>
#include <unistd.h>

#include "arch/attn.h"
#include "arch/moe.h"
#include "quant/quant.h"

#define S_MAX_VOCAB (1u << 24)
#define S_MAX_FF (1u << 20)
#define S_MAX_HEADS 1024

/* A run's scratch: the layer's vectors in f32, then the activations of n positions. */
typedef struct {
    float *vec[DEC_N_VECTORS];    /* this layer's vectors by role, or NULL (not in the layer) */
    float *vbuf[DEC_N_VECTORS];   /* (s_vec_len) each, owned */
    float *xb;                    /* (max_pos, dim) normed input of q/k/v, then of gate/up */
    float *q, *att;               /* (max_pos, q_dim) */
    float *o, *down;              /* (max_pos, dim) */
    float *k, *v;                 /* (max_pos, kv_dim) */
    float *gate, *up;             /* (max_pos, n_ff); gate becomes act(gate) . up */
    float *qkv;                   /* (max_pos, q_dim + 2 kv_dim): a fused qkv's products */
    float *gu;                    /* (max_pos, 2 n_ff): a fused gate/up's products */
    float *tmp;                   /* (max_pos, max rows of a matrix): a row range's products */
    float *scores;                /* (nthreads, scores_row) attention weights */
    uint32_t scores_ctx;          /* floats allocated */
    uint32_t scores_row;          /* floats a thread: the longest cache of this pass's
                                   * sessions, or a KV group's scratch (arch_attn_group) */
    float *kt;                    /* (n_head_kv, arch_attn_kt_floats) the pass's keys,
                                   * transposed for arch_attn_group; NULL until a pass needs it */
    size_t kt_cap;                /* floats allocated */
    uint32_t kt_lo, kt_n;         /* its keys: positions kt_lo .. + kt_n; kt_n 0 = one head a
                                   * position (s_attn_task) this pass */
    atomic_uint next;             /* s_kt_task's, then s_group_task's next item */
    atomic_uint pnext;            /* s_pos_task's next run of S_POS_CHUNK positions */
    int job;                      /* s_pos_task's step (S_JOB_*) */
    arch_rope_args rope;          /* this layer's (set by begin) */
    uint32_t window;              /* this layer's sliding window, 0 = none */
    int fused_qkv, fused_gu;      /* this layer has DEC_QKV / DEC_GATE_UP */
    arch_moe *moe;                /* the experts' scratch (a model with experts), owned */
} s_run;

static uint32_t s_qdim(const arch_hparams *hp)
{
    return hp->n_head * hp->head_dim;
}

static uint32_t s_kvdim(const arch_hparams *hp)
{
    return hp->n_head_kv * hp->head_dim;
}

/* ---------------------------------------------------------------- opening */

int arch_dec_u32(const gguf_file *g, const char *arch, const char *key, int required,
                 uint32_t dflt, uint32_t *out, char *err, size_t errlen)
{
    char k[128];
    snprintf(k, sizeof k, "%s.%s", arch, key);
    if (!gguf_find_kv(g, k)) {
        if (required) {
            arch_err(err, errlen, g->path, "metadata key '%s' is missing", k);
            return -1;
        }
        *out = dflt;
        return 0;
    }
    return gguf_get_u32(g, k, out, err, errlen);
}

int arch_dec_f32(const gguf_file *g, const char *arch, const char *key, int required, float dflt,
                 float *out, char *err, size_t errlen)
{
    char k[128];
    snprintf(k, sizeof k, "%s.%s", arch, key);
    if (!gguf_find_kv(g, k)) {
        if (required) {
            arch_err(err, errlen, g->path, "metadata key '%s' is missing", k);
            return -1;
        }
        *out = dflt;
        return 0;
    }
    if (gguf_get_f32(g, k, out, err, errlen))
        return -1;
    if (!isfinite(*out)) {
        arch_err(err, errlen, g->path, "metadata key '%s' is not finite", k);
        return -1;
    }
    return 0;
}

/* Rope scaling keys as llama.cpp's llm_load_hparams reads them: rope.scaling.type (default
 * "linear"), rope.scaling.factor or the older rope.scale_linear (0 or absent = none), and
 * llama3's per-pair divisors as the tensor rope_freqs.weight. */
static int s_rope_scaling(arch_model *m, int rope_freqs_ok, char *err, size_t errlen)
{
    const gguf_file *g = m->g;
    arch_hparams *hp = &m->hp;
    char k[128];
    const char *type = "linear";
    snprintf(k, sizeof k, "%s.rope.scaling.type", hp->name);
    if (gguf_find_kv(g, k) && gguf_get_str(g, k, &type, err, errlen))
        return -1;
    float factor = 0;
    snprintf(k, sizeof k, "%s.rope.scaling.factor", hp->name);
    if (gguf_find_kv(g, k)) {
        if (arch_dec_f32(g, hp->name, "rope.scaling.factor", 1, 0, &factor, err, errlen))
            return -1;
    } else if (arch_dec_f32(g, hp->name, "rope.scale_linear", 0, 0, &factor, err, errlen)) {
        return -1;
    }
    if (arch_dec_u32(g, hp->name, "rope.scaling.original_context_length", 0, 0, &hp->rope_orig_ctx,
              err, errlen))
        return -1;
    if (factor < 0) {
        arch_err(err, errlen, g->path, "%s.rope.scaling.factor %g is negative", hp->name,
                 (double)factor);
        return -1;
    }
    hp->rope_scale_factor = factor == 0 ? 1.0f : factor;
    if (!strcmp(type, "none") || factor == 0 || factor == 1.0f) {
        hp->rope_scaling = ARCH_ROPE_NONE;
        hp->rope_scale_factor = 1.0f;
    } else if (!strcmp(type, "linear")) {
        hp->rope_scaling = ARCH_ROPE_LINEAR;
    } else if (!strcmp(type, "yarn")) {
        /* llama_context's YaRN set-up: ext_factor 1, beta fast / slow 32 / 1, and the
         * attention factor 1 + 0.1 ln(factor), divided back out (rope_yarn multiplies it in
         * again), times rope.scaling.attn_factor: the float operations kept */
        float af = 1.0f;
        if (arch_dec_f32(g, hp->name, "rope.scaling.attn_factor", 0, 1.0f, &af, err, errlen))
            return -1;
        hp->rope_scaling = ARCH_ROPE_YARN;
        hp->yarn_beta_fast = 32.0f;
        hp->yarn_beta_slow = 1.0f;
        float ms = factor <= 1.0f ? 1.0f : 0.1f * 1.0f * logf(factor) + 1.0f;
        ms *= 1.0f / (1.0f + 0.1f * logf(factor));
        hp->yarn_attn_factor = ms * af;
    } else {
        arch_err(err, errlen, g->path,
                 "%s.rope.scaling.type '%s' is not supported (supported: none, linear, yarn, "
                 "and llama3 through rope_freqs.weight)", hp->name, type);
        return -1;
    }
    if (!gguf_find_tensor(g, "rope_freqs.weight"))
        return 0;
    if (!rope_freqs_ok) {
        /* llama.cpp reads rope_freqs for llama only and refuses the extra tensor elsewhere */
        arch_err(err, errlen, g->path, "tensor 'rope_freqs.weight' is not part of a %s model",
                 hp->name);
        return -1;
    }
    if (arch_dec_factors(g, "rope_freqs.weight", hp->rope_dim / 2, &m->rope_freqs, err, errlen))
        return -1;
    hp->rope_scaling = ARCH_ROPE_LLAMA3;
    return 0;
}

static int s_hparams(arch_model *m, int rope_freqs_ok, char *err, size_t errlen)
{
    const gguf_file *g = m->g;
    arch_hparams *hp = &m->hp;
    const char *a = hp->name;
    if (arch_dec_u32(g, a, "block_count", 1, 0, &hp->n_layers, err, errlen) ||
        arch_dec_u32(g, a, "embedding_length", 1, 0, &hp->dim, err, errlen) ||
        arch_dec_u32(g, a, "feed_forward_length", 1, 0, &hp->n_ff, err, errlen) ||
        arch_dec_u32(g, a, "attention.head_count", 1, 0, &hp->n_head, err, errlen) ||
        arch_dec_u32(g, a, "attention.head_count_kv", 0, hp->n_head, &hp->n_head_kv, err, errlen) ||
        arch_dec_u32(g, a, "context_length", 1, 0, &hp->n_ctx_train, err, errlen) ||
        arch_dec_f32(g, a, "attention.layer_norm_rms_epsilon", 1, 0, &hp->norm_eps, err, errlen) ||
        arch_dec_f32(g, a, "rope.freq_base", 0, 10000.0f, &hp->rope_freq_base, err, errlen))
        return -1;
    const char *bad = NULL;
    if (hp->n_layers < 1 || hp->n_layers > 4096)
        bad = "block_count must be 1..4096";
    else if (hp->dim < 1 || hp->dim > 65536)
        bad = "embedding_length must be 1..65536";
    else if (hp->n_ff < 1 || hp->n_ff > S_MAX_FF)
        bad = "feed_forward_length must be 1..1048576";
    else if (hp->n_head < 1 || hp->n_head > S_MAX_HEADS || hp->dim % hp->n_head)
        bad = "attention.head_count must be 1..1024 and divide embedding_length";
    else if (hp->n_head_kv < 1 || hp->n_head % hp->n_head_kv)
        bad = "attention.head_count_kv must be >= 1 and divide attention.head_count";
    else if (hp->n_ctx_train < 1)
        bad = "context_length must be >= 1";
    else if (!(hp->norm_eps > 0 && hp->norm_eps < 1))
        bad = "attention.layer_norm_rms_epsilon must be in (0, 1)";
    else if (!(hp->rope_freq_base > 0))
        bad = "rope.freq_base must be > 0";
    if (bad) {
        arch_err(err, errlen, g->path, "%s.%s", a, bad);
        return -1;
    }
    hp->head_dim = hp->dim / hp->n_head;
    uint32_t vl = 0;
    if (arch_dec_u32(g, a, "attention.key_length", 0, hp->head_dim, &hp->head_dim, err, errlen) ||
        arch_dec_u32(g, a, "attention.value_length", 0, hp->head_dim, &vl, err, errlen) ||
        arch_dec_u32(g, a, "rope.dimension_count", 0, hp->head_dim, &hp->rope_dim, err, errlen))
        return -1;
    if (hp->head_dim < 2 || hp->head_dim > 4096 || vl != hp->head_dim) {
        arch_err(err, errlen, g->path,
                 "%s.attention.key_length %u and value_length %u must be equal and 2..4096", a,
                 hp->head_dim, vl);
        return -1;
    }
    if (hp->rope_dim < 2 || hp->rope_dim > hp->head_dim || hp->rope_dim % 2) {
        arch_err(err, errlen, g->path, "%s.rope.dimension_count %u must be even and 2..%u", a,
                 hp->rope_dim, hp->head_dim);
        return -1;
    }
    return s_rope_scaling(m, rope_freqs_ok, err, errlen);
}

/* The experts' keys as llama.cpp's llm_load_hparams reads them (expert_count, expert_used_count
 * and, for qwen3moe, expert_feed_forward_length, default feed_forward_length / used). */
static int s_experts(arch_model *m, int experts, char *err, size_t errlen)
{
    const gguf_file *g = m->g;
    arch_hparams *hp = &m->hp;
    const char *a = hp->name;
    if (arch_dec_u32(g, a, "expert_count", experts == 2, 0, &hp->n_expert, err, errlen) ||
        arch_dec_u32(g, a, "expert_used_count", hp->n_expert > 0, 0, &hp->n_expert_used, err,
                     errlen) ||
        arch_dec_f32(g, a, "expert_weights_scale", 0, 0, &hp->expert_weights_scale, err, errlen))
        return -1;
    if (!hp->n_expert) {
        if (experts == 2) {
            arch_err(err, errlen, g->path, "%s.expert_count must be >= 1", a);
            return -1;
        }
        hp->n_expert_used = 0;
        return 0;
    }
    if (!experts) {
        arch_err(err, errlen, g->path, "%s.expert_count: a %s model has no experts", a, a);
        return -1;
    }
    hp->n_ff_exp = hp->n_ff;
    if (experts == 2 &&
        arch_dec_u32(g, a, "expert_feed_forward_length", 0, hp->n_ff / hp->n_expert_used,
                     &hp->n_ff_exp, err, errlen))
        return -1;
    const char *bad = NULL;
    if (hp->n_expert > ARCH_MOE_MAX_EXPERTS)
        bad = "expert_count must be 1..512";
    else if (hp->n_expert_used < 1 || hp->n_expert_used > hp->n_expert ||
             hp->n_expert_used > ARCH_MOE_MAX_USED)
        bad = "expert_used_count must be 1..min(expert_count, 64)";
    else if (hp->n_ff_exp < 1 || hp->n_ff_exp > S_MAX_FF)
        bad = "the experts' feed_forward_length must be 1..1048576";
    else if (!(hp->expert_weights_scale >= 0))
        bad = "expert_weights_scale must be >= 0";
    if (bad) {
        arch_err(err, errlen, g->path, "%s.%s", a, bad);
        return -1;
    }
    return 0;
}

int arch_dec_factors(const gguf_file *g, const char *name, uint32_t n, float **out, char *err,
                     size_t errlen)
{
    arch_tensor t;
    if (arch_tensor_get(g, name, 0, 1, n, &t, err, errlen))
        return -1;
    if (t.type != QUANT_F32) {
        arch_err(err, errlen, g->path, "tensor '%s': type %s, f32 expected", name,
                 quant_type_name(t.type));
        return -1;
    }
    if (!(*out = malloc(n * sizeof(float)))) {
        arch_err(err, errlen, g->path, "out of memory");
        return -1;
    }
    int fd = open(g->path, O_RDONLY | O_CLOEXEC);
    ssize_t got = fd < 0 ? -1 : pread(fd, *out, n * sizeof(float), (off_t)t.off);
    if (fd >= 0)
        close(fd);
    if (got != (ssize_t)(n * sizeof(float))) {
        arch_err(err, errlen, g->path, "cannot read tensor '%s'", name);
        return -1;
    }
    for (uint32_t i = 0; i < n; i++)
        if (!isfinite((*out)[i]) || (*out)[i] <= 0) {
            arch_err(err, errlen, g->path, "%s[%u] = %g: must be finite and > 0", name, i,
                     (double)(*out)[i]);
            return -1;
        }
    return 0;
}

int arch_dec_open(arch_model *m, const dec_family *f, char *err, size_t errlen)
{
    const gguf_file *g = m->g;
    arch_hparams *hp = &m->hp;
    hp->rope_type = f->rope_type;
    if (s_hparams(m, f->rope_freqs_ok, err, errlen) || s_experts(m, f->experts, err, errlen))
        return -1;
    hp->attn_scale = 1.0f / sqrtf((float)hp->head_dim);
    hp->attn_scale_q = 0;
    hp->rope_freq_base_swa = hp->rope_freq_base;
    hp->rope_mscale = 1.0f;
    hp->embd_scale = 1.0f;
    hp->logit_softcap = 0;
    hp->attn_softcap = 0;
    hp->rope_scaling_local = 0;
    hp->ffn_act = ARCH_ACT_SILU;
    const gguf_tensor *te = gguf_find_tensor(g, "token_embd.weight");
    if (!te) {
        arch_err(err, errlen, g->path, "tensor 'token_embd.weight' is missing");
        return -1;
    }
    if (te->n_dims != 2 || te->dims[1] < 1 || te->dims[1] > S_MAX_VOCAB) {
        arch_err(err, errlen, g->path,
                 "tensor 'token_embd.weight' must be [embedding_length, n_vocab <= %u]",
                 S_MAX_VOCAB);
        return -1;
    }
    hp->n_vocab = (uint32_t)te->dims[1];
    uint32_t d = hp->dim;
    if (arch_tensor_get(g, "token_embd.weight", 1, hp->n_vocab, d, &m->tok_embd, err, errlen) ||
        arch_tensor_get(g, "output_norm.weight", 0, 1, d, &m->out_norm, err, errlen))
        return -1;
    if (gguf_find_tensor(g, "output.weight")) {
        if (arch_tensor_get(g, "output.weight", 1, hp->n_vocab, d, &m->output, err, errlen))
            return -1;
    } else {
        hp->tied_output = 1;
        m->output = m->tok_embd;
    }
    return 0;
}

int arch_dec_layer(const arch_model *m, uint32_t l, arch_layer *ly, const dec_role *roles,
                   size_t n, char *err, size_t errlen)
{
    const arch_hparams *hp = &m->hp;
    uint32_t d = hp->dim, qd = s_qdim(hp), kvd = s_kvdim(hp), ff = hp->n_ff, hd = hp->head_dim;
    uint32_t fe = hp->n_ff_exp;
    static const char *const names[DEC_N_ROLES] = {
        [DEC_ATTN_NORM] = "attn_norm.weight",   [DEC_FFN_NORM] = "ffn_norm.weight",
        [DEC_BQ] = "attn_q.bias",               [DEC_BK] = "attn_k.bias",
        [DEC_BV] = "attn_v.bias",               [DEC_Q_NORM] = "attn_q_norm.weight",
        [DEC_K_NORM] = "attn_k_norm.weight",
        [DEC_POST_ATTN_NORM] = "post_attention_norm.weight",
        [DEC_POST_FFN_NORM] = "post_ffw_norm.weight",
        [DEC_Q] = "attn_q.weight",              [DEC_K] = "attn_k.weight",
        [DEC_V] = "attn_v.weight",              [DEC_O] = "attn_output.weight",
        [DEC_GATE] = "ffn_gate.weight",         [DEC_UP] = "ffn_up.weight",
        [DEC_DOWN] = "ffn_down.weight",         [DEC_QKV] = "attn_qkv.weight",
        [DEC_GATE_UP] = "ffn_up.weight",        [DEC_GATE_INP] = "ffn_gate_inp.weight",
        [DEC_GATE_EXPS] = "ffn_gate_exps.weight", [DEC_UP_EXPS] = "ffn_up_exps.weight",
        [DEC_DOWN_EXPS] = "ffn_down_exps.weight",
        [DEC_FFN_NORM_PA] = "post_attention_norm.weight", [DEC_BO] = "attn_output.bias",
        [DEC_SINKS] = "attn_sinks.weight",      [DEC_GATE_INP_B] = "ffn_gate_inp.bias",
        [DEC_GATE_EXPS_B] = "ffn_gate_exps.bias", [DEC_UP_EXPS_B] = "ffn_up_exps.bias",
        [DEC_DOWN_EXPS_B] = "ffn_down_exps.bias",
    };
    /* rows x cols of each role (a vector: 1 x cols) */
    const uint32_t shape[DEC_N_ROLES][2] = {
        [DEC_ATTN_NORM] = { 1, d },   [DEC_FFN_NORM] = { 1, d },  [DEC_BQ] = { 1, qd },
        [DEC_BK] = { 1, kvd },        [DEC_BV] = { 1, kvd },      [DEC_Q_NORM] = { 1, hd },
        [DEC_K_NORM] = { 1, hd },     [DEC_POST_ATTN_NORM] = { 1, d },
        [DEC_POST_FFN_NORM] = { 1, d },
        [DEC_Q] = { qd, d },          [DEC_K] = { kvd, d },       [DEC_V] = { kvd, d },
        [DEC_O] = { d, qd },          [DEC_GATE] = { ff, d },     [DEC_UP] = { ff, d },
        [DEC_DOWN] = { d, ff },       [DEC_QKV] = { qd + 2 * kvd, d },
        [DEC_GATE_UP] = { 2 * ff, d },
        [DEC_GATE_INP] = { hp->n_expert, d },
        /* one expert's rows x cols (arch_tensor_get_experts makes n_expert of them) */
        [DEC_GATE_EXPS] = { fe, d },  [DEC_UP_EXPS] = { fe, d },  [DEC_DOWN_EXPS] = { d, fe },
        [DEC_FFN_NORM_PA] = { 1, d }, [DEC_BO] = { 1, d },        [DEC_SINKS] = { 1, hp->n_head },
        [DEC_GATE_INP_B] = { 1, hp->n_expert },
        /* a row per expert: 2-D in the file, kept among the vectors (arch_dec_vec_len) */
        [DEC_GATE_EXPS_B] = { hp->n_expert, fe }, [DEC_UP_EXPS_B] = { hp->n_expert, fe },
        [DEC_DOWN_EXPS_B] = { hp->n_expert, d },
    };
    for (size_t i = 0; i < n && i < ARCH_MAX_LAYER_TENSORS; i++) {
        dec_role r = roles[i];
        int matrix = r >= DEC_N_VECTORS;
        char name[ARCH_NAME_MAX];
        snprintf(name, sizeof name, "blk.%u.%s", l, names[r]);
        arch_tensor *t = &ly->t[ly->n_tensors];
        int exps = r == DEC_GATE_EXPS || r == DEC_UP_EXPS || r == DEC_DOWN_EXPS;
        int bias2d = r == DEC_GATE_EXPS_B || r == DEC_UP_EXPS_B || r == DEC_DOWN_EXPS_B;
        if (exps ? arch_tensor_get_experts(m->g, name, hp->n_expert, shape[r][0], shape[r][1], t,
                                           err, errlen)
                 : arch_tensor_get(m->g, name, matrix || bias2d, shape[r][0], shape[r][1], t, err,
                                   errlen))
            return -1;
        if (bias2d) { /* an expert bias travels and is staged as one vector of its rows */
            t->cols *= t->rows;
            t->rows = 1;
            t->row_bytes = t->nbytes;
        }
        t->is_matrix = matrix;
        t->role = r;
        if (!matrix)
            ly->n_vectors++;
        ly->n_tensors++;
    }
    return 0;
}

int arch_dec_is_local(const arch_hparams *hp, uint32_t l)
{
    if (!hp->n_swa)
        return 0;
    return hp->swa_pattern == 0 || l % hp->swa_pattern < hp->swa_pattern - 1;
}

void arch_dec_cost(const arch_model *m, uint32_t l, arch_cost *c)
{
    arch_cost_matrices(&m->layers[l], m->hp.n_expert_used, c);
    /* per cached position: q.k and a.v, head_dim multiply-adds each, for every head */
    c->attn_flops_per_pos_ctx = 2.0 * 2.0 * m->hp.n_head * m->hp.head_dim;
    /* K and V in f32 (see arch_kv) */
    c->kv_bytes_per_pos = 2ull * m->hp.n_head_kv * m->hp.head_dim * sizeof(float);
}

/* ---------------------------------------------------------------- running */

/* The widest matrix's rows, for tmp (a fused matrix's too, whichever the file has). */
static uint64_t s_wide(const arch_hparams *hp)
{
    uint64_t w = hp->dim;
    uint64_t c[] = { s_qdim(hp), s_kvdim(hp), hp->n_ff, (uint64_t)s_qdim(hp) + 2 * s_kvdim(hp),
                     2ull * hp->n_ff, hp->n_expert };
    for (size_t i = 0; i < sizeof c / sizeof c[0]; i++)
        w = c[i] > w ? c[i] : w;
    return w;
}

/* Whether the model's layers have a role (every layer of a family has the same list). */
static int s_has(const arch_model *m, dec_role role)
{
    if (!m->layers)
        return 0;
    for (uint32_t i = 0; i < m->layers[0].n_tensors; i++)
        if (m->layers[0].t[i].role == role)
            return 1;
    return 0;
}

/* Floats of a vector role's buffer: max(dim, q_dim), or an expert bias's n_expert rows when
 * the model has it (gpt-oss), or n_expert / n_head where those are wider. */
static uint64_t s_vec_len(const arch_model *m, dec_role role)
{
    const arch_hparams *hp = &m->hp;
    uint64_t d = hp->dim, qd = s_qdim(hp), w = d > qd ? d : qd;
    w = hp->n_head > w ? hp->n_head : w;
    w = hp->n_expert > w ? hp->n_expert : w;
    if ((role == DEC_GATE_EXPS_B || role == DEC_UP_EXPS_B) && s_has(m, role))
        return (uint64_t)hp->n_expert * hp->n_ff_exp;
    if (role == DEC_DOWN_EXPS_B && s_has(m, role))
        return (uint64_t)hp->n_expert * d;
    return w;
}

uint64_t arch_dec_run_bytes(const arch_model *m, uint32_t max_pos)
{
    const arch_hparams *hp = &m->hp;
    uint64_t P = max_pos, d = hp->dim, qd = s_qdim(hp), kvd = s_kvdim(hp), ff = hp->n_ff;
    uint64_t vw = 0;
    for (int i = 0; i < DEC_N_VECTORS; i++)
        vw += s_vec_len(m, (dec_role)i);
    uint64_t fused = (s_has(m, DEC_QKV) ? qd + 2 * kvd : 0) +
                     (s_has(m, DEC_GATE_UP) ? 2 * ff : 0);
    /* arch_dec_run_init: xb o down (d), q att (qd), k v (kvd), gate up (ff), qkv gu (fused),
     * tmp; vectors */
    return (P * (3 * d + 2 * qd + 2 * kvd + 2 * ff + fused + s_wide(hp)) + vw) *
               sizeof(float) +
           (hp->n_expert ? arch_moe_bytes(hp, max_pos) : 0);
}

int arch_dec_run_init(arch_run *r, char *err, size_t errlen)
{
    const arch_hparams *hp = &r->m->hp;
    size_t P = r->max_pos, d = hp->dim, qd = s_qdim(hp), kvd = s_kvdim(hp), ff = hp->n_ff;
    s_run *s = r->fam = calloc(1, sizeof(s_run));
    if (s) {
        float **bufs[] = { &s->xb, &s->q, &s->att, &s->o, &s->down, &s->k, &s->v,
                           &s->gate, &s->up, &s->tmp };
        size_t sizes[] = { P * d, P * qd, P * qd, P * d, P * d, P * kvd, P * kvd, P * ff, P * ff,
                           P * (size_t)s_wide(hp) };
        for (size_t i = 0; i < sizeof sizes / sizeof sizes[0]; i++)
            if (!(*bufs[i] = malloc(sizes[i] * sizeof(float))))
                goto oom;
        for (int i = 0; i < DEC_N_VECTORS; i++)
            if (!(s->vbuf[i] = malloc(s_vec_len(r->m, (dec_role)i) * sizeof(float))))
                goto oom;
        if (s_has(r->m, DEC_QKV) && !(s->qkv = malloc(P * (qd + 2 * kvd) * sizeof(float))))
            goto oom;
        if (s_has(r->m, DEC_GATE_UP) && !(s->gu = malloc(P * 2 * ff * sizeof(float))))
            goto oom;
        if (hp->n_expert && !(s->moe = arch_moe_new(hp, r->max_pos)))
            goto oom;
        return 0;
    }
oom:
    arch_err(err, errlen, r->m->g->path, "out of memory for a run of %u positions", r->max_pos);
    return -1;
}

void arch_dec_run_free(arch_run *r)
{
    s_run *s = r->fam;
    if (!s)
        return;
    float *bufs[] = { s->xb, s->q, s->att, s->o, s->down, s->k, s->v, s->gate, s->up, s->tmp,
                      s->scores, s->qkv, s->gu, s->kt };
    for (size_t i = 0; i < sizeof bufs / sizeof bufs[0]; i++)
        free(bufs[i]);
    for (int i = 0; i < DEC_N_VECTORS; i++)
        free(s->vbuf[i]);
    arch_moe_free(s->moe);
    free(s);
    r->fam = NULL;
}

/* A pass of at least S_GROUP_MIN positions of one session runs attention a KV group at a time
 * (arch_attn_group: each key block loaded serves the group's heads) over its keys transposed
 * once a layer; shorter passes (decoding, a batch of sessions) keep one head a position, which
 * needs no transposed copy. Both give the same bits. The copy holds the pass's keys (the
 * window before its first position and its own): past S_KT_MAX_BYTES a pass keeps one head a
 * position rather than double the cache it reads. */
#define S_GROUP_MIN 8
#define S_KT_MAX_BYTES (64u << 20)
#define S_KT_CHUNK 1024 /* keys a transposing task (a multiple of 16) */

/* Sets kt_lo / kt_n for this pass (kt_n 0: one head a position) and sizes kt. */
static int s_group_plan(arch_run *r, char *err, size_t errlen)
{
    s_run *s = r->fam;
    const arch_hparams *hp = &r->m->hp;
    s->kt_n = 0;
    if (r->n_segs != 1 || r->n < S_GROUP_MIN)
        return 0;
    const arch_seg *sg = &r->segs[0];
    uint32_t lo = s->window && sg->pos0 >= s->window ? sg->pos0 - s->window + 1 : 0;
    uint32_t n = sg->pos0 + sg->n - lo;
    size_t one = arch_attn_kt_floats(n, hp->head_dim), need = one * hp->n_head_kv;
    if (need > S_KT_MAX_BYTES / sizeof(float))
        return 0;
    if (need > s->kt_cap) {
        float *kt = realloc(s->kt, need * sizeof(float));
        if (!kt) {
            arch_err(err, errlen, r->m->g->path, "out of memory for %u transposed keys", n);
            return -1;
        }
        s->kt = kt;
        s->kt_cap = need;
    }
    s->kt_lo = lo;
    s->kt_n = n;
    return 0;
}

int arch_dec_begin(arch_run *r, char *err, size_t errlen)
{
    s_run *s = r->fam;
    const arch_model *m = r->m;
    const arch_hparams *hp = &m->hp;
    const arch_layer *l = &m->layers[r->layer];
    uint32_t kvd = s_kvdim(hp), ctx = 0;
    /* every session of the pass (one unless batched): its cache and positions checked, the
     * attention weights sized for the longest cache */
    for (uint32_t i = 0; i < r->n_segs; i++) {
        const arch_seg *sg = &r->segs[i];
        const arch_kv *kv = sg->kv;
        if (!kv || !kv->k || !kv->v || kv->kv_dim != kvd) {
            arch_err(err, errlen, m->g->path, "layer %u: a KV cache of width %u is needed",
                     r->layer, kvd);
            return -1;
        }
        if (sg->pos0 > kv->n_ctx || sg->n > kv->n_ctx - sg->pos0) {
            arch_err(err, errlen, m->g->path,
                     "positions %u..%u do not fit the KV cache of %u positions", sg->pos0,
                     sg->pos0 + sg->n - 1, kv->n_ctx);
            return -1;
        }
        /* a ring shorter than the context (a sliding-window layer's, arch_kv_rows) must hold
         * the window before the pass's first position and all the pass's positions */
        uint32_t rows = kv->n_rows ? kv->n_rows : kv->n_ctx, w = arch_layer_window(m, r->layer);
        if (rows < kv->n_ctx && (!w || (uint64_t)rows + 1 < (uint64_t)w + sg->n)) {
            arch_err(err, errlen, m->g->path, "layer %u: a KV cache of %u rows holds neither "
                     "the context (%u) nor the window (%u) and %u positions", r->layer, rows,
                     kv->n_ctx, w, sg->n);
            return -1;
        }
        ctx = kv->n_ctx > ctx ? kv->n_ctx : ctx;
    }
    memset(s->vec, 0, sizeof s->vec);
    s->fused_qkv = s->fused_gu = 0;
    for (uint32_t i = l->n_vectors; i < l->n_tensors; i++) {
        s->fused_qkv |= l->t[i].role == DEC_QKV;
        s->fused_gu |= l->t[i].role == DEC_GATE_UP;
    }
    for (uint32_t i = 0; i < l->n_vectors; i++) {
        const arch_tensor *t = &l->t[i];
        char why[160];
        float *dst = s->vbuf[t->role];
        if (!r->vectors[i] || quant_dequantize_row((quant_type)t->type, r->vectors[i], dst,
                                                   t->rows * t->cols, why, sizeof why)) {
            arch_err(err, errlen, m->g->path, "tensor '%s': %s", t->name,
                     r->vectors[i] ? why : "no data");
            return -1;
        }
        /* gpt-oss's post_attention_norm is the feed-forward's input norm */
        s->vec[t->role == DEC_FFN_NORM_PA ? DEC_FFN_NORM : t->role] = dst;
    }
    /* this layer's RoPE and window: gemma3's local layers have their own base and no scaling,
     * gemma2's the global scaling (llama.cpp's get_rope_freq_base / _scale); phi3's longrope
     * factors are picked per session in s_attention (s_factors) */
    int local = arch_dec_is_local(hp, r->layer);
    s->window = local ? hp->n_swa : 0;
    s->rope.rope_dim = hp->rope_dim;
    s->rope.neox = hp->rope_type == ARCH_ROPE_NEOX;
    s->rope.base = local ? hp->rope_freq_base_swa : hp->rope_freq_base;
    int scaled = (!local || hp->rope_scaling_local) &&
                 (hp->rope_scaling == ARCH_ROPE_LINEAR || hp->rope_scaling == ARCH_ROPE_YARN);
    s->rope.freq_scale = scaled ? 1.0f / hp->rope_scale_factor : 1.0f;
    s->rope.mscale = hp->rope_mscale;
    s->rope.ext_factor = 0.0f;
    if (scaled && hp->rope_scaling == ARCH_ROPE_YARN) { /* llama.cpp's ext_factor 1 for yarn */
        s->rope.ext_factor = 1.0f;
        s->rope.mscale = hp->yarn_attn_factor;
        arch_rope_yarn_corr(hp->rope_dim, hp->rope_orig_ctx ? hp->rope_orig_ctx : hp->n_ctx_train,
                            s->rope.base, hp->yarn_beta_fast, hp->yarn_beta_slow, s->rope.corr);
    }
    /* attention weights: one row of the longest cache's length per thread, or a KV group's
     * (s_group_plan) */
    if (s_group_plan(r, err, errlen))
        return -1;
    size_t row = ctx;
    if (s->kt_n) {
        size_t g = arch_attn_group_scratch(hp->n_head / hp->n_head_kv, s->kt_n);
        row = g > row ? g : row;
    }
    if (row > UINT32_MAX / (uint32_t)r->nthreads) {
        arch_err(err, errlen, m->g->path, "attention over %u positions is too long", ctx);
        return -1;
    }
    s->scores_row = (uint32_t)row;
    size_t need = (size_t)r->nthreads * row;
    if (need > (size_t)s->scores_ctx) {
        float *w = realloc(s->scores, need * sizeof(float));
        if (!w) {
            arch_err(err, errlen, m->g->path, "out of memory for attention over %u positions",
                     ctx);
            return -1;
        }
        s->scores = w;
        s->scores_ctx = (uint32_t)need;
    }
    return 0;
}

/* phi3's longrope factors for a session whose cache holds n_ctx positions: llama.cpp's context
 * is a multiple of 256 (llama_context pads n_ctx_seq), the choice is made on that
 * (get_rope_factors). Per session: the sessions of one pass may have caches of other sizes. */
static const float *s_factors(const arch_model *m, uint32_t n_ctx)
{
    const arch_hparams *hp = &m->hp;
    uint64_t ctx256 = ((uint64_t)n_ctx + 255) / 256 * 256;
    return m->rope_freqs ? m->rope_freqs
           : m->rope_long && ctx256 > hp->rope_orig_ctx ? m->rope_long
                                                       : m->rope_short;
}

/* Row p of the pass: its session's cache and its absolute position. A pass has a few
 * segments (one per session in it), so a walk over them costs nothing beside a row's work. */
static arch_kv *s_row(const arch_run *r, uint32_t p, uint32_t *pos)
{
    uint32_t i = 0;
    while (i + 1 < r->n_segs && p >= r->segs[i].n)
        p -= r->segs[i++].n;
    *pos = r->segs[i].pos0 + p;
    return r->segs[i].kv;
}

/* One (position, head) pair per index, threads taking every nthreads-th: each pair's loop
 * runs alone in a fixed order over its own session's cache, so the bits depend neither on the
 * split nor on the other sessions in the pass. */
static void s_attn_task(void *arg, int tid, int nt)
{
    arch_run *r = arg;
    s_run *s = r->fam;
    const arch_hparams *hp = &r->m->hp;
    uint32_t hd = hp->head_dim, qd = s_qdim(hp), kvd = s_kvdim(hp);
    uint32_t group = hp->n_head / hp->n_head_kv;
    float *w = s->scores + (size_t)tid * s->scores_row;
    float scale = hp->attn_scale_q ? 1.0f : hp->attn_scale;
    uint32_t total = r->n * hp->n_head;
    for (uint32_t j = (uint32_t)tid; j < total; j += (uint32_t)nt) {
        uint32_t p = j / hp->n_head, h = j % hp->n_head, kh = h / group, pos;
        const arch_kv *kv = s_row(r, p, &pos);
        /* causal: cache positions 0 .. pos; a local layer's only those > pos - window
         * (llama.cpp's is_masked_swa: masked when pos - t >= n_swa) */
        uint32_t t0 = s->window && pos >= s->window ? pos - s->window + 1 : 0;
        const float *q = s->q + (size_t)p * qd + (size_t)h * hd;
        /* positions t0..pos in the ring (arch_kv): from t0's row to the end, then from row 0 */
        uint32_t rows = kv->n_rows ? kv->n_rows : kv->n_ctx, r0 = t0 % rows, len = pos + 1 - t0;
        uint32_t len1 = len < rows - r0 ? len : rows - r0;
        size_t off = (size_t)kh * hd;
        arch_attn_head2(q, kv->k + (size_t)r0 * kvd + off, kv->v + (size_t)r0 * kvd + off, len1,
                        kv->k + off, kv->v + off, len - len1, kvd, hd, scale, hp->attn_softcap,
                        s->vec[DEC_SINKS] ? s->vec[DEC_SINKS][h] : -INFINITY, w,
                        s->att + (size_t)p * qd + (size_t)h * hd);
    }
}

/* The pass's keys transposed: one (KV head, S_KT_CHUNK keys) an index, claimed in turn. */
static void s_kt_task(void *arg, int tid, int nt)
{
    (void)tid;
    (void)nt;
    arch_run *r = arg;
    s_run *s = r->fam;
    const arch_hparams *hp = &r->m->hp;
    const arch_kv *kv = r->segs[0].kv;
    uint32_t hd = hp->head_dim, kvd = s_kvdim(hp), rows = kv->n_rows ? kv->n_rows : kv->n_ctx;
    uint32_t chunks = (s->kt_n + S_KT_CHUNK - 1) / S_KT_CHUNK;
    size_t one = arch_attn_kt_floats(s->kt_n, hd);
    for (;;) {
        uint32_t j = atomic_fetch_add_explicit(&s->next, 1, memory_order_relaxed);
        if (j >= hp->n_head_kv * chunks)
            break;
        uint32_t kh = j / chunks, c = j % chunks, e = c * S_KT_CHUNK;
        uint32_t n = s->kt_n - e < S_KT_CHUNK ? s->kt_n - e : S_KT_CHUNK;
        arch_attn_kt(s->kt + kh * one + (size_t)e * hd, kv->k + (size_t)kh * hd, kvd, rows,
                     s->kt_lo + e, n, hd);
    }
}

/* One (position, KV group's heads) an item, the latest positions (the longest) first, each
 * thread taking the next item when done: the items' lengths grow with the position, and a
 * fixed split left threads waiting on each other. Each item writes only its heads' outputs,
 * so the bits depend on neither the split nor the order. */
static void s_group_task(void *arg, int tid, int nt)
{
    (void)nt;
    arch_run *r = arg;
    s_run *s = r->fam;
    const arch_hparams *hp = &r->m->hp;
    const arch_seg *sg = &r->segs[0];
    const arch_kv *kv = sg->kv;
    uint32_t hd = hp->head_dim, qd = s_qdim(hp), kvd = s_kvdim(hp);
    uint32_t group = hp->n_head / hp->n_head_kv;
    size_t one = arch_attn_kt_floats(s->kt_n, hd);
    float *w = s->scores + (size_t)tid * s->scores_row;
    arch_attn_keys keys = { .stride = kvd, .rows = kv->n_rows ? kv->n_rows : kv->n_ctx,
                            .kt_lo = s->kt_lo, .hd = hd,
                            .scale = hp->attn_scale_q ? 1.0f : hp->attn_scale,
                            .softcap = hp->attn_softcap };
    for (;;) {
        uint32_t j = atomic_fetch_add_explicit(&s->next, 1, memory_order_relaxed);
        if (j >= r->n * hp->n_head_kv)
            break;
        uint32_t p = r->n - 1 - j / hp->n_head_kv, kh = j % hp->n_head_kv;
        uint32_t pos = sg->pos0 + p, h = kh * group;
        /* causal, and a local layer's window (as s_attn_task) */
        uint32_t t0 = s->window && pos >= s->window ? pos - s->window + 1 : 0;
        keys.k = kv->k + (size_t)kh * hd;
        keys.v = kv->v + (size_t)kh * hd;
        keys.kt = s->kt + kh * one;
        arch_attn_group(&keys, s->q + (size_t)p * qd + (size_t)h * hd, group, t0, pos + 1 - t0,
                        s->vec[DEC_SINKS] ? s->vec[DEC_SINKS] + h : NULL, w,
                        s->att + (size_t)p * qd + (size_t)h * hd);
    }
}

static void s_add(float *x, const float *b, size_t n)
{
    for (size_t i = 0; i < n; i++)
        x[i] += b[i];
}

static int s_attention(arch_run *r)
{
    s_run *s = r->fam;
    const arch_model *m = r->m;
    const arch_hparams *hp = &m->hp;
    uint32_t qd = s_qdim(hp), kvd = s_kvdim(hp), hd = hp->head_dim;
    for (uint32_t p = 0; p < r->n; p++) {
        float *q = s->q + (size_t)p * qd, *k = s->k + (size_t)p * kvd, *v = s->v + (size_t)p * kvd;
        if (s->fused_qkv) { /* q's rows, then k's, then v's (llama.cpp's build_qkv views) */
            const float *row = s->qkv + (size_t)p * (qd + 2 * kvd);
            memcpy(q, row, qd * sizeof(float));
            memcpy(k, row + qd, kvd * sizeof(float));
            memcpy(v, row + qd + kvd, kvd * sizeof(float));
        }
        if (s->vec[DEC_BQ])
            s_add(q, s->vec[DEC_BQ], qd);
        if (s->vec[DEC_BK])
            s_add(k, s->vec[DEC_BK], kvd);
        if (s->vec[DEC_BV])
            s_add(v, s->vec[DEC_BV], kvd);
        /* qwen3 / gemma3: each head's q and k through an rmsnorm of its own (head_dim wide) */
        if (s->vec[DEC_Q_NORM])
            for (uint32_t h = 0; h < hp->n_head; h++)
                arch_rmsnorm(q + (size_t)h * hd, s->vec[DEC_Q_NORM], q + (size_t)h * hd, hd,
                             hp->norm_eps);
        if (s->vec[DEC_K_NORM])
            for (uint32_t h = 0; h < hp->n_head_kv; h++)
                arch_rmsnorm(k + (size_t)h * hd, s->vec[DEC_K_NORM], k + (size_t)h * hd, hd,
                             hp->norm_eps);
        uint32_t pos;
        arch_kv *kv = s_row(r, p, &pos);
        s->rope.factors = s_factors(m, kv->n_ctx);
        arch_rope(q, hp->n_head, hd, &s->rope, pos);
        arch_rope(k, hp->n_head_kv, hd, &s->rope, pos);
        if (hp->attn_scale_q) /* gemma3's graph scales q itself (ggml_scale) */
            for (uint32_t i = 0; i < qd; i++)
                q[i] *= hp->attn_scale;
        size_t row = pos % (kv->n_rows ? kv->n_rows : kv->n_ctx);
        memcpy(kv->k + row * kvd, k, kvd * sizeof(float));
        memcpy(kv->v + row * kvd, v, kvd * sizeof(float));
    }
    char why[160];
    if (s->kt_n) {
        atomic_store_explicit(&s->next, 0, memory_order_relaxed);
        if (quant_pool_claim(r->nthreads, s_kt_task, r, why, sizeof why))
            return arch_run_fail(r, "layer %u: attention: %s", r->layer, why);
        atomic_store_explicit(&s->next, 0, memory_order_relaxed);
        if (quant_pool_claim(r->nthreads, s_group_task, r, why, sizeof why))
            return arch_run_fail(r, "layer %u: attention: %s", r->layer, why);
        return 0;
    }
    if (quant_pool_run(r->nthreads, s_attn_task, r, why, sizeof why))
        return arch_run_fail(r, "layer %u: attention: %s", r->layer, why);
    return 0;
}

/* GELU (tanh form) as ggml's CPU geglu computes it: through a table of f16 results indexed by
 * the f16 rounding of x (ggml-cpu's GGML_GELU_FP16), 0 below -10, x above 10. */
static float s_gelu(float x)
{
    if (x <= -10.0f)
        return 0.0f;
    if (x >= 10.0f)
        return x;
    float f = quant_f16_to_f32(quant_f32_to_f16(x));
    const float a = 0.044715f, k = 0.79788456080286535587989211986876f;
    float g = 0.5f * f * (1.0f + tanhf(k * f * (1.0f + a * f * f)));
    return quant_f16_to_f32(quant_f32_to_f16(g));
}

/* The steps between the products that work a position at a time, on the pool's threads, runs
 * of S_POS_CHUNK positions claimed in turn: one thread ran them while the other waited (the norms
 * and SwiGLU's e^ over 512 x 5632 values, 1.1-1.5% of a 1-thread Q4_K_M prompt's samples
 * each, so up to ~3-5% of the 2-thread wall time). Every position's operations are the ones
 * the one-thread loops did, in their order: the same bits whatever the split. */
enum { S_JOB_NORM_IN, S_JOB_FFN_IN, S_JOB_ACT, S_JOB_END };

static void s_act(s_run *s, const arch_hparams *hp, uint32_t p)
{
    uint32_t ff = hp->n_ff;
    float *gate = s->gate + (size_t)p * ff;
    const float *up = s->up + (size_t)p * ff;
    if (s->fused_gu) { /* gate's n_ff values, then up's (ggml_swiglu on the fused rows) */
        memcpy(gate, s->gu + (size_t)p * 2 * ff, ff * sizeof(float));
        memcpy(s->up + (size_t)p * ff, s->gu + ((size_t)p * 2 + 1) * ff, ff * sizeof(float));
    }
    if (hp->ffn_act == ARCH_ACT_GELU) {
        for (uint32_t i = 0; i < ff; i++)
            gate[i] = s_gelu(gate[i]) * up[i];
        return;
    }
    /* SwiGLU: silu(gate) . up, silu(g) = g / (1 + e^-g) as ggml's ggml_silu_f32 */
    quant_silu_mul(gate, up, ff);
}

/* The job on positions p0 .. p1 - 1; the norms a run of rows at once (arch_rmsnorm_rows) */
static void s_pos_range(arch_run *r, uint32_t p0, uint32_t p1)
{
    s_run *s = r->fam;
    const arch_hparams *hp = &r->m->hp;
    uint32_t d = hp->dim, n = p1 - p0;
    float *x = r->x + (size_t)p0 * d, *xb = s->xb + (size_t)p0 * d;
    float *o = s->o + (size_t)p0 * d, *down = s->down + (size_t)p0 * d;
    switch (s->job) {
    case S_JOB_NORM_IN:
        arch_rmsnorm_rows(x, s->vec[DEC_ATTN_NORM], xb, d, hp->norm_eps, n);
        return;
    case S_JOB_FFN_IN:
        if (s->vec[DEC_BO]) /* gpt-oss: wo's bias, then the residual (build_attn's wo_b) */
            for (uint32_t p = 0; p < n; p++)
                s_add(o + (size_t)p * d, s->vec[DEC_BO], d);
        if (s->vec[DEC_POST_ATTN_NORM])
            arch_rmsnorm_rows(o, s->vec[DEC_POST_ATTN_NORM], o, d, hp->norm_eps, n);
        s_add(x, o, (size_t)n * d);
        arch_rmsnorm_rows(x, s->vec[DEC_FFN_NORM], xb, d, hp->norm_eps, n);
        return;
    case S_JOB_ACT:
        for (uint32_t p = p0; p < p1; p++)
            s_act(s, hp, p);
        return;
    default: /* S_JOB_END */
        if (s->vec[DEC_POST_FFN_NORM])
            arch_rmsnorm_rows(down, s->vec[DEC_POST_FFN_NORM], down, d, hp->norm_eps, n);
        s_add(x, down, (size_t)n * d);
    }
}

/* Positions a thread claims at a time: a multiple of arch_rmsnorm_rows' 8 */
#define S_POS_CHUNK 16u

static void s_pos_task(void *arg, int tid, int nt)
{
    (void)tid;
    (void)nt;
    arch_run *r = arg;
    s_run *s = r->fam;
    for (;;) {
        uint32_t p0 = atomic_fetch_add_explicit(&s->pnext, 1, memory_order_relaxed) * S_POS_CHUNK;
        if (p0 >= r->n)
            return;
        s_pos_range(r, p0, p0 + S_POS_CHUNK < r->n ? p0 + S_POS_CHUNK : r->n);
    }
}

/* job over the run's positions: on the pool from 4 positions up (a decoding step's one
 * position is not worth a wake-up) */
static int s_pos_run(arch_run *r, int job)
{
    s_run *s = r->fam;
    s->job = job;
    if (r->nthreads < 2 || r->n < 4) {
        s_pos_range(r, 0, r->n);
        return 0;
    }
    char why[160];
    atomic_store_explicit(&s->pnext, 0, memory_order_relaxed);
    if (quant_pool_claim(r->nthreads, s_pos_task, r, why, sizeof why))
        return arch_run_fail(r, "layer %u: %s", r->layer, why);
    return 0;
}

int arch_dec_before(arch_run *r, uint32_t tensor)
{
    s_run *s = r->fam;
    switch (r->m->layers[r->layer].t[tensor].role) {
    case DEC_Q:
    case DEC_QKV:
        return s_pos_run(r, S_JOB_NORM_IN);
    case DEC_O:
        return s_attention(r);
    case DEC_GATE:
    case DEC_GATE_UP:
    case DEC_GATE_INP:
        return s_pos_run(r, S_JOB_FFN_IN);
    case DEC_DOWN:
        return s_pos_run(r, S_JOB_ACT);
    case DEC_GATE_EXPS: /* the router's logits are in: each position's experts */
        arch_moe_route_all(s->moe, r->n, s->vec[DEC_GATE_INP_B]);
        return 0;
    case DEC_DOWN_EXPS:
        arch_moe_act(s->moe, r->n, s->vec[DEC_GATE_EXPS_B], s->vec[DEC_UP_EXPS_B]);
        return 0;
    default:
        return 0; /* k, v, up: same input as the tensor before them */
    }
}

int arch_dec_rows(arch_run *r, uint32_t tensor, uint64_t r0, uint64_t n, const void *rows)
{
    s_run *s = r->fam;
    const arch_layer *l = &r->m->layers[r->layer];
    const arch_tensor *t = &l->t[tensor];
    const float *X;
    float *Y;
    char why[160];
    if (t->n_expert) { /* the routed experts' rows of this range only */
        int which = t->role == DEC_GATE_EXPS ? 0 : t->role == DEC_UP_EXPS ? 1 : 2;
        if (arch_moe_rows(s->moe, which, t, r0, n, rows, s->xb, r->n, r->nthreads, why,
                          sizeof why))
            return arch_run_fail(r, "layer %u: %s rows %llu..+%llu: %s", r->layer, t->name,
                                 (unsigned long long)r0, (unsigned long long)n, why);
        return 0;
    }
    switch (t->role) {
    case DEC_Q: X = s->xb; Y = s->q; break;
    case DEC_K: X = s->xb; Y = s->k; break;
    case DEC_V: X = s->xb; Y = s->v; break;
    case DEC_O: X = s->att; Y = s->o; break;
    case DEC_GATE: X = s->xb; Y = s->gate; break;
    case DEC_UP: X = s->xb; Y = s->up; break;
    case DEC_QKV: X = s->xb; Y = s->qkv; break;
    case DEC_GATE_UP: X = s->xb; Y = s->gu; break;
    case DEC_GATE_INP: X = s->xb; Y = arch_moe_logits(s->moe); break;
    default: X = s->gate; Y = s->down; break;
    }
    int whole = r0 == 0 && n == t->rows;
    /* a row range's products land in tmp (n positions x n rows), then in their columns of Y */
    if (quant_matmat((quant_type)t->type, n, t->cols, rows, r->n, X, whole ? Y : s->tmp,
                     r->nthreads, why, sizeof why))
        return arch_run_fail(r, "layer %u: %s rows %llu..+%llu: %s", r->layer, t->name,
                             (unsigned long long)r0, (unsigned long long)n, why);
    if (!whole)
        for (uint32_t p = 0; p < r->n; p++)
            memcpy(Y + (size_t)p * t->rows + r0, s->tmp + (size_t)p * n, n * sizeof(float));
    return 0;
}

uint32_t arch_dec_experts(const arch_run *r, uint8_t *used)
{
    const s_run *s = r->fam;
    return s->moe ? arch_moe_used(s->moe, r->n, used) : 0;
}

int arch_dec_end(arch_run *r)
{
    s_run *s = r->fam;
    if (s->moe)
        arch_moe_out(s->moe, r->n, s->down, s->vec[DEC_DOWN_EXPS_B]);
    return s_pos_run(r, S_JOB_END);
}
