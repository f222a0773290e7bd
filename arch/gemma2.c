/* gemma2.c — the gemma2 family (Gemma 2 2B, 9B, 27B): the table entry arch_gemma2_ops over the
 * shared decoder layer (arch/decoder.c). arch/
 *
 * As llama.cpp's src/models/gemma2.cpp reads and runs it, gemma3's layer (arch/gemma3.c)
 * without the q/k norms and with:
 *   - attention scores soft-capped, c tanh(s / c), c = attn_logit_softcapping (default 50);
 *   - the final logits soft-capped always, c = final_logit_softcapping (default 30);
 *   - every other layer local (attention.sliding_window_pattern, default 2: the even layers),
 *     with attention.sliding_window positions (default 4096), rotating with
 *     rope.freq_base_swa (default: rope.freq_base) and the file's rope scaling, as the global
 *     ones do;
 *   - the head always the embedding (llama.cpp ignores an output.weight);
 *   - norm weights with Gemma's +1 already added by the converter (conversion/gemma.py).
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
    if (arch_dec_u32(g, a, "attention.sliding_window", 0, 4096, &hp->n_swa, err, errlen) ||
        arch_dec_u32(g, a, "attention.sliding_window_pattern", 0, 2, &hp->swa_pattern, err,
                     errlen) ||
        arch_dec_f32(g, a, "rope.freq_base_swa", 0, hp->rope_freq_base, &hp->rope_freq_base_swa,
                     err, errlen) ||
        arch_dec_f32(g, a, "attn_logit_softcapping", 0, 50.0f, &hp->attn_softcap, err, errlen) ||
        arch_dec_f32(g, a, "final_logit_softcapping", 0, 30.0f, &hp->logit_softcap, err, errlen))
        return -1;
    if (!(hp->rope_freq_base_swa > 0) || !(hp->attn_softcap > 0) || !(hp->logit_softcap > 0)) {
        arch_err(err, errlen, g->path, "%s.rope.freq_base_swa, attn_logit_softcapping and "
                 "final_logit_softcapping must be > 0", a);
        return -1;
    }
    hp->rope_scaling_local = 1;
    hp->embd_scale = sqrtf((float)hp->dim);
    hp->ffn_act = ARCH_ACT_GELU;
    hp->attn_scale_q = 1;
    hp->attn_scale = hp->n_layers == 46 ? 1.0f / sqrtf((float)(hp->dim / hp->n_head))
                                        : 1.0f / sqrtf((float)hp->head_dim);
    hp->tied_output = 1;
    m->output = m->tok_embd;
    return 0;
}

static int s_layer(const arch_model *m, uint32_t l, arch_layer *ly, char *err, size_t errlen)
{
    static const dec_role roles[] = { DEC_ATTN_NORM, DEC_FFN_NORM, DEC_POST_ATTN_NORM,
                                      DEC_POST_FFN_NORM, DEC_Q, DEC_K, DEC_V, DEC_O, DEC_GATE,
                                      DEC_UP, DEC_DOWN };
    return arch_dec_layer(m, l, ly, roles, sizeof roles / sizeof roles[0], err, errlen);
}

const arch_ops arch_gemma2_ops = ARCH_DEC_OPS("gemma2", s_open, s_layer);
