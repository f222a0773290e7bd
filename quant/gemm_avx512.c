/* gemm_avx512.c — batched Q4_0 and Q8_0 kernels on AVX-512 VNNI: weight rows in vector lanes,
 * one integer sum per block and pair, quant.h's order. quant/
 *
 * quant.h's order for these two types is one exact integer sum per block and one fma per
 * block into lane b % 16 of the (row, position) pair. So a vector can hold 16 rows instead
 * of 16 quads of one row: the kernel repacks 16 (or 32) rows at a time (a row group) so that
 * one 64-byte vector is quad q of block k for 16 rows, and vpdpbusd against the position's
 * quad q broadcast (an embedded broadcast: a load, no shuffle) adds 16 rows' 4 products each.
 * Eight of them are the block's sums for 16 rows, exact; then one conversion, one multiply
 * (16 rows' scales times the position's) and one fma for 16 pairs, where the one-row order
 * of quads spent those three per 4 elements. This is what llama.cpp's repacked Q4_0 kernels
 * do (it repacks at load; here the repack is per product and row group, from the GGUF bytes,
 * so nothing else changes: decoding reads the file as it is and gives the same bits).
 *
 * Lanes are walked outermost: the blocks of lane l (k = l, l + 16, ...) go through the
 * pair's accumulator in order, then the next lane; the repacked weights and the panel are laid
 * out lane-major so that walk reads forward. At the end quant_reduce16's tree is done across
 * the 16 lanes' vectors, 16 rows at once, and a pair's result is stored with its neighbours.
 */
#pragma GCC target("avx2,fma,f16c,avx512f,avx512bw,avx512vl,avx512vnni")
#include <immintrin.h>
#include <stdlib.h>
#include <string.h>

#include "quant/gemm.h"
#include "quant/reduce_avx.h"

/* A tile: S_G row groups of 16 x S_Q positions (2 x 4: 16 integer and 8 float accumulators
 * beside the group's weight vectors; -D to try others). */
#ifndef S_G
#define S_G 2
#endif
#ifndef S_Q
#define S_Q 4
#endif
_Static_assert(S_Q >= 1 && S_Q <= 8 && S_G >= 1 && S_G <= 2, "tile shape");

#define S_L QUANT_QB_BLANES   /* 16 lanes */
#ifndef S_PF
#define S_PF 1024                 /* the repack's prefetch distance in bytes of a row */
#endif

static inline int32_t s_i32(const uint8_t *p)
{
    int32_t v;
    memcpy(&v, p, 4);
    return v;
}

static inline float s_f32(const uint8_t *p)
{
    float v;
    memcpy(&v, p, 4);
    return v;
}

static inline __m512i s_join(const void *lo, const void *hi)
{
    return _mm512_inserti64x4(_mm512_castsi256_si512(_mm256_loadu_si256((const __m256i *)lo)),
                              _mm256_loadu_si256((const __m256i *)hi), 1);
}

/* A panel record, one per (block, position): the block's 32 activation quants in element
 * order, -o * their sum (o = 128 for Q8_0, whose weights go in as x + 128; 8 for Q4_0, whose
 * nibbles are value + 8), and the block's scale x_d. Records lane-major: block k at slot
 * (k % 16) * nbl + k / 16, a slot's B positions side by side. */
#define S_REC 40

static uint64_t s_nbl(uint64_t nb)
{
    return (nb + S_L - 1) / S_L;
}

static uint64_t s_slot(uint64_t k, uint64_t nbl)
{
    return (k % S_L) * nbl + k / S_L;
}

static uint64_t s_panel_bytes(uint64_t n, uint64_t B)
{
    const uint64_t nb = n / QUANT_QK;
    return nb ? s_nbl(nb) * S_L * B * S_REC : 0;
}

static inline void s_pack(uint64_t n, uint64_t B, const uint8_t *act, uint64_t ab, uint8_t *panel,
                          uint64_t b0, uint64_t b1, int32_t o)
{
    const uint64_t nb = n / QUANT_QK, nbl = s_nbl(nb);
    for (uint64_t b = b0; b < b1; b++) {
        const quant_act_q8 y = quant_act_view(act + b * ab, n);
        for (uint64_t k = 0; k < nb; k++) {
            uint8_t *r = panel + (s_slot(k, nbl) * B + b) * S_REC;
            int32_t sum = 0;
            for (int e = 0; e < QUANT_QK; e++)
                sum += y.qs[k * QUANT_QK + (uint64_t)e];
            const int32_t bias = -o * sum;
            memcpy(r, y.qs + k * QUANT_QK, QUANT_QK);
            memcpy(r + 32, &bias, 4);
            memcpy(r + 36, y.d + k, 4);
        }
    }
}

static void s_q8_pack(uint64_t n, uint64_t B, const uint8_t *act, uint64_t ab, uint8_t *panel,
                      uint64_t b0, uint64_t b1)
{
    s_pack(n, B, act, ab, panel, b0, b1, 128);
}

static void s_q4_pack(uint64_t n, uint64_t B, const uint8_t *act, uint64_t ab, uint8_t *panel,
                      uint64_t b0, uint64_t b1)
{
    s_pack(n, B, act, ab, panel, b0, b1, 8);
}

/* ---------------------------------------------------------------- repacking a row group */

/* Per block slot and group of 16 rows: 8 vectors (quad q: 16 rows' 4 unsigned bytes, row i in
 * dword i), then the 16 rows' scales as f32. Q8_0's bytes biased by 128; Q4_0's nibbles one a
 * byte (the low ones are quads 0..3, the high ones 4..7: split here once, not in the tile for
 * every position, where the mask and shift cost 3 uops per 8 vpdpbusd; twice the bytes, still
 * within L2). So the tile is one for both types. */
#define S_Q8_NQ 8
#define S_GB (S_Q8_NQ * 64 + 64)

static inline short s_h(const uint8_t *p)
{
    short v;
    memcpy(&v, p, 2);
    return v;
}

/* 16 rows' f16 scales of one block (stride bytes apart) widened: gathered into a register
 * word by word (through a stored array, 16 narrow stores and one wide load miss the store
 * forwarding: the repack was 15% of a 1-thread Q4_0 prompt, perf, 2026-12-02). */
static inline __m512 s_dw16(const uint8_t *d, uint64_t st)
{
    const __m256i h = _mm256_setr_epi16(
        s_h(d), s_h(d + st), s_h(d + 2 * st), s_h(d + 3 * st), s_h(d + 4 * st), s_h(d + 5 * st),
        s_h(d + 6 * st), s_h(d + 7 * st), s_h(d + 8 * st), s_h(d + 9 * st), s_h(d + 10 * st),
        s_h(d + 11 * st), s_h(d + 12 * st), s_h(d + 13 * st), s_h(d + 14 * st),
        s_h(d + 15 * st));
    return _mm512_cvtph_ps(h);
}

/* Q8_0 block k of rows r[0..15] (row_bytes apart) into out: an 8 x 8 dword transpose per half
 * (rows i and i + 8 share a vector), then the quarters put in row order. */
static void s_q8_repack(const uint8_t *w, uint64_t row_bytes, uint64_t k, uint8_t *out)
{
    const uint64_t off = k * sizeof(quant_block_q8_0);
    __m512i v[8], t[8], u[8];
    #pragma GCC unroll 8
    for (int i = 0; i < 8; i++) {
        const uint8_t *a = w + (uint64_t)i * row_bytes + off + 2;
        const uint8_t *b = w + (uint64_t)(i + 8) * row_bytes + off + 2;
        v[i] = s_join(a, b);
    }
    #pragma GCC unroll 8
    for (int i = 0; i < 8; i += 2) {
        t[i] = _mm512_unpacklo_epi32(v[i], v[i + 1]);
        t[i + 1] = _mm512_unpackhi_epi32(v[i], v[i + 1]);
    }
    #pragma GCC unroll 8
    for (int i = 0; i < 8; i += 4) {
        u[i] = _mm512_unpacklo_epi64(t[i], t[i + 2]);     /* quads 0, 4 of rows i..i+3 */
        u[i + 1] = _mm512_unpackhi_epi64(t[i], t[i + 2]); /* 1, 5 */
        u[i + 2] = _mm512_unpacklo_epi64(t[i + 1], t[i + 3]); /* 2, 6 */
        u[i + 3] = _mm512_unpackhi_epi64(t[i + 1], t[i + 3]); /* 3, 7 */
    }
    const __m512i lo = _mm512_setr_epi64(0, 1, 8, 9, 4, 5, 12, 13);
    const __m512i hi = _mm512_setr_epi64(2, 3, 10, 11, 6, 7, 14, 15);
    const __m512i bias = _mm512_set1_epi8((char)0x80);
    #pragma GCC unroll 8
    for (int q = 0; q < 4; q++) {
        _mm512_store_si512(out + 64 * q,
                           _mm512_xor_si512(_mm512_permutex2var_epi64(u[q], lo, u[q + 4]), bias));
        _mm512_store_si512(out + 64 * (q + 4),
                           _mm512_xor_si512(_mm512_permutex2var_epi64(u[q], hi, u[q + 4]), bias));
    }
    _mm512_store_ps(out + 64 * S_Q8_NQ, s_dw16(w + off, row_bytes));
}

/* Q4_0: 16 nibble bytes a row; rows i, i + 4, i + 8, i + 12 in one vector's 128-bit lanes, a
 * 4 x 4 dword transpose per lane puts rows 4L..4L+3 in lane L. */
static void s_q4_repack(const uint8_t *w, uint64_t row_bytes, uint64_t k, uint8_t *out)
{
    const uint64_t off = k * sizeof(quant_block_q4_0);
    __m512i v[4];
    #pragma GCC unroll 8
    for (int i = 0; i < 4; i++) { /* masked broadcasts: loads, no shuffle-port uop */
        const uint8_t *p = w + (uint64_t)i * row_bytes + off + 2;
        __m512i x = _mm512_broadcast_i32x4(_mm_loadu_si128((const __m128i *)p));
        x = _mm512_mask_broadcast_i32x4(x, 0x00F0,
                                        _mm_loadu_si128((const __m128i *)(p + 4 * row_bytes)));
        x = _mm512_mask_broadcast_i32x4(x, 0x0F00,
                                        _mm_loadu_si128((const __m128i *)(p + 8 * row_bytes)));
        v[i] = _mm512_mask_broadcast_i32x4(x, 0xF000, _mm_loadu_si128((const __m128i *)(p + 12 *
                                                                                   row_bytes)));
    }
    const __m512i t0 = _mm512_unpacklo_epi32(v[0], v[1]), t1 = _mm512_unpackhi_epi32(v[0], v[1]);
    const __m512i t2 = _mm512_unpacklo_epi32(v[2], v[3]), t3 = _mm512_unpackhi_epi32(v[2], v[3]);
    const __m512i q[4] = { _mm512_unpacklo_epi64(t0, t2), _mm512_unpackhi_epi64(t0, t2),
                           _mm512_unpacklo_epi64(t1, t3), _mm512_unpackhi_epi64(t1, t3) };
    const __m512i m = _mm512_set1_epi8(0x0F);
    #pragma GCC unroll 8
    for (int i = 0; i < 4; i++) {
        _mm512_store_si512(out + 64 * i, _mm512_and_si512(q[i], m));
        _mm512_store_si512(out + 64 * (i + 4), _mm512_and_si512(_mm512_srli_epi16(q[i], 4), m));
    }
    _mm512_store_ps(out + 64 * S_Q8_NQ, s_dw16(w + off, row_bytes));
}

/* ---------------------------------------------------------------- the tile */

/* G groups of 16 rows (repacked: rp, S_GB bytes a group slot, G of them side by side per slot)
 * against P positions from b: per lane l, its blocks in order through one float accumulator
 * per (group, position); then the 16-lane tree and one store of 16 results per pair. The
 * block's sum goes in two integer chains (quads 0..3 from the bias, 4..7 from 0) to halve the
 * vpdpbusd latency each waits on. */
static inline __attribute__((always_inline)) void
s_tile(const quant_gemm_args *a, const uint8_t *rp, uint64_t r, uint64_t b, const int G,
       const int P)
{
    const uint64_t nb = a->n / QUANT_QK, nbl = s_nbl(nb);
    __m512 acc[S_G][S_Q][S_L];
    for (int l = 0; l < S_L; l++) {
        __m512 f[S_G][S_Q];
        #pragma GCC unroll 8
        for (int g = 0; g < G; g++)
            #pragma GCC unroll 8
            for (int p = 0; p < P; p++)
                f[g][p] = _mm512_setzero_ps();
        for (uint64_t k = (uint64_t)l, j = 0; k < nb; k += S_L, j++) {
            const uint64_t slot = (uint64_t)l * nbl + j;
            const uint8_t *wk = rp + slot * (uint64_t)G * S_GB;
            const uint8_t *pk = a->panel + (slot * a->B + b) * S_REC;
            __m512i i0[S_G][S_Q], i1[S_G][S_Q];
            #pragma GCC unroll 8
            for (int g = 0; g < G; g++)
                #pragma GCC unroll 8
                for (int p = 0; p < P; p++) {
                    i0[g][p] = _mm512_set1_epi32(s_i32(pk + p * S_REC + 32));
                    i1[g][p] = _mm512_setzero_si512();
                }
            #pragma GCC unroll 8
            for (int q = 0; q < S_Q8_NQ; q++) {
                __m512i w[S_G];
                #pragma GCC unroll 8
                for (int g = 0; g < G; g++)
                    w[g] = _mm512_load_si512(wk + g * S_GB + 64 * q);
                #pragma GCC unroll 8
                for (int p = 0; p < P; p++) {
                    const __m512i y4 = _mm512_set1_epi32(s_i32(pk + p * S_REC + 4 * q));
                    #pragma GCC unroll 8
                    for (int g = 0; g < G; g++) {
                        if (q < 4)
                            i0[g][p] = _mm512_dpbusd_epi32(i0[g][p], w[g], y4);
                        else
                            i1[g][p] = _mm512_dpbusd_epi32(i1[g][p], w[g], y4);
                    }
                }
            }
            #pragma GCC unroll 8
            for (int g = 0; g < G; g++) {
                const __m512 dw = _mm512_load_ps(wk + g * S_GB + 64 * S_Q8_NQ);
                #pragma GCC unroll 8
                for (int p = 0; p < P; p++) {
                    const __m512 d = _mm512_mul_ps(dw, _mm512_set1_ps(s_f32(pk + p * S_REC + 36)));
                    const __m512 s = _mm512_cvtepi32_ps(_mm512_add_epi32(i0[g][p], i1[g][p]));
                    f[g][p] = _mm512_fmadd_ps(s, d, f[g][p]);
                }
            }
        }
        #pragma GCC unroll 8
        for (int g = 0; g < G; g++)
            #pragma GCC unroll 8
            for (int p = 0; p < P; p++)
                acc[g][p][l] = f[g][p];
    }
    #pragma GCC unroll 8
    for (int g = 0; g < G; g++)
        #pragma GCC unroll 8
        for (int p = 0; p < P; p++) {
            __m512 t[8];
            #pragma GCC unroll 8
            for (int j = 0; j < 8; j++)
                t[j] = _mm512_add_ps(acc[g][p][j], acc[g][p][j + 8]);
            #pragma GCC unroll 8
            for (int j = 0; j < 4; j++)
                t[j] = _mm512_add_ps(t[j], t[j + 4]);
            #pragma GCC unroll 8
            for (int j = 0; j < 2; j++)
                t[j] = _mm512_add_ps(t[j], t[j + 2]);
            _mm512_storeu_ps(a->Y + (b + (uint64_t)p) * a->ldy + r + 16 * (uint64_t)g,
                             _mm512_add_ps(t[0], t[1]));
        }
}

static void s_tiles(const quant_gemm_args *a, const uint8_t *rp, uint64_t r, uint64_t b0,
                    uint64_t b1, int G)
{
    for (uint64_t b = b0; b < b1; b += S_Q) {
        const uint64_t np = b1 - b < S_Q ? b1 - b : S_Q;
        if (G == S_G) {
            switch (np) {
            case 8: s_tile(a, rp, r, b, S_G, S_Q >= 8 ? 8 : 1); break;
            case 7: s_tile(a, rp, r, b, S_G, S_Q >= 7 ? 7 : 1); break;
            case 6: s_tile(a, rp, r, b, S_G, S_Q >= 6 ? 6 : 1); break;
            case 5: s_tile(a, rp, r, b, S_G, S_Q >= 5 ? 5 : 1); break;
            case 4: s_tile(a, rp, r, b, S_G, S_Q >= 4 ? 4 : 1); break;
            case 3: s_tile(a, rp, r, b, S_G, S_Q >= 3 ? 3 : 1); break;
            case 2: s_tile(a, rp, r, b, S_G, S_Q >= 2 ? 2 : 1); break;
            default: s_tile(a, rp, r, b, S_G, 1); break;
            }
        } else {
            for (uint64_t p = b; p < b + np; p++)
                s_tile(a, rp, r, p, 1, 1);
        }
    }
}

/* Rows [r0, r1) against positions [b0, b1): S_G groups of 16 rows repacked at a time (kept in
 * L2 while every position passes), one group of 16 after, the last rows by the row kernel —
 * as is everything if the scratch cannot be had: the bits are the same either way. */
static inline void s_run(int q4, const quant_gemm_args *a, uint64_t r0, uint64_t r1, uint64_t b0,
                         uint64_t b1)
{
    const uint64_t nb = a->n / QUANT_QK, nbl = s_nbl(nb);
    const uint64_t gb = S_GB;
    uint8_t *rp = NULL;
    uint64_t r = r0;
    if (r1 - r0 >= 16 && posix_memalign((void **)&rp, 64, (size_t)(nbl * S_L * S_G * gb)))
        rp = NULL;
    while (rp && r + 16 <= r1) {
        const int G = r + 16 * S_G <= r1 ? S_G : 1;
        const uint8_t *w = a->W + r * a->row_bytes;
        for (uint64_t k = 0; k < nb; k++) {
            /* The repack is where a product's weights come from DRAM, 16 or 32 rows side by
             * side: more streams than the hardware prefetchers follow, so ask for each row's
             * bytes S_PF ahead, a line per row every 64 bytes of it. */
            const uint64_t at = k * (a->row_bytes / nb);
            if (at / 64 != (at + a->row_bytes / nb) / 64)
                for (int i = 0; i < 16 * G; i++)
                    __builtin_prefetch(w + (uint64_t)i * a->row_bytes + at + S_PF, 0, 3);
            #pragma GCC unroll 8
            for (int g = 0; g < G; g++) {
                uint8_t *o = rp + (s_slot(k, nbl) * (uint64_t)G + (uint64_t)g) * gb;
                if (q4)
                    s_q4_repack(w + 16 * (uint64_t)g * a->row_bytes, a->row_bytes, k, o);
                else
                    s_q8_repack(w + 16 * (uint64_t)g * a->row_bytes, a->row_bytes, k, o);
            }
        }
        s_tiles(a, rp, r, b0, b1, G);
        r += 16 * (uint64_t)G;
    }
    free(rp);
    for (; r < r1; r++)
        for (uint64_t p = b0; p < b1; p++)
            a->Y[p * a->ldy + r] = a->dot(a->n, a->W + r * a->row_bytes,
                                          a->act + p * a->act_bytes);
}

/* A decode pass (the sessions of one continuous batch, at most QUANT_Q8_DOTN positions) is
 * bound by reading the weights: no repack, each row read once front to back for every
 * position (quant_dotn_q8_0_avx512). The repack reads 32 rows side by side, 34 bytes of each
 * at a time, and it was where a 4-session pass spent its time: perf -e cpu-clock, TinyLlama
 * Q8_0, generate --sessions 4, 2 threads, 2026-12-02 (Xeon, load ~13): s_q8_repack 57%,
 * s_run's prefetches 13%, the tiles 15%; per decode pass 1.5x the CPU time of one session's
 * pass (its one-row kernel). */
static void s_q8_run(const quant_gemm_args *a, uint64_t r0, uint64_t r1, uint64_t b0, uint64_t b1)
{
    const uint64_t np = b1 - b0;
    if (np > QUANT_Q8_DOTN) {
        s_run(0, a, r0, r1, b0, b1);
        return;
    }
    const void *act[QUANT_Q8_DOTN];
    float out[QUANT_Q8_DOTN];
    for (uint64_t p = 0; p < np; p++)
        act[p] = a->act + (b0 + p) * a->act_bytes;
    for (uint64_t r = r0; r < r1; r++) {
        quant_dotn_q8_0_avx512(a->n, a->W + r * a->row_bytes, act, (int)np, out);
        for (uint64_t p = 0; p < np; p++)
            a->Y[(b0 + p) * a->ldy + r] = out[p];
    }
}

static void s_q4_run(const quant_gemm_args *a, uint64_t r0, uint64_t r1, uint64_t b0, uint64_t b1)
{
    s_run(1, a, r0, r1, b0, b1);
}

const quant_gemm quant_gemm_q4_0_avx512 = {
    "avx512-vnni", s_panel_bytes, s_q4_pack, s_q4_run, NULL
};
const quant_gemm quant_gemm_q8_0_avx512 = {
    "avx512-vnni", s_panel_bytes, s_q8_pack, s_q8_run, NULL
};
