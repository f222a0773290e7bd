/* gemma3.c — the gemma3 family (Gemma 3 270M..27B text models): the table entry
 * arch_gemma3_ops over the shared decoder layer (arch/decoder.c). arch/
 *
 * As llama.cpp's src/models/gemma3.cpp reads and runs it:
 *   - the embedding rows times sqrt(embedding_length) (arch_embed_finish);
 *   - four norms a layer: attn_norm, post_attention_norm (on the attention's output before the
 *     residual), ffn_norm, post_ffw_norm (on the FFN's output before the residual); and q/k
 *     norms per head as qwen3. Gemma's RMSNorm multiplies by (1 + w): llama.cpp's converter
 *     (conversion/gemma.py, Gemma3Model.norm_shift) adds the 1 to every *norm.weight as it
 *     writes the file, so the stored weights multiply plainly, as every other family's;
 *   - the FFN gated by GELU (tanh form), not silu;
 *   - q scaled before attention by 1/sqrt(attention.key_length) (1/sqrt(embedding_length /
 *     head_count) for the 62-layer 27B, as llama.cpp's load_arch_hparams has it);
 *   - with attention.sliding_window > 0, layer l is local unless l % P == P - 1 (P =
 *     attention.sliding_window_pattern, default 6): a local layer attends to the window and
 *     rotates with rope.freq_base_swa (default 10000) unscaled; the global ones with
 *     rope.freq_base and the file's rope scaling;
 *   - final_logit_softcapping when the file has it (Gemma 3's files do not; Gemma 2's do);
 *   - NEOX RoPE; the output head tied unless output.weight is present.
 */
#include "arch/decoder.h"

#include <math.h>

static int s_open(arch_model *m, char *err, size_t errlen)
{
    const dec_family f = { .rope_type = ARCH_ROPE_NEOX, .rope_freqs_ok = 0 };
    if (arch_dec_open(m, &f, err, errlen))
        return -1;
    const gguf_file *g = m->g;
    arch_hparams *hp = &m->hp;
    const char *a = hp->name;
    if (arch_dec_u32(g, a, "attention.sliding_window", 0, 0, &hp->n_swa, err, errlen) ||
        arch_dec_u32(g, a, "attention.sliding_window_pattern", 0, 6, &hp->swa_pattern, err,
                     errlen) ||
        arch_dec_f32(g, a, "rope.freq_base_swa", 0, 10000.0f, &hp->rope_freq_base_swa, err,
                     errlen) ||
        arch_dec_f32(g, a, "final_logit_softcapping", 0, 0, &hp->logit_softcap, err, errlen))
        return -1;
    if (!(hp->rope_freq_base_swa > 0) || hp->logit_softcap < 0) {
        arch_err(err, errlen, g->path, "%s.rope.freq_base_swa must be > 0 and "
                 "final_logit_softcapping >= 0", a);
        return -1;
    }
    hp->embd_scale = sqrtf((float)hp->dim);
    hp->ffn_act = ARCH_ACT_GELU;
    hp->attn_scale_q = 1;
    hp->attn_scale = hp->n_layers == 62 ? 1.0f / sqrtf((float)(hp->dim / hp->n_head))
                                        : 1.0f / sqrtf((float)hp->head_dim);
    return 0;
}

static int s_layer(const arch_model *m, uint32_t l, arch_layer *ly, char *err, size_t errlen)
{
    static const dec_role roles[] = { DEC_ATTN_NORM, DEC_FFN_NORM, DEC_Q_NORM, DEC_K_NORM,
                                      DEC_POST_ATTN_NORM, DEC_POST_FFN_NORM, DEC_Q, DEC_K, DEC_V,
                                      DEC_O, DEC_GATE, DEC_UP, DEC_DOWN };
    return arch_dec_layer(m, l, ly, roles, sizeof roles / sizeof roles[0], err, errlen);
}

const arch_ops arch_gemma3_ops = ARCH_DEC_OPS("gemma3", s_open, s_layer);
