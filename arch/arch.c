/* arch.c — architectures by general.architecture: the table of families, opening a model,
 * pricing a layer, and a layer's hooks checked for order then handed to the family. arch/ */
#include "arch/arch.h"
#include <immintrin.h>

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "arch/arch_int.h"
#include "arch/decoder.h"
#include "quant/quant.h"
#include "base/util.h"

void arch_err(char *err, size_t errlen, const char *path, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    util_verrf(err, errlen, path ? path : "model", fmt, ap);
    va_end(ap);
}

int arch_run_fail(arch_run *r, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(r->err, sizeof r->err, fmt, ap);
    va_end(ap);
    return -1;
}

/* Every family, by general.architecture. Adding one: its file and one line here (arch.h). */
static const arch_ops *const s_families[] = {
    &arch_dense_ops,
    &arch_llama_ops,
    &arch_qwen2_ops,
    &arch_qwen3_ops,
    &arch_qwen3moe_ops,
    &arch_gemma2_ops,
    &arch_gemma3_ops,
    &arch_phi3_ops,
    &arch_gptoss_ops,
};
#define S_N_FAMILIES (sizeof s_families / sizeof s_families[0])

/* ---------------------------------------------------------------- opening */

/* n_expert > 0: a 3-D [cols, rows, n_expert] tensor, seen as n_expert x rows rows */
static int s_tensor_get(const gguf_file *g, const char *name, int is_matrix, uint32_t n_expert,
                        uint64_t rows, uint64_t cols, arch_tensor *t, char *err, size_t errlen)
{
    const gguf_tensor *gt = gguf_find_tensor(g, name);
    char why[160];
    if (!gt) {
        arch_err(err, errlen, g->path, "tensor '%s' is missing", name);
        return -1;
    }
    uint32_t want_dims = n_expert ? 3 : is_matrix ? 2 : 1;
    if (gt->n_dims != want_dims || gt->dims[0] != cols || (is_matrix && gt->dims[1] != rows) ||
        (n_expert && gt->dims[2] != n_expert)) {
        char have[96] = "", want[64];
        size_t k = 0;
        for (uint32_t i = 0; i < gt->n_dims && k < sizeof have; i++)
            k += (size_t)snprintf(have + k, sizeof have - k, "%s%llu", i ? ", " : "",
                                  (unsigned long long)gt->dims[i]);
        if (n_expert)
            snprintf(want, sizeof want, "[%llu, %llu, %u]", (unsigned long long)cols,
                     (unsigned long long)rows, n_expert);
        else if (is_matrix)
            snprintf(want, sizeof want, "[%llu, %llu]", (unsigned long long)cols,
                     (unsigned long long)rows);
        else
            snprintf(want, sizeof want, "[%llu]", (unsigned long long)cols);
        arch_err(err, errlen, g->path,
                 "tensor '%s' has shape [%s], the hyper-parameters want %s (ggml ne order)",
                 name, have, want);
        return -1;
    }
    const quant_type_info *ti = quant_type_get(gt->type);
    if (!ti) {
        arch_err(err, errlen, g->path,
                 "tensor '%s': type %s (%u) is not supported (supported: %s)", name,
                 quant_type_name(gt->type), gt->type, quant_type_list());
        return -1;
    }
    if (n_expert)
        rows *= n_expert;
    uint64_t rb = 0, nb = 0;
    if (quant_row_bytes((quant_type)gt->type, cols, &rb, why, sizeof why) ||
        quant_tensor_bytes((quant_type)gt->type, rows, cols, &nb, why, sizeof why)) {
        arch_err(err, errlen, g->path, "tensor '%s': %s", name, why);
        return -1;
    }
    if (nb != gt->nbytes) {
        arch_err(err, errlen, g->path, "tensor '%s': %llu bytes, %s %llu x %llu needs %llu", name,
                 (unsigned long long)gt->nbytes, ti->name, (unsigned long long)rows,
                 (unsigned long long)cols, (unsigned long long)nb);
        return -1;
    }
    memset(t, 0, sizeof *t);
    snprintf(t->name, sizeof t->name, "%s", name);
    t->type = gt->type;
    t->rows = rows;
    t->cols = cols;
    t->off = gt->offset;
    t->nbytes = gt->nbytes;
    t->row_bytes = rb;
    t->is_matrix = is_matrix;
    t->n_expert = n_expert;
    return 0;
}

int arch_tensor_get(const gguf_file *g, const char *name, int is_matrix, uint64_t rows,
                    uint64_t cols, arch_tensor *t, char *err, size_t errlen)
{
    return s_tensor_get(g, name, is_matrix, 0, rows, cols, t, err, errlen);
}

int arch_tensor_get_experts(const gguf_file *g, const char *name, uint32_t n_expert,
                            uint64_t rows, uint64_t cols, arch_tensor *t, char *err,
                            size_t errlen)
{
    return s_tensor_get(g, name, 1, n_expert, rows, cols, t, err, errlen);
}

static void s_layer_seal(arch_layer *l)
{
    l->weight_bytes = 0;
    for (uint32_t i = 0; i < l->n_tensors; i++)
        l->weight_bytes += l->t[i].nbytes;
}

int arch_model_bind(arch_model *m, const char *name, char *err, size_t errlen)
{
    const char *path = m->g ? m->g->path : NULL;
    for (size_t i = 0; i < S_N_FAMILIES; i++)
        if (!strcmp(name, s_families[i]->name)) {
            m->ops = s_families[i];
            snprintf(m->hp.name, sizeof m->hp.name, "%s", name);
            return 0;
        }
    char known[256] = "";
    size_t k = 0;
    for (size_t i = 0; i < S_N_FAMILIES && k < sizeof known; i++)
        k += (size_t)snprintf(known + k, sizeof known - k, "%s%s", i ? ", " : "",
                              s_families[i]->name);
    arch_err(err, errlen, path, "general.architecture '%s' is not supported (supported: %s)",
             name, known);
    return -1;
}

int arch_model_open(arch_model *m, const gguf_file *g, char *err, size_t errlen)
{
    memset(m, 0, sizeof *m);
    m->g = g;
    const char *name = NULL;
    if (gguf_get_str(g, "general.architecture", &name, err, errlen) ||
        arch_model_bind(m, name, err, errlen) || m->ops->open(m, err, errlen))
        goto err;
    if (!(m->layers = calloc(m->hp.n_layers, sizeof *m->layers))) {
        arch_err(err, errlen, g->path, "out of memory");
        goto err;
    }
    for (uint32_t l = 0; l < m->hp.n_layers; l++) {
        if (m->ops->layer(m, l, &m->layers[l], err, errlen))
            goto err;
        s_layer_seal(&m->layers[l]);
    }
    return 0;
err:
    arch_model_close(m);
    return -1;
}

void arch_model_close(arch_model *m)
{
    if (!m)
        return;
    free(m->layers);
    free(m->rope_freqs);
    free(m->rope_long);
    free(m->rope_short);
    m->layers = NULL;
    m->rope_freqs = m->rope_long = m->rope_short = NULL;
}

int arch_model_has(const arch_model *m, unsigned props)
{
    return m->ops && (m->ops->props & props) == props;
}

void arch_cost_matrices(const arch_layer *l, uint32_t n_expert_used, arch_cost *c)
{
    c->weight_bytes = l->weight_bytes;
    c->routed_bytes = 0;
    for (uint32_t i = 0; i < l->n_tensors; i++) {
        const arch_tensor *t = &l->t[i];
        /* an expert tensor: a position multiplies n_expert_used experts' rows of it */
        double share = t->n_expert ? (double)n_expert_used / t->n_expert : 1.0;
        if (t->is_matrix)
            c->flops_per_pos += 2.0 * (double)t->rows * (double)t->cols * share;
        c->routed_bytes += t->n_expert ? t->nbytes / t->n_expert * n_expert_used : t->nbytes;
    }
}

void arch_layer_cost(const arch_model *m, uint32_t layer, arch_cost *c)
{
    memset(c, 0, sizeof *c);
    if (layer >= m->hp.n_layers)
        return;
    m->ops->cost(m, layer, c);
}

/* ---------------------------------------------------------------- KV caches */

uint32_t arch_layer_window(const arch_model *m, uint32_t l)
{
    if (!arch_model_has(m, ARCH_KV) || l >= m->hp.n_layers || !arch_dec_is_local(&m->hp, l))
        return 0;
    return m->hp.n_swa;
}

uint32_t arch_kv_rows(const arch_model *m, uint32_t l, uint32_t n_ctx, uint32_t max_batch)
{
    uint64_t w = arch_layer_window(m, l);
    if (!w)
        return n_ctx;
    w += max_batch ? max_batch : 1;
    return w < n_ctx ? (uint32_t)w : n_ctx;
}

uint64_t arch_kv_bytes(const arch_model *m, uint32_t first, uint32_t last, uint32_t n_ctx,
                       uint32_t max_batch)
{
    uint64_t b = 0;
    for (uint32_t l = first; l < last && l < m->hp.n_layers; l++) {
        arch_cost c;
        arch_layer_cost(m, l, &c);
        b += (uint64_t)arch_kv_rows(m, l, n_ctx, max_batch) * c.kv_bytes_per_pos;
    }
    return b;
}

uint32_t arch_kv_resume(const arch_model *m, uint32_t n_ctx, uint32_t max_batch, uint32_t high,
                        uint32_t pos)
{
    for (uint32_t l = 0; l < m->hp.n_layers && pos; l++) {
        uint32_t w = arch_layer_window(m, l), rows = arch_kv_rows(m, l, n_ctx, max_batch);
        /* the ring's rows hold positions high - rows .. high - 1 (a later write of position
         * t + rows overwrote t), and resuming at pos needs pos - w + 1 .. pos - 1 */
        if (w && high > rows && (uint64_t)pos + rows < (uint64_t)high + w - 1)
            pos = 0;
    }
    return pos;
}

/* ---------------------------------------------------------------- running */

arch_run *arch_run_new(const arch_model *m, uint32_t max_pos, char *err, size_t errlen)
{
    if (!max_pos) {
        arch_err(err, errlen, m->g ? m->g->path : NULL, "a run needs max_pos >= 1");
        return NULL;
    }
    arch_run *r = calloc(1, sizeof *r);
    if (!r) {
        arch_err(err, errlen, m->g ? m->g->path : NULL, "out of memory");
        return NULL;
    }
    r->m = m;
    r->max_pos = max_pos;
    r->nthreads = 1;
    r->cur = ARCH_MAX_LAYER_TENSORS;
    if (m->ops->run_init(r, err, errlen))
        arch_run_free(&r);
    return r;
}

uint64_t arch_run_bytes(const arch_model *m, uint32_t max_pos)
{
    return m->ops->run_bytes(m, max_pos);
}

void arch_run_free(arch_run **rp)
{
    if (!rp || !*rp)
        return;
    arch_run *r = *rp;
    r->m->ops->run_free(r);
    free(r);
    *rp = NULL;
}

const char *arch_run_error(const arch_run *r)
{
    return r->err;
}

void arch_run_set_threads(arch_run *r, int nthreads)
{
    if (nthreads < 1)
        nthreads = 1;
    if (nthreads > QUANT_MAX_THREADS)
        nthreads = QUANT_MAX_THREADS;
    r->nthreads = nthreads;
}

int arch_layer_begin(arch_run *r, uint32_t layer, const void *const *vectors, arch_kv *kv,
                     float *x, uint32_t n, uint32_t pos0, char *err, size_t errlen)
{
    r->seg1 = (arch_seg){ .kv = kv, .pos0 = pos0, .n = n };
    return arch_layer_begin_segs(r, layer, vectors, &r->seg1, 1, x, err, errlen);
}

int arch_layer_begin_segs(arch_run *r, uint32_t layer, const void *const *vectors,
                          const arch_seg *segs, uint32_t n_segs, float *x, char *err,
                          size_t errlen)
{
    const arch_model *m = r->m;
    const char *path = m->g ? m->g->path : NULL;
    uint64_t n = 0;
    r->err[0] = 0;
    for (uint32_t i = 0; segs && i < n_segs; i++) {
        if (!segs[i].n) {
            arch_err(err, errlen, path, "layer %u: segment %u has no positions", layer, i);
            return -1;
        }
        n += segs[i].n;
    }
    if (!segs || !n_segs || (n_segs > 1 && !arch_model_has(m, ARCH_KV))) {
        arch_err(err, errlen, path, "layer %u: %u segments: bad call", layer, n_segs);
        return -1;
    }
    if (layer >= m->hp.n_layers || !n || n > r->max_pos || !x) {
        arch_err(err, errlen, path, "layer %u of %u over %llu positions (run holds %u): bad call",
                 layer, m->hp.n_layers, (unsigned long long)n, r->max_pos);
        return -1;
    }
    if (m->layers[layer].n_vectors && !vectors) {
        arch_err(err, errlen, path, "layer %u: its vectors are missing", layer);
        return -1;
    }
    r->layer = layer;
    r->cur = m->layers[layer].n_vectors; /* the first matrix comes next */
    r->next_row = 0;
    r->ready = 0;
    r->vectors = vectors;
    r->segs = segs;
    r->n_segs = n_segs;
    r->kv = segs[0].kv;
    r->x = x;
    r->n = (uint32_t)n;
    r->pos0 = segs[0].pos0;
    return m->ops->begin(r, err, errlen);
}

int arch_layer_before(arch_run *r, uint32_t tensor)
{
    const arch_layer *l = &r->m->layers[r->layer];
    if (tensor >= l->n_tensors || !l->t[tensor].is_matrix)
        return arch_run_fail(r, "layer %u: tensor %u is not a matrix of the layer", r->layer,
                             tensor);
    /* matrices in consumption order, each after all of the previous one's rows: the hooks
     * read what the earlier ones wrote */
    if (tensor != r->cur || r->ready)
        return arch_run_fail(r, "layer %u: before(%s) out of order (expected %s, row %llu)",
                             r->layer, l->t[tensor].name,
                             r->cur < l->n_tensors ? l->t[r->cur].name : "begin",
                             (unsigned long long)r->next_row);
    r->ready = 1;
    return r->m->ops->before(r, tensor);
}

int arch_layer_rows(arch_run *r, uint32_t tensor, uint64_t r0, uint64_t n, const void *rows)
{
    const arch_layer *l = &r->m->layers[r->layer];
    /* rows NULL: only an expert tensor's, for experts no position routes to (the family
     * checks that) */
    if (tensor >= l->n_tensors || !l->t[tensor].is_matrix || (!rows && !l->t[tensor].n_expert) ||
        !n ||
        r0 > l->t[tensor].rows || n > l->t[tensor].rows - r0)
        return arch_run_fail(r, "layer %u: rows %llu..+%llu of tensor %u are outside it",
                             r->layer, (unsigned long long)r0, (unsigned long long)n, tensor);
    if (tensor != r->cur || !r->ready || r0 != r->next_row)
        return arch_run_fail(r, "layer %u: rows %llu..+%llu of %s out of order (expected %s "
                             "from row %llu)", r->layer, (unsigned long long)r0,
                             (unsigned long long)n, l->t[tensor].name,
                             r->cur < l->n_tensors ? l->t[r->cur].name : "none",
                             (unsigned long long)r->next_row);
    int rc = r->m->ops->rows(r, tensor, r0, n, rows);
    if (rc)
        return rc;
    r->next_row = r0 + n;
    if (r->next_row == l->t[tensor].rows) { /* done: the next matrix may start */
        r->cur++;
        r->next_row = 0;
        r->ready = 0;
    }
    return 0;
}

uint32_t arch_layer_experts(const arch_run *r, uint8_t *used)
{
    const arch_layer *l = &r->m->layers[r->layer];
    /* routing is known once before(the first expert tensor) has run: the current matrix is
     * an expert tensor, prepared, or after another expert tensor */
    if (r->cur >= l->n_tensors || !l->t[r->cur].n_expert ||
        (!r->ready && (r->cur == 0 || !l->t[r->cur - 1].n_expert)))
        return 0;
    return r->m->ops->experts(r, used);
}

int arch_layer_end(arch_run *r)
{
    const arch_layer *l = &r->m->layers[r->layer];
    if (r->cur != l->n_tensors || r->layer >= r->m->hp.n_layers)
        return arch_run_fail(r, "layer %u: end before all rows of %s", r->layer,
                             r->cur < l->n_tensors ? l->t[r->cur].name : "the layer");
    r->cur = ARCH_MAX_LAYER_TENSORS;
    return r->m->ops->end(r);
}

int arch_layer_forward(arch_run *r, uint32_t layer, const void *const *data, arch_kv *kv,
                       float *x, uint32_t n, uint32_t pos0, char *err, size_t errlen)
{
    if (!data || layer >= r->m->hp.n_layers) {
        arch_err(err, errlen, r->m->g ? r->m->g->path : NULL, "layer %u: no data", layer);
        return -1;
    }
    r->seg1 = (arch_seg){ .kv = kv, .pos0 = pos0, .n = n };
    return arch_layer_forward_segs(r, layer, data, &r->seg1, 1, x, err, errlen);
}

int arch_layer_forward_segs(arch_run *r, uint32_t layer, const void *const *data,
                            const arch_seg *segs, uint32_t n_segs, float *x, char *err,
                            size_t errlen)
{
    if (!data || layer >= r->m->hp.n_layers) {
        arch_err(err, errlen, r->m->g ? r->m->g->path : NULL, "layer %u: no data", layer);
        return -1;
    }
    if (arch_layer_begin_segs(r, layer, data, segs, n_segs, x, err, errlen))
        return -1;
    const arch_layer *l = &r->m->layers[layer];
    for (uint32_t t = l->n_vectors; t < l->n_tensors; t++)
        if (arch_layer_before(r, t) || arch_layer_rows(r, t, 0, l->t[t].rows, data[t]))
            goto err;
    if (arch_layer_end(r))
        goto err;
    return 0;
err:
    arch_err(err, errlen, r->m->g ? r->m->g->path : NULL, "%s", r->err);
    return -1;
}

void arch_rmsnorm(const float *x, const float *w, float *out, uint32_t dim, float eps)
{
    double ss = 0;
    for (uint32_t i = 0; i < dim; i++)
        ss += (double)(x[i] * x[i]);
    float scale = 1.0f / sqrtf((float)(ss / dim) + eps);
    for (uint32_t i = 0; i < dim; i++)
        out[i] = x[i] * scale * w[i];
}

/* The sums of squares of 8 rows (dim apart), row j in lane j: each lane's float square then
 * double add, left to right, as arch_rmsnorm's loop. One row's chain waits a double add's
 * latency per element; 8 rows' chains in one vector take the same time (arch_rmsnorm was
 * ~0.8% of a 1-thread Q4_K_M prompt, perf, 2026-12-03). */
__attribute__((target("avx2,avx512f"))) static void s_sumsq8(const float *x, uint32_t dim,
                                                              double ss[8])
{
    const __m256i idx = _mm256_mullo_epi32(_mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7),
                                           _mm256_set1_epi32((int)dim));
    __m512d acc = _mm512_setzero_pd();
    for (uint32_t i = 0; i < dim; i++) {
        const __m256 v = _mm256_i32gather_ps(x + i, idx, 4);
        acc = _mm512_add_pd(acc, _mm512_cvtps_pd(_mm256_mul_ps(v, v)));
    }
    _mm512_storeu_pd(ss, acc);
}

void arch_rmsnorm_rows(const float *x, const float *w, float *out, uint32_t dim, float eps,
                       uint32_t n)
{
    uint32_t p = 0;
    /* lane offsets up to 7 dim must fit the gather's int32 indices */
    if (quant_isa_current() == QUANT_ISA_AVX512 && dim <= (1u << 27))
        for (; p + 8 <= n; p += 8) {
            double ss[8];
            s_sumsq8(x + (size_t)p * dim, dim, ss);
            for (uint32_t j = 0; j < 8; j++) {
                const float *xj = x + (size_t)(p + j) * dim;
                float *oj = out + (size_t)(p + j) * dim;
                float scale = 1.0f / sqrtf((float)(ss[j] / dim) + eps);
                for (uint32_t i = 0; i < dim; i++)
                    oj[i] = xj[i] * scale * w[i];
            }
        }
    for (; p < n; p++)
        arch_rmsnorm(x + (size_t)p * dim, w, out + (size_t)p * dim, dim, eps);
}

void arch_embed_finish(const arch_model *m, float *x, uint32_t n)
{
    float sc = m->hp.embd_scale;
    if (sc == 0 || sc == 1.0f)
        return;
    for (size_t i = 0; i < (size_t)n * m->hp.dim; i++)
        x[i] *= sc; /* ggml_scale */
}

void arch_logits_finish(const arch_model *m, float *logits, uint32_t n)
{
    float c = m->hp.logit_softcap;
    if (!(c > 0))
        return;
    /* as llama.cpp's graph: scale by 1/c, tanh, scale by c */
    float inv = 1.0f / c;
    for (size_t i = 0; i < (size_t)n * m->hp.n_vocab; i++)
        logits[i] = tanhf(logits[i] * inv) * c;
}
