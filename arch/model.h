/* model.h — the lab model on top of GGUF: L layers of W (d x d f32) and g (d f32). arch/
 *
 * File layout written by model_gen (readers accept any GGUF that has these tensors and keys):
 *   general.architecture = "swarm-dense"       swarm.layer_count, swarm.dim (u32)
 *   swarm.seed (u64)                            swarm.checksum_algo = "xxh3-64"
 *   swarm.layer_checksums (array u64, L)        general.alignment = 4096
 *   tensors, in order: "blk.N.g" (ne = [d]), "blk.N.w" (ne = [d, d], row-major: row r is
 *   d contiguous floats at offset r*d*4)
 * Layer checksum = XXH3-64 over the bytes of g then the bytes of W (seed 0), so a reader that
 * streams g first and then W's rows in order can verify a layer without a second pass.
 * Weights are deterministic from the seed: W ~ U(-a, a) with a = 1/sqrt(d), g ~ U(0.5, 1.5).
 */
#ifndef SWARM_MODEL_H
#define SWARM_MODEL_H

#include <limits.h>
#include <stddef.h>
#include <stdint.h>

#define MODEL_ARCH "swarm-dense"
#define MODEL_MAX_LAYERS 4096
#define MODEL_MAX_DIM 65536
/* The lab's default model ([model] path's default; configs/lab02.ini, `make lab`). */
#define MODEL_LAB_PATH "models/lab02.gguf"

typedef struct {
    uint64_t g_off;        /* absolute offset of g (d f32) */
    uint64_t w_off;        /* absolute offset of W (d*d f32, row-major) */
    uint64_t checksum;     /* XXH3-64(g bytes || W bytes) from metadata */
} model_layer;

typedef struct {
    char *path;            /* owned */
    uint64_t file_size;
    uint32_t n_layers;
    uint32_t dim;
    uint32_t alignment;    /* from the file (4096 for ours, 32 typical elsewhere) */
    uint64_t seed;
    uint32_t w_type;       /* ggml type of every W (f32 as generated; `swarm quantize` makes
                            * others, opened only by model_open_quant) */
    uint64_t w_bytes;      /* bytes of one W of that type */
    model_layer *layers;   /* n_layers, owned */
} model_t;

/* Bytes of one layer's weights (W + g), not counting padding. */
static inline uint64_t model_layer_bytes(const model_t *m)
{
    return (m->w_bytes ? m->w_bytes : (uint64_t)m->dim * m->dim * 4u) + (uint64_t)m->dim * 4u;
}

/* Open and validate a model file (GGUF checks + our keys + tensor shapes/types): W and g f32,
 * which is what the workers and the parity-gated arms compute on. */
int model_open(model_t *m, const char *path, char *err, size_t errlen);
/* The same, W in any type quant/ computes (the quantized arm's file); g stays f32 and every
 * W has one type. */
int model_open_quant(model_t *m, const char *path, char *err, size_t errlen);
void model_close(model_t *m);

/* A model path and what may happen when nothing is there. A path the user names is never
 * invented: a mistyped path must be an error, not a new random model that then passes every
 * gate. Only a caller that was asked to (generate = 1: `[model] generate = 1` in a config, for
 * the path in that config) generates, and only where nothing exists: an existing file, ours or
 * a real model of another architecture, is never regenerated or overwritten. */
typedef struct {
    const char *path;
    int generate;              /* 1: generate a missing path (and its missing folders) */
    uint32_t layers, dim;      /* what to generate, and the `swarm gen` hint */
    uint64_t seed;
    char named_by[PATH_MAX + 64]; /* for errors: "named by --model", "[model] path in x.ini" */
    char gen_hint[PATH_MAX + 64]; /* how to ask for generation instead ("": no such way) */
} model_source;

/* Before anything is created: 0 the path exists, 1 it is missing and will be generated, -1 it
 * is missing (or unusable) and will not be: err names the path, who named it, and the command
 * that would create it (`swarm gen ...`, `make lab` for the lab's default model). */
int model_check_source(const model_source *src, char *err, size_t errlen);
/* model_check_source, then generate if that said so (logging it), then model_open. 0 / -1. */
int model_open_source(model_t *m, const model_source *src, char *err, size_t errlen);

/* Write a synthetic model. alignment: 4096 for ours (O_DIRECT friendly); tests use 32 too.
 * Streams layer by layer (never holds more than one layer in memory); writes to path.tmp and
 * renames, so an interrupted gen never leaves a half file under the real name. */
int model_gen(const char *path, uint32_t layers, uint32_t dim, uint64_t seed, uint32_t alignment,
              char *err, size_t errlen);

/* Deterministically fill layer l's weights (what model_gen writes). g: d floats, W: d*d. */
void model_fill_layer(uint64_t seed, uint32_t layer, uint32_t dim, float *g, float *W);

/* XXH3-64 of g bytes then W bytes (the metadata checksum). */
uint64_t model_layer_checksum(const float *g, const float *W, uint32_t dim);

#endif
