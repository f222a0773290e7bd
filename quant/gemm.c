/* gemm.c — which batched kernel quant_matmat uses: per type, per kernel family, by cpuid. quant/
 *
 * A table beside dot.c's rather than a column in it: a type gains a batched kernel by one
 * entry here, and a type with none simply falls back (matvec.c), so new types need nothing.
 */
#include <stdatomic.h>
#include <stddef.h>

#include "quant/gemm.h"

typedef struct {
    quant_type type;
    const quant_gemm *k[QUANT_GEMM_KINDS];   /* by quant_gemm_kind; NULL: none */
} s_entry;

static const s_entry s_table[] = {
    { QUANT_F16, { &quant_gemm_f16_avx512, NULL, NULL } },
    { QUANT_BF16, { &quant_gemm_bf16_avx512, NULL, NULL } },
    { QUANT_Q4_0, { &quant_gemm_q4_0_avx512, &quant_gemm_q4_0_avxvnni, &quant_gemm_q4_0_avx2 } },
    { QUANT_Q8_0, { &quant_gemm_q8_0_avx512, &quant_gemm_q8_0_avxvnni, &quant_gemm_q8_0_avx2 } },
    { QUANT_Q4_K, { &quant_gemm_q4_K_avx512, NULL, &quant_gemm_q4_K_avx2 } },
    { QUANT_Q5_K, { &quant_gemm_q5_K_avx512, NULL, &quant_gemm_q5_K_avx2 } },
    { QUANT_Q6_K, { &quant_gemm_q6_K_avx512, NULL, &quant_gemm_q6_K_avx2 } },
    { QUANT_Q4_1, { NULL, NULL, &quant_gemm_q4_1_avx2 } },
    { QUANT_Q5_0, { NULL, NULL, &quant_gemm_q5_0_avx2 } },
    { QUANT_Q5_1, { NULL, NULL, &quant_gemm_q5_1_avx2 } },
    { QUANT_IQ4_NL, { NULL, NULL, &quant_gemm_iq4_nl_avx2 } },
    { QUANT_IQ4_XS, { NULL, NULL, &quant_gemm_iq4_xs_avx2 } },
};

static int s_kind_runs(quant_gemm_kind kind)
{
    const int avx2 = __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma") &&
                     __builtin_cpu_supports("f16c");
    switch (kind) {
    case QUANT_GEMM_AVX512:
        return avx2 && __builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512bw") &&
               __builtin_cpu_supports("avx512vl") && __builtin_cpu_supports("avx512vnni");
    case QUANT_GEMM_AVXVNNI:
        return avx2 && __builtin_cpu_supports("avxvnni");
    case QUANT_GEMM_AVX2:
        return avx2;
    }
    return 0;
}

const quant_gemm *quant_gemm_get_kind(quant_type t, quant_gemm_kind kind)
{
    if ((unsigned)kind >= QUANT_GEMM_KINDS || !s_kind_runs(kind))
        return NULL;
    for (size_t i = 0; i < sizeof s_table / sizeof s_table[0]; i++)
        if (s_table[i].type == t)
            return s_table[i].k[kind];
    return NULL;
}

static _Atomic int s_force = QUANT_GEMM_AUTO;

int quant_gemm_force(int kind)
{
    if (kind != QUANT_GEMM_AUTO && kind != QUANT_GEMM_NONE &&
        ((unsigned)kind >= QUANT_GEMM_KINDS || !s_kind_runs((quant_gemm_kind)kind)))
        return -1;
    atomic_store(&s_force, kind);
    return 0;
}

const quant_gemm *quant_gemm_get(quant_type t)
{
    const int f = atomic_load(&s_force);
    if (f == QUANT_GEMM_NONE)
        return NULL;
    if (f >= 0)
        return quant_gemm_get_kind(t, (quant_gemm_kind)f);
    switch (quant_isa_current()) {
    case QUANT_ISA_AVX512:
        return quant_gemm_get_kind(t, QUANT_GEMM_AVX512);
    case QUANT_ISA_AVX2: {
        const quant_gemm *g = quant_gemm_get_kind(t, QUANT_GEMM_AVXVNNI);
        return g ? g : quant_gemm_get_kind(t, QUANT_GEMM_AVX2);
    }
    default:
        return NULL;
    }
}
