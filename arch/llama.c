/* llama.c — the llama family and its qwen2 variant: attention with RoPE over a KV cache,
 * SwiGLU FFN; the table entries arch_llama_ops and arch_qwen2_ops. arch/
 *
 * One layer, in the order its tensors are consumed (llama2.c's forward() is the model):
 *   before(q)    xb = rmsnorm(x) . attn_norm
 *   rows q,k,v   q, k, v = W xb for every position (quant_matmat over the n positions)
 *   before(o)    + bias (qwen2), RoPE on q and k, k and v into the cache, attention -> att
 *   rows o       o = Wo att
 *   before(gate) x += o; xb = rmsnorm(x) . ffn_norm
 *   rows gate,up gate, up = W xb
 *   before(down) gate = silu(gate) . up
 *   rows down    down = Wd gate
 *   end          x += down
 * qwen2 is llama with biases on Q, K and V and NEOX RoPE: its own table entry, reusing every
 * function here, with the difference decided at open (its layers list the biases as vectors,
 * its hp.rope_type is NEOX), so nothing below asks which family it runs.
 * RoPE as llama.cpp's llama_model_rope_type gives it: LLM_ARCH_LLAMA is LLAMA_ROPE_TYPE_NORM
 * (adjacent pairs 2i, 2i+1), LLM_ARCH_QWEN2 is LLAMA_ROPE_TYPE_NEOX (pairs i, i + rope_dim/2).
 * The angles are made as ggml's rope cache makes them (theta_scale = base^(-2/rope_dim),
 * multiplied in pair by pair from theta = pos, divided by rope_freqs, times the linear
 * freq_scale), so they carry the same f32 roundings as llama.cpp's.
 *
 * Determinism: every product row is one quant_vec_dot (fixed order, same bits for any row
 * range, thread count and batch: quant.h); norms, attention and softmax are fixed-order loops
 * per (position, head), and a position's attention reads only cache positions 0..pos, all
 * written before any attention runs. So a batch of n positions gives the bits of n single
 * steps, and a layer streamed by row ranges gives the bits of a resident one.
 */
#include <immintrin.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <fcntl.h>
#include <unistd.h>

#include "arch/arch_int.h"
#include "quant/quant.h"

#define S_MAX_VOCAB (1u << 24)
#define S_MAX_FF (1u << 20)
#define S_MAX_HEADS 1024

/* A layer's tensors, by position: vectors first (norms, then qwen2's biases), then the
 * matrices in the order the forward pass consumes them. */
enum { LL_V_ATTN_NORM = 0, LL_V_FFN_NORM = 1, LL_V_BQ = 2, LL_V_BK = 3, LL_V_BV = 4 };
enum { LL_M_Q = 0, LL_M_K, LL_M_V, LL_M_O, LL_M_GATE, LL_M_UP, LL_M_DOWN, LL_M_COUNT };

/* A run's scratch: the layer's vectors in f32, then the activations of n positions. */
typedef struct {
    float *vec[5];                /* attn_norm, ffn_norm (dim); bq (dim), bk, bv (kv_dim) */
    float *xb;                    /* (max_pos, dim) normed input of q/k/v, then of gate/up */
    float *q, *att, *o, *down;    /* (max_pos, dim) */
    float *k, *v;                 /* (max_pos, kv_dim) */
    float *gate, *up;             /* (max_pos, n_ff); gate becomes silu(gate) . up */
    float *tmp;                   /* (max_pos, max rows of a matrix): a row range's products */
    float *scores;                /* (nthreads, scores_row) attention weights */
    uint32_t scores_ctx;          /* floats allocated */
    uint32_t scores_row;          /* the longest cache of this pass's sessions */
} s_run;

/* ---------------------------------------------------------------- opening */

static int s_u32(const gguf_file *g, const char *arch, const char *key, int required,
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

static int s_f32(const gguf_file *g, const char *arch, const char *key, int required, float dflt,
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
        if (s_f32(g, hp->name, "rope.scaling.factor", 1, 0, &factor, err, errlen))
            return -1;
    } else if (s_f32(g, hp->name, "rope.scale_linear", 0, 0, &factor, err, errlen)) {
        return -1;
    }
    if (s_u32(g, hp->name, "rope.scaling.original_context_length", 0, 0, &hp->rope_orig_ctx,
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
    } else {
        arch_err(err, errlen, g->path,
                 "%s.rope.scaling.type '%s' is not supported (supported: none, linear, and "
                 "llama3 through rope_freqs.weight)", hp->name, type);
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
    arch_tensor t;
    uint32_t npair = hp->rope_dim / 2;
    if (arch_tensor_get(g, "rope_freqs.weight", 0, 1, npair, &t, err, errlen))
        return -1;
    if (t.type != QUANT_F32) {
        arch_err(err, errlen, g->path, "tensor 'rope_freqs.weight': type %s, f32 expected",
                 quant_type_name(t.type));
        return -1;
    }
    if (!(m->rope_freqs = malloc(npair * sizeof(float)))) {
        arch_err(err, errlen, g->path, "out of memory");
        return -1;
    }
    int fd = open(g->path, O_RDONLY | O_CLOEXEC);
    ssize_t got = fd < 0 ? -1 : pread(fd, m->rope_freqs, npair * sizeof(float), (off_t)t.off);
    if (fd >= 0)
        close(fd);
    if (got != (ssize_t)(npair * sizeof(float))) {
        arch_err(err, errlen, g->path, "cannot read tensor 'rope_freqs.weight'");
        return -1;
    }
    for (uint32_t i = 0; i < npair; i++)
        if (!isfinite(m->rope_freqs[i]) || m->rope_freqs[i] <= 0) {
            arch_err(err, errlen, g->path, "rope_freqs.weight[%u] = %g: must be finite and > 0",
                     i, (double)m->rope_freqs[i]);
            return -1;
        }
    hp->rope_scaling = ARCH_ROPE_LLAMA3;
    return 0;
}

static int s_hparams(arch_model *m, int rope_freqs_ok, char *err, size_t errlen)
{
    const gguf_file *g = m->g;
    arch_hparams *hp = &m->hp;
    const char *a = hp->name;
    if (s_u32(g, a, "block_count", 1, 0, &hp->n_layers, err, errlen) ||
        s_u32(g, a, "embedding_length", 1, 0, &hp->dim, err, errlen) ||
        s_u32(g, a, "feed_forward_length", 1, 0, &hp->n_ff, err, errlen) ||
        s_u32(g, a, "attention.head_count", 1, 0, &hp->n_head, err, errlen) ||
        s_u32(g, a, "attention.head_count_kv", 0, hp->n_head, &hp->n_head_kv, err, errlen) ||
        s_u32(g, a, "context_length", 1, 0, &hp->n_ctx_train, err, errlen) ||
        s_f32(g, a, "attention.layer_norm_rms_epsilon", 1, 0, &hp->norm_eps, err, errlen) ||
        s_f32(g, a, "rope.freq_base", 0, 10000.0f, &hp->rope_freq_base, err, errlen))
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
    uint32_t kl = hp->head_dim;
    if (s_u32(g, a, "attention.key_length", 0, hp->head_dim, &kl, err, errlen) ||
        s_u32(g, a, "rope.dimension_count", 0, hp->head_dim, &hp->rope_dim, err, errlen))
        return -1;
    if (kl != hp->head_dim) {
        arch_err(err, errlen, g->path,
                 "%s.attention.key_length %u differs from embedding_length / head_count = %u: "
                 "not supported", a, kl, hp->head_dim);
        return -1;
    }
    if (hp->rope_dim < 2 || hp->rope_dim > hp->head_dim || hp->rope_dim % 2) {
        arch_err(err, errlen, g->path, "%s.rope.dimension_count %u must be even and 2..%u", a,
                 hp->rope_dim, hp->head_dim);
        return -1;
    }
    return s_rope_scaling(m, rope_freqs_ok, err, errlen);
}

/* Hyper-parameters and the tensors outside the layers. rope_freqs_ok: Llama 3.1's
 * rope_freqs.weight is read (llama.cpp reads it for llama only and refuses it elsewhere). */
static int s_open(arch_model *m, arch_rope_type rope_type, int rope_freqs_ok, char *err,
                  size_t errlen)
{
    const gguf_file *g = m->g;
    arch_hparams *hp = &m->hp;
    hp->rope_type = rope_type;
    if (s_hparams(m, rope_freqs_ok, err, errlen))
        return -1;
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

static int s_llama_open(arch_model *m, char *err, size_t errlen)
{
    return s_open(m, ARCH_ROPE_NORM, 1, err, errlen);
}

static int s_qwen2_open(arch_model *m, char *err, size_t errlen)
{
    return s_open(m, ARCH_ROPE_NEOX, 0, err, errlen);
}

/* Layer l's tensors in consumption order (the LL_V_ and LL_M_ positions); qkv_bias: qwen2's
 * attn_{q,k,v}.bias after the norms. */
static int s_layer(const arch_model *m, uint32_t l, arch_layer *ly, int qkv_bias, char *err,
                   size_t errlen)
{
    const arch_hparams *hp = &m->hp;
    uint32_t d = hp->dim, kvd = hp->n_head_kv * hp->head_dim, ff = hp->n_ff;
    const struct {
        const char *name;
        int matrix;
        uint32_t rows, cols;
    } want[] = {
        { "attn_norm.weight", 0, 1, d },   { "ffn_norm.weight", 0, 1, d },
        { "attn_q.bias", 0, 1, d },        { "attn_k.bias", 0, 1, kvd },
        { "attn_v.bias", 0, 1, kvd },      { "attn_q.weight", 1, d, d },
        { "attn_k.weight", 1, kvd, d },    { "attn_v.weight", 1, kvd, d },
        { "attn_output.weight", 1, d, d }, { "ffn_gate.weight", 1, ff, d },
        { "ffn_up.weight", 1, ff, d },     { "ffn_down.weight", 1, d, ff },
    };
    for (size_t i = 0; i < sizeof want / sizeof want[0]; i++) {
        if (!qkv_bias && i >= LL_V_BQ && i <= LL_V_BV)
            continue; /* llama has no Q/K/V biases */
        char name[ARCH_NAME_MAX];
        snprintf(name, sizeof name, "blk.%u.%s", l, want[i].name);
        if (arch_tensor_get(m->g, name, want[i].matrix, want[i].rows, want[i].cols,
                            &ly->t[ly->n_tensors], err, errlen))
            return -1;
        if (!want[i].matrix)
            ly->n_vectors++;
        ly->n_tensors++;
    }
    return 0;
}

static int s_llama_layer(const arch_model *m, uint32_t l, arch_layer *ly, char *err,
                         size_t errlen)
{
    return s_layer(m, l, ly, 0, err, errlen);
}

static int s_qwen2_layer(const arch_model *m, uint32_t l, arch_layer *ly, char *err,
                         size_t errlen)
{
    return s_layer(m, l, ly, 1, err, errlen);
}

static void s_cost(const arch_model *m, uint32_t l, arch_cost *c)
{
    arch_cost_matrices(&m->layers[l], c);
    /* per cached position: q.k and a.v, head_dim multiply-adds each, for every head */
    c->attn_flops_per_pos_ctx = 2.0 * 2.0 * m->hp.n_head * m->hp.head_dim;
    /* K and V in f32 (see arch_kv) */
    c->kv_bytes_per_pos = 2ull * m->hp.n_head_kv * m->hp.head_dim * sizeof(float);
}

/* ---------------------------------------------------------------- running */

static uint64_t s_run_bytes(const arch_model *m, uint32_t max_pos)
{
    const arch_hparams *hp = &m->hp;
    uint64_t P = max_pos, d = hp->dim, kvd = (uint64_t)hp->n_head_kv * hp->head_dim,
             ff = hp->n_ff, wide = d > ff ? d : ff;
    /* s_run_init: xb q att o down (d), k v (kvd), gate up (ff), tmp (wide); vectors */
    return (P * (5 * d + 2 * kvd + 2 * ff + wide) + 3 * d + 2 * kvd) * sizeof(float);
}

static int s_run_init(arch_run *r, char *err, size_t errlen)
{
    const arch_hparams *hp = &r->m->hp;
    size_t P = r->max_pos, d = hp->dim, kvd = (size_t)hp->n_head_kv * hp->head_dim,
           ff = hp->n_ff;
    size_t wide = d > ff ? d : ff;
    s_run *s = r->fam = calloc(1, sizeof(s_run));
    if (s) {
        float **bufs[] = { &s->xb, &s->q, &s->att, &s->o, &s->down, &s->k, &s->v,
                           &s->gate, &s->up, &s->tmp };
        size_t sizes[] = { P * d, P * d, P * d, P * d, P * d, P * kvd, P * kvd, P * ff, P * ff,
                           P * wide };
        for (size_t i = 0; i < sizeof sizes / sizeof sizes[0]; i++)
            if (!(*bufs[i] = malloc(sizes[i] * sizeof(float))))
                goto oom;
        size_t vs[] = { d, d, d, kvd, kvd };
        for (int i = 0; i < 5; i++)
            if (!(s->vec[i] = malloc(vs[i] * sizeof(float))))
                goto oom;
        return 0;
    }
oom:
    arch_err(err, errlen, r->m->g->path, "out of memory for a run of %u positions", r->max_pos);
    return -1;
}

static void s_run_free(arch_run *r)
{
    s_run *s = r->fam;
    if (!s)
        return;
    float *bufs[] = { s->xb, s->q, s->att, s->o, s->down, s->k, s->v, s->gate, s->up, s->tmp,
                      s->scores, s->vec[0], s->vec[1], s->vec[2], s->vec[3], s->vec[4] };
    for (size_t i = 0; i < sizeof bufs / sizeof bufs[0]; i++)
        free(bufs[i]);
    free(s);
    r->fam = NULL;
}

static int s_begin(arch_run *r, char *err, size_t errlen)
{
    s_run *s = r->fam;
    const arch_model *m = r->m;
    const arch_hparams *hp = &m->hp;
    const arch_layer *l = &m->layers[r->layer];
    uint32_t kvd = hp->n_head_kv * hp->head_dim, ctx = 0;
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
        ctx = kv->n_ctx > ctx ? kv->n_ctx : ctx;
    }
    s->scores_row = ctx;
    for (uint32_t i = 0; i < l->n_vectors; i++) {
        const arch_tensor *t = &l->t[i];
        char why[160];
        if (!r->vectors[i] || quant_dequantize_row((quant_type)t->type, r->vectors[i], s->vec[i],
                                                   t->cols, why, sizeof why)) {
            arch_err(err, errlen, m->g->path, "tensor '%s': %s", t->name,
                     r->vectors[i] ? why : "no data");
            return -1;
        }
    }
    /* attention weights: one row of the longest cache's length per thread */
    size_t need = (size_t)r->nthreads * ctx;
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

/* RoPE on one position's heads (n_heads x head_dim, in place) at absolute position pos. */
static void s_rope(const arch_model *m, float *v, uint32_t n_heads, uint32_t pos)
{
    const arch_hparams *hp = &m->hp;
    uint32_t hd = hp->head_dim, npair = hp->rope_dim / 2;
    int neox = hp->rope_type == ARCH_ROPE_NEOX;
    float theta_scale = powf(hp->rope_freq_base, -2.0f / (float)hp->rope_dim);
    float freq_scale = hp->rope_scaling == ARCH_ROPE_LINEAR ? 1.0f / hp->rope_scale_factor : 1.0f;
    float theta = (float)pos;
    for (uint32_t i = 0; i < npair; i++) {
        float ff = m->rope_freqs ? m->rope_freqs[i] : 1.0f;
        float t = freq_scale * (theta / ff);
        float c = cosf(t), s = sinf(t);
        theta *= theta_scale;
        uint32_t a = neox ? i : 2 * i, b = neox ? i + npair : 2 * i + 1;
        for (uint32_t h = 0; h < n_heads; h++) {
            float *x = v + (size_t)h * hd;
            float x0 = x[a], x1 = x[b];
            x[a] = x0 * c - x1 * s;
            x[b] = x0 * s + x1 * c;
        }
    }
}

/* q . k in one fixed order: 8 interleaved partial sums (lane j takes i = j mod 8), then a fixed
 * tree, then the tail. One running sum made this a chain of dependent adds, ~4 cycles each:
 * after a 512-token prompt it cost ~26 ms of a q8_0 TinyLlama token (86 against 60 ms, 1
 * thread, 2026-12-01); independent lanes let the compiler keep 8 in flight or vectorize. */
static float s_dot8(const float *a, const float *b, uint32_t n)
{
    float l[8] = { 0 };
    uint32_t i = 0;
    for (; i + 8 <= n; i += 8)
        for (uint32_t j = 0; j < 8; j++)
            l[j] += a[i + j] * b[i + j];
    float s = ((l[0] + l[4]) + (l[2] + l[6])) + ((l[1] + l[5]) + (l[3] + l[7]));
    for (; i < n; i++)
        s += a[i] * b[i];
    return s;
}

/* AVX twins of s_dot8 and of the weighted sum of V rows: the same 8 lanes, the same tree,
 * each element's multiply then add in the same order (no fma in the target, and -std=c11
 * contracts nothing), so the bits are the scalar code's on any machine; picked once by cpuid.
 * The baseline x86-64 build ran both one float at a time: attention was 32% of a q8_0
 * TinyLlama run with a 512-token prompt and 24 generated (perf, 2 threads, 2026-12-01). */

/* s_dot8's tree on the 8 lanes of v: ((l0 + l4) + (l2 + l6)) + ((l1 + l5) + (l3 + l7)). */
__attribute__((target("avx"))) static inline float s_tree8(__m256 v)
{
    __m128 a = _mm_add_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
    __m128 b = _mm_add_ps(a, _mm_movehl_ps(a, a)); /* (l0+l4)+(l2+l6), (l1+l5)+(l3+l7) */
    return _mm_cvtss_f32(_mm_add_ss(b, _mm_shuffle_ps(b, b, 1)));
}

/* w[t] = s_dot8(q, k_t, hd) * scale for t < len, k_t = k + t * stride. Four keys at a time:
 * each key's sum is still one chain in s_dot8's order, but four chains run side by side (one
 * chain waited 4 cycles an add: 32 a 64-wide head, 360k heads x keys a TinyLlama token at
 * 512 positions). */
__attribute__((target("avx"))) static void s_scores_avx(const float *q, const float *k,
                                                        size_t stride, uint32_t len,
                                                        uint32_t hd, float scale, float *w)
{
    uint32_t t = 0, h8 = hd / 8 * 8;
    for (; t + 4 <= len; t += 4) {
        const float *k0 = k + (size_t)t * stride, *k1 = k0 + stride, *k2 = k1 + stride,
                    *k3 = k2 + stride;
        __m256 a0 = _mm256_setzero_ps(), a1 = a0, a2 = a0, a3 = a0;
        for (uint32_t i = 0; i < h8; i += 8) {
            __m256 qv = _mm256_loadu_ps(q + i);
            a0 = _mm256_add_ps(a0, _mm256_mul_ps(qv, _mm256_loadu_ps(k0 + i)));
            a1 = _mm256_add_ps(a1, _mm256_mul_ps(qv, _mm256_loadu_ps(k1 + i)));
            a2 = _mm256_add_ps(a2, _mm256_mul_ps(qv, _mm256_loadu_ps(k2 + i)));
            a3 = _mm256_add_ps(a3, _mm256_mul_ps(qv, _mm256_loadu_ps(k3 + i)));
        }
        float s0 = s_tree8(a0), s1 = s_tree8(a1), s2 = s_tree8(a2), s3 = s_tree8(a3);
        for (uint32_t i = h8; i < hd; i++) {
            s0 += q[i] * k0[i];
            s1 += q[i] * k1[i];
            s2 += q[i] * k2[i];
            s3 += q[i] * k3[i];
        }
        w[t] = s0 * scale;
        w[t + 1] = s1 * scale;
        w[t + 2] = s2 * scale;
        w[t + 3] = s3 * scale;
    }
    for (; t < len; t++) {
        const float *kt = k + (size_t)t * stride;
        __m256 a = _mm256_setzero_ps();
        for (uint32_t i = 0; i < h8; i += 8)
            a = _mm256_add_ps(a, _mm256_mul_ps(_mm256_loadu_ps(q + i), _mm256_loadu_ps(kt + i)));
        float s0 = s_tree8(a);
        for (uint32_t i = h8; i < hd; i++)
            s0 += q[i] * kt[i];
        w[t] = s0 * scale;
    }
}

/* out[0..hd) = sum over t of (w[t] * inv) * v_t, t in order, each element starting from 0.
 * v_t = v + t * stride. */
static void s_wsum(float *out, const float *w, float inv, const float *v, size_t stride,
                   uint32_t len, uint32_t hd)
{
    memset(out, 0, hd * sizeof(float));
    for (uint32_t t = 0; t < len; t++) {
        const float *vt = v + (size_t)t * stride;
        float a = w[t] * inv;
        for (uint32_t i = 0; i < hd; i++)
            out[i] += a * vt[i];
    }
}

/* Blocks of 64 elements in 8 registers over every t: 8 independent chains keep the adder
 * busy (4 chains waited on its latency; the scalar loop stored every element back after
 * every t). */
__attribute__((target("avx"))) static void s_wsum_avx(float *out, const float *w, float inv,
                                                      const float *v, size_t stride,
                                                      uint32_t len, uint32_t hd)
{
    uint32_t i0 = 0;
    for (; i0 + 64 <= hd; i0 += 64) {
        __m256 o[8];
        for (int j = 0; j < 8; j++)
            o[j] = _mm256_setzero_ps();
        for (uint32_t t = 0; t < len; t++) {
            const float *vt = v + (size_t)t * stride + i0;
            __m256 a = _mm256_set1_ps(w[t] * inv);
            for (int j = 0; j < 8; j++)
                o[j] = _mm256_add_ps(o[j], _mm256_mul_ps(a, _mm256_loadu_ps(vt + 8 * j)));
        }
        for (int j = 0; j < 8; j++)
            _mm256_storeu_ps(out + i0 + 8 * j, o[j]);
    }
    for (; i0 + 32 <= hd; i0 += 32) {
        __m256 o0 = _mm256_setzero_ps(), o1 = o0, o2 = o0, o3 = o0;
        for (uint32_t t = 0; t < len; t++) {
            const float *vt = v + (size_t)t * stride + i0;
            __m256 a = _mm256_set1_ps(w[t] * inv);
            o0 = _mm256_add_ps(o0, _mm256_mul_ps(a, _mm256_loadu_ps(vt)));
            o1 = _mm256_add_ps(o1, _mm256_mul_ps(a, _mm256_loadu_ps(vt + 8)));
            o2 = _mm256_add_ps(o2, _mm256_mul_ps(a, _mm256_loadu_ps(vt + 16)));
            o3 = _mm256_add_ps(o3, _mm256_mul_ps(a, _mm256_loadu_ps(vt + 24)));
        }
        _mm256_storeu_ps(out + i0, o0);
        _mm256_storeu_ps(out + i0 + 8, o1);
        _mm256_storeu_ps(out + i0 + 16, o2);
        _mm256_storeu_ps(out + i0 + 24, o3);
    }
    if (i0 < hd)
        s_wsum(out + i0, w, inv, v + i0, stride, len, hd - i0);
}

static int s_have_avx(void)
{
    static int have = -1;
    if (have < 0)
        have = __builtin_cpu_supports("avx") ? 1 : 0;
    return have;
}

/* Row p of the pass: its session's cache and its absolute position. A pass has a few
 * segments (one per session in it), so a walk over them costs nothing beside a row's work. */
static const arch_kv *s_row(const arch_run *r, uint32_t p, uint32_t *pos)
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
    uint32_t hd = hp->head_dim, kvd = hp->n_head_kv * hd, group = hp->n_head / hp->n_head_kv;
    float *w = s->scores + (size_t)tid * s->scores_row;
    float scale = 1.0f / sqrtf((float)hd);
    uint32_t total = r->n * hp->n_head;
    int avx = s_have_avx();
    for (uint32_t j = (uint32_t)tid; j < total; j += (uint32_t)nt) {
        uint32_t p = j / hp->n_head, h = j % hp->n_head, kh = h / group, pos;
        const arch_kv *kv = s_row(r, p, &pos);
        uint32_t len = pos + 1; /* causal: cache positions 0 .. pos */
        const float *q = s->q + (size_t)p * hp->dim + (size_t)h * hd;
        float mx = -INFINITY;
        if (avx)
            s_scores_avx(q, kv->k + (size_t)kh * hd, kvd, len, hd, scale, w);
        for (uint32_t t = 0; t < len; t++) {
            const float *k = kv->k + (size_t)t * kvd + (size_t)kh * hd;
            if (!avx)
                w[t] = s_dot8(q, k, hd) * scale;
            mx = w[t] > mx ? w[t] : mx;
        }
        float sum = 0;
        for (uint32_t t = 0; t < len; t++) {
            w[t] = expf(w[t] - mx);
            sum += w[t];
        }
        float inv = 1.0f / sum;
        float *out = s->att + (size_t)p * hp->dim + (size_t)h * hd;
        const float *v = kv->v + (size_t)kh * hd;
        (avx ? s_wsum_avx : s_wsum)(out, w, inv, v, kvd, len, hd);
    }
}

static int s_attention(arch_run *r)
{
    s_run *s = r->fam;
    const arch_model *m = r->m;
    const arch_hparams *hp = &m->hp;
    uint32_t d = hp->dim, kvd = hp->n_head_kv * hp->head_dim;
    int bias = m->layers[r->layer].n_vectors > LL_V_BQ; /* qwen2's layers list Q/K/V biases */
    for (uint32_t p = 0; p < r->n; p++) {
        float *q = s->q + (size_t)p * d, *k = s->k + (size_t)p * kvd, *v = s->v + (size_t)p * kvd;
        if (bias) {
            for (uint32_t i = 0; i < d; i++)
                q[i] += s->vec[LL_V_BQ][i];
            for (uint32_t i = 0; i < kvd; i++) {
                k[i] += s->vec[LL_V_BK][i];
                v[i] += s->vec[LL_V_BV][i];
            }
        }
        uint32_t pos;
        const arch_kv *kv = s_row(r, p, &pos);
        s_rope(m, q, hp->n_head, pos);
        s_rope(m, k, hp->n_head_kv, pos);
        memcpy(kv->k + (size_t)pos * kvd, k, kvd * sizeof(float));
        memcpy(kv->v + (size_t)pos * kvd, v, kvd * sizeof(float));
    }
    char why[160];
    if (quant_pool_run(r->nthreads, s_attn_task, r, why, sizeof why))
        return arch_run_fail(r, "layer %u: attention: %s", r->layer, why);
    return 0;
}

static int s_before(arch_run *r, uint32_t tensor)
{
    s_run *s = r->fam;
    const arch_hparams *hp = &r->m->hp;
    uint32_t d = hp->dim, ff = hp->n_ff;
    switch (tensor - r->m->layers[r->layer].n_vectors) {
    case LL_M_Q:
        for (uint32_t p = 0; p < r->n; p++)
            arch_rmsnorm(r->x + (size_t)p * d, s->vec[LL_V_ATTN_NORM], s->xb + (size_t)p * d, d,
                         hp->norm_eps);
        return 0;
    case LL_M_O:
        return s_attention(r);
    case LL_M_GATE:
        for (size_t i = 0; i < (size_t)r->n * d; i++)
            r->x[i] += s->o[i];
        for (uint32_t p = 0; p < r->n; p++)
            arch_rmsnorm(r->x + (size_t)p * d, s->vec[LL_V_FFN_NORM], s->xb + (size_t)p * d, d,
                         hp->norm_eps);
        return 0;
    case LL_M_DOWN:
        /* SwiGLU: silu(gate) . up, silu(g) = g / (1 + e^-g) as ggml's ggml_silu_f32 */
        for (size_t i = 0; i < (size_t)r->n * ff; i++) {
            float g = s->gate[i];
            s->gate[i] = g / (1.0f + expf(-g)) * s->up[i];
        }
        return 0;
    default:
        return 0; /* k, v, up: same input as the tensor before them */
    }
}

static int s_rows(arch_run *r, uint32_t tensor, uint64_t r0, uint64_t n, const void *rows)
{
    s_run *s = r->fam;
    const arch_layer *l = &r->m->layers[r->layer];
    const arch_tensor *t = &l->t[tensor];
    const float *X;
    float *Y;
    switch (tensor - l->n_vectors) {
    case LL_M_Q: X = s->xb; Y = s->q; break;
    case LL_M_K: X = s->xb; Y = s->k; break;
    case LL_M_V: X = s->xb; Y = s->v; break;
    case LL_M_O: X = s->att; Y = s->o; break;
    case LL_M_GATE: X = s->xb; Y = s->gate; break;
    case LL_M_UP: X = s->xb; Y = s->up; break;
    default: X = s->gate; Y = s->down; break;
    }
    char why[160];
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

static int s_end(arch_run *r)
{
    s_run *s = r->fam;
    size_t nd = (size_t)r->n * r->m->hp.dim;
    for (size_t i = 0; i < nd; i++)
        r->x[i] += s->down[i];
    return 0;
}

/* ---------------------------------------------------------------- the table entries */

const arch_ops arch_llama_ops = {
    .name = "llama",
    .props = ARCH_TOKENS | ARCH_KV,
    .open = s_llama_open,
    .layer = s_llama_layer,
    .cost = s_cost,
    .run_bytes = s_run_bytes,
    .run_init = s_run_init,
    .run_free = s_run_free,
    .begin = s_begin,
    .before = s_before,
    .rows = s_rows,
    .end = s_end,
};

/* llama with Q/K/V biases and NEOX RoPE (both decided at open: see the top of the file) */
const arch_ops arch_qwen2_ops = {
    .name = "qwen2",
    .props = ARCH_TOKENS | ARCH_KV,
    .open = s_qwen2_open,
    .layer = s_qwen2_layer,
    .cost = s_cost,
    .run_bytes = s_run_bytes,
    .run_init = s_run_init,
    .run_free = s_run_free,
    .begin = s_begin,
    .before = s_before,
    .rows = s_rows,
    .end = s_end,
};
