/* gptoss.c — the gpt-oss family (gpt-oss-20b, gpt-oss-120b): the table entry arch_gptoss_ops
 * over the shared decoder layer (arch/decoder.c). arch/
 *
 * As llama.cpp's src/models/openai-moe.cpp (LLM_ARCH_OPENAI_MOE, general.architecture
 * "gpt-oss") reads and runs it:
 *   - attention with biases on q, k, v and the output, NEOX RoPE over head_dim
 *     (attention.key_length: 64 heads of 64 on a 2880-wide model), scores scaled by
 *     1/sqrt(head_dim), and each head's learned sink logit (attn_sinks.weight) in the softmax;
 *   - every other layer local: attention.sliding_window positions (required),
 *     attention.sliding_window_pattern (default 2: the even layers), rotating with
 *     rope.freq_base_swa (default rope.freq_base) and the file's scaling, YaRN for the
 *     published files (rope.scaling.type yarn, factor 32, original context 4096);
 *   - no ffn_norm: post_attention_norm.weight is the norm of x + o before the experts;
 *   - a Mixture-of-Experts feed-forward of expert_feed_forward_length wide experts with
 *     biases on the router and on every expert's gate, up and down rows, gated
 *     SOFTMAX_WEIGHT (the top k of the router's logits, then a softmax over those k, not
 *     normalised again) and the clamped SwiGLU of ggml_swiglu_oai (alpha 1.702, limit 7);
 *   - its own output.weight (llama.cpp requires one).
 * Expert tensors are MXFP4 in the published files (quant/mxfp4.h); any supported type reads.
 */
#include "arch/decoder.h"

static int s_open(arch_model *m, char *err, size_t errlen)
{
    const dec_family f = { .rope_type = ARCH_ROPE_NEOX, .rope_freqs_ok = 0, .experts = 2 };
    if (arch_dec_open(m, &f, err, errlen))
        return -1;
    const gguf_file *g = m->g;
    arch_hparams *hp = &m->hp;
    const char *a = hp->name;
    if (arch_dec_u32(g, a, "attention.sliding_window", 1, 0, &hp->n_swa, err, errlen) ||
        arch_dec_u32(g, a, "attention.sliding_window_pattern", 0, 2, &hp->swa_pattern, err,
                     errlen) ||
        arch_dec_f32(g, a, "rope.freq_base_swa", 0, hp->rope_freq_base, &hp->rope_freq_base_swa,
                     err, errlen))
        return -1;
    if (hp->n_swa < 1 || !(hp->rope_freq_base_swa > 0)) {
        arch_err(err, errlen, g->path, "%s.attention.sliding_window must be >= 1 and "
                 "rope.freq_base_swa > 0", a);
        return -1;
    }
    if (hp->tied_output) {
        arch_err(err, errlen, g->path, "tensor 'output.weight' is missing (a %s model has its "
                 "own head)", a);
        return -1;
    }
    hp->rope_scaling_local = 1;
    hp->ffn_act = ARCH_ACT_SWIGLU_OAI;
    hp->gating = ARCH_GATING_SOFTMAX_WEIGHT;
    return 0;
}

static int s_layer(const arch_model *m, uint32_t l, arch_layer *ly, char *err, size_t errlen)
{
    static const dec_role roles[] = {
        DEC_ATTN_NORM, DEC_FFN_NORM_PA, DEC_BQ, DEC_BK, DEC_BV, DEC_BO, DEC_SINKS,
        DEC_GATE_INP_B, DEC_GATE_EXPS_B, DEC_UP_EXPS_B, DEC_DOWN_EXPS_B,
        DEC_Q, DEC_K, DEC_V, DEC_O, DEC_MOE_ROLES,
    };
    return arch_dec_layer(m, l, ly, roles, sizeof roles / sizeof roles[0], err, errlen);
}

const arch_ops arch_gptoss_ops = ARCH_DEC_OPS("gpt-oss", s_open, s_layer);
