/* moe.c — the Mixture-of-Experts feed-forward of the decoder layer: routing, the routed
 * experts' products, the weighted sum (arch/moe.h says how, as llama.cpp's build_moe_ffn).
 * arch/ */
#include "arch/moe.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "quant/quant.h"

struct arch_moe {
    uint32_t n_expert, k, dim, ff, max_pos;
    int norm_w;
    float scale;
    arch_gating gating;
    arch_ffn_act act;             /* SILU or SWIGLU_OAI */
    float *logits;                /* (max_pos, n_expert) */
    uint32_t *sel;                /* (max_pos, k) */
    float *w;                     /* (max_pos, k) */
    float *gate, *up;             /* (max_pos, k, ff): gate becomes silu(gate) . up */
    float *down;                  /* (max_pos, k, dim) */
};

uint64_t arch_moe_bytes(const arch_hparams *hp, uint32_t max_pos)
{
    uint64_t P = max_pos, k = hp->n_expert_used;
    return P * ((uint64_t)hp->n_expert * sizeof(float) + k * (sizeof(uint32_t) + sizeof(float)) +
                k * (2ull * hp->n_ff_exp + hp->dim) * sizeof(float)) + sizeof(arch_moe);
}

arch_moe *arch_moe_new(const arch_hparams *hp, uint32_t max_pos)
{
    arch_moe *m = calloc(1, sizeof *m);
    if (!m)
        return NULL;
    size_t P = max_pos, k = hp->n_expert_used;
    m->n_expert = hp->n_expert;
    m->k = hp->n_expert_used;
    m->dim = hp->dim;
    m->ff = hp->n_ff_exp;
    m->max_pos = max_pos;
    /* llama and qwen3moe normalise (build_moe_ffn's norm_w = true); gpt-oss's softmax over
     * the chosen k needs none (norm_w false) */
    m->gating = hp->gating;
    m->norm_w = hp->gating == ARCH_GATING_SOFTMAX;
    m->scale = hp->expert_weights_scale;
    m->act = hp->ffn_act;
    m->logits = malloc(P * m->n_expert * sizeof(float));
    m->sel = malloc(P * k * sizeof(uint32_t));
    m->w = malloc(P * k * sizeof(float));
    m->gate = malloc(P * k * m->ff * sizeof(float));
    m->up = malloc(P * k * m->ff * sizeof(float));
    m->down = malloc(P * k * m->dim * sizeof(float));
    if (!m->logits || !m->sel || !m->w || !m->gate || !m->up || !m->down) {
        arch_moe_free(m);
        return NULL;
    }
    return m;
}

void arch_moe_free(arch_moe *m)
{
    if (!m)
        return;
    free(m->logits);
    free(m->sel);
    free(m->w);
    free(m->gate);
    free(m->up);
    free(m->down);
    free(m);
}

void arch_moe_route(const float *logits, uint32_t n_expert, uint32_t k, int norm_w, float scale,
                    uint32_t *sel, float *w)
{
    /* ggml_soft_max: e^(x - max), summed in double, times the float of 1 / sum */
    float mx = -INFINITY;
    for (uint32_t e = 0; e < n_expert; e++)
        mx = logits[e] > mx ? logits[e] : mx;
    double sum = 0;
    for (uint32_t e = 0; e < n_expert; e++)
        sum += (double)expf(logits[e] - mx);
    float inv = (float)(1.0 / sum);
    /* top k by probability, largest first (ggml_argsort_top_k); ties keep the lower index.
     * The probabilities are recomputed (the same bits) rather than stored: k is small. */
    for (uint32_t j = 0; j < k; j++) {
        uint32_t best = n_expert;
        float bp = -INFINITY;
        for (uint32_t e = 0; e < n_expert; e++) {
            int taken = 0;
            for (uint32_t i = 0; i < j; i++)
                taken |= sel[i] == e;
            float p = expf(logits[e] - mx) * inv;
            if (!taken && (best == n_expert || p > bp)) {
                best = e;
                bp = p;
            }
        }
        sel[j] = best;
        w[j] = bp;
    }
    if (norm_w) {
        /* ggml_sum_rows (a double sum), clamped at f16's smallest normal, then ggml_div */
        double s = 0;
        for (uint32_t j = 0; j < k; j++)
            s += (double)w[j];
        float fs = (float)s;
        if (!(fs >= 6.103515625e-5f))
            fs = 6.103515625e-5f;
        for (uint32_t j = 0; j < k; j++)
            w[j] = w[j] / fs;
    }
    if (scale != 0.0f && scale != 1.0f)
        for (uint32_t j = 0; j < k; j++)
            w[j] *= scale;
}

void arch_moe_route_weight(const float *logits, uint32_t n_expert, uint32_t k, float scale,
                           uint32_t *sel, float *w)
{
    /* top k of the logits themselves, largest first, ties to the lower index */
    for (uint32_t j = 0; j < k; j++) {
        uint32_t best = n_expert;
        for (uint32_t e = 0; e < n_expert; e++) {
            int taken = 0;
            for (uint32_t i = 0; i < j; i++)
                taken |= sel[i] == e;
            if (!taken && (best == n_expert || logits[e] > logits[best]))
                best = e;
        }
        sel[j] = best;
    }
    /* ggml_soft_max over the k chosen: e^(x - max) (max = the first), summed in double,
     * times the float of 1 / sum */
    float mx = logits[sel[0]];
    double sum = 0;
    for (uint32_t j = 0; j < k; j++) {
        w[j] = expf(logits[sel[j]] - mx);
        sum += (double)w[j];
    }
    float inv = (float)(1.0 / sum);
    for (uint32_t j = 0; j < k; j++)
        w[j] *= inv;
    if (scale != 0.0f && scale != 1.0f)
        for (uint32_t j = 0; j < k; j++)
            w[j] *= scale;
}

float *arch_moe_logits(arch_moe *m)
{
    return m->logits;
}

const uint32_t *arch_moe_selected(const arch_moe *m)
{
    return m->sel;
}

void arch_moe_route_all(arch_moe *m, uint32_t n, const float *bias)
{
    for (uint32_t p = 0; p < n; p++) {
        float *lg = m->logits + (size_t)p * m->n_expert;
        if (bias) /* gpt-oss's router bias (ggml_add after the product) */
            for (uint32_t e = 0; e < m->n_expert; e++)
                lg[e] += bias[e];
        if (m->gating == ARCH_GATING_SOFTMAX_WEIGHT)
            arch_moe_route_weight(lg, m->n_expert, m->k, m->scale, m->sel + (size_t)p * m->k,
                                  m->w + (size_t)p * m->k);
        else
            arch_moe_route(lg, m->n_expert, m->k, m->norm_w, m->scale, m->sel + (size_t)p * m->k,
                           m->w + (size_t)p * m->k);
    }
}

uint32_t arch_moe_used(const arch_moe *m, uint32_t n, uint8_t *used)
{
    uint32_t c = 0;
    memset(used, 0, m->n_expert);
    for (size_t i = 0; i < (size_t)n * m->k; i++)
        if (!used[m->sel[i]]) {
            used[m->sel[i]] = 1;
            c++;
        }
    return c;
}

int arch_moe_rows(arch_moe *m, int which, const arch_tensor *t, uint64_t r0, uint64_t nr,
                  const void *rows, const float *x, uint32_t n, int nthreads, char *why,
                  size_t whylen)
{
    uint64_t per = t->rows / t->n_expert;
    uint32_t outw = which == 2 ? m->dim : m->ff;
    float *out = which == 0 ? m->gate : which == 1 ? m->up : m->down;
    for (uint64_t e = r0 / per; e * per < r0 + nr; e++) {
        uint64_t lo = e * per > r0 ? e * per : r0;
        uint64_t hi = (e + 1) * per < r0 + nr ? (e + 1) * per : r0 + nr;
        const uint8_t *src = rows ? (const uint8_t *)rows + (lo - r0) * t->row_bytes : NULL;
        for (uint32_t p = 0; p < n; p++)
            for (uint32_t j = 0; j < m->k; j++) {
                size_t slot = (size_t)p * m->k + j;
                if (m->sel[slot] != e)
                    continue;
                if (!src) {
                    snprintf(why, whylen, "expert %llu is routed to but its rows were not read",
                             (unsigned long long)e);
                    return -1;
                }
                const float *in = which == 2 ? m->gate + slot * m->ff : x + (size_t)p * m->dim;
                if (quant_matmat((quant_type)t->type, hi - lo, t->cols, src, 1, in,
                                 out + slot * outw + (lo - e * per), nthreads, why, whylen))
                    return -1;
            }
    }
    return 0;
}

void arch_moe_act(arch_moe *m, uint32_t n, const float *gate_b, const float *up_b)
{
    /* gpt-oss's expert biases: the routed expert's row of each (ggml_add_id) */
    for (size_t slot = 0; (gate_b || up_b) && slot < (size_t)n * m->k; slot++)
        for (uint32_t i = 0; i < m->ff; i++) {
            if (gate_b)
                m->gate[slot * m->ff + i] += gate_b[(size_t)m->sel[slot] * m->ff + i];
            if (up_b)
                m->up[slot * m->ff + i] += up_b[(size_t)m->sel[slot] * m->ff + i];
        }
    if (m->act == ARCH_ACT_SWIGLU_OAI) {
        /* ggml_compute_forward_swiglu_oai_f32 with llama.cpp's alpha 1.702, limit 7 */
        const float alpha = 1.702f, limit = 7.0f;
        for (size_t i = 0; i < (size_t)n * m->k * m->ff; i++) {
            float x = m->gate[i] < limit ? m->gate[i] : limit;
            float y = m->up[i] < -limit ? -limit : m->up[i] > limit ? limit : m->up[i];
            m->gate[i] = x / (1.f + expf(alpha * (-x))) * (y + 1.f);
        }
        return;
    }
    /* SwiGLU as the dense layer: silu(g) = g / (1 + e^-g) (ggml_silu_f32), times up */
    quant_silu_mul(m->gate, m->up, (size_t)n * m->k * m->ff);
}

void arch_moe_out(arch_moe *m, uint32_t n, float *out, const float *down_b)
{
    for (uint32_t p = 0; p < n; p++) {
        float *o = out + (size_t)p * m->dim;
        for (uint32_t j = 0; j < m->k; j++) {
            size_t slot = (size_t)p * m->k + j;
            float *d = m->down + slot * m->dim;
            float wj = m->w[slot];
            if (down_b) /* gpt-oss: the expert's down bias before the weight */
                for (uint32_t i = 0; i < m->dim; i++)
                    d[i] += down_b[(size_t)m->sel[slot] * m->dim + i];
            for (uint32_t i = 0; i < m->dim; i++)
                o[i] = j ? o[i] + d[i] * wj : d[i] * wj;
        }
    }
}
