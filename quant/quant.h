/* quant.h — ggml tensor types (F32, F16, BF16, Q8_0, Q4_0, Q4_1, Q5_0, Q5_1, IQ4_NL, Q2_K, Q3_K,
 * Q4_K, Q5_K, Q6_K, IQ4_XS, MXFP4): layouts, rows, dot products. quant/
 *
 * The types a real GGUF file stores its weights in, with exactly ggml's block layouts, so a
 * row read from a file (or written by quant_quantize_row) is byte-for-byte what ggml reads
 * and writes. Upstream names are cited where a detail was checked: ggml.h (enum ggml_type),
 * ggml-common.h (block_q8_0, block_q4_0), ggml-quants.c (quantize_row_q8_0_ref,
 * quantize_row_q4_0_ref, dequantize_row_*), ggml-impl.h (fp16/bf16 conversions), ggml-cpu's
 * type traits (vec_dot_type: Q8_0 for both quantized types).
 *
 * Dot products. A weight row of type T meets an activation in T's activation form
 * (quant_act_type): f32 for F32/F16/BF16, Q8_0 for the blocks of 32 (Q8_0, Q4_0, Q4_1, Q5_0,
 * Q5_1, IQ4_NL: ggml-cpu pairs Q4_1 / Q5_1 with Q8_1, which is Q8_0's quants with block_q8_1's
 * f16 `s` beside them, appended to their form: quant_x.h), Q8_K for the K-quants and
 * IQ4_XS (whose
 * order within a super-block kquant.c states; as llama.cpp does: the
 * activation is quantized once per matrix-vector product, then every block's dot product is
 * integer). Every implementation (scalar, AVX2, AVX-512) follows one fixed order, so a row's
 * result has the same bits whichever runs and however many threads share the rows:
 *   - 32 f32 accumulator lanes. Float types put element i in lane i % 32. Q8_0 and Q4_0 use
 *     16 lanes: block b's 32 products summed exactly (an integer), one fma of it with the
 *     block's scale product into lane b % 16 — one float operation per block, as llama.cpp's
 *     repacked kernels do, so a batched kernel that keeps rows in vector lanes (gemm_avx512.c)
 *     needs no per-quad float work. The other block types work in quads (block b's elements
 *     4q..4q+3, q = 0..7, an exact integer sum) in the 32 lanes: quad q in lane
 *     (b % 4) * 8 + q, or in Q4_0-style lane order 4 * (b % 4) + q and 16 + 4 * (b % 4) + q - 4
 *     for low/high nibbles (quant_x.h);
 *   - each contribution is one fused multiply-add (fmaf): w*x, or isum * (d_w * d_x);
 *   - the 32 lanes are reduced by one tree: t[j] = (a[j] + a[j+8]) + (a[j+16] + a[j+24]),
 *     then t[j] + t[j+4], then + [j+2], then + [j+1]; the 16 lanes by t[j] = a[j] + a[j+8],
 *     then the same three steps.
 * Integer parts are exact; every float operation is the same IEEE operation in the same
 * order in every implementation, so scalar and SIMD agree to the bit (tests/test_quant.c).
 *
 * Ownership: every buffer passed in is the caller's and nothing keeps a pointer to it past the
 * call; the matrix products' pool owns its threads and its activation scratch. Alignment: rows
 * are read as their C types, so f32 data must be 4-byte aligned and everything else 2-byte
 * (GGUF tensor data is 32-aligned); the matrix products check, the row functions assume.
 */
#ifndef SWARM_QUANT_H
#define SWARM_QUANT_H

#include <stddef.h>
#include <stdint.h>

/* ggml type ids (ggml.h enum ggml_type; pinned by the GGUF format, checked below). */
typedef enum {
    QUANT_F32 = 0,
    QUANT_F16 = 1,
    QUANT_Q4_0 = 2,
    QUANT_Q4_1 = 3,
    QUANT_Q5_0 = 6,
    QUANT_Q5_1 = 7,
    QUANT_Q8_0 = 8,
    QUANT_Q2_K = 10,
    QUANT_Q3_K = 11,
    QUANT_Q4_K = 12,
    QUANT_Q5_K = 13,
    QUANT_Q6_K = 14,
    QUANT_Q8_K = 15,           /* activation form of the K-quants only: never a weight type */
    QUANT_IQ4_NL = 20,
    QUANT_IQ4_XS = 23,
    QUANT_BF16 = 30,
    QUANT_MXFP4 = 39,          /* gpt-oss's experts: quant/mxfp4.h */
} quant_type;
_Static_assert(QUANT_F32 == 0 && QUANT_F16 == 1, "ggml GGML_TYPE_F32 / GGML_TYPE_F16");
_Static_assert(QUANT_Q4_0 == 2 && QUANT_Q8_0 == 8, "ggml GGML_TYPE_Q4_0 / GGML_TYPE_Q8_0");
_Static_assert(QUANT_BF16 == 30 && QUANT_MXFP4 == 39, "ggml GGML_TYPE_BF16 / GGML_TYPE_MXFP4");
_Static_assert(QUANT_Q4_1 == 3 && QUANT_Q5_0 == 6 && QUANT_Q5_1 == 7 && QUANT_Q2_K == 10 &&
                   QUANT_Q3_K == 11 && QUANT_IQ4_NL == 20 && QUANT_IQ4_XS == 23,
               "ggml GGML_TYPE_Q4_1 / Q5_0 / Q5_1 / Q2_K / Q3_K / IQ4_NL / IQ4_XS");
_Static_assert(QUANT_Q4_K == 12 && QUANT_Q5_K == 13 && QUANT_Q6_K == 14 && QUANT_Q8_K == 15,
               "ggml GGML_TYPE_Q4_K / Q5_K / Q6_K / Q8_K");

/* Elements per block of the quantized types (ggml-common.h QK8_0, QK4_0). */
#define QUANT_QK 32

/* ggml-common.h block_q8_0: value j = qs[j] * d, d an IEEE half. 34 bytes. */
typedef struct {
    uint16_t d;                /* scale, IEEE binary16 bits */
    int8_t qs[QUANT_QK];       /* quants, -128..127 (the reference quantizer gives -127..127) */
} quant_block_q8_0;

/* ggml-common.h block_q4_0: byte j holds element j in its low nibble and element j + 16 in
 * its high nibble; value = (nibble - 8) * d. 18 bytes. */
typedef struct {
    uint16_t d;                /* scale, IEEE binary16 bits */
    uint8_t qs[QUANT_QK / 2];  /* nibbles */
} quant_block_q4_0;

_Static_assert(sizeof(quant_block_q8_0) == 34, "ggml block_q8_0 is 2 + 32 bytes");
_Static_assert(sizeof(quant_block_q4_0) == 18, "ggml block_q4_0 is 2 + 16 bytes");

/* The other blocks of 32 keep block_q4_0's nibbles (byte j: element j low, j + 16 high).
 * ggml-common.h block_q4_1: value = nibble * d + m. 20 bytes. */
typedef struct {
    uint16_t d;                /* scale, IEEE half */
    uint16_t m;                /* min (the value of level 0), IEEE half */
    uint8_t qs[QUANT_QK / 2];
} quant_block_q4_1;

/* ggml-common.h block_q5_0: a fifth bit per element, element j's in bit j of qh (little
 * endian); value = ((nibble | bit << 4) - 16) * d. 22 bytes. */
typedef struct {
    uint16_t d;
    uint8_t qh[4];
    uint8_t qs[QUANT_QK / 2];
} quant_block_q5_0;

/* ggml-common.h block_q5_1: value = (nibble | bit << 4) * d + m. 24 bytes. */
typedef struct {
    uint16_t d;
    uint16_t m;
    uint8_t qh[4];
    uint8_t qs[QUANT_QK / 2];
} quant_block_q5_1;

/* ggml-common.h block_iq4_nl: value = kvalues_iq4nl[nibble] * d (the non-linear levels,
 * quant_iq4nl_values below). 18 bytes. */
typedef struct {
    uint16_t d;
    uint8_t qs[QUANT_QK / 2];
} quant_block_iq4_nl;

_Static_assert(sizeof(quant_block_q4_1) == 20, "ggml block_q4_1 is 2*2 + 16 bytes");
_Static_assert(sizeof(quant_block_q5_0) == 22, "ggml block_q5_0 is 2 + 4 + 16 bytes");
_Static_assert(sizeof(quant_block_q5_1) == 24, "ggml block_q5_1 is 2*2 + 4 + 16 bytes");
_Static_assert(sizeof(quant_block_iq4_nl) == 18, "ggml block_iq4_nl is 2 + 16 bytes");

/* ggml-common.h kvalues_iq4nl: IQ4_NL's and IQ4_XS's 16 levels. */
extern const int8_t quant_iq4nl_values[16];

/* K-quants: super-blocks of 256 (ggml-common.h QK_K). */
#define QUANT_QK_K 256

/* ggml-common.h block_q4_K: 8 sub-blocks of 32; sub-block j has a 6-bit scale sc_j and min
 * m_j packed in scales[12] (ggml-quants.c get_scale_min_k4); qs[32 i + l] holds element
 * 64 i + l in its low nibble and 64 i + 32 + l in its high nibble; value = d sc_j q - dmin m_j.
 * 144 bytes. */
typedef struct {
    uint16_t d;                    /* super-block scale of the scales, IEEE half */
    uint16_t dmin;                 /* super-block scale of the mins, IEEE half */
    uint8_t scales[12];            /* 8 scales and 8 mins, 6 bits each */
    uint8_t qs[QUANT_QK_K / 2];    /* nibbles */
} quant_block_q4_K;

/* ggml-common.h block_q5_K: block_q4_K's scales and nibbles plus a fifth bit per element:
 * element 64 i + l has it in qh[l] bit 2 i, element 64 i + 32 + l in bit 2 i + 1. 176 bytes. */
typedef struct {
    uint16_t d;
    uint16_t dmin;
    uint8_t scales[12];
    uint8_t qh[QUANT_QK_K / 8];    /* fifth bits */
    uint8_t qs[QUANT_QK_K / 2];    /* low four bits */
} quant_block_q5_K;

/* ggml-common.h block_q6_K: 16 sub-blocks of 16 with int8 scales; element 128 n + 32 w + l
 * (w = 0..3) has its low 4 bits in ql[64 n + l + 32 (w & 1)] (low nibble for w < 2, high for
 * w >= 2) and its high 2 bits in qh[32 n + l] bits 2 w..2 w + 1; value = d sc (q - 32).
 * 210 bytes. */
typedef struct {
    uint8_t ql[QUANT_QK_K / 2];
    uint8_t qh[QUANT_QK_K / 4];
    int8_t scales[QUANT_QK_K / 16];
    uint16_t d;
} quant_block_q6_K;

/* ggml-common.h block_q2_K: 16 sub-blocks of 16; element 128 n + 32 j + l (j = 0..3,
 * l = 0..31) is bits 2 j..2 j + 1 of qs[32 n + l], in sub-block 8 n + 2 j + l / 16, whose
 * scales[] byte holds a 4-bit scale (low) and min (high); value = d sc q - dmin m. 84 bytes. */
typedef struct {
    uint8_t scales[QUANT_QK_K / 16];
    uint8_t qs[QUANT_QK_K / 4];
    uint16_t d;
    uint16_t dmin;
} quant_block_q2_K;

/* ggml-common.h block_q3_K: q2_K's 2-bit layout plus a third bit, element 128 n + 32 j + l's
 * in hmask[l] bit 4 n + j; 16 6-bit scales packed in scales[12] (ggml's dequantize_row_q3_K
 * unpacks them), stored + 32; value = d (sc - 32) (q - (bit ? 0 : 4)). 110 bytes. */
typedef struct {
    uint8_t hmask[QUANT_QK_K / 8];
    uint8_t qs[QUANT_QK_K / 4];
    uint8_t scales[12];
    uint16_t d;
} quant_block_q3_K;

/* ggml-common.h block_iq4_xs: 8 sub-blocks of 32 with iq4_nl's nibbles (16 bytes each) and a
 * 6-bit scale ls (low 4 bits in scales_l, high 2 in scales_h), value = d (ls - 32)
 * kvalues_iq4nl[nibble]. 136 bytes. */
typedef struct {
    uint16_t d;
    uint16_t scales_h;
    uint8_t scales_l[QUANT_QK_K / 64];
    uint8_t qs[QUANT_QK_K / 2];
} quant_block_iq4_xs;

_Static_assert(sizeof(quant_block_q2_K) == 84, "ggml block_q2_K is 16 + 64 + 2*2 bytes");
_Static_assert(sizeof(quant_block_q3_K) == 110, "ggml block_q3_K is 32 + 64 + 12 + 2 bytes");
_Static_assert(sizeof(quant_block_iq4_xs) == 136, "ggml block_iq4_xs is 2 + 2 + 4 + 128 bytes");

/* ggml-common.h block_q8_K, the K-quants' activation (ggml-cpu's vec_dot_type for all three):
 * value = qs * d, bsums the sums of each 16 quants. 292 bytes. */
typedef struct {
    float d;
    int8_t qs[QUANT_QK_K];
    int16_t bsums[QUANT_QK_K / 16];
} quant_block_q8_K;

_Static_assert(sizeof(quant_block_q4_K) == 144, "ggml block_q4_K is 2*2 + 12 + 128 bytes");
_Static_assert(sizeof(quant_block_q5_K) == 176, "ggml block_q5_K is 2*2 + 12 + 32 + 128 bytes");
_Static_assert(sizeof(quant_block_q6_K) == 210, "ggml block_q6_K is 128 + 64 + 16 + 2 bytes");
_Static_assert(sizeof(quant_block_q8_K) == 292, "ggml block_q8_K is 4 + 256 + 32 bytes");

typedef struct {
    quant_type type;
    const char *name;          /* ggml's name: "f32", "f16", "bf16", "q8_0", "q4_0", "q4_K"... */
    uint32_t block;            /* elements per block (1 for the float types) */
    uint32_t block_bytes;      /* bytes per block */
} quant_type_info;

/* The supported type with ggml id `id`, or NULL. */
const quant_type_info *quant_type_get(uint32_t id);
/* ggml's name for any ggml id, supported or not ("q4_K", "iq2_xs"); "unknown" past the enum.
 * For error messages: "tensor 'blk.0.ffn_up.weight': type q4_K (12) is not supported". */
const char *quant_type_name(uint32_t id);
/* Parse a name ("q8_0", "Q8_0", "f16") into a supported type. 0 / -1 with err. */
int quant_type_parse(const char *name, quant_type *out, char *err, size_t errlen);
/* The supported weight types' names, comma separated, for messages. A static string. */
const char *quant_type_list(void);

/* Bytes of a row of n elements of type t. -1 with err (naming type, n and block) if t is
 * unsupported, n is not a multiple of the block, or the size overflows. */
int quant_row_bytes(quant_type t, uint64_t n, uint64_t *bytes, char *err, size_t errlen);
/* Bytes of rows x cols (cols the row length), overflow-checked as above. */
int quant_tensor_bytes(quant_type t, uint64_t rows, uint64_t cols, uint64_t *bytes, char *err,
                       size_t errlen);

/* Scalar conversions, exactly ggml-impl.h's: f32 -> f16 rounds to nearest even (what F16C's
 * vcvtps2ph with rounding 0 and ggml's software path both do); f32 -> bf16 rounds to nearest
 * even, NaN kept quiet (ggml_compute_fp32_to_bf16); the widening ones are exact. */
float quant_f16_to_f32(uint16_t h);
uint16_t quant_f32_to_f16(float f);
float quant_bf16_to_f32(uint16_t h);
uint16_t quant_f32_to_bf16(float f);

/* Quantize n floats into a row of type t (ggml's reference quantizers: the bytes ggml writes).
 * Dequantize a row of type t into n floats. -1 with err on a bad type or length. */
int quant_quantize_row(quant_type t, const float *x /* (n,) */, void *out, uint64_t n,
                       char *err, size_t errlen);
int quant_dequantize_row(quant_type t, const void *in, float *y /* (n,) */, uint64_t n,
                         char *err, size_t errlen);

/* ---------------------------------------------------------------- dot products */

/* The form a weight type's activation takes: QUANT_F32, QUANT_Q8_0 or QUANT_Q8_K. */
quant_type quant_act_type(quant_type w);

/* The activation form, for a row of n elements (quant_act_bytes bytes):
 *   F32, F16, BF16 weights: the n floats.
 *   Q8_0, Q4_0 (and Q4_1, Q5_0, Q5_1, IQ4_NL, in Q4_0's lane order: quant_x.h) weights: x
 *   quantized to Q8_0 blocks exactly as quantize_row_q8_0_ref does
 *     (llama.cpp's vec_dot_type for both), stored for the kernels' loads rather than as
 *     34-byte blocks, in two arrangements:
 *     qs, bias128 (for Q8_0 weights): the n quants in element order; per block the 8 quad
 *       sums times -128 (a VNNI kernel feeds weights in as x + 128, unsigned);
 *     qs4, bias8 (for Q4_0 weights): per group of 4 blocks (the last may have fewer, k),
 *       the blocks' elements 0..15 one after the other, then their elements 16..31 (as the
 *       nibbles come out of the weights); per group 32 quad sums times -8 (Q4_0 stores
 *       value + 8) in Q4_0's lane order (quant.h above; lanes of absent blocks are 0);
 *     and d, each block's scale widened to f32 (exact).
 *   The same numbers as the Q8_0 blocks; the sums take the offsets back out exactly. */
typedef struct {
    const int8_t *qs;          /* (n,) element order */
    const float *d;            /* (n/32,) */
    const int32_t *bias128;    /* (n/32, 8): -128 * quad sums, block-major */
    const int8_t *qs4;         /* (n,) grouped for Q4_0 */
    const int32_t *bias8;      /* (groups, 32): -8 * quad sums in Q4_0 lane order */
} quant_act_q8;
/* The K-quants' activation form (Q4_K, Q5_K, Q6_K weights) for n elements: the n / 256
 * block_q8_K blocks exactly as quantize_row_q8_K_ref writes them, then the same quants once
 * more, each super-block's 32-value chunks in the order 0, 2, 1, 3, 4, 6, 5, 7: a 64-byte
 * load of Q4_K/Q5_K nibbles masked gives chunks (0, 2), shifted (1, 3), and this copy gives
 * their activations in one load each. */
/* The parts of a Q8_0 activation form of n elements. */
quant_act_q8 quant_act_view(const void *act, uint64_t n);

/* Bytes of w's activation form for n elements (n a multiple of w's block). 0 / -1 with err. */
int quant_act_bytes(quant_type w, uint64_t n, uint64_t *bytes, char *err, size_t errlen);
/* Bring x (n floats) into w's activation form in act (quant_act_bytes). -1 with err on a bad
 * length or a non-finite value in a quantized form. */
int quant_act_prepare(quant_type w, const float *x, uint64_t n, void *act, char *err,
                      size_t errlen);

typedef enum { QUANT_ISA_SCALAR = 0, QUANT_ISA_AVX2 = 1, QUANT_ISA_AVX512 = 2 } quant_isa;
#define QUANT_ISA_COUNT 3

/* One row's dot product: w_row (n elements of its type) . act (its activation form). n must
 * be a multiple of the type's block (quant_row_bytes checks that; this does not). */
typedef float (*quant_dot_fn)(uint64_t n, const void *w_row, const void *act);

/* The best implementation this CPU runs (cpuid, via __builtin_cpu_supports): AVX-512
 * (F+BW+VL+VNNI), else AVX2 (+FMA+F16C), else scalar. */
quant_isa quant_isa_best(void);
const char *quant_isa_name(quant_isa isa);
/* Parse "scalar" | "avx2" | "avx512". 0 / -1. */
/* Read every 64-byte line of [p, p + bytes) (bytes a multiple of 64) the way the row kernels
 * stream weights: each line asked for QUANT_PREFETCH bytes ahead (quant_int.h), 8 independent
 * lanes, nothing computed but an XOR to keep the loads. The memory-read bound of every
 * benchmark (bench-mem, bench-quant, bench-llm): a plain load loop read 5.5-7.6 GB/s on one
 * thread here while the prefetching kernels streamed up to 12.8 (2026-12-01), so it was no
 * bound. Returns the XOR (keep it, or the loop may go). */
uint64_t quant_read_stream(const void *p, uint64_t bytes);
int quant_isa_parse(const char *s, quant_isa *out);
/* The implementation of t's dot product for isa; NULL if this CPU cannot run it. */
quant_dot_fn quant_dot_get(quant_type t, quant_isa isa);
/* The ISA quant_vec_dot and quant_matvec use: quant_isa_best() unless set (bench, tests).
 * quant_isa_set returns -1 if this CPU cannot run isa. Not for use while a matvec runs. */
quant_isa quant_isa_current(void);
int quant_isa_set(quant_isa isa);

/* quant_act_prepare with a given ISA (scalar: the reference path; others: AVX2 where the CPU
 * has it). The bytes are the same whichever runs; tests hold them to that. */
int quant_act_prepare_isa(quant_isa isa, quant_type w, const float *x, uint64_t n, void *act,
                          char *err, size_t errlen);

/* w_row . act with the current ISA (see quant_dot_fn). */
float quant_vec_dot(quant_type t, uint64_t n, const void *w_row, const void *act);

/* ---------------------------------------------------------------- matrix products */

/* y = W x: W is `rows` rows of `cols` elements of type t (row-major, rows contiguous), x has
 * cols floats, y rows floats. x is brought into t's activation form once (the calling thread),
 * then rows are split into nthreads contiguous ranges over a process-wide pthread pool; each
 * row is one quant_vec_dot, so y has the same bits for every nthreads (1..QUANT_MAX_THREADS).
 * Callable from any thread, one product at a time per process (a mutex serialises callers).
 * Scratch is kept between calls, so steady-state calls allocate nothing. 0 / -1 with err. */
#define QUANT_MAX_THREADS 64
int quant_matvec(quant_type t, uint64_t rows, uint64_t cols, const void *W, const float *x,
                 float *y, int nthreads, char *err, size_t errlen);

/* Y = X W^T for a batch of B positions: X is (B, cols) floats, Y is (B, rows) floats. Each
 * weight row is read once per batch (rows are taken in small groups that stay in cache while
 * every position uses them); Y[b] has exactly the bits quant_matvec gives for X[b]. */
int quant_matmat(quant_type t, uint64_t rows, uint64_t cols, const void *W, uint64_t B,
                 const float *X, float *Y, int nthreads, char *err, size_t errlen);

/* Run fn(arg, i, n) for i in 0..n-1 on the pool's threads (the caller runs i = 0) and wait
 * for all: the bench uses it to read memory with the same threads the products use. */
typedef void (*quant_task_fn)(void *arg, int i, int n);
int quant_pool_run(int nthreads, quant_task_fn fn, void *arg, char *err, size_t errlen);
/* The same for a job whose shares take their work from a shared counter until none is left
 * (so share 0 alone can finish it): once the caller's share returns, workers that have not
 * started are not waited for and do not start (a vCPU the host holds does not stall the job). */
int quant_pool_claim(int nthreads, quant_task_fn fn, void *arg, char *err, size_t errlen);

/* glibc's expf in 16 lanes (vexp.c), bit for bit the scalar loops they replace, on the
 * AVX-512 ISA once a check against this process's expf passed (else those loops):
 * quant_expf_sub: w[i] = expf(w[i] - sub); quant_silu_mul: gate[i] = g / (1 + expf(-g)) *
 * up[i] with g = gate[i] (SwiGLU as ggml_silu_f32). quant_expf_vector: 1 if the vector runs. */
void quant_expf_sub(float *w, uint64_t n, float sub);
void quant_silu_mul(float *gate, const float *up, uint64_t n);
int quant_expf_vector(void);

/* Join the pool's threads and free its scratch (tests call it so sanitizers see no leak). */
void quant_pool_shutdown(void);

#endif
