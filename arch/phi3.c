/* phi3.c — the phi3 family (Phi-3 mini/medium 4k and 128k, Phi-3.5-mini, Phi-4-mini): the table
 * entry arch_phi3_ops over the shared decoder layer (arch/decoder.c). arch/
 *
 * As llama.cpp's src/models/phi3.cpp reads and runs it:
 *   - q, k and v in one matrix, attn_qkv.weight (rows: q's, k's, then v's), or the three
 *     separate matrices where a file has them; the gate and up projections in one ffn_up.weight
 *     of 2 n_ff rows (gate's first: ggml_swiglu of the fused rows), no ffn_gate;
 *   - q scaled by 1/sqrt(head size) before attention; NEOX RoPE over rope.dimension_count
 *     dimensions (Phi-4-mini rotates 3/4 of each head);
 *   - the 128k variants' longrope, as llama.cpp's converter writes it (conversion/phi.py):
 *     rope_factors_long.weight and rope_factors_short.weight (rope_dim / 2 divisors of each
 *     pair's frequency), the long ones when the context, padded to llama.cpp's multiple of 256,
 *     exceeds rope.scaling.original_context_length (get_rope_factors); cos and sin times
 *     rope.scaling.attn_factor (the converter's sqrt(1 + ln(scale) / ln(original context)));
 *   - attention.sliding_window is read by llama.cpp and then not used ("Phi SWA is currently
 *     disabled"): every layer attends to all positions here too.
 */
#include "arch/decoder.h"

#include <math.h>
#include <stdio.h>

static int s_open(arch_model *m, char *err, size_t errlen)
{
    const dec_family f = { .rope_type = ARCH_ROPE_NEOX, .rope_freqs_ok = 0 };
    if (arch_dec_open(m, &f, err, errlen))
        return -1;
    const gguf_file *g = m->g;
    arch_hparams *hp = &m->hp;
    if (arch_dec_f32(g, hp->name, "rope.scaling.attn_factor", 0, 1.0f, &hp->rope_mscale, err,
                     errlen))
        return -1;
    if (!(hp->rope_mscale > 0)) {
        arch_err(err, errlen, g->path, "%s.rope.scaling.attn_factor must be > 0", hp->name);
        return -1;
    }
    if (!hp->rope_orig_ctx) /* llama.cpp's n_ctx_orig_yarn defaults to the training context */
        hp->rope_orig_ctx = hp->n_ctx_train;
    uint32_t npair = hp->rope_dim / 2;
    if ((gguf_find_tensor(g, "rope_factors_long.weight") &&
         arch_dec_factors(g, "rope_factors_long.weight", npair, &m->rope_long, err, errlen)) ||
        (gguf_find_tensor(g, "rope_factors_short.weight") &&
         arch_dec_factors(g, "rope_factors_short.weight", npair, &m->rope_short, err, errlen)))
        return -1;
    hp->attn_scale_q = 1;
    hp->attn_scale = 1.0f / sqrtf((float)hp->head_dim);
    return 0;
}

static int s_layer(const arch_model *m, uint32_t l, arch_layer *ly, char *err, size_t errlen)
{
    static const dec_role fused[] = { DEC_ATTN_NORM, DEC_FFN_NORM, DEC_QKV, DEC_O, DEC_GATE_UP,
                                      DEC_DOWN };
    static const dec_role split[] = { DEC_ATTN_NORM, DEC_FFN_NORM, DEC_Q, DEC_K, DEC_V, DEC_O,
                                      DEC_GATE_UP, DEC_DOWN };
    char name[ARCH_NAME_MAX];
    snprintf(name, sizeof name, "blk.%u.attn_qkv.weight", l);
    if (gguf_find_tensor(m->g, name))
        return arch_dec_layer(m, l, ly, fused, sizeof fused / sizeof fused[0], err, errlen);
    return arch_dec_layer(m, l, ly, split, sizeof split / sizeof split[0], err, errlen);
}

const arch_ops arch_phi3_ops = ARCH_DEC_OPS("phi3", s_open, s_layer);
