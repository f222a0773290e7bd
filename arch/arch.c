/* arch.c — architectures by general.architecture: open a model, price a layer, run a layer's
 * hooks (dispatched to dense.c or llama.c). arch/ */
#include "arch/arch.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "arch/arch_int.h"
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

const char *arch_id_name(arch_id id)
{
    switch (id) {
    case ARCH_DENSE: return "swarm-dense";
    case ARCH_LLAMA: return "llama";
    case ARCH_QWEN2: return "qwen2";
    }
    return "unknown";
}

/* ---------------------------------------------------------------- opening */

int arch_tensor_get(const gguf_file *g, const char *name, int is_matrix, uint64_t rows,
                    uint64_t cols, arch_tensor *t, char *err, size_t errlen)
{
    const gguf_tensor *gt = gguf_find_tensor(g, name);
    char why[160];
    if (!gt) {
        arch_err(err, errlen, g->path, "tensor '%s' is missing", name);
        return -1;
    }
    uint32_t want_dims = is_matrix ? 2 : 1;
    if (gt->n_dims != want_dims || gt->dims[0] != cols || (is_matrix && gt->dims[1] != rows)) {
        char have[96] = "", want[64];
        size_t k = 0;
        for (uint32_t i = 0; i < gt->n_dims && k < sizeof have; i++)
            k += (size_t)snprintf(have + k, sizeof have - k, "%s%llu", i ? ", " : "",
                                  (unsigned long long)gt->dims[i]);
        if (is_matrix)
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
                 "tensor '%s': type %s (%u) is not supported (supported: f32, f16, bf16, q8_0, "
                 "q4_0)", name, quant_type_name(gt->type), gt->type);
        return -1;
    }
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
    return 0;
}

void arch_layer_seal(arch_layer *l)
{
    l->weight_bytes = 0;
    for (uint32_t i = 0; i < l->n_tensors; i++)
        l->weight_bytes += l->t[i].nbytes;
}

int arch_model_open(arch_model *m, const gguf_file *g, char *err, size_t errlen)
{
    memset(m, 0, sizeof *m);
    m->g = g;
    const char *name = NULL;
    if (gguf_get_str(g, "general.architecture", &name, err, errlen))
        return -1;
    snprintf(m->hp.name, sizeof m->hp.name, "%s", name);
    int rc;
    if (!strcmp(name, "swarm-dense")) {
        m->hp.id = ARCH_DENSE;
        rc = dense_open(m, err, errlen);
    } else if (!strcmp(name, "llama")) {
        m->hp.id = ARCH_LLAMA;
        rc = llama_open(m, err, errlen);
    } else if (!strcmp(name, "qwen2")) {
        m->hp.id = ARCH_QWEN2;
        rc = llama_open(m, err, errlen);
    } else {
        arch_err(err, errlen, g->path,
                 "general.architecture '%s' is not supported (supported: swarm-dense, llama, "
                 "qwen2)", name);
        rc = -1;
    }
    if (rc)
        arch_model_close(m);
    return rc;
}

void arch_model_close(arch_model *m)
{
    if (!m)
        return;
    free(m->layers);
    free(m->rope_freqs);
    m->layers = NULL;
    m->rope_freqs = NULL;
}

void arch_layer_cost(const arch_model *m, uint32_t layer, arch_cost *c)
{
    memset(c, 0, sizeof *c);
    if (layer >= m->hp.n_layers)
        return;
    const arch_layer *l = &m->layers[layer];
    c->weight_bytes = l->weight_bytes;
    for (uint32_t i = 0; i < l->n_tensors; i++)
        if (l->t[i].is_matrix)
            c->flops_per_pos += 2.0 * (double)l->t[i].rows * (double)l->t[i].cols;
    if (m->hp.id != ARCH_DENSE) {
        /* per cached position: q.k and a.v, head_dim multiply-adds each, for every head */
        c->attn_flops_per_pos_ctx = 2.0 * 2.0 * m->hp.n_head * m->hp.head_dim;
        /* K and V in f32 (see arch_kv) */
        c->kv_bytes_per_pos = 2ull * m->hp.n_head_kv * m->hp.head_dim * sizeof(float);
    }
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
    int rc = m->hp.id == ARCH_DENSE ? dense_run_init(r, err, errlen)
                                    : llama_run_init(r, err, errlen);
    if (rc)
        arch_run_free(&r);
    return r;
}

uint64_t arch_run_bytes(const arch_model *m, uint32_t max_pos)
{
    const arch_hparams *hp = &m->hp;
    uint64_t P = max_pos, d = hp->dim, kvd = (uint64_t)hp->n_head_kv * hp->head_dim,
             ff = hp->n_ff, wide = d > ff ? d : ff;
    if (hp->id == ARCH_DENSE) /* dense_run_init: u and y */
        return 2 * P * d * sizeof(float);
    /* llama_run_init: xb q att o down (d), k v (kvd), gate up (ff), tmp (wide); vectors */
    return (P * (5 * d + 2 * kvd + 2 * ff + wide) + 3 * d + 2 * kvd) * sizeof(float);
}

void arch_run_free(arch_run **rp)
{
    if (!rp || !*rp)
        return;
    arch_run *r = *rp;
    free(r->u);
    free(r->y);
    llama_run_free(r);
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
    const arch_model *m = r->m;
    const char *path = m->g ? m->g->path : NULL;
    r->err[0] = 0;
    if (layer >= m->hp.n_layers || !n || n > r->max_pos || !x) {
        arch_err(err, errlen, path, "layer %u of %u over %u positions (run holds %u): bad call",
                 layer, m->hp.n_layers, n, r->max_pos);
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
    r->kv = kv;
    r->x = x;
    r->n = n;
    r->pos0 = pos0;
    return m->hp.id == ARCH_DENSE ? dense_begin(r, err, errlen) : llama_begin(r, err, errlen);
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
    return r->m->hp.id == ARCH_DENSE ? dense_before(r, tensor) : llama_before(r, tensor);
}

int arch_layer_rows(arch_run *r, uint32_t tensor, uint64_t r0, uint64_t n, const void *rows)
{
    const arch_layer *l = &r->m->layers[r->layer];
    if (tensor >= l->n_tensors || !l->t[tensor].is_matrix || !rows || !n ||
        r0 > l->t[tensor].rows || n > l->t[tensor].rows - r0)
        return arch_run_fail(r, "layer %u: rows %llu..+%llu of tensor %u are outside it",
                             r->layer, (unsigned long long)r0, (unsigned long long)n, tensor);
    if (tensor != r->cur || !r->ready || r0 != r->next_row)
        return arch_run_fail(r, "layer %u: rows %llu..+%llu of %s out of order (expected %s "
                             "from row %llu)", r->layer, (unsigned long long)r0,
                             (unsigned long long)n, l->t[tensor].name,
                             r->cur < l->n_tensors ? l->t[r->cur].name : "none",
                             (unsigned long long)r->next_row);
    int rc = r->m->hp.id == ARCH_DENSE ? dense_rows(r, tensor, r0, n, rows)
                                       : llama_rows(r, tensor, r0, n, rows);
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

int arch_layer_end(arch_run *r)
{
    const arch_layer *l = &r->m->layers[r->layer];
    if (r->cur != l->n_tensors || r->layer >= r->m->hp.n_layers)
        return arch_run_fail(r, "layer %u: end before all rows of %s", r->layer,
                             r->cur < l->n_tensors ? l->t[r->cur].name : "the layer");
    r->cur = ARCH_MAX_LAYER_TENSORS;
    return r->m->hp.id == ARCH_DENSE ? dense_end(r) : llama_end(r);
}

int arch_layer_forward(arch_run *r, uint32_t layer, const void *const *data, arch_kv *kv,
                       float *x, uint32_t n, uint32_t pos0, char *err, size_t errlen)
{
    if (!data || layer >= r->m->hp.n_layers) {
        arch_err(err, errlen, r->m->g ? r->m->g->path : NULL, "layer %u: no data", layer);
        return -1;
    }
    if (arch_layer_begin(r, layer, data, kv, x, n, pos0, err, errlen))
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
