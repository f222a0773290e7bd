/* qwen3.c — the qwen3 family (Qwen3 0.6B..32B): the table entry arch_qwen3_ops over the shared
 * decoder layer (arch/decoder.c). arch/
 *
 * As llama.cpp's src/models/qwen3.cpp: qwen2's layer without the Q/K/V biases, with an RMS
 * norm over each head of q and of k (attn_q_norm / attn_k_norm.weight, head_dim wide, the
 * model's epsilon) before RoPE; NEOX RoPE; head_dim from attention.key_length, which need not
 * be embedding_length / head_count (Qwen3-0.6B: 1024 wide, 16 heads of 128), so Q and the
 * output projection are n_head * head_dim wide.
 */
#include "arch/decoder.h"

static int s_open(arch_model *m, char *err, size_t errlen)
{
    const dec_family f = { .rope_type = ARCH_ROPE_NEOX, .rope_freqs_ok = 0 };
    return arch_dec_open(m, &f, err, errlen);
}

static int s_layer(const arch_model *m, uint32_t l, arch_layer *ly, char *err, size_t errlen)
{
    static const dec_role roles[] = { DEC_ATTN_NORM, DEC_FFN_NORM, DEC_Q_NORM, DEC_K_NORM,
                                      DEC_Q, DEC_K, DEC_V, DEC_O, DEC_GATE, DEC_UP, DEC_DOWN };
    return arch_dec_layer(m, l, ly, roles, sizeof roles / sizeof roles[0], err, errlen);
}

const arch_ops arch_qwen3_ops = ARCH_DEC_OPS("qwen3", s_open, s_layer);

/* qwen3moe (Qwen3-30B-A3B, 235B-A22B): qwen3's attention, a Mixture-of-Experts feed-forward of
 * expert_feed_forward_length wide experts (llama.cpp's src/models/qwen3moe.cpp: softmax
 * gating, the top-k weights normalised) */
static int s_moe_open(arch_model *m, char *err, size_t errlen)
{
    const dec_family f = { .rope_type = ARCH_ROPE_NEOX, .rope_freqs_ok = 0, .experts = 2 };
    return arch_dec_open(m, &f, err, errlen);
}

static int s_moe_layer(const arch_model *m, uint32_t l, arch_layer *ly, char *err, size_t errlen)
{
    static const dec_role roles[] = { DEC_ATTN_NORM, DEC_FFN_NORM, DEC_Q_NORM, DEC_K_NORM,
                                      DEC_Q, DEC_K, DEC_V, DEC_O, DEC_MOE_ROLES };
    return arch_dec_layer(m, l, ly, roles, sizeof roles / sizeof roles[0], err, errlen);
}

const arch_ops arch_qwen3moe_ops = ARCH_DEC_OPS("qwen3moe", s_moe_open, s_moe_layer);
