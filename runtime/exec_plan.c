/* exec_plan.c — the executor's plan and streaming schedule, from the architecture's layers.
 * runtime/
 *
 * The working-set rule in one place: what a cap must hold is the caller's overhead and held
 * bytes (a runner's KV caches, embedding, head), the layer run's scratch, the resident layers
 * (each tensor in its own EXEC_ALIGN-aligned buffer) and, when anything streams, the ring of
 * chunk buffers and the staging area for a streamed layer's vectors. Every layer is priced by
 * its own tensors (arch_layer), never as a copy of layer 0.
 */
#include "runtime/exec_int.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "arch/kernel.h"
#include "base/util.h"
#include "quant/quant.h"

/* The lab layer's scratch is two (d,) f32 vectors (arch/dense.c s_run_init), each aligned. */
static uint64_t s_fixed_bytes(const arch_model *am, const exec_opts *o)
{
    uint32_t P = o->max_pos ? o->max_pos : 1;
    return o->overhead_bytes + o->held_bytes + arch_run_bytes(am, P) + 2 * EXEC_ALIGN;
}

uint64_t exec_arch_layer_bytes(const arch_layer *l)
{
    uint64_t b = 0;
    for (uint32_t i = 0; i < l->n_tensors; i++)
        b += exec_round_up(l->t[i].nbytes + 2 * EXEC_ALIGN, EXEC_ALIGN);
    return b;
}

uint64_t exec_stage_bytes(const arch_layer *l)
{
    uint64_t b = 0;
    for (uint32_t i = 0; i < l->n_vectors; i++)
        b += exec_round_up(l->t[i].nbytes, 64);
    return b;
}

uint64_t exec_layer_bytes(uint32_t dim)
{
    uint64_t d = dim;
    return exec_round_up(d * d * 4 + 2 * EXEC_ALIGN, EXEC_ALIGN) +
           exec_round_up(d * 4 + 2 * EXEC_ALIGN, EXEC_ALIGN);
}

uint32_t exec_resident_fit(uint32_t dim, const exec_opts *o)
{
    uint64_t fixed = o->overhead_bytes + o->held_bytes + 2ull * dim * 4 + 2 * EXEC_ALIGN, n;
    if (o->budget_bytes == 0)
        return UINT32_MAX;
    if (o->budget_bytes <= fixed)
        return 0;
    n = (o->budget_bytes - fixed) / exec_layer_bytes(dim);
    return n > UINT32_MAX ? UINT32_MAX : (uint32_t)n;
}

uint32_t exec_resident_fit_arch(const arch_model *am, uint32_t first, const exec_opts *o)
{
    uint64_t used = s_fixed_bytes(am, o);
    uint32_t n = 0;
    if (o->budget_bytes == 0)
        return UINT32_MAX;
    for (uint32_t l = first; l < am->hp.n_layers; l++, n++) {
        used += exec_arch_layer_bytes(&am->layers[l]);
        if (used > o->budget_bytes)
            break;
    }
    return n;
}

void exec_opts_worker(exec_opts *o, uint64_t cap_bytes)
{
    *o = (exec_opts){ .budget_bytes = cap_bytes, .queue_depth = 1, .chunk_bytes = 4u << 20,
                      .overhead_bytes = EXEC_WORKER_OVERHEAD, .resident_only = 1,
                      .verify_resident = 1 };
}

/* Rows per chunk: whole 4-row blocks (bit-identity: see "Determinism" in docs/design.md), at
 * least one block. Multiple of 8 rows: OpenBLAS splits a call's rows evenly across its
 * threads, and with 2 threads each half must still start on a 4-row boundary. A row of a
 * quantized type is whole blocks, so every range is block-aligned. */
uint64_t exec_chunk_rows(const arch_tensor *t, uint64_t chunk_bytes)
{
    if (!t->is_matrix)
        return 1;
    uint64_t rows = chunk_bytes / t->row_bytes / 8 * 8;
    if (rows < 8)
        rows = 8;
    if (rows > t->rows)
        rows = exec_round_up(t->rows, ARCH_ROW_ALIGN);
    return rows;
}

int exec_dense_arch(const model_t *m, arch_model *am, char *err, size_t errlen)
{
    uint64_t d = m->dim;
    memset(am, 0, sizeof *am);
    if (arch_model_bind(am, MODEL_ARCH, err, errlen))
        return -1;
    am->hp.n_layers = m->n_layers;
    am->hp.dim = m->dim;
    am->hp.norm_eps = KERNEL_EPS;
    if (!(am->layers = calloc(m->n_layers ? m->n_layers : 1, sizeof *am->layers))) {
        snprintf(err, errlen, "%s: out of memory", m->path);
        return -1;
    }
    for (uint32_t l = 0; l < m->n_layers; l++) {
        arch_layer *ly = &am->layers[l];
        ly->n_tensors = 2;
        ly->n_vectors = 1;
        ly->t[0] = (arch_tensor){ .type = QUANT_F32, .rows = 1, .cols = d,
                                  .off = m->layers[l].g_off, .nbytes = d * 4, .row_bytes = d * 4 };
        uint64_t wb = m->w_bytes ? m->w_bytes : d * d * 4;
        ly->t[1] = (arch_tensor){ .type = m->w_bytes ? m->w_type : QUANT_F32, .rows = d,
                                  .cols = d, .off = m->layers[l].w_off, .nbytes = wb,
                                  .row_bytes = wb / d, .is_matrix = 1 };
        snprintf(ly->t[0].name, sizeof ly->t[0].name, "blk.%u.g", l);
        snprintf(ly->t[1].name, sizeof ly->t[1].name, "blk.%u.w", l);
        ly->weight_bytes = d * 4 + wb;
    }
    return 0;
}

int exec_plan_make(const model_t *m, uint32_t first, uint32_t last, const exec_opts *o,
                   exec_plan *p, char *err, size_t errlen)
{
    arch_model am;
    if (exec_dense_arch(m, &am, err, errlen))
        return -1;
    int rc = exec_plan_arch(&am, m->path, first, last, o, p, err, errlen);
    arch_model_close(&am);
    return rc;
}

int exec_plan_make_arch(const arch_model *am, uint32_t first, uint32_t last,
                        const exec_opts *o, exec_plan *p, char *err, size_t errlen)
{
    return exec_plan_arch(am, am->g ? am->g->path : "model", first, last, o, p, err, errlen);
}

exec_chunk *exec_schedule(const arch_model *am, const exec_plan *p, uint32_t first,
                          uint32_t last, uint64_t chunk_bytes, uint64_t *n)
{
    uint64_t cnt = 0;
    exec_chunk *c = NULL;
    for (int pass = 0; pass < 2; pass++) {
        cnt = 0;
        for (uint32_t l = first + p->n_resident + p->n_split; l < last; l++) {
            const arch_layer *ly = &am->layers[l];
            uint64_t layer_first = cnt;
            for (uint32_t t = 0; t < ly->n_tensors; t++) {
                const arch_tensor *T = &ly->t[t];
                if (p->expert_slots && T->n_expert)
                    continue; /* read by expert, after routing (exec.c) */
                uint64_t rows = exec_chunk_rows(T, chunk_bytes);
                for (uint64_t r0 = 0; r0 < T->rows; r0 += rows, cnt++) {
                    if (!c)
                        continue;
                    uint64_t nr = T->rows - r0 < rows ? T->rows - r0 : rows;
                    c[cnt] = (exec_chunk){ .layer = l, .tensor = t, .r0 = r0, .nrows = nr,
                                           .off = T->off + r0 * T->row_bytes,
                                           .len = nr * T->row_bytes };
                }
            }
            if (c && cnt > layer_first) {
                c[layer_first].first = 1;
                c[cnt - 1].last = 1;
            }
        }
        if (!c && !(c = calloc(cnt ? cnt : 1, sizeof *c)))
            return NULL;
    }
    *n = cnt;
    return c;
}

/* The refusal of a cap that cannot hold a plan, with every term of the sum. */
static int s_short(char *err, size_t errlen, const char *path, const char *what, uint64_t need,
                   uint64_t fixed, const char *rest, uint64_t rest_bytes, const exec_opts *o)
{
    char b[7][32];
    snprintf(err, errlen,
             "%s: cap %s cannot hold %s: %s needed (%s overhead + %s held by the runner + %s "
             "layer scratch + %s %s): short by %s",
             path, util_fmt_size(o->budget_bytes, b[0], sizeof b[0]), what,
             util_fmt_size(need, b[1], sizeof b[1]),
             util_fmt_size(o->overhead_bytes, b[2], sizeof b[2]),
             util_fmt_size(o->held_bytes, b[3], sizeof b[3]),
             util_fmt_size(fixed - o->overhead_bytes - o->held_bytes, b[4], sizeof b[4]),
             util_fmt_size(rest_bytes, b[5], sizeof b[5]), rest,
             util_fmt_size(need - o->budget_bytes, b[6], sizeof b[6]));
    return -1;
}

/* One expert's slot in the cache: its slice of each expert tensor of layer l, each in the
 * aligned superset an O_DIRECT read of it takes. */
uint64_t exec_expert_slot_bytes(const arch_layer *l)
{
    uint64_t b = 0;
    for (uint32_t t = 0; t < l->n_tensors; t++)
        if (l->t[t].n_expert)
            b += exec_round_up(l->t[t].nbytes / l->t[t].n_expert + 2 * EXEC_ALIGN, EXEC_ALIGN);
    return b;
}

/* A split layer's resident part: its tensors but the experts, each in its aligned buffer. */
uint64_t exec_split_layer_bytes(const arch_layer *l)
{
    uint64_t b = 0;
    for (uint32_t i = 0; i < l->n_tensors; i++)
        if (!l->t[i].n_expert)
            b += exec_round_up(l->t[i].nbytes + 2 * EXEC_ALIGN, EXEC_ALIGN);
    return b;
}

static uint64_t s_split_bytes(const arch_model *am, uint32_t first, uint32_t last)
{
    uint64_t b = 0;
    for (uint32_t l = first; l < last; l++)
        b += exec_split_layer_bytes(&am->layers[l]);
    return b;
}

/* Expert streaming for layers [first, last): the slot size (0: no layer has experts, or the
 * options keep experts with their layers) and the fewest slots a step can need. */
static uint64_t s_expert_slot(const arch_model *am, uint32_t first, uint32_t last,
                              const exec_opts *o, uint32_t *min_slots)
{
    uint64_t slot = 0;
    uint32_t mn = 0;
    if (o->experts_dense || o->io_only || o->stream_all || o->resident_only || !o->budget_bytes)
        return 0;
    for (uint32_t l = first; l < last; l++) {
        const arch_layer *ly = &am->layers[l];
        uint64_t b = exec_expert_slot_bytes(ly);
        slot = b > slot ? b : slot;
        for (uint32_t t = 0; t < ly->n_tensors; t++)
            if (ly->t[t].n_expert) {
                uint64_t k = (uint64_t)(o->max_pos ? o->max_pos : 1) * am->hp.n_expert_used;
                uint32_t need = k < ly->t[t].n_expert ? (uint32_t)k : ly->t[t].n_expert;
                mn = need > mn ? need : mn;
            }
    }
    *min_slots = mn;
    return slot;
}

int exec_plan_arch(const arch_model *am, const char *path, uint32_t first, uint32_t last,
                   const exec_opts *o, exec_plan *p, char *err, size_t errlen)
{
    uint64_t fixed = s_fixed_bytes(am, o), all = 0, slot_cap = 0, stage = 0;
    uint32_t xmin = 0;
    uint64_t xslot = 0;
    char what[96];
    memset(p, 0, sizeof *p);
    if (first >= last || last > am->hp.n_layers) {
        snprintf(err, errlen, "bad layer range [%u, %u) for a %u-layer model", first, last,
                 am->hp.n_layers);
        return -1;
    }
    p->n_layers = last - first;
    p->layer_alloc = exec_arch_layer_bytes(&am->layers[first]);
    xslot = s_expert_slot(am, first, last, o, &xmin);
    /* The ring's slot holds the largest chunk of any layer in the range (plus the aligned
     * superset's two partial blocks); the stage holds the largest layer's vectors. */
    for (uint32_t l = first; l < last; l++) {
        const arch_layer *ly = &am->layers[l];
        all += exec_arch_layer_bytes(ly);
        if (exec_stage_bytes(ly) > stage)
            stage = exec_stage_bytes(ly);
        for (uint32_t t = 0; t < ly->n_tensors; t++) {
            if (xslot && ly->t[t].n_expert)
                continue; /* never a chunk of the ring */
            uint64_t s = exec_round_up(exec_chunk_rows(&ly->t[t], o->chunk_bytes) *
                                           ly->t[t].row_bytes + 2 * EXEC_ALIGN, EXEC_ALIGN);
            if (s > slot_cap)
                slot_cap = s;
        }
    }
    const arch_layer *l0 = &am->layers[first];
    p->rows_per_chunk = (uint32_t)exec_chunk_rows(&l0->t[l0->n_vectors], o->chunk_bytes);
    p->chunks_per_layer = 0;
    for (uint32_t t = 0; t < l0->n_tensors; t++) {
        uint64_t r = exec_chunk_rows(&l0->t[t], o->chunk_bytes);
        p->chunks_per_layer += (uint32_t)((l0->t[t].rows + r - 1) / r);
    }
    p->slot_bytes = slot_cap;
    uint64_t ring = (uint64_t)(o->queue_depth + 1) * slot_cap;

    if (o->budget_bytes == 0 && !o->stream_all) {
        p->n_resident = p->n_layers;
    } else if (o->stream_all) {
        p->n_resident = 0;
    } else if (o->resident_only) {
        if (fixed + all > o->budget_bytes) {
            snprintf(what, sizeof what, "layers [%u, %u) resident", first, last);
            return s_short(err, errlen, path, what, fixed + all, fixed, "of layers", all, o);
        }
        p->n_resident = p->n_layers;
    } else if (fixed + all <= o->budget_bytes) {
        p->n_resident = p->n_layers; /* everything fits without a ring */
    } else if (xslot && fixed + s_split_bytes(am, first, last) + (uint64_t)xmin * xslot <=
                            o->budget_bytes) {
        /* Experts stream: every layer's attention and router resident, nothing through the
         * ring; the rest of the cap is the expert cache (below). */
        p->n_split = p->n_layers;
    } else {
        uint64_t xc = (uint64_t)xmin * xslot; /* the fewest expert slots a step can use */
        uint64_t need_min = fixed + ring + stage + xc, used = need_min;
        if (need_min > o->budget_bytes)
            return s_short(err, errlen, path, "even the streaming ring", need_min, fixed,
                           xc ? "of ring, vector stage and expert cache"
                              : "of ring and vector stage", ring + stage + xc, o);
        /* With experts streaming, the leading layers keep their attention and router
         * resident (a whole layer would spend the cap on its own experts, which the cache
         * holds for every layer alike); without, whole layers. */
        for (uint32_t l = first; l < last; l++) {
            uint64_t b = xslot ? exec_split_layer_bytes(&am->layers[l])
                               : exec_arch_layer_bytes(&am->layers[l]);
            if (used + b > o->budget_bytes)
                break;
            used += b;
            if (xslot)
                p->n_split++;
            else
                p->n_resident++;
        }
    }
    p->n_streamed = p->n_layers - p->n_resident - p->n_split;
    for (uint32_t l = first; l < first + p->n_resident; l++)
        p->resident_bytes += exec_arch_layer_bytes(&am->layers[l]);
    for (uint32_t l = first + p->n_resident; l < first + p->n_resident + p->n_split; l++)
        p->resident_bytes += exec_split_layer_bytes(&am->layers[l]);
    p->ring_slots = o->queue_depth + 1;
    if (o->ring_slots) {
        p->ring_slots = o->ring_slots; /* bench-disk: the SSD arm's ring, not its own */
    } else if (p->n_streamed && o->budget_bytes && !o->stream_all && !o->resident_only) {
        /* What the resident layers leave of the budget, less one slot's worth kept unspent,
         * buys up to queue_depth + 1 more slots. The kept slot is the plan's only margin for
         * an overhead that outgrows its estimate (AddressSanitizer's allocations overran the
         * tests' 1 MiB once the spare was spent).
         * With only queue_depth + 1 the disk idles whenever the step does not consume for a
         * while (the resident layers at the top of each step, a preempted thread): the ring
         * holds ≈15 ms of reads at 2.4 GB/s against ≈25 ms of resident compute. Measured on
         * lab02 (2026-12-01, 3 pairs back to back, load ≈2.5): 9 slots 493-563 ms per step,
         * device busy 74-88%; 13 slots 466-494 ms, busy 86-94% (its 600 MiB cap gives 12). */
        /* the expert cache's fewest slots are spoken for: extra ring slots taken from them
         * left a plan over its cap (434.8 MiB under 400 MiB with 9 extra 4 MiB slots) */
        uint64_t used = fixed + ring + stage + p->resident_bytes + (uint64_t)xmin * xslot;
        uint64_t extra = o->budget_bytes > used + slot_cap
                             ? (o->budget_bytes - used - slot_cap) / slot_cap
                             : 0;
        p->ring_slots += (uint32_t)(extra > o->queue_depth + 1u ? o->queue_depth + 1u : extra);
    }
    p->ring_bytes = p->n_streamed ? (uint64_t)p->ring_slots * slot_cap : 0;
    p->stage_bytes = p->n_streamed ? stage : 0;
    if ((p->n_streamed || p->n_split) && xslot) {
        /* the cache: at least a step's worth, then what the budget leaves (one chunk slot
         * kept unspent, as the ring does), at most every streamed expert */
        uint64_t used = fixed + p->ring_bytes + p->stage_bytes + p->resident_bytes;
        uint64_t most = 0, n = xmin;
        for (uint32_t l = first + p->n_resident; l < last; l++) /* split and streamed */
            for (uint32_t t = 0; t < am->layers[l].n_tensors; t++)
                if (am->layers[l].t[t].n_expert) {
                    most += am->layers[l].t[t].n_expert;
                    break;
                }
        if (o->budget_bytes > used + slot_cap + n * xslot)
            n = (o->budget_bytes - used - slot_cap) / xslot;
        n = n > most ? most : n;
        n = n < xmin ? xmin : n;
        if (n) {
            p->expert_slots = (uint32_t)n;
            p->expert_slot_bytes = xslot;
            p->expert_cache_bytes = n * xslot;
        }
    }
    p->working_set = p->resident_bytes + p->ring_bytes + p->stage_bytes + fixed +
                     p->expert_cache_bytes;
    if (p->n_streamed) {
        /* Bytes requested per step: each chunk's aligned superset. */
        uint64_t n = 0;
        exec_chunk *c = exec_schedule(am, p, first, last, o->chunk_bytes, &n);
        if (!c) {
            snprintf(err, errlen, "%s: out of memory for the streaming schedule", path);
            return -1;
        }
        for (uint64_t i = 0; i < n; i++)
            p->streamed_per_step += exec_round_up(c[i].off + c[i].len, EXEC_ALIGN) -
                                    c[i].off / EXEC_ALIGN * EXEC_ALIGN;
        p->chunks_per_step = n;
        free(c);
    }
    return 0;
}
