/* exec_int.h — what exec.c shares with exec_plan.c: the streaming schedule. runtime/ */
#ifndef SWARM_EXEC_INT_H
#define SWARM_EXEC_INT_H

#include "arch/arch.h"
#include "runtime/exec.h"

/* One read of a step: tensor `tensor` of layer `layer`, rows [r0, r0 + nrows) (a vector is
 * its one row), at file bytes [off, off + len). */
typedef struct {
    uint32_t layer, tensor;
    uint64_t r0, nrows;
    uint64_t off, len;
    int first, last;              /* the layer's first / last chunk (hash reset / verdict) */
} exec_chunk;

/* The plan of layers [first, last) of am (exec.h's rule, from each layer's own tensors). */
int exec_plan_arch(const arch_model *am, const char *path, uint32_t first, uint32_t last,
                   const exec_opts *o, exec_plan *p, char *err, size_t errlen);
/* The chunks of one step: every streamed layer's vectors (one read each), then each matrix's
 * row ranges (exec_chunk_rows). *n gets the count. NULL when out of memory. */
exec_chunk *exec_schedule(const arch_model *am, const exec_plan *p, uint32_t first,
                          uint32_t last, uint64_t chunk_bytes, uint64_t *n);
/* Rows per read of tensor t for a target of chunk_bytes: whole 8-row blocks (at least one),
 * or the whole tensor rounded up to ARCH_ROW_ALIGN when it is smaller. */
uint64_t exec_chunk_rows(const arch_tensor *t, uint64_t chunk_bytes);
/* Bytes a layer takes resident: each tensor in its own EXEC_ALIGN-aligned buffer. */
uint64_t exec_arch_layer_bytes(const arch_layer *l);
/* Bytes one expert takes in the expert cache: its slice of each of layer l's expert tensors,
 * each an aligned superset. */
uint64_t exec_expert_slot_bytes(const arch_layer *l);
/* A split layer's resident bytes: every tensor but its experts, aligned as resident ones. */
uint64_t exec_split_layer_bytes(const arch_layer *l);
/* Bytes the vector staging area of a streamed layer takes (its vectors, 64-byte aligned). */
uint64_t exec_stage_bytes(const arch_layer *l);
/* The lab model as an architecture (no file opened: the tensors from model_t's offsets). */
int exec_dense_arch(const model_t *m, arch_model *am, char *err, size_t errlen);

static inline uint64_t exec_round_up(uint64_t v, uint64_t a)
{
    return (v + a - 1) / a * a;
}

#endif
