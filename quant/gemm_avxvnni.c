/* gemm_avxvnni.c — batched Q4_0 / Q8_0 kernels for AVX2 + AVX-VNNI (vpdpbusd on 256 bits,
 * VEX: Alder Lake and later, Zen 5): gemm_avx2.h with one vpdpbusd per 32 products. quant/ */
#pragma GCC target("avx2,fma,f16c,avxvnni")
#define S_VNNI 1
#include "quant/gemm_avx2.h"

const quant_gemm quant_gemm_q4_0_avxvnni = { "avx-vnni", s_panel_bytes, s_pack_q4, s_run_q4, NULL };
const quant_gemm quant_gemm_q8_0_avxvnni = { "avx-vnni", s_panel_bytes, s_pack_q8, s_run_q8, NULL };
