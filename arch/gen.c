/* gen.c — random-weight llama (with experts: Mixtral), qwen2, qwen3, qwen3moe, gemma2, gemma3,
 * phi3 GGUF files (swarm gen --arch).
 * arch/
 *
 * Tensors in the order llama.cpp's converter writes them (token_embd, then each block, then
 * output_norm and output), metadata under the architecture's prefix, and, when asked, the
 * tokenizer.* keys of a vocabulary-only file copied with their exact GGUF types (llama.cpp's
 * loader rejects a key of the wrong type), so llama.cpp loads the result as a complete model.
 * Alignment 32 like published files: readers here accept any alignment (the SSD arm reads the
 * 4096-aligned superset of a range), so nothing asks for 4096.
 */
#include "arch/gen.h"

#include <errno.h>
#include <fcntl.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "arch/arch_int.h"
#include "gguf/gguf.h"
#include "base/util.h"
#include "quant/quant.h"

/* uniform on (-a, a) with a = 0.02 sqrt(3): standard deviation 0.02, as initialisers use */
#define S_W_HALF 0.034641016f

/* The families this writes, with what their published files carry. */
typedef struct {
    const char *name;             /* general.architecture */
    int qkv_bias;                 /* attn_{q,k,v}.bias (qwen2) */
    float eps, rope_base;         /* layer_norm_rms_epsilon and rope.freq_base as they ship */
    int rope_freqs;               /* may carry Llama 3.1's rope_freqs.weight */
    int qk_norm;                  /* attn_q_norm, attn_k_norm (qwen3, gemma3) */
    int post_norms;               /* post_attention_norm, post_ffw_norm (gemma3) */
    int key_length;               /* attention.key_length / value_length always written */
    int fused;                    /* attn_qkv and a 2 n_ff ffn_up, no ffn_gate (phi3) */
    int experts;                  /* 0 none; 1 may have experts (llama); 2 must (qwen3moe) */
    int oss;                      /* gpt-oss: o bias, sinks, router and expert biases, its
                                   * post_attention_norm in place of ffn_norm, YaRN, a window */
} s_family;

static const s_family s_families[] = {
    { "llama", 0, 1e-5f, 10000.0f, 1, 0, 0, 0, 0, 1, 0 },
    { "qwen2", 1, 1e-6f, 1000000.0f, 0, 0, 0, 0, 0, 0, 0 },
    { "qwen3", 0, 1e-6f, 1000000.0f, 0, 1, 0, 1, 0, 0, 0 },
    { "qwen3moe", 0, 1e-6f, 1000000.0f, 0, 1, 0, 1, 0, 2, 0 },
    { "gemma2", 0, 1e-6f, 10000.0f, 0, 0, 1, 1, 0, 0, 0 },
    { "gemma3", 0, 1e-6f, 1000000.0f, 0, 1, 1, 1, 0, 0, 0 },
    { "phi3", 0, 1e-5f, 10000.0f, 0, 0, 0, 0, 1, 0, 0 },
    { "gpt-oss", 1, 1e-5f, 150000.0f, 0, 0, 0, 1, 0, 2, 1 },
};

typedef struct {
    char name[ARCH_NAME_MAX];
    int matrix;
    uint32_t rows, cols;
    uint32_t n_expert;            /* > 0: a 3-D [cols, rows, n_expert] expert tensor */
    int f32_2d;                   /* a 2-D f32 tensor (gpt-oss's expert biases) */
    float center, half;           /* values in center +- half */
} s_spec;

/* Copy every tokenizer.* kv of v into w with its type. */
static int s_copy_tokenizer(gguf_writer *w, const gguf_file *v, uint32_t *n_vocab,
                            const char *skip, char *err, size_t errlen)
{
    *n_vocab = 0;
    for (uint64_t i = 0; i < v->n_kv; i++) {
        const gguf_kv *kv = &v->kv[i];
        if (strncmp(kv->key, "tokenizer.", 10) || (skip && !strcmp(kv->key, skip)))
            continue;
        int rc = -1;
        switch (kv->type) {
        case GGUF_T_STRING: rc = gguf_writer_kv_str(w, kv->key, kv->str); break;
        case GGUF_T_UINT32: rc = gguf_writer_kv_u32(w, kv->key, (uint32_t)kv->u64); break;
        case GGUF_T_INT32: rc = gguf_writer_kv_i32(w, kv->key, (int32_t)kv->i64); break;
        case GGUF_T_UINT64: rc = gguf_writer_kv_u64(w, kv->key, kv->u64); break;
        case GGUF_T_FLOAT32: rc = gguf_writer_kv_f32(w, kv->key, (float)kv->f64); break;
        case GGUF_T_BOOL: rc = gguf_writer_kv_bool(w, kv->key, (int)kv->u64); break;
        case GGUF_T_ARRAY:
            if (kv->arr_type == GGUF_T_STRING) {
                rc = gguf_writer_kv_arr_str(w, kv->key, (const char *const *)kv->arr_str,
                                            kv->arr_n);
            } else if (kv->arr_type == GGUF_T_FLOAT32) {
                float *f = malloc((kv->arr_n ? kv->arr_n : 1) * sizeof(float));
                if (f) {
                    for (uint64_t j = 0; j < kv->arr_n; j++)
                        f[j] = (float)kv->arr_f64[j];
                    rc = gguf_writer_kv_arr_f32(w, kv->key, f, kv->arr_n);
                }
                free(f);
            } else if (kv->arr_type == GGUF_T_INT32) {
                int32_t *a = malloc((kv->arr_n ? kv->arr_n : 1) * sizeof(int32_t));
                if (a) {
                    for (uint64_t j = 0; j < kv->arr_n; j++)
                        a[j] = (int32_t)gguf_arr_i64(kv, j);
                    rc = gguf_writer_kv_arr_i32(w, kv->key, a, kv->arr_n);
                }
                free(a);
            } else {
                arch_err(err, errlen, v->path, "key '%s': arrays of GGUF type %u are not copied",
                         kv->key, kv->arr_type);
                return -1;
            }
            if (!strcmp(kv->key, "tokenizer.ggml.tokens"))
                *n_vocab = (uint32_t)kv->arr_n;
            break;
        default:
            arch_err(err, errlen, v->path, "key '%s': GGUF type %u is not copied", kv->key,
                     kv->type);
            return -1;
        }
        if (rc) {
            arch_err(err, errlen, v->path, "key '%s': cannot copy (out of memory?)", kv->key);
            return -1;
        }
    }
    if (!*n_vocab) {
        arch_err(err, errlen, v->path, "no tokenizer.ggml.tokens array: not a vocabulary file");
        return -1;
    }
    return 0;
}

/* Tensor i's values, row by row: splitmix64 seeded per tensor, 24 random bits per value. */
static void s_fill_row(uint64_t *st, float *row, uint32_t n, float center, float half)
{
    for (uint32_t j = 0; j < n; j++) {
        uint32_t r = (uint32_t)(util_splitmix64(st) >> 40); /* 0 .. 2^24 - 1 */
        row[j] = center + half * ((float)r / 8388608.0f - 1.0f);
    }
}

/* arch_gen_opts.confident: token_embd row t times G; output row j plus token_embd's unscaled
 * row s(j), regenerated from its place in tensor 0's stream (splitmix64's state advances by
 * its constant a value, so row t starts at seed + t cols steps). */
static void s_confident_row(const arch_gen_opts *o, const char *name, uint64_t r,
                            uint32_t n_vocab, float *row, uint32_t cols)
{
    if (!strcmp(name, "token_embd.weight")) {
        for (uint32_t j = 0; j < cols; j++)
            row[j] *= o->confident;
        return;
    }
    if (strcmp(name, "output.weight"))
        return;
    uint64_t t = (7919u * r + 1) % n_vocab;
    uint64_t st = (o->seed * 0x9e3779b97f4a7c15ull ^ (1ull << 32)) +
                  t * cols * 0x9e3779b97f4a7c15ull;
    for (uint32_t j = 0; j < cols; j++) {
        uint32_t x = (uint32_t)(util_splitmix64(&st) >> 40);
        row[j] += S_W_HALF * ((float)x / 8388608.0f - 1.0f);
    }
}

/* Llama 3.1's rope scaling as llama.cpp's converter (convert_hf_to_gguf.py, LlamaModel's
 * rope_freqs) bakes it into the file: factor 8, low_freq_factor 1, high_freq_factor 4,
 * original context 8192; pair i's frequency is divided by out[i]. */
static void s_llama3_freqs(float base, uint32_t rope_dim, float *out)
{
    const double factor = 8, lo = 1, hi = 4, old_ctx = 8192;
    const double lo_wavelen = old_ctx / lo, hi_wavelen = old_ctx / hi;
    for (uint32_t i = 0; i < rope_dim / 2; i++) {
        double freq = 1.0 / pow(base, (double)(2 * i) / rope_dim);
        double wavelen = 2 * M_PI / freq;
        if (wavelen < hi_wavelen) {
            out[i] = 1.0f;
        } else if (wavelen > lo_wavelen) {
            out[i] = (float)factor;
        } else {
            double smooth = (old_ctx / wavelen - lo) / (hi - lo);
            out[i] = (float)(1.0 / ((1 - smooth) / factor + smooth));
        }
    }
}

/* Phi-3 128k-like longrope divisors (the published ones grow from 1 to a few dozen across the
 * pairs, the short ones stay near 1): long 1 + 30 (i/n)^2, short 1 + 0.1 i/n. */
static void s_longrope_factors(const char *name, uint32_t n, float *out)
{
    int lng = !strcmp(name, "rope_factors_long.weight");
    if (!lng && strcmp(name, "rope_factors_short.weight"))
        return;
    for (uint32_t i = 0; i < n; i++) {
        float t = (float)i / (float)n;
        out[i] = lng ? 1.0f + 30.0f * t * t : 1.0f + 0.1f * t;
    }
}

static int s_specs(const arch_gen_opts *o, const s_family *fam, uint32_t n_vocab, s_spec **out,
                   uint32_t *count)
{
    uint32_t hd = o->head_dim ? o->head_dim : o->dim / o->n_head;
    uint32_t d = o->dim, qd = o->n_head * hd, kvd = o->n_head_kv * hd, ff = o->n_ff;
    int bias = fam->qkv_bias;
    uint32_t per = 10 + (bias ? 3 : 0) + (fam->qk_norm ? 2 : 0) + (fam->post_norms ? 2 : 0) +
                   (fam->oss ? 6 : 0);
    uint32_t n = 1 + per * o->n_layers + 1 + (o->tied ? 0 : 1) + (o->rope_llama3 ? 1 : 0) +
                 (o->longrope ? 2 : 0);
    s_spec *s = calloc(n, sizeof *s);
    if (!s)
        return -1;
    uint32_t k = 0;
#define S_ADD(nm, mx, r, c, ce, h)                                                         \
    do {                                                                                   \
        snprintf(s[k].name, sizeof s[k].name, "%s", nm);                                  \
        s[k].matrix = mx, s[k].rows = r, s[k].cols = c, s[k].center = ce, s[k].half = h;  \
        k++;                                                                               \
    } while (0)
    S_ADD("token_embd.weight", 1, n_vocab, d, 0.0f, S_W_HALF);
    for (uint32_t l = 0; l < o->n_layers; l++) {
        char nm[ARCH_NAME_MAX];
#define S_BLK(suffix, mx, r, c, ce, h)                                                     \
    do {                                                                                   \
        snprintf(nm, sizeof nm, "blk.%u.%s", l, suffix);                                   \
        S_ADD(nm, mx, r, c, ce, h);                                                        \
    } while (0)
        S_BLK("attn_norm.weight", 0, 1, d, 1.0f, 0.1f);
        if (fam->fused) {
            S_BLK("attn_qkv.weight", 1, qd + 2 * kvd, d, 0.0f, S_W_HALF);
        } else {
            S_BLK("attn_q.weight", 1, qd, d, 0.0f, S_W_HALF);
            S_BLK("attn_k.weight", 1, kvd, d, 0.0f, S_W_HALF);
            S_BLK("attn_v.weight", 1, kvd, d, 0.0f, S_W_HALF);
        }
        if (bias) {
            S_BLK("attn_q.bias", 0, 1, qd, 0.0f, S_W_HALF);
            S_BLK("attn_k.bias", 0, 1, kvd, 0.0f, S_W_HALF);
            S_BLK("attn_v.bias", 0, 1, kvd, 0.0f, S_W_HALF);
        }
        if (fam->qk_norm) {
            S_BLK("attn_q_norm.weight", 0, 1, hd, 1.0f, 0.1f);
            S_BLK("attn_k_norm.weight", 0, 1, hd, 1.0f, 0.1f);
        }
        S_BLK("attn_output.weight", 1, d, qd, 0.0f, S_W_HALF);
        if (fam->oss) { /* its sinks are logits of the scores' order: spread them wide */
            S_BLK("attn_output.bias", 0, 1, d, 0.0f, S_W_HALF);
            S_BLK("attn_sinks.weight", 0, 1, o->n_head, 0.0f, 2.0f);
        }
        if (fam->post_norms || fam->oss)
            S_BLK("post_attention_norm.weight", 0, 1, d, 1.0f, 0.1f);
        if (!fam->oss)
            S_BLK("ffn_norm.weight", 0, 1, d, 1.0f, 0.1f);
        if (o->n_expert) { /* as llama.cpp's converter names and shapes them */
            uint32_t fe = o->n_ff_exp ? o->n_ff_exp : ff;
            S_BLK("ffn_gate_inp.weight", 1, o->n_expert, d, 0.0f, S_W_HALF);
            if (fam->oss) { /* a router bias wide enough to move routing */
                S_BLK("ffn_gate_inp.bias", 0, 1, o->n_expert, 0.0f, 0.5f);
                S_BLK("ffn_gate_exps.bias", 0, o->n_expert, fe, 0.0f, S_W_HALF);
                s[k - 1].f32_2d = 1;
                S_BLK("ffn_up_exps.bias", 0, o->n_expert, fe, 0.0f, S_W_HALF);
                s[k - 1].f32_2d = 1;
                S_BLK("ffn_down_exps.bias", 0, o->n_expert, d, 0.0f, S_W_HALF);
                s[k - 1].f32_2d = 1;
            }
            S_BLK("ffn_gate_exps.weight", 1, fe, d, 0.0f, S_W_HALF);
            s[k - 1].n_expert = o->n_expert;
            S_BLK("ffn_up_exps.weight", 1, fe, d, 0.0f, S_W_HALF);
            s[k - 1].n_expert = o->n_expert;
            S_BLK("ffn_down_exps.weight", 1, d, fe, 0.0f, S_W_HALF);
            s[k - 1].n_expert = o->n_expert;
        } else if (fam->fused) {
            S_BLK("ffn_up.weight", 1, 2 * ff, d, 0.0f, S_W_HALF);
        } else {
            S_BLK("ffn_gate.weight", 1, ff, d, 0.0f, S_W_HALF);
            S_BLK("ffn_up.weight", 1, ff, d, 0.0f, S_W_HALF);
        }
        if (!o->n_expert)
            S_BLK("ffn_down.weight", 1, d, ff, 0.0f, S_W_HALF);
        if (fam->post_norms)
            S_BLK("post_ffw_norm.weight", 0, 1, d, 1.0f, 0.1f);
#undef S_BLK
    }
    S_ADD("output_norm.weight", 0, 1, d, 1.0f, 0.1f);
    if (!o->tied)
        S_ADD("output.weight", 1, n_vocab, d, 0.0f, S_W_HALF);
    uint32_t rd = o->rope_dim ? o->rope_dim : hd;
    if (o->rope_llama3)
        S_ADD("rope_freqs.weight", 0, 1, rd / 2, 0.0f, 0.0f); /* values: below */
    if (o->longrope) {
        S_ADD("rope_factors_long.weight", 0, 1, rd / 2, 0.0f, 0.0f);
        S_ADD("rope_factors_short.weight", 0, 1, rd / 2, 0.0f, 0.0f);
    }
#undef S_ADD
    *out = s;
    *count = k;
    return 0;
}

int arch_gen(const char *path, const arch_gen_opts *o, char *err, size_t errlen)
{
    const s_family *fam = NULL;
    for (size_t i = 0; i < sizeof s_families / sizeof s_families[0]; i++)
        if (o->arch && !strcmp(o->arch, s_families[i].name))
            fam = &s_families[i];
    const char *an = fam ? fam->name : "";
    uint32_t align = o->alignment ? o->alignment : GGUF_DEFAULT_ALIGNMENT;
    uint32_t n_ctx = o->n_ctx ? o->n_ctx : 2048;
    char tmp[4096], why[160];
    gguf_file *voc = NULL;
    gguf_writer *w = NULL;
    s_spec *sp = NULL;
    float *row = NULL;
    void *qrow = NULL;
    int fd = -1, rc = -1;
    uint32_t n_vocab = o->n_vocab, n_specs = 0;
    const char *bad = NULL;
    uint32_t hd = o->head_dim ? o->head_dim : (o->n_head ? o->dim / o->n_head : 0);
    if (!fam)
        bad = "the architecture must be llama, qwen2, qwen3, qwen3moe, gemma2, gemma3, phi3 or "
              "gpt-oss";
    else if (!o->dim || o->dim > 65536 || !o->n_head || o->dim % o->n_head)
        bad = "dim must be 1..65536 and a multiple of heads";
    else if (hd < 2 || hd > 4096 || hd % 2)
        bad = "the head size must be even and 2..4096";
    else if ((o->swa && strncmp(fam->name, "gemma", 5) && !fam->oss) ||
             (o->softcap != 0 && strncmp(fam->name, "gemma", 5)))
        bad = "a sliding window belongs to gemma and gpt-oss files, logit soft-capping to gemma";
    else if (fam->oss && (o->tied || o->rope_linear > 1 || o->rope_llama3))
        bad = "a gpt-oss file has its own head and its own rope scaling (YaRN)";
    else if (!strcmp(fam->name, "gemma2") && !o->tied)
        bad = "gemma2's head is its embedding: --tied";
    else if (!(o->softcap >= 0) || !(o->attn_softcap >= 0))
        bad = "the soft-caps must be >= 0";
    else if (o->attn_softcap > 0 && strcmp(fam->name, "gemma2"))
        bad = "attention soft-capping belongs to gemma2 files";
    else if (!(o->confident >= 0) || (o->confident > 0 && o->tied))
        bad = "--confident must be >= 0 and needs an output.weight (not --tied)";
    else if (o->rope_dim && (o->rope_dim % 2 || o->rope_dim > hd))
        bad = "the rotated dimensions must be even and at most the head size";
    else if (o->longrope && strcmp(fam->name, "phi3"))
        bad = "longrope belongs to phi3 files";
    else if (o->longrope && (o->rope_linear > 1 || o->rope_llama3))
        bad = "longrope is the only rope scaling of its file";
    else if (!o->n_head_kv || o->n_head % o->n_head_kv)
        bad = "kv-heads must divide heads";
    else if (!o->n_layers || o->n_layers > 4096)
        bad = "layers must be 1..4096";
    else if (!o->n_ff || o->n_ff > (1u << 20))
        bad = "ff must be 1..1048576";
    else if (!o->vocab_from && (!o->n_vocab || o->n_vocab > (1u << 24)))
        bad = "a vocabulary is needed: --vocab-from FILE or --vocab 1..16777216";
    else if (o->n_expert && !fam->experts)
        bad = "experts belong to llama, qwen3moe and gpt-oss files";
    else if (fam->experts == 2 && !o->n_expert)
        bad = "a qwen3moe or gpt-oss file needs --experts N";
    else if (o->n_expert && (o->n_expert > 512 || (o->n_expert_used ? o->n_expert_used : 2) >
                                                      (o->n_expert < 64 ? o->n_expert : 64)))
        bad = "experts must be 1..512 and experts-used 1..min(experts, 64)";
    else if (o->n_ff_exp && fam->experts != 2)
        bad = "an expert feed-forward width of its own belongs to qwen3moe and gpt-oss files";
    else if (o->rope_llama3 && !fam->rope_freqs)
        bad = "Llama 3.1's rope_freqs.weight belongs to llama files only";
    if (bad) {
        arch_err(err, errlen, path, "gen: %s", bad);
        return -1;
    }
    const quant_type_info *ti = quant_type_get(o->type);
    if (!ti || o->dim % ti->block || o->n_ff % ti->block || (o->n_head * hd) % ti->block ||
        o->n_ff_exp % ti->block) {
        arch_err(err, errlen, path,
                 "gen: type %s needs dim, ff and heads x head size multiples of its block %u",
                 quant_type_name(o->type), ti ? ti->block : 0);
        return -1;
    }
    if (snprintf(tmp, sizeof tmp, "%s.tmp", path) >= (int)sizeof tmp) {
        arch_err(err, errlen, path, "path too long");
        return -1;
    }
    if (!(w = gguf_writer_new(align)))
        goto oom;
    if (o->vocab_from) {
        if (!(voc = gguf_open(o->vocab_from, err, errlen)) ||
            s_copy_tokenizer(w, voc, &n_vocab,
                             o->chat_template ? "tokenizer.chat_template" : NULL, err, errlen))
            goto err;
    }
    if (o->chat_template && gguf_writer_kv_str(w, "tokenizer.chat_template", o->chat_template))
        goto oom;
    char k[128];
    float eps = fam->eps, base = fam->rope_base;
#define S_KEY(suffix) (snprintf(k, sizeof k, "%s.%s", an, suffix), k)
    if (gguf_writer_kv_str(w, "general.architecture", an) ||
        gguf_writer_kv_str(w, "general.name", "swarm random-weight test model") ||
        gguf_writer_kv_u32(w, S_KEY("block_count"), o->n_layers) ||
        gguf_writer_kv_u32(w, S_KEY("context_length"), n_ctx) ||
        gguf_writer_kv_u32(w, S_KEY("embedding_length"), o->dim) ||
        gguf_writer_kv_u32(w, S_KEY("feed_forward_length"), o->n_ff) ||
        gguf_writer_kv_u32(w, S_KEY("attention.head_count"), o->n_head) ||
        gguf_writer_kv_u32(w, S_KEY("attention.head_count_kv"), o->n_head_kv) ||
        gguf_writer_kv_u32(w, S_KEY("rope.dimension_count"), o->rope_dim ? o->rope_dim : hd) ||
        gguf_writer_kv_f32(w, S_KEY("rope.freq_base"), base) ||
        gguf_writer_kv_f32(w, S_KEY("attention.layer_norm_rms_epsilon"), eps) ||
        gguf_writer_kv_u32(w, S_KEY("vocab_size"), n_vocab) ||
        gguf_writer_kv_u64(w, "swarm.seed", o->seed))
        goto oom;
    if ((fam->key_length || o->head_dim) &&
        (gguf_writer_kv_u32(w, S_KEY("attention.key_length"), hd) ||
         gguf_writer_kv_u32(w, S_KEY("attention.value_length"), hd)))
        goto oom;
    if ((o->swa || fam->oss) &&
        gguf_writer_kv_u32(w, S_KEY("attention.sliding_window"), o->swa ? o->swa : 128))
        goto oom;
    /* gpt-oss's YaRN as its converter writes it: factor 32 over an original context of 4096 */
    if (fam->oss && (gguf_writer_kv_str(w, S_KEY("rope.scaling.type"), "yarn") ||
                     gguf_writer_kv_f32(w, S_KEY("rope.scaling.factor"), 32.0f) ||
                     gguf_writer_kv_u32(w, S_KEY("rope.scaling.original_context_length"),
                                        4096)))
        goto oom;
    if (o->n_expert &&
        (gguf_writer_kv_u32(w, S_KEY("expert_count"), o->n_expert) ||
         gguf_writer_kv_u32(w, S_KEY("expert_used_count"),
                            o->n_expert_used ? o->n_expert_used : 2) ||
         (fam->experts == 2 &&
          gguf_writer_kv_u32(w, S_KEY("expert_feed_forward_length"),
                             o->n_ff_exp ? o->n_ff_exp : o->n_ff))))
        goto oom;
    /* phi3's 128k longrope as conversion/phi.py writes it: the original context and
     * attn_factor sqrt(1 + ln(scale) / ln(original)), scale = context / original */
    if (o->longrope) {
        double scale = (double)n_ctx / o->longrope;
        float af = scale > 1 ? (float)sqrt(1 + log(scale) / log((double)o->longrope)) : 1.0f;
        if (gguf_writer_kv_u32(w, S_KEY("rope.scaling.original_context_length"), o->longrope) ||
            gguf_writer_kv_f32(w, S_KEY("rope.scaling.attn_factor"), af))
            goto oom;
    }
    if (o->softcap > 0 && gguf_writer_kv_f32(w, S_KEY("final_logit_softcapping"), o->softcap))
        goto oom;
    /* Gemma 2's configs: scores capped at 50, logits at 30 (conversion/gemma.py writes both) */
    if (!strcmp(an, "gemma2") &&
        (gguf_writer_kv_f32(w, S_KEY("attn_logit_softcapping"),
                            o->attn_softcap > 0 ? o->attn_softcap : 50.0f) ||
         (!(o->softcap > 0) && gguf_writer_kv_f32(w, S_KEY("final_logit_softcapping"), 30.0f)) ||
         (!o->swa && gguf_writer_kv_u32(w, S_KEY("attention.sliding_window"), 4096))))
        goto oom;
    if (o->rope_linear > 1 && (gguf_writer_kv_str(w, S_KEY("rope.scaling.type"), "linear") ||
                               gguf_writer_kv_f32(w, S_KEY("rope.scaling.factor"), o->rope_linear)))
        goto oom;
#undef S_KEY
    if (s_specs(o, fam, n_vocab, &sp, &n_specs))
        goto oom;
    uint32_t widest = o->dim > o->n_ff ? o->dim : o->n_ff;
    widest = widest > o->n_head * hd ? widest : o->n_head * hd;
    widest = widest > 2 * o->n_ff ? widest : 2 * o->n_ff;
    widest = widest > o->n_ff_exp ? widest : o->n_ff_exp;
    widest = widest > o->n_expert ? widest : o->n_expert;
    if (!(row = malloc(widest * sizeof(float))) || !(qrow = malloc(widest * 4)))
        goto oom;
    for (uint32_t i = 0; i < n_specs; i++) {
        uint64_t dims[3] = { sp[i].cols, sp[i].rows, sp[i].n_expert };
        uint32_t type = sp[i].matrix ? o->type : QUANT_F32;
        int nd = sp[i].n_expert ? 3 : sp[i].matrix || sp[i].f32_2d ? 2 : 1;
        if (gguf_writer_tensor(w, sp[i].name, type, nd, dims) < 0) {
            arch_err(err, errlen, path, "gen: cannot declare tensor '%s'", sp[i].name);
            goto err;
        }
    }
    if ((fd = open(tmp, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644)) < 0) {
        arch_err(err, errlen, tmp, "open: %s", strerror(errno));
        goto err;
    }
    if (gguf_writer_write_header(w, fd, err, errlen))
        goto err;
    for (uint32_t i = 0; i < n_specs; i++) {
        quant_type type = sp[i].matrix ? (quant_type)o->type : QUANT_F32;
        uint64_t st = o->seed * 0x9e3779b97f4a7c15ull ^ ((uint64_t)(i + 1) << 32);
        uint64_t rb = 0;
        if (quant_row_bytes(type, sp[i].cols, &rb, why, sizeof why))
            goto why;
        uint64_t n_rows = (uint64_t)sp[i].rows * (sp[i].n_expert ? sp[i].n_expert : 1);
        for (uint64_t r = 0; r < n_rows; r++) {
            s_fill_row(&st, row, sp[i].cols, sp[i].center, sp[i].half);
            if (o->confident > 0)
                s_confident_row(o, sp[i].name, r, n_vocab, row, sp[i].cols);
            if (!strcmp(sp[i].name, "rope_freqs.weight"))
                s_llama3_freqs(base, o->rope_dim ? o->rope_dim : hd, row);
            s_longrope_factors(sp[i].name, sp[i].cols, row);
            if (quant_quantize_row(type, row, qrow, sp[i].cols, why, sizeof why))
                goto why;
            if (gguf_writer_write_data(w, fd, (int)i, qrow, rb, err, errlen))
                goto err;
        }
    }
    if (fsync(fd) || close(fd)) {
        fd = -1;
        arch_err(err, errlen, tmp, "write: %s", strerror(errno));
        goto err;
    }
    fd = -1;
    if (rename(tmp, path)) {
        arch_err(err, errlen, path, "rename from %s: %s", tmp, strerror(errno));
        goto err;
    }
    rc = 0;
    goto out;
why:
    arch_err(err, errlen, path, "gen: %s", why);
    goto err;
oom:
    arch_err(err, errlen, path, "gen: out of memory");
err:
    if (fd >= 0)
        close(fd);
    fd = -1;
    unlink(tmp);
out:
    free(row);
    free(qrow);
    free(sp);
    gguf_writer_free(&w);
    gguf_close(&voc);
    return rc;
}
