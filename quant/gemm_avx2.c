/* gemm_avx2.c — batched Q4_0 / Q8_0 kernels for AVX2 + FMA + F16C (no VNNI): gemm_avx2.h with
 * vpmaddubsw / vpmaddwd for the integer sums. quant/ */
#pragma GCC target("avx2,fma,f16c")
#define S_VNNI 0
#include "quant/gemm_avx2.h"

const quant_gemm quant_gemm_q4_0_avx2 = { "avx2", s_panel_bytes, s_pack_q4, s_run_q4, NULL };
const quant_gemm quant_gemm_q8_0_avx2 = { "avx2", s_panel_bytes, s_pack_q8, s_run_q8, NULL };
