/* gemm.h — private to quant/: batched kernels (a block of weight rows times a panel of
 * positions), the prompt-processing path of quant_matmat. quant/
 *
 * A batched kernel keeps quant.h's order for every (row, position) pair — the same 32 lanes,
 * the same fmaf per lane in the same sequence, the same reduction tree — so Y[b] has exactly
 * the bits quant_matvec gives for X[b] whatever the batch (tests/test_gemm.c holds every
 * kernel to that, bit for bit). What it changes is only where the operands come from: the
 * batch's activation forms are repacked once per product into a panel laid out for the
 * kernel's loads (positions side by side per group of blocks, scales pre-broadcast to the
 * lanes they multiply), and a register tile of rows x positions decodes each weight vector
 * once for several positions and loads each activation vector once for several rows.
 *
 * A type with no batched kernel on the current ISA (gemm_get gives NULL) falls back to
 * quant_matmat's tiles or to one dot per pair (matvec.c). Kernels for new types go here, in
 * their own files, and into gemm_get's table; nothing else changes.
 */
#ifndef SWARM_QUANT_GEMM_H
#define SWARM_QUANT_GEMM_H

#include <stdint.h>

#include "quant/quant_int.h"

/* One batched product's operands, as matvec.c lays them out. */
typedef struct {
    uint64_t n;                /* row length (cols) */
    const uint8_t *W;          /* weight rows, row_bytes apart */
    uint64_t row_bytes;
    uint64_t B;                /* positions in the product */
    const uint8_t *panel;      /* the kernel's repacked activations (pack below) */
    const uint8_t *act;        /* B activation forms, act_bytes apart (edges use them) */
    uint64_t act_bytes;
    quant_dot_fn dot;          /* the one-row kernel: pairs outside the register tiles */
    float *Y;                  /* (B, ldy): Y[b * ldy + r] */
    uint64_t ldy;
    uint8_t *scratch;          /* this share's scratch_bytes (64-aligned), or NULL */
} quant_gemm_args;

typedef struct {
    const char *name;          /* "avx512-vnni", "avx-vnni", "avx2" ... (bench, tests) */
    /* Panel bytes for B positions of n elements; 0 if this kernel does not take n (then the
     * caller falls back). */
    uint64_t (*panel_bytes)(uint64_t n, uint64_t B);
    /* Positions [b0, b1) of the batch's activation forms (act + b * act_bytes) into panel
     * (panel_bytes(n, B) bytes); disjoint ranges may be packed by different threads. */
    void (*pack)(uint64_t n, uint64_t B, const uint8_t *act, uint64_t act_bytes, uint8_t *panel,
                 uint64_t b0, uint64_t b1);
    /* Rows [r0, r1) against positions [b0, b1). */
    void (*run)(const quant_gemm_args *a, uint64_t r0, uint64_t r1, uint64_t b0, uint64_t b1);
    /* Bytes of scratch each share (thread) of a product of B positions gets as a->scratch, or
     * NULL / 0 for none; run must give the same bits without it (a->scratch NULL). */
    uint64_t (*scratch_bytes)(uint64_t n, uint64_t B);
} quant_gemm;

/* Which kernel families exist (a CPU may run several: tests run each). */
typedef enum {
    QUANT_GEMM_AVX512 = 0,     /* AVX-512 F+BW+VL+VNNI (vpdpbusd on 512 bits) */
    QUANT_GEMM_AVXVNNI = 1,    /* AVX2 + AVX-VNNI (vpdpbusd on 256 bits, VEX) */
    QUANT_GEMM_AVX2 = 2,       /* AVX2 + FMA + F16C (vpmaddubsw / vpmaddwd) */
} quant_gemm_kind;
#define QUANT_GEMM_KINDS 3

/* The kernel of `kind` for weight type t, or NULL (none, or this CPU cannot run it). */
const quant_gemm *quant_gemm_get_kind(quant_type t, quant_gemm_kind kind);
/* The kernel quant_matmat uses for t: with the current ISA (quant_isa_current) AVX-512 ->
 * the AVX-512 family; AVX2 -> AVX-VNNI where the CPU has it, else AVX2; scalar -> none. */
const quant_gemm *quant_gemm_get(quant_type t);
/* Tests and timing tools: QUANT_GEMM_AUTO (the choice above), QUANT_GEMM_NONE (no batched
 * kernel: matmat's tiles), or one kind (used where it has the type). -1 if this CPU cannot run
 * that kind. Not for use while a product runs. */
#define QUANT_GEMM_AUTO (-1)
#define QUANT_GEMM_NONE (-2)
int quant_gemm_force(int kind);

/* The AVX-512 family (gemm_avx512.c). */
extern const quant_gemm quant_gemm_q4_0_avx512, quant_gemm_q8_0_avx512;
/* The 256-bit families (gemm_avxvnni.c, gemm_avx2.c; both from gemm_avx2.h). */
extern const quant_gemm quant_gemm_q4_0_avxvnni, quant_gemm_q4_0_avx2;
extern const quant_gemm quant_gemm_q8_0_avxvnni, quant_gemm_q8_0_avx2;
/* (gemm_f_avx512.c) */
extern const quant_gemm quant_gemm_f16_avx512, quant_gemm_bf16_avx512;
/* (gemm_k_avx512.c) */
extern const quant_gemm quant_gemm_q4_K_avx512, quant_gemm_q5_K_avx512, quant_gemm_q6_K_avx512;
/* (gemm_k_avx2.c) */
extern const quant_gemm quant_gemm_q4_K_avx2, quant_gemm_q5_K_avx2, quant_gemm_q6_K_avx2;
/* (gemm_x_avx2.c) */
extern const quant_gemm quant_gemm_q4_1_avx2, quant_gemm_q5_0_avx2, quant_gemm_q5_1_avx2;
extern const quant_gemm quant_gemm_iq4_nl_avx2, quant_gemm_iq4_xs_avx2;

/* The driver every AVX-512 kernel file shares: positions outermost in tiles of S_P, rows in
 * tiles of S_R (both #defined by the including file before use), a tile of np < S_P positions
 * by its own instance (widths 1..8), the rows past the last whole tile by the row kernel, so an
 * edge gives the row kernel's bits. TILE(a, r, b, R, P) is an always-inline tile function. */
#define QUANT_GEMM_RUN(NAME, TILE)                                                             \
    static void NAME(const quant_gemm_args *a, uint64_t r0, uint64_t r1, uint64_t b0,          \
                     uint64_t b1)                                                              \
    {                                                                                          \
        for (uint64_t b = b0; b < b1; b += S_P) {                                              \
            const uint64_t np = b1 - b < S_P ? b1 - b : S_P;                                   \
            uint64_t r = r0;                                                                   \
            for (; r + S_R <= r1; r += S_R) {                                                  \
                switch (np) {                                                                  \
                case 8: TILE(a, r, b, S_R, S_P >= 8 ? 8 : 1); break;                           \
                case 7: TILE(a, r, b, S_R, S_P >= 7 ? 7 : 1); break;                           \
                case 6: TILE(a, r, b, S_R, S_P >= 6 ? 6 : 1); break;                           \
                case 5: TILE(a, r, b, S_R, S_P >= 5 ? 5 : 1); break;                           \
                case 4: TILE(a, r, b, S_R, S_P >= 4 ? 4 : 1); break;                           \
                case 3: TILE(a, r, b, S_R, S_P >= 3 ? 3 : 1); break;                           \
                case 2: TILE(a, r, b, S_R, S_P >= 2 ? 2 : 1); break;                           \
                default: TILE(a, r, b, S_R, 1); break;                                         \
                }                                                                              \
            }                                                                                  \
            for (; r < r1; r++)                                                                \
                for (uint64_t p = b; p < b + np; p++)                                          \
                    a->Y[p * a->ldy + r] = a->dot(a->n, a->W + r * a->row_bytes,               \
                                                  a->act + p * a->act_bytes);                  \
        }                                                                                      \
    }

#endif
