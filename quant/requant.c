/* requant.c — `swarm quantize`: a GGUF file's weights into another type, tensor by tensor. quant/
 *
 * Type per tensor, after llama.cpp's llama_tensor_get_type (src/llama-quant.cpp, the version
 * node-llama-cpp 3.22.1 ships) without an importance matrix, for the rules that apply to a
 * dense (not mixture-of-experts, not falcon) model:
 *   - only 2-D tensors whose name ends in "weight" are quantized (norms and other 1-D tensors
 *     are copied as stored);
 *   - output.weight (token_embd.weight when there is no output.weight): Q6_K, or Q8_0 if its
 *     rows are not whole 256-blocks; a Q8_0 target keeps Q8_0;
 *   - attn_v.weight and attn_qkv.weight (llama.cpp's attn_v category; i counts them):
 *       Q4_K_M, Q5_K_M: Q6_K where use_more_bits(i); Q4_K_S: Q5_K for i < 4;
 *       Q2_K: Q4_K if n_head / n_head_kv >= 4, else Q3_K; Q3_K_M: Q5_K for i < 2, else Q4_K;
 *       Q3_K_L: Q5_K; IQ4_NL, IQ4_XS: Q5_K if n_head / n_head_kv >= 4;
 *       and a 70B llama (80 layers, grouped KV heads) takes Q5_K for Q3_K or Q4_K;
 *   - ffn_down (i counts them, n of them): Q4_K_M, Q5_K_M: Q6_K where use_more_bits(i);
 *     Q4_K_S: Q5_K for i < n / 8; Q2_K: Q3_K; Q3_K_M: Q5_K for i < n / 16, else Q4_K;
 *     Q3_K_L: Q5_K; IQ4_NL, IQ4_XS: Q5_K for i < n / 8 (no importance matrix);
 *   - attn_output.weight: Q2_K: Q3_K; Q3_K_M: Q4_K; Q3_K_L: Q5_K;
 *   - a row that does not fit the chosen block falls back as llama.cpp's
 *     tensor_type_fallback: Q2_K, Q3_K -> Q4_0; Q4_K -> Q5_0; Q5_K -> Q5_1; Q6_K -> Q8_0;
 *     IQ4_XS -> IQ4_NL; and F16 if that does not fit either (blocks of 32 go to F16);
 *   - MXFP4_MOE (gpt-oss's published type): every 3-D expert tensor (ne[2] > 1) MXFP4,
 *     every other quantized tensor (output and token_embd included) Q8_0.
 * Q3_K, Q4_K and Q5_K as TYPE mean Q3_K_M, Q4_K_M and Q5_K_M, as llama-quantize takes them.
 * Which mixes need an importance matrix: none of these. llama.cpp requires one for the IQ
 * types below 4 bits (IQ1_S, IQ1_M, IQ2_XXS, IQ2_XS, IQ2_S, IQ3_XXS) and for Q2_K_S; swarm
 * writes none of those. IQ4_NL / IQ4_XS and Q2_K do not need one (Q2_K without one is poor:
 * llama-quantize warns, and so does swarm's usage text). The lab's dense model (swarm-dense)
 * has one matrix per layer (blk.N.w): it gets the target's base type and its per-layer
 * checksums are recomputed over the bytes as stored (xxh3-64 of g then W).
 */
#include "quant/requant.h"

#include <errno.h>
#include <pthread.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <unistd.h>

#define XXH_STATIC_LINKING_ONLY
#include <xxhash.h>

#include "gguf/gguf.h"
#include "quant/quant.h"

typedef enum {
    S_PURE,
    S_Q4_K_M,
    S_Q4_K_S,
    S_Q5_K_M,
    S_Q2_K,
    S_Q3_K_S,
    S_Q3_K_M,
    S_Q3_K_L,
    S_IQ4, /* IQ4_NL and IQ4_XS: the same rules */
    S_MXFP4_MOE, /* 3-D expert tensors MXFP4, every other quantized tensor Q8_0 */
} s_kind;

typedef struct {
    const char *name;
    quant_type base;
    uint32_t ftype;           /* llama.h LLAMA_FTYPE_MOSTLY_* */
    s_kind kind;
} s_mix;

static const s_mix s_mixes[] = {
    { "Q8_0", QUANT_Q8_0, 7, S_PURE },     { "Q4_0", QUANT_Q4_0, 2, S_PURE },
    { "Q6_K", QUANT_Q6_K, 18, S_PURE },    { "Q4_K_S", QUANT_Q4_K, 14, S_Q4_K_S },
    { "Q4_K_M", QUANT_Q4_K, 15, S_Q4_K_M }, { "Q4_K", QUANT_Q4_K, 15, S_Q4_K_M },
    { "Q5_K_M", QUANT_Q5_K, 17, S_Q5_K_M }, { "Q5_K", QUANT_Q5_K, 17, S_Q5_K_M },
    { "Q4_1", QUANT_Q4_1, 3, S_PURE },     { "Q5_0", QUANT_Q5_0, 8, S_PURE },
    { "Q5_1", QUANT_Q5_1, 9, S_PURE },     { "Q2_K", QUANT_Q2_K, 10, S_Q2_K },
    { "Q3_K_S", QUANT_Q3_K, 11, S_Q3_K_S }, { "Q3_K_M", QUANT_Q3_K, 12, S_Q3_K_M },
    { "Q3_K", QUANT_Q3_K, 12, S_Q3_K_M },  { "Q3_K_L", QUANT_Q3_K, 13, S_Q3_K_L },
    { "IQ4_NL", QUANT_IQ4_NL, 25, S_IQ4 }, { "IQ4_XS", QUANT_IQ4_XS, 30, S_IQ4 },
    { "MXFP4_MOE", QUANT_Q8_0, 38, S_MXFP4_MOE },
};

/* llama-quant.cpp use_more_bits. */
static int s_more_bits(uint64_t i, uint64_t n)
{
    return i < n / 8 || i >= 7 * n / 8 || (i >= n / 8 && (i - n / 8) % 3 == 2);
}

static int s_ends(const char *s, const char *suf)
{
    size_t a = strlen(s), b = strlen(suf);
    return a >= b && !strcmp(s + a - b, suf);
}

typedef struct {
    const s_mix *mix;
    int dense, has_output;
    int gqa4;                 /* n_head / n_head_kv >= 4 (llama.cpp's n_gqa() >= 4) */
    int is70b;                /* a llama of 80 layers with grouped KV heads: llama.cpp's 70B */
    uint64_t n_v, i_v, n_down, i_down;
} s_ctx;

static int s_quantizable(const s_ctx *c, const gguf_tensor *t)
{
    if (c->dense)
        return t->n_dims == 2 && s_ends(t->name, ".w");
    return t->n_dims >= 2 && s_ends(t->name, "weight") && !strstr(t->name, "_norm") &&
           !strstr(t->name, "ffn_gate_inp");
}

/* llama.cpp's tensor_type_fallback: the type of the smaller block for a row that does not
 * fit, or F16 when none fits. */
static quant_type s_fallback(quant_type q, uint64_t cols)
{
    quant_type f = q;
    switch (q) {
    case QUANT_Q2_K:
    case QUANT_Q3_K: f = QUANT_Q4_0; break;
    case QUANT_Q4_K: f = QUANT_Q5_0; break;
    case QUANT_Q5_K: f = QUANT_Q5_1; break;
    case QUANT_Q6_K: f = QUANT_Q8_0; break;
    case QUANT_IQ4_XS: f = QUANT_IQ4_NL; break;
    default: break;
    }
    return cols % quant_type_get((uint32_t)f)->block ? QUANT_F16 : f;
}

/* attn_v / attn_qkv (the c->i_v-th of c->n_v). */
static quant_type s_pick_v(const s_ctx *c, quant_type q)
{
    switch (c->mix->kind) {
    case S_Q4_K_M:
    case S_Q5_K_M: q = s_more_bits(c->i_v, c->n_v) ? QUANT_Q6_K : q; break;
    case S_Q4_K_S: q = c->i_v < 4 ? QUANT_Q5_K : q; break;
    case S_Q2_K: q = c->gqa4 ? QUANT_Q4_K : QUANT_Q3_K; break;
    case S_Q3_K_M: q = c->i_v < 2 ? QUANT_Q5_K : QUANT_Q4_K; break;
    case S_Q3_K_L: q = QUANT_Q5_K; break;
    case S_IQ4: q = c->gqa4 ? QUANT_Q5_K : q; break;
    default: break;
    }
    if (c->is70b && (q == QUANT_Q3_K || q == QUANT_Q4_K))
        q = QUANT_Q5_K;
    return q;
}

/* ffn_down (the c->i_down-th of c->n_down). */
static quant_type s_pick_down(const s_ctx *c, quant_type q)
{
    const uint64_t i = c->i_down, n = c->n_down;
    switch (c->mix->kind) {
    case S_Q4_K_M:
    case S_Q5_K_M: return s_more_bits(i, n) ? QUANT_Q6_K : q;
    case S_Q4_K_S: return i < n / 8 ? QUANT_Q5_K : q;
    case S_Q2_K: return QUANT_Q3_K;
    case S_Q3_K_M: return i < n / 16 ? QUANT_Q5_K : QUANT_Q4_K;
    case S_Q3_K_L: return QUANT_Q5_K;
    case S_IQ4: return i < n / 8 ? QUANT_Q5_K : q;
    default: return q;
    }
}

/* The type for t (a quantizable tensor); *fell set if its rows did not fit. */
static quant_type s_pick(s_ctx *c, const gguf_tensor *t, int *fell)
{
    const s_kind k = c->mix->kind;
    quant_type q = c->mix->base;
    const char *n = t->name;
    *fell = 0;
    if (k == S_MXFP4_MOE) /* llama.cpp's MXFP4_MOE: its output rule gives Q8_0 too */
        q = t->n_dims == 3 && t->dims[2] > 1 ? QUANT_MXFP4 : QUANT_Q8_0;
    else if (!c->dense) {
        if (!strcmp(n, "output.weight") || (!c->has_output && !strcmp(n, "token_embd.weight"))) {
            if (t->dims[0] % QUANT_QK_K)
                q = QUANT_Q8_0;
            else if (q != QUANT_Q8_0)
                q = QUANT_Q6_K;
        } else if (strstr(n, "attn_qkv.weight") && (k == S_Q4_K_M || k == S_Q5_K_M)) {
            /* swarm's rule from an older llama.cpp, kept for the mixes it had: */
            q = k == S_Q4_K_M ? QUANT_Q5_K : QUANT_Q6_K;
            c->i_v++;
        } else if (strstr(n, "attn_v.weight") || strstr(n, "attn_qkv.weight")) {
            q = s_pick_v(c, q);
            c->i_v++;
        } else if (strstr(n, "ffn_down")) {
            q = s_pick_down(c, q);
            c->i_down++;
        } else if (strstr(n, "attn_output.weight")) {
            q = k == S_Q2_K ? QUANT_Q3_K : k == S_Q3_K_M ? QUANT_Q4_K
                : k == S_Q3_K_L ? QUANT_Q5_K : q;
        }
    }
    if (t->dims[0] % quant_type_get((uint32_t)q)->block) {
        *fell = 1;
        q = s_fallback(q, t->dims[0]);
    }
    return q;
}

/* llama.cpp's n_gqa() >= 4 and its 70B test, from the file's hyper-parameters. */
static int s_hparams(const gguf_file *g, const char *arch, s_ctx *c, char *err, size_t errlen)
{
    char key[160];
    uint32_t nh = 0, nkv = 0, nl = 0;
    snprintf(key, sizeof key, "%s.attention.head_count", arch);
    if (gguf_find_kv(g, key) && gguf_get_u32(g, key, &nh, err, errlen))
        return -1;
    snprintf(key, sizeof key, "%s.attention.head_count_kv", arch);
    if (gguf_find_kv(g, key) && gguf_get_u32(g, key, &nkv, err, errlen))
        return -1;
    snprintf(key, sizeof key, "%s.block_count", arch);
    if (gguf_find_kv(g, key) && gguf_get_u32(g, key, &nl, err, errlen))
        return -1;
    if (!nkv)
        nkv = nh;
    c->gqa4 = nkv && nh / nkv >= 4;
    c->is70b = !strcmp(arch, "llama") && nl == 80 && nh != nkv;
    return 0;
}

static int s_pread_all(int fd, void *buf, uint64_t n, uint64_t off)
{
    uint8_t *p = buf;
    while (n) {
        ssize_t r = pread(fd, p, n, (off_t)off);
        if (r <= 0)
            return -1;
        p += r;
        n -= (uint64_t)r;
        off += (uint64_t)r;
    }
    return 0;
}

/* Bytes per read of a tensor copied as stored. */
#define S_COPY (16u << 20)

/* Rows per chunk: about 16 MiB of f32, at least one row. */
static uint64_t s_chunk_rows(uint64_t cols)
{
    uint64_t r = (16u << 20) / (cols ? cols * 4 : 1);
    return r ? r : 1;
}

/* One chunk's rows, converted by nth pool threads: share i takes rows [nr i / n, nr (i+1) / n)
 * with its own f32 row (f + i * cols). Each row's bytes depend on that row only, so the file
 * is the same for every thread count (test_requant checks). */
typedef struct {
    quant_type from, to;
    uint64_t cols, nr, inrb, outrb;
    const uint8_t *in;
    uint8_t *out;
    float *f;
    pthread_mutex_t mu;       /* guards bad and e */
    uint64_t bad;             /* first failing row, or UINT64_MAX */
    char e[256];
} s_rowjob;

static void s_convert(void *arg, int i, int n)
{
    s_rowjob *j = arg;
    float *f = j->f + (uint64_t)i * j->cols;
    char e2[256];
    const uint64_t r1 = j->nr * (uint64_t)(i + 1) / (uint64_t)n;
    for (uint64_t r = j->nr * (uint64_t)i / (uint64_t)n; r < r1; r++) {
        if (quant_dequantize_row(j->from, j->in + r * j->inrb, f, j->cols, e2, sizeof e2) ||
            quant_quantize_row(j->to, f, j->out + r * j->outrb, j->cols, e2, sizeof e2)) {
            pthread_mutex_lock(&j->mu);
            if (r < j->bad) {
                j->bad = r;
                snprintf(j->e, sizeof j->e, "%s", e2);
            }
            pthread_mutex_unlock(&j->mu);
            return;
        }
    }
}

int requant_file(const char *in_path, const char *out_path, const char *type, int nthreads,
                 int verbose, requant_stats *st, char *err, size_t errlen)
{
    const int nth = nthreads < 1 ? 1 : nthreads > QUANT_MAX_THREADS ? QUANT_MAX_THREADS : nthreads;
    gguf_file *g = NULL;
    gguf_writer *w = NULL;
    quant_type *types = NULL;
    uint64_t *sums = NULL, nlayers = 0;
    uint8_t *in = NULL, *out = NULL, *cbuf = NULL;
    float *f = NULL;
    int ifd = -1, ofd = -1, rc = -1;
    char tmp[4096], e2[256];
    s_ctx c = { 0 };
    memset(st, 0, sizeof *st);
    for (size_t i = 0; i < sizeof s_mixes / sizeof s_mixes[0]; i++)
        if (!strcasecmp(type, s_mixes[i].name))
            c.mix = &s_mixes[i];
    if (!c.mix) {
        snprintf(err, errlen, "unknown type '%s' (types: %s)", type, REQUANT_NAMES);
        return -1;
    }
    if (!(g = gguf_open(in_path, err, errlen)))
        return -1;
    const char *arch = "";
    if (gguf_find_kv(g, "general.architecture") &&
        gguf_get_str(g, "general.architecture", &arch, err, errlen))
        goto out;
    c.dense = !strcmp(arch, "swarm-dense");
    if (!c.dense && s_hparams(g, arch, &c, err, errlen))
        goto out;
    if (!(types = calloc(g->n_tensors ? g->n_tensors : 1, sizeof *types)))
        goto oom;
    for (uint64_t i = 0; i < g->n_tensors; i++) {
        const char *n = g->tensors[i].name;
        c.has_output |= !strcmp(n, "output.weight");
        c.n_v += strstr(n, "attn_v.weight") || strstr(n, "attn_qkv.weight");
        c.n_down += strstr(n, "ffn_down") != NULL;
    }
    if (c.dense) {
        const gguf_kv *cs = gguf_find_kv(g, "swarm.layer_checksums");
        nlayers = cs && cs->type == GGUF_T_ARRAY ? cs->arr_n : 0;
        if (!(sums = calloc(nlayers ? nlayers : 1, sizeof *sums)))
            goto oom;
    }
    if (!(w = gguf_writer_new(g->alignment)))
        goto oom;
    for (uint64_t i = 0; i < g->n_kv; i++) {
        const char *k = g->kv[i].key;
        if (!strcmp(k, "general.alignment") || !strcmp(k, "general.file_type"))
            continue;
        if (gguf_writer_kv_copy(w, &g->kv[i]))
            break;
    }
    /* the dense model has no file_type (its reader would not expect one) */
    if (!c.dense)
        gguf_writer_kv_u32(w, "general.file_type", c.mix->ftype);
    uint64_t max_cols = 1, max_rb = 1;
    for (uint64_t i = 0; i < g->n_tensors; i++) {
        const gguf_tensor *t = &g->tensors[i];
        types[i] = (quant_type)t->type;
        if (s_quantizable(&c, t)) {
            if (!quant_type_get(t->type) || (t->type != QUANT_F32 && t->type != QUANT_F16 &&
                                              t->type != QUANT_BF16 && t->type != QUANT_Q8_0)) {
                snprintf(err, errlen, "%s: tensor '%s' is %s: only f32, f16, bf16 and q8_0 "
                         "tensors are requantized (quantizing twice compounds the error)",
                         in_path, t->name, quant_type_name(t->type));
                goto out;
            }
            int fell;
            types[i] = s_pick(&c, t, &fell);
            st->fallbacks += (uint64_t)fell;
            st->quantized++;
        }
        uint64_t rb;
        if (quant_row_bytes(types[i], t->dims[0], &rb, e2, sizeof e2) == 0 && rb > max_rb)
            max_rb = rb;
        max_cols = t->dims[0] > max_cols ? t->dims[0] : max_cols;
        if (gguf_writer_tensor(w, t->name, (uint32_t)types[i], t->n_dims, t->dims) < 0)
            break;
    }
    snprintf(tmp, sizeof tmp, "%s.tmp", out_path);
    if ((ifd = open(in_path, O_RDONLY)) < 0 ||
        (ofd = open(tmp, O_WRONLY | O_CREAT | O_TRUNC, 0644)) < 0) {
        snprintf(err, errlen, "%s: %s", ifd < 0 ? in_path : tmp, strerror(errno));
        goto out;
    }
    if (gguf_writer_write_header(w, ofd, err, errlen))
        goto out;
    const uint64_t crow = s_chunk_rows(max_cols);
    uint64_t inrb_max = 0;
    for (uint64_t i = 0; i < g->n_tensors; i++) {
        uint64_t rb;
        if (!quant_row_bytes((quant_type)g->tensors[i].type, g->tensors[i].dims[0], &rb, e2,
                             sizeof e2) && rb > inrb_max)
            inrb_max = rb;
    }
    if (!(in = malloc(crow * (inrb_max > max_rb ? inrb_max : max_rb))) ||
        !(out = malloc(crow * max_rb)) || !(f = malloc((size_t)nth * max_cols * sizeof *f)) ||
        !(cbuf = malloc(S_COPY)))
        goto oom;
    XXH3_state_t xs;
    for (uint64_t i = 0; i < g->n_tensors; i++) {
        const gguf_tensor *t = &g->tensors[i];
        const uint64_t cols = t->dims[0];
        uint64_t nrows = 1;
        for (uint32_t d = 1; d < t->n_dims; d++)
            nrows *= t->dims[d];
        const int conv = types[i] != (quant_type)t->type;
        uint64_t inrb = 0, outrb = 0;
        if (conv && (quant_row_bytes((quant_type)t->type, cols, &inrb, err, errlen) ||
                     quant_row_bytes(types[i], cols, &outrb, err, errlen)))
            goto out;
        uint32_t layer = 0;
        const int dl = c.dense && sscanf(t->name, "blk.%u.", &layer) == 1 && layer < nlayers;
        if (dl && s_ends(t->name, ".g"))
            XXH3_64bits_reset(&xs);
        if (!conv) { /* copied as stored, in chunks */
            for (uint64_t off = 0; off < t->nbytes;) {
                const uint64_t n = t->nbytes - off < S_COPY ? t->nbytes - off : S_COPY;
                if (s_pread_all(ifd, cbuf, n, t->offset + off)) {
                    snprintf(err, errlen, "%s: tensor '%s': read failed or file truncated",
                             in_path, t->name);
                    goto out;
                }
                if (dl)
                    XXH3_64bits_update(&xs, cbuf, n);
                if (gguf_writer_write_data(w, ofd, (int)i, cbuf, n, err, errlen))
                    goto out;
                off += n;
            }
        } else {
            for (uint64_t r0 = 0; r0 < nrows; r0 += crow) {
                const uint64_t nr = nrows - r0 < crow ? nrows - r0 : crow;
                if (s_pread_all(ifd, in, nr * inrb, t->offset + r0 * inrb)) {
                    snprintf(err, errlen, "%s: tensor '%s': read failed or file truncated",
                             in_path, t->name);
                    goto out;
                }
                s_rowjob job = { .mu = PTHREAD_MUTEX_INITIALIZER, .from = (quant_type)t->type,
                                 .to = types[i], .cols = cols, .nr = nr, .in = in, .out = out,
                                 .inrb = inrb, .outrb = outrb, .f = f, .bad = UINT64_MAX };
                if (quant_pool_run(nth, s_convert, &job, err, errlen))
                    goto out;
                if (job.bad != UINT64_MAX) {
                    snprintf(err, errlen, "%s: tensor '%s' row %llu: %s", in_path, t->name,
                             (unsigned long long)(r0 + job.bad), job.e);
                    goto out;
                }
                if (dl)
                    XXH3_64bits_update(&xs, out, nr * outrb);
                if (gguf_writer_write_data(w, ofd, (int)i, out, nr * outrb, err, errlen))
                    goto out;
            }
        }
        if (dl && s_ends(t->name, ".w"))
            sums[layer] = XXH3_64bits_digest(&xs);
        st->tensors++;
        st->bytes_in += t->nbytes;
        st->bytes_out += conv ? nrows * outrb : t->nbytes;
        if (verbose)
            printf("%-32s %-5s -> %-5s\n", t->name, quant_type_name(t->type),
                   quant_type_name((uint32_t)types[i]));
    }
    if (c.dense && nlayers) {
        uint64_t off;
        if (gguf_writer_kv_value_offset(w, "swarm.layer_checksums", &off) ||
            pwrite(ofd, sums, nlayers * 8, (off_t)off) != (ssize_t)(nlayers * 8)) {
            snprintf(err, errlen, "%s: cannot write the layer checksums", tmp);
            goto out;
        }
    }
    if (fsync(ofd) || close(ofd)) {
        ofd = -1;
        snprintf(err, errlen, "%s: %s", tmp, strerror(errno));
        goto out;
    }
    ofd = -1;
    if (rename(tmp, out_path)) {
        snprintf(err, errlen, "rename %s -> %s: %s", tmp, out_path, strerror(errno));
        goto out;
    }
    rc = 0;
    goto out;
oom:
    snprintf(err, errlen, "out of memory");
out:
    if (rc && ofd >= 0)
        unlink(tmp);
    if (ofd >= 0)
        close(ofd);
    if (ifd >= 0)
        close(ifd);
    free(in);
    free(out);
    free(cbuf);
    free(f);
    free(types);
    free(sums);
    gguf_writer_free(&w);
    gguf_close(&g);
    return rc;
}
