/* gemm_f_avx512.c — batched F16 and BF16 kernels on AVX-512: register tiles of weight rows x
 * positions, lane for lane quant.h's order for the float types. quant/
 *
 * Element i of a pair goes into lane i % 32 by one fmaf, in element order, then
 * quant_reduce32's tree: the row kernels' (dot_avx512.c) operations exactly. A weight vector
 * is widened once (vcvtph2ps, or a 16-bit shift for BF16) for S_P positions; an activation
 * vector is read once per S_R rows (a memory operand of the fma). The activation form of a
 * float type is the floats themselves, so the panel is the batch's activations as they are.
 * From S_PANEL_MIN positions (a prompt) the weight rows are instead widened to f32 once per
 * batch into the share's scratch and every position's tiles read them there (s_run_panels);
 * below it (decoding, a speculative pass) each tile of rows takes every position in groups
 * (s_run_few), so the weights are read from DRAM once; the S_R x S_P tiles only where a batch
 * of a prompt's size has no scratch.
 *
 * llama.cpp rounds the activations to f16 for an f16 product (ggml-cpu's vec_dot_type) and
 * sums f16 x f16 products in its own order; swarm keeps f32 activations and quant.h's order,
 * within test_arch's tolerance of llama.cpp's logits (4 f16 roundings of the activations).
 *
 * BF16 dot products (vdpbf16ps) are not used: they multiply BF16 by BF16, so the activations
 * would have to be rounded to BF16 and each pair of products summed before the lane's add;
 * that is another order, and decoding (one position, quant_matvec) would have to take it too
 * for a position's bits to stay the same alone and in a batch. F16 weights keep f32 products.
 */
#pragma GCC target("avx2,fma,f16c,avx512f,avx512bw,avx512vl")
#include <immintrin.h>
#include <string.h>

#include "quant/gemm.h"
#include "quant/quant_int.h"
#include "quant/reduce_avx.h"

/* Rows x positions per tile: S_R * S_P * 2 accumulators and S_R * 2 widened weight vectors in
 * the 32 registers. tests/tools/gemm_time, 5632 x 2048, batch 64, 1 thread, CPU us per
 * position, two runs each (2026-12-02, load average ~9), f16 / bf16: 4x2 184-188 / 156-161,
 * 5x2 196-214 / 194-198, 6x2 217-267 / 192-227, 2x4 267-307 / 251-256, 3x4 275-289 /
 * 250-263 (spills), 4x3 273-280 / 269-288 (spills), 3x2 302-314, 8x1 294-331, 6x1 272-282;
 * matvec.c's 2x4 tiles 306-379 / 292-372. F32 (8 KiB rows) gained nothing at any shape
 * (0.73-1.05x, with an S_F32 case of s_tile): F32 keeps the tiles. -D to try others. */
#ifndef S_R
#define S_R 4
#endif
#ifndef S_P
#define S_P 2
_Static_assert(S_P >= 1 && S_P <= 8, "QUANT_GEMM_RUN covers widths 1..8");
#endif

/* The decode tile's rows (s_run_few below). */
#ifndef S_RD
#define S_RD 2
#endif
/* ... and its rows and positions a group past S_PD positions */
#ifndef S_RW
#define S_RW 4
#endif
#ifndef S_PW
#define S_PW 3
#endif
/* s_tile's register arrays: room for every shape (each <= 8 rows, <= 8 positions) */
#define S_AR 8
#define S_AP 8

enum { S_F32, S_F16, S_BF16 };

static uint64_t s_panel_bytes(uint64_t n, uint64_t B)
{
    (void)B;
    return n && n % QUANT_LANES == 0 ? 64 : 0; /* no panel: the activations are read in place */
}

static void s_pack(uint64_t n, uint64_t B, const uint8_t *act, uint64_t ab, uint8_t *panel,
                   uint64_t b0, uint64_t b1)
{
    (void)n, (void)B, (void)act, (void)ab, (void)panel, (void)b0, (void)b1;
}

static inline __attribute__((always_inline)) __m512 s_w(int kind, const void *w, uint64_t i)
{
    if (kind == S_F32)
        return _mm512_loadu_ps((const float *)w + i);
    const __m256i h = _mm256_loadu_si256((const __m256i *)((const uint16_t *)w + i));
    if (kind == S_F16)
        return _mm512_cvtph_ps(h);
    return _mm512_castsi512_ps(_mm512_slli_epi32(_mm512_cvtepu16_epi32(h), 16));
}

/* pf: prefetch each row's weights QUANT_PREFETCH bytes ahead in the order the tile reads
 * them, as the row kernels do (the decode tile streams its rows from DRAM once; the prompt
 * tiles re-read theirs from cache). A tile reads its R rows side by side, so the bytes a row
 * reads QUANT_PREFETCH later lie past its end in the next tile's row, R rows on, not in the
 * next row (which this tile is reading now): TinyLlama's 2048-wide F16 rows are 4096 bytes,
 * so with the row kernels' "past the end: the next row" half of the rows of a 2-row tile went
 * unfetched (pf 2: the rows of the next tile of R; past the share or the matrix a prefetch is
 * wasted, never a fault). */
static inline __attribute__((always_inline)) void
s_tile(int kind, const quant_gemm_args *a, uint64_t r, uint64_t b, const int R, const int P,
       const int pf)
{
    const unsigned wb = kind == S_F32 ? QUANT_LANES * 4 : QUANT_LANES * 2; /* row bytes a step */
    const uint64_t n = a->n, rb = a->row_bytes, skip = (uint64_t)(R - 1) * rb;
    const uint8_t *w[S_AR];
    const float *x[S_AP];
    __m512 c[S_AR][S_AP][2];
#pragma GCC unroll 8
    for (int i = 0; i < R; i++) {
        w[i] = a->W + (r + (uint64_t)i) * rb;
#pragma GCC unroll 8
        for (int p = 0; p < P; p++)
            c[i][p][0] = c[i][p][1] = _mm512_setzero_ps();
    }
#pragma GCC unroll 8
    for (int p = 0; p < P; p++)
        x[p] = (const float *)(a->act + (b + (uint64_t)p) * a->act_bytes);
    for (uint64_t e = 0; e < n; e += QUANT_LANES) {
        /* the offset in each row QUANT_PREFETCH ahead, moved to the next tile's row past the
         * end (pf 2) */
        const uint64_t o = e * (wb / QUANT_LANES) + QUANT_PREFETCH;
        const uint64_t po = o < rb ? o : o + skip;
#pragma GCC unroll 8
        for (int i = 0; i < R; i++) {
            if (pf == 1)
                quant_prefetch(w[i] + e * (wb / QUANT_LANES), wb);
            else if (pf == 2)
                for (unsigned k = 0; k < wb; k += 64)
                    __builtin_prefetch(w[i] + po + k, 0, 3);
        }
        /* lanes 0..15, then 16..31: R widened weight vectors live at a time, not 2R */
#pragma GCC unroll 2
        for (int h = 0; h < 2; h++) {
            __m512 wv[S_AR];
#pragma GCC unroll 8
            for (int i = 0; i < R; i++)
                wv[i] = s_w(kind, w[i], e + 16 * (uint64_t)h);
#pragma GCC unroll 8
            for (int p = 0; p < P; p++) {
                const __m512 xv = _mm512_loadu_ps(x[p] + e + 16 * (uint64_t)h);
#pragma GCC unroll 8
                for (int i = 0; i < R; i++)
                    c[i][p][h] = _mm512_fmadd_ps(wv[i], xv, c[i][p][h]);
            }
        }
    }
#pragma GCC unroll 8
    for (int i = 0; i < R; i++)
#pragma GCC unroll 8
        for (int p = 0; p < P; p++) {
            float l[QUANT_LANES];
            _mm512_storeu_ps(l, c[i][p][0]);
            _mm512_storeu_ps(l + 16, c[i][p][1]);
            a->Y[(b + (uint64_t)p) * a->ldy + r + (uint64_t)i] = quant_reduce32_avx(l);
        }
}

#define S_TILE_OF(K, NAME)                                                                     \
    static inline __attribute__((always_inline)) void NAME(const quant_gemm_args *a,           \
                                                           uint64_t r, uint64_t b, const int R, \
                                                           const int P)                        \
    {                                                                                          \
        s_tile(K, a, r, b, R, P, 0);                                                           \
    }
S_TILE_OF(S_F16, s_tile16)
S_TILE_OF(S_BF16, s_tileb16)

QUANT_GEMM_RUN(s_tiles16, s_tile16)
QUANT_GEMM_RUN(s_tilesb16, s_tileb16)

/* A decode pass (the sessions of one continuous batch, or a speculative pass's k + 1
 * positions: B < S_PANEL_MIN) is bound by reading the weights, not by the fmas: the S_R x S_P
 * driver above walks a row group once per S_P positions, and the second walk (from L2) did not
 * overlap the first's DRAM reads: bench-quant --batch 4 --pool 1024M, 5632 x 2048 F16, 1
 * thread, 2026-12-02 (Xeon, AVX-512): 1681 us a position against 3422 us for one matvec, so 4
 * sessions cost 1.97x one. Here each tile of rows takes every position while its rows are in
 * L1, in groups: the first group streams the rows from DRAM (prefetching), the others re-read
 * them from L1; the rows past the last tile by the row kernel. Up to S_PD positions, one group
 * of S_RD rows; more, groups of at most S_PW positions on tiles of S_RW rows, since there the
 * positions' activations (8 KiB each at 2048 wide) no longer stay in L1 beside the rows and
 * each is read from L2 once per tile: more rows a tile, fewer reads. experiments/few_pass.c,
 * 12 TinyLlama-shaped F16 layers from DRAM, 2 threads, ms a pass of 1 / 4 / 5 / 8 / 9 / 12
 * positions (2026-12-02 20:14, load 1.5, two rounds, best of 3 passes (12: median);
 * docs/measurements/2026-12-02-f16few.md):
 * 2 rows x up to 4 41-43 / 48-49 / 71-73 / 98-103 / 115-116 / 144-150; 2 x 6 44 / 49-50 /
 * 64-65 / 99-103 / 109-111 / 143-145; 3 x 4 41-43 / 48-51 / 65-67 / 89-91 / 102-104 /
 * 128-129; 4 x 3 41 / 53-54 / 57-65 / 71-73 / 75-76 / 96-97; main's S_R x S_P tiles (4 x 2,
 * no prefetch) 42 / 55 / 72 / 88 / 97 / 117. Same bits: a pair's lanes see the same fmas in
 * the same order whatever the tile or group. */
#ifndef S_PD
#define S_PD 4
#endif
_Static_assert(S_PD >= 2 && S_PD <= 8 && S_RD * S_PD * 2 + S_RD + 1 <= 31 && S_PW >= 1 &&
                   S_PW <= S_PD && S_RW <= 8 && S_RW * S_PW * 2 + S_RW + 1 <= 31,
               "decode tiles");

static inline __attribute__((always_inline)) void
s_few_group(int kind, const quant_gemm_args *a, uint64_t r, uint64_t b, const int R,
            uint64_t np, int pf)
{
    switch (np) {
#if S_PD >= 8
    case 8: s_tile(kind, a, r, b, R, 8, pf); break;
#endif
#if S_PD >= 7
    case 7: s_tile(kind, a, r, b, R, 7, pf); break;
#endif
#if S_PD >= 6
    case 6: s_tile(kind, a, r, b, R, 6, pf); break;
#endif
#if S_PD >= 5
    case 5: s_tile(kind, a, r, b, R, 5, pf); break;
#endif
    case 4: s_tile(kind, a, r, b, R, 4, pf); break;
    case 3: s_tile(kind, a, r, b, R, 3, pf); break;
    case 2: s_tile(kind, a, r, b, R, 2, pf); break;
    default: s_tile(kind, a, r, b, R, 1, pf); break;
    }
}

/* Rows [r0, r1) in tiles of R rows, every position of [b0, b1) in groups of at most gmax. */
static inline __attribute__((always_inline)) void
s_few_rows(int kind, const quant_gemm_args *a, uint64_t r0, uint64_t r1, uint64_t b0,
           uint64_t b1, const int R, const uint64_t gmax)
{
    const uint64_t groups = (b1 - b0 + gmax - 1) / gmax;
    uint64_t r = r0;
    for (; r + (uint64_t)R <= r1; r += (uint64_t)R)
        /* groups of about equal size: 5 = 3 + 2, not 3 + 1 + 1 */
        for (uint64_t g = 0, b = b0; g < groups; g++) {
            const uint64_t p = (b1 - b + (groups - g) - 1) / (groups - g);
            if (g == 0)
                s_few_group(kind, a, r, b, R, p <= gmax ? p : gmax, 2);
            else
                s_few_group(kind, a, r, b, R, p <= gmax ? p : gmax, 0);
            b += p;
        }
    for (; r < r1; r++)
        for (uint64_t p = b0; p < b1; p++)
            a->Y[p * a->ldy + r] = a->dot(a->n, a->W + r * a->row_bytes, a->act + p * a->act_bytes);
}

static inline __attribute__((always_inline)) void
s_run_few(int kind, const quant_gemm_args *a, uint64_t r0, uint64_t r1, uint64_t b0, uint64_t b1)
{
    if (b1 - b0 <= S_PD)
        s_few_rows(kind, a, r0, r1, b0, b1, S_RD, S_PD);
    else
        s_few_rows(kind, a, r0, r1, b0, b1, S_RW, S_PW);
}

/* ---------------------------------------------------------------- converted panels
 *
 * A prompt (B > S_PD) is bound by the fmas' ports, not by reading the weights, and the tiles
 * above spend one vcvtph2ps (2 uops on the fma ports) per 2 fmas: a weight vector widened for
 * 2 positions. Here a panel of up to S_PANEL_ROWS(n) rows is widened once into this thread's
 * scratch (f32, L2-resident, each tile of S_FR rows packed as one stream: s_pk) and then
 * serves every position of the batch: tiles of S_FR rows x S_FP positions, run once for lanes
 * 0..15 of each 32 and once for 16..31 (S_FR * S_FP accumulators, S_FR weight vectors and one
 * activation vector live: the halves are separate accumulators anyway, and keeping both live
 * held a tile to 4 x 3), the positions' activations taken S_KC elements at a time so a tile's
 * S_FP activation rows stay in L1 while the panel's row tiles pass over them; a tile's
 * accumulators wait in scratch between chunks and between the halves. Every lane still sees
 * element i at i % 32 by one fma in element order and quant_reduce32's tree at the end
 * (chunks start on multiples of 32; widening is exact), so the bits are the row kernel's.
 * Per 25 fmas a 5 x 5 tile loads 5 weight vectors (streamed from L2) and 5 activation vectors
 * (L1), where the 4 x 3 tile of both halves loaded 8 from L2 and 6 from L1 per 24.
 * gemm_time f16 batch 512, 1 thread, us a position summed over 2048x2048, 5632x2048 and
 * 2048x5632, 1.5 MiB panels, chunks of 1024 elements unless said, two rounds alternating
 * (2026-12-03 08:05, load 3, docs/measurements/2026-12-03-f16pp.md): 5 x 5 427-457,
 * 6 x 4 436-453, 4 x 6 460-464, 5 x 5 in chunks of 768 / 1280 443-453 / 463-468, 6 x 4 in
 * chunks of 768 / 1536 444-453 / 467, 4 x 6 in chunks of 1536 570-579 (its 36 KiB of
 * activations crowd the weights out of L1); 3 x 8 (256 KiB panels, chunks of 384) 1268
 * where 4 x 6 took 642 in that sitting. */
#ifndef S_FR
#define S_FR 5
#endif
#ifndef S_FP
#define S_FP 5
#endif
_Static_assert(S_FR >= 1 && S_FR <= 6 && S_FP >= 1 && S_FP <= 8 && S_FR * S_FP + S_FR <= 30,
               "panel tile");
/* f32 bytes of a panel (in a 2 MiB L2, beside the activations streaming through) and
 * activation bytes of a tile's chunk (S_FP rows of s_kc floats, in a 48 KiB L1 beside the
 * weight rows passing through; 20 KiB: 1024 elements of 5 positions). Batch 64 (2026-12-02
 * 16:00, the tiles of both halves, docs/measurements/2026-12-02-f16-prefill.md) chose
 * 256 KiB. At batch 512 (a pp512 prompt) the batch's activations (512 x 8 or 22 KiB) no
 * longer fit in L2 and stream from L3 once per panel: a panel's rows are their reuse, and a
 * 256 KiB panel of 5632-wide rows held 8. 1.5 MiB holds a whole group of matvec.c's
 * (S_GROUP_BYTES of F16: 46 rows at 5632, 128 at 2048) in one panel. gemm_time f16 batch
 * 512, 1 thread, us a position, 2048x2048 / 5632x2048 / 2048x5632, 4 x 6 tiles (2026-12-03
 * 08:00, load 2.2): 256 KiB 82.6 / 215 / 310, 512 KiB 72.4-72.9 / 197-202 / 247-248, 1 MiB
 * 71.5-71.6 / 190-207 / 232-255 (main's 4 x 3 tiles, 256 KiB: 84-98 / 233-238 / 330-339);
 * 1.5 MiB against 1 MiB (46 rows: 23 + 23, s_even), 08:01, load 3.8: 2048x5632 232.6-236.6
 * against 253.2-255.0, the others within 2%. */
#ifndef S_PANEL_BYTES
#define S_PANEL_BYTES (1536u << 10)
#endif
#ifndef S_CHUNK_BYTES
#define S_CHUNK_BYTES (20u << 10)
#endif
/* Positions from which the panel path runs: a pass of up to S_PD positions is the decode tile
 * (one read of the weights); between, the tiles above. */
#ifndef S_PANEL_MIN
#define S_PANEL_MIN 16
#endif

static uint64_t s_kc(uint64_t n)
{
    uint64_t kc = S_CHUNK_BYTES / (4u * S_FP) / QUANT_LANES * QUANT_LANES;
    return kc < n ? kc : n;
}

static uint64_t s_panel_rows(uint64_t n)
{
    uint64_t rows = S_PANEL_BYTES / (4u * n) / S_FR * S_FR;
    return rows ? rows : S_FR;
}

/* Scratch of one share: the widened panel, then a tile's accumulators per row tile. */
static uint64_t s_scratch_bytes(uint64_t n, uint64_t B)
{
    if (B < S_PANEL_MIN || !n || n % QUANT_LANES)
        return 0;
    const uint64_t rows = s_panel_rows(n);
    return rows * n * 4u + rows * S_FP * QUANT_LANES * 4u;
}

/* A tile's rows in the panel, packed so that one pass of a tile reads one stream: the tile of
 * R rows at [r, r + R) holds, from (r - p0) * n, lanes 16h..16h+15 of element group e / 32 of
 * row i at h * R * n / 2 + (e / 32) * R * 16 + i * 16. */
static inline __attribute__((always_inline)) uint64_t s_pk(uint64_t n, int R, int h, uint64_t e)
{
    return (uint64_t)h * (uint64_t)R * n / 2 + e / QUANT_LANES * (uint64_t)R * 16;
}

/* The next tile's size, m of a panel's rows or a batch's positions left in tiles of at most
 * max: the rest split evenly (46 rows: 4 x 10 + 3 + 3, not 4 x 11 + 2; 512 positions in
 * 6s and 5s, not 6 x 85 + 2), since a small edge tile runs far below a full one's pace. Only
 * speed depends on it. */
static inline uint64_t s_even(uint64_t m, uint64_t max)
{
    const uint64_t tiles = (m + max - 1) / max;
    return (m + tiles - 1) / tiles;
}

/* Lanes 16h..16h+15 of rows [r, r + R) of the panel's tile wt against positions [b, b + P),
 * elements [e0, e1): accumulators from acc (or zero at e0 == 0), back to acc, or at e1 == n
 * and h == 1 reduced with the h == 0 half (waiting in acc) into Y. The two halves of a lane
 * group are separate accumulators, so a pass per half keeps the row kernel's order and needs
 * R x P accumulators, not 2 R x P. */
static inline __attribute__((always_inline)) void
s_ftile(const quant_gemm_args *a, const float *wt, float *acc, uint64_t r, uint64_t b,
        uint64_t e0, uint64_t e1, int h, const int R, const int P)
{
    const uint64_t n = a->n;
    const float *x[S_FP];
    __m512 c[S_FR][S_FP];
#pragma GCC unroll 8
    for (int p = 0; p < P; p++)
        x[p] = (const float *)(a->act + (b + (uint64_t)p) * a->act_bytes) + 16 * h;
#pragma GCC unroll 8
    for (int i = 0; i < R; i++)
#pragma GCC unroll 8
        for (int p = 0; p < P; p++)
            c[i][p] = e0 ? _mm512_load_ps(acc + ((i * P + p) * 2 + h) * 16) : _mm512_setzero_ps();
    const float *wp = wt + s_pk(n, R, h, e0);
    for (uint64_t e = e0; e < e1; e += QUANT_LANES, wp += R * 16) {
        __m512 w[S_FR];
#pragma GCC unroll 8
        for (int i = 0; i < R; i++) {
            w[i] = _mm512_load_ps(wp + i * 16);
            /* in a register: folded into each fma as a memory operand (gcc's choice) it was
             * loaded P times, and the loads, not the fmas, set the pace */
            __asm__("" : "+v"(w[i]));
        }
#pragma GCC unroll 8
        for (int p = 0; p < P; p++) {
            const __m512 xv = _mm512_loadu_ps(x[p] + e);
#pragma GCC unroll 8
            for (int i = 0; i < R; i++)
                c[i][p] = _mm512_fmadd_ps(w[i], xv, c[i][p]);
        }
    }
#pragma GCC unroll 8
    for (int i = 0; i < R; i++)
#pragma GCC unroll 8
        for (int p = 0; p < P; p++) {
            float *t = acc + (i * P + p) * 2 * 16;
            if (e1 < n || !h) {
                _mm512_store_ps(t + 16 * h, c[i][p]);
                continue;
            }
            float l[QUANT_LANES];
            _mm512_storeu_ps(l, _mm512_load_ps(t));
            _mm512_storeu_ps(l + 16, c[i][p]);
            a->Y[(b + (uint64_t)p) * a->ldy + r + (uint64_t)i] = quant_reduce32_avx(l);
        }
}

/* s_ftile for a tile of R <= S_FR rows and P <= S_FP positions (the panel's and batch's edges) */
#define S_FT_P(R)                                                                              \
    switch (P) {                                                                               \
    case 8: s_ftile(a, wt, acc, r, b, e0, e1, h, R, S_FP >= 8 ? 8 : 1); break;                 \
    case 7: s_ftile(a, wt, acc, r, b, e0, e1, h, R, S_FP >= 7 ? 7 : 1); break;                 \
    case 6: s_ftile(a, wt, acc, r, b, e0, e1, h, R, S_FP >= 6 ? 6 : 1); break;                 \
    case 5: s_ftile(a, wt, acc, r, b, e0, e1, h, R, S_FP >= 5 ? 5 : 1); break;                 \
    case 4: s_ftile(a, wt, acc, r, b, e0, e1, h, R, S_FP >= 4 ? 4 : 1); break;                 \
    case 3: s_ftile(a, wt, acc, r, b, e0, e1, h, R, S_FP >= 3 ? 3 : 1); break;                 \
    case 2: s_ftile(a, wt, acc, r, b, e0, e1, h, R, S_FP >= 2 ? 2 : 1); break;                 \
    default: s_ftile(a, wt, acc, r, b, e0, e1, h, R, 1); break;                                \
    }
static void s_ftile_any(const quant_gemm_args *a, const float *wt, float *acc, uint64_t r,
                        uint64_t b, uint64_t e0, uint64_t e1, int h, int R, int P)
{
    switch (R) {
    case 6: S_FT_P(S_FR >= 6 ? 6 : 1) break;
    case 5: S_FT_P(S_FR >= 5 ? 5 : 1) break;
    case 4: S_FT_P(S_FR >= 4 ? 4 : 1) break;
    case 3: S_FT_P(S_FR >= 3 ? 3 : 1) break;
    case 2: S_FT_P(S_FR >= 2 ? 2 : 1) break;
    default: S_FT_P(1) break;
    }
}

/* Rows [p0, p1) of W widened into the panel wf, packed a tile at a time (s_pk). */
static void s_widen(int kind, const quant_gemm_args *a, uint64_t p0, uint64_t p1, float *wf)
{
    const uint64_t n = a->n;
    for (uint64_t r = p0, R; r < p1; r += R) {
        R = s_even(p1 - r, S_FR);
        float *t = wf + (r - p0) * n;
        for (uint64_t i = 0; i < R; i++) {
            const uint8_t *w = a->W + (r + i) * a->row_bytes;
            for (uint64_t e = 0; e < n; e += QUANT_LANES) {
                _mm512_store_ps(t + s_pk(n, (int)R, 0, e) + i * 16, s_w(kind, w, e));
                _mm512_store_ps(t + s_pk(n, (int)R, 1, e) + i * 16, s_w(kind, w, e + 16));
            }
        }
    }
}

/* One panel of rows [p0, p1) against positions [b0, b1), asking meanwhile for the pf_bytes at
 * pf (the next panel's weights): widening them otherwise waited on DRAM, 8% of a 1-thread
 * prompt (perf, TinyLlama-shaped F16, batches of 64, 2026-12-02). */
static void s_panel(const quant_gemm_args *a, const float *wf, float *acc, uint64_t p0,
                    uint64_t p1, uint64_t b0, uint64_t b1, const uint8_t *pf, uint64_t pf_bytes)
{
    const uint64_t n = a->n, kc = s_kc(n);
    /* the prefetches spread over the panel's tiles, a few lines each */
    const uint64_t tiles = (b1 - b0 + S_FP - 1) / S_FP * ((n + kc - 1) / kc) *
                           ((p1 - p0 + S_FR - 1) / S_FR);
    const uint64_t step = (pf_bytes / 64 + tiles - 1) / tiles * 64;
    uint64_t pf_at = 0;
    for (uint64_t b = b0, P; b < b1; b += P) {
        P = s_even(b1 - b, S_FP);
        for (uint64_t e0 = 0; e0 < n; e0 += kc) {
            const uint64_t e1 = e0 + kc < n ? e0 + kc : n;
            for (uint64_t r = p0, R; r < p1; r += R) {
                for (uint64_t o = 0; o < step && pf_at < pf_bytes; o += 64, pf_at += 64)
                    _mm_prefetch((const char *)pf + pf_at, _MM_HINT_T1);
                R = s_even(p1 - r, S_FR);
                float *t = acc + (r - p0) * S_FP * QUANT_LANES;
                const float *w = wf + (r - p0) * n;
                for (int h = 0; h < 2; h++) {
                    if (R == S_FR && P == S_FP)
                        s_ftile(a, w, t, r, b, e0, e1, h, S_FR, S_FP);
                    else
                        s_ftile_any(a, w, t, r, b, e0, e1, h, (int)R, (int)P);
                }
            }
        }
    }
}

static void s_run_panels(int kind, const quant_gemm_args *a, uint64_t r0, uint64_t r1,
                         uint64_t b0, uint64_t b1)
{
    const uint64_t most = s_panel_rows(a->n);
    float *wf = (float *)a->scratch, *acc = wf + most * a->n;
    /* panels of about equal size: each streams the batch's activations once */
    const uint64_t rows = s_even(r1 - r0, most);
    for (uint64_t p0 = r0; p0 < r1; p0 += rows) {
        const uint64_t p1 = p0 + rows < r1 ? p0 + rows : r1;
        /* the next panel's rows, past r1 too: the share's next group starts there (past the
         * share or the matrix: wasted requests, and a prefetch never faults) */
        s_widen(kind, a, p0, p1, wf);
        s_panel(a, wf, acc, p0, p1, b0, b1, a->W + p1 * a->row_bytes, rows * a->row_bytes);
    }
}

static void s_run16(const quant_gemm_args *a, uint64_t r0, uint64_t r1, uint64_t b0, uint64_t b1)
{
    if (b1 - b0 < S_PANEL_MIN)
        s_run_few(S_F16, a, r0, r1, b0, b1);
    else if (a->scratch && a->B >= S_PANEL_MIN)
        s_run_panels(S_F16, a, r0, r1, b0, b1);
    else
        s_tiles16(a, r0, r1, b0, b1);
}

static void s_runb16(const quant_gemm_args *a, uint64_t r0, uint64_t r1, uint64_t b0, uint64_t b1)
{
    if (b1 - b0 < S_PANEL_MIN)
        s_run_few(S_BF16, a, r0, r1, b0, b1);
    else if (a->scratch && a->B >= S_PANEL_MIN)
        s_run_panels(S_BF16, a, r0, r1, b0, b1);
    else
        s_tilesb16(a, r0, r1, b0, b1);
}

const quant_gemm quant_gemm_f16_avx512 = { "avx512", s_panel_bytes, s_pack, s_run16,
                                           s_scratch_bytes };
const quant_gemm quant_gemm_bf16_avx512 = { "avx512", s_panel_bytes, s_pack, s_runb16,
                                            s_scratch_bytes };
