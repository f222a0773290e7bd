/* llama.c — the llama family (Mixtral's experts among it: arch/moe.c) and its qwen2 variant: the table entries arch_llama_ops and
 * arch_qwen2_ops over the shared decoder layer (arch/decoder.c: attention with RoPE over a KV
 * cache, SwiGLU FFN). arch/
 *
 * qwen2 is llama with biases on Q, K and V and NEOX RoPE: its own table entry, with the
 * difference decided at open (its layers list the biases as vectors, its hp.rope_type is
 * NEOX), so nothing in the forward pass asks which family it runs. RoPE as llama.cpp's
 * llama_model_rope_type gives it: LLM_ARCH_LLAMA is LLAMA_ROPE_TYPE_NORM (adjacent pairs 2i,
 * 2i+1), LLM_ARCH_QWEN2 is LLAMA_ROPE_TYPE_NEOX (pairs i, i + rope_dim/2). Only llama reads
 * Llama 3.1's rope_freqs.weight (llama.cpp refuses the extra tensor elsewhere).
 */
#include "arch/decoder.h"

static int s_llama_open(arch_model *m, char *err, size_t errlen)
{
    const dec_family f = { .rope_type = ARCH_ROPE_NORM, .rope_freqs_ok = 1, .experts = 1 };
    return arch_dec_open(m, &f, err, errlen);
}

static int s_qwen2_open(arch_model *m, char *err, size_t errlen)
{
    const dec_family f = { .rope_type = ARCH_ROPE_NEOX, .rope_freqs_ok = 0 };
    return arch_dec_open(m, &f, err, errlen);
}

static int s_llama_layer(const arch_model *m, uint32_t l, arch_layer *ly, char *err,
                         size_t errlen)
{
    static const dec_role roles[] = { DEC_ATTN_NORM, DEC_FFN_NORM, DEC_Q, DEC_K, DEC_V, DEC_O,
                                      DEC_GATE, DEC_UP, DEC_DOWN };
    /* Mixtral: the same attention, experts in place of the feed-forward (decided at open by
     * expert_count, as llama.cpp's llama graph branches on ffn_gate_inp) */
    static const dec_role moe[] = { DEC_ATTN_NORM, DEC_FFN_NORM, DEC_Q, DEC_K, DEC_V, DEC_O,
                                    DEC_MOE_ROLES };
    if (m->hp.n_expert)
        return arch_dec_layer(m, l, ly, moe, sizeof moe / sizeof moe[0], err, errlen);
    return arch_dec_layer(m, l, ly, roles, sizeof roles / sizeof roles[0], err, errlen);
}

static int s_qwen2_layer(const arch_model *m, uint32_t l, arch_layer *ly, char *err,
                         size_t errlen)
{
    static const dec_role roles[] = { DEC_ATTN_NORM, DEC_FFN_NORM, DEC_BQ, DEC_BK, DEC_BV, DEC_Q,
                                      DEC_K, DEC_V, DEC_O, DEC_GATE, DEC_UP, DEC_DOWN };
    return arch_dec_layer(m, l, ly, roles, sizeof roles / sizeof roles[0], err, errlen);
}

const arch_ops arch_llama_ops = ARCH_DEC_OPS("llama", s_llama_open, s_llama_layer);

/* llama with Q/K/V biases and NEOX RoPE (both decided at open: see the top of the file) */
const arch_ops arch_qwen2_ops = ARCH_DEC_OPS("qwen2", s_qwen2_open, s_qwen2_layer);
