/* dense.c — the lab's layer as an architecture, "swarm-dense": x' = x + silu(W (rmsnorm(x) . g)).
 * arch/
 *
 * W may be quantized (`swarm quantize` on the lab model, the quantized arm): its rows are then
 * quant_matvec's (activations in the type's activation form, quant/quant.h), and the f32 path
 * below is untouched.
 * Tensors in consumption order: blk.N.g (the vector, d f32), then blk.N.w (d x d f32). The
 * hooks are arch/kernel.c's three steps, unchanged, so a layer run through this interface
 * has exactly kernel_layer's bits: before(w) = kernel_prepare, rows = kernel_rows (one sgemv
 * per row range, ranges starting on multiples of ARCH_ROW_ALIGN as OpenBLAS needs for
 * identical bits), end = kernel_finish. Positions are independent: each is its own vector.
 */
#include <stdio.h>
#include <stdlib.h>

#include "arch/arch_int.h"
#include "arch/kernel.h"
#include "arch/model.h"
#include "quant/quant.h"

_Static_assert(ARCH_ROW_ALIGN == KERNEL_ROW_ALIGN, "row ranges follow the kernel's alignment");

/* A run's scratch, per position. */
typedef struct {
    float *u;                     /* (max_pos, dim) rmsnorm(x) . g */
    float *y;                     /* (max_pos, dim) W u */
} s_run;

static int s_open(arch_model *m, char *err, size_t errlen)
{
    const gguf_file *g = m->g;
    uint64_t L = 0, d = 0;
    if (gguf_get_u64(g, "swarm.layer_count", &L, err, errlen) ||
        gguf_get_u64(g, "swarm.dim", &d, err, errlen))
        return -1;
    if (L < 1 || L > MODEL_MAX_LAYERS || d < 1 || d > MODEL_MAX_DIM) {
        arch_err(err, errlen, g->path,
                 "swarm.layer_count %llu / swarm.dim %llu out of range (1..%d, 1..%d)",
                 (unsigned long long)L, (unsigned long long)d, MODEL_MAX_LAYERS, MODEL_MAX_DIM);
        return -1;
    }
    arch_hparams *hp = &m->hp;
    hp->n_layers = (uint32_t)L;
    hp->dim = (uint32_t)d;
    hp->norm_eps = KERNEL_EPS;
    return 0;
}

static int s_layer(const arch_model *m, uint32_t l, arch_layer *ly, char *err, size_t errlen)
{
    const gguf_file *g = m->g;
    uint32_t d = m->hp.dim;
    char name[ARCH_NAME_MAX];
    snprintf(name, sizeof name, "blk.%u.g", l);
    if (arch_tensor_get(g, name, 0, 1, d, &ly->t[0], err, errlen))
        return -1;
    snprintf(name, sizeof name, "blk.%u.w", l);
    if (arch_tensor_get(g, name, 1, d, d, &ly->t[1], err, errlen))
        return -1;
    /* g is read as floats by kernel_prepare; W is OpenBLAS's sgemv in f32 and quant's row
     * products in any other type it computes (arch_tensor_get checked that) */
    if (ly->t[0].type != QUANT_F32) {
        arch_err(err, errlen, g->path, "tensor '%s': type %s, swarm-dense needs f32",
                 ly->t[0].name, quant_type_name(ly->t[0].type));
        return -1;
    }
    ly->n_tensors = 2;
    ly->n_vectors = 1;
    return 0;
}

/* The matrix products only: no attention, no cache (positions are independent). */
static void s_cost(const arch_model *m, uint32_t l, arch_cost *c)
{
    arch_cost_matrices(&m->layers[l], 0, c);
}

static uint64_t s_run_bytes(const arch_model *m, uint32_t max_pos)
{
    return 2ull * max_pos * m->hp.dim * sizeof(float); /* s_run_init: u and y */
}

static int s_run_init(arch_run *r, char *err, size_t errlen)
{
    size_t n = (size_t)r->max_pos * r->m->hp.dim;
    s_run *s = calloc(1, sizeof *s);
    r->fam = s;
    if (!s || !(s->u = malloc(n * sizeof(float))) || !(s->y = malloc(n * sizeof(float)))) {
        arch_err(err, errlen, r->m->g ? r->m->g->path : NULL, "out of memory for %u positions",
                 r->max_pos);
        return -1;
    }
    return 0;
}

static void s_run_free(arch_run *r)
{
    s_run *s = r->fam;
    if (!s)
        return;
    free(s->u);
    free(s->y);
    free(s);
    r->fam = NULL;
}

static int s_begin(arch_run *r, char *err, size_t errlen)
{
    (void)r;
    (void)err;
    (void)errlen;
    return 0;
}

static int s_before(arch_run *r, uint32_t tensor)
{
    (void)tensor;
    s_run *s = r->fam;
    uint32_t d = r->m->hp.dim;
    const float *g = r->vectors[0];
    for (uint32_t p = 0; p < r->n; p++)
        kernel_prepare(g, r->x + (size_t)p * d, s->u + (size_t)p * d, d);
    return 0;
}

static int s_rows(arch_run *r, uint32_t tensor, uint64_t r0, uint64_t n, const void *rows)
{
    s_run *s = r->fam;
    uint32_t d = r->m->hp.dim;
    const arch_tensor *t = &r->m->layers[r->layer].t[tensor];
    if (t->type != QUANT_F32) {
        /* one quant_matvec per position: each row is one dot product in a fixed order, so
         * the bits do not depend on the row ranges or the thread count */
        char why[160];
        for (uint32_t p = 0; p < r->n; p++)
            if (quant_matvec((quant_type)t->type, n, d, rows, s->u + (size_t)p * d,
                             s->y + (size_t)p * d + r0, r->nthreads, why, sizeof why))
                return arch_run_fail(r, "layer %u: %s rows %llu..+%llu: %s", r->layer, t->name,
                                     (unsigned long long)r0, (unsigned long long)n, why);
        return 0;
    }
    if (r0 % ARCH_ROW_ALIGN)
        return arch_run_fail(r, "layer %u: row range starts at %llu, not a multiple of %d",
                             r->layer, (unsigned long long)r0, ARCH_ROW_ALIGN);
    for (uint32_t p = 0; p < r->n; p++)
        kernel_rows(rows, s->u + (size_t)p * d, s->y + (size_t)p * d, (uint32_t)r0, (uint32_t)n,
                    d);
    return 0;
}

static int s_end(arch_run *r)
{
    s_run *s = r->fam;
    uint32_t d = r->m->hp.dim;
    for (uint32_t p = 0; p < r->n; p++)
        kernel_finish(r->x + (size_t)p * d, s->y + (size_t)p * d, d);
    return 0;
}

/* No tokens (the lab feeds activations) and no cache: ARCH_TOKENS and ARCH_KV are absent. */
/* no experts: arch.c never asks (no tensor of the layer has any) */
static uint32_t s_experts(const arch_run *r, uint8_t *used)
{
    (void)r, (void)used;
    return 0;
}

const arch_ops arch_dense_ops = {
    .name = MODEL_ARCH,
    .props = 0,
    .open = s_open,
    .layer = s_layer,
    .cost = s_cost,
    .run_bytes = s_run_bytes,
    .run_init = s_run_init,
    .run_free = s_run_free,
    .experts = s_experts,
    .begin = s_begin,
    .before = s_before,
    .rows = s_rows,
    .end = s_end,
};
