/* arm_quant.c — the quantized arm: the lab model at the precision that fits the cap, held
 * whole and resident in one capped process, judged by a quality gate. dist/
 *
 * The file is `swarm quantize F32 F32-stem.TYPE.gguf TYPE` beside the f32 model, made when
 * missing only where the f32 model itself may be generated, and reused after. Its outputs
 * cannot be the reference's bits, so the parity gate is n/a and the quality gate judges the
 * error against the f32 reference on the same inputs, with limits derived from the type's
 * rounding (s_limit_rel below; docs/lab.md "The quantized arm").
 */
#include <math.h>
#include <stdio.h>
#include <string.h>
#include <sys/stat.h>

#include "base/log.h"
#include "base/util.h"
#include "dist/arm.h"
#include "quant/quant.h"
#include "quant/requant.h"

void arm_quant_path(const char *f32_path, const char *type, char *out, size_t outlen)
{
    size_t n = strlen(f32_path);
    const char *ext = ".gguf";
    if (n > 5 && !strcmp(f32_path + n - 5, ext))
        n -= 5;
    snprintf(out, outlen, "%.*s.%s%s", (int)n, f32_path, type, ext);
}

int arm_quant_open(const config_t *cfg, const model_t *f32, int may_generate, model_t *qm,
                   char *err, size_t errlen)
{
    char path[PATH_MAX + 32], why[512];
    struct stat st;
    quant_type want;
    arm_quant_path(f32->path, cfg->quant_type, path, sizeof path);
    if (quant_type_parse(cfg->quant_type, &want, why, sizeof why)) {
        snprintf(err, errlen, "[quantized] type: %s", why);
        return -1;
    }
    if (stat(path, &st)) {
        if (!may_generate) {
            snprintf(err, errlen, "quantized model %s is missing and this run may not make it "
                     "(the f32 model is not one the config generates); make it with: "
                     "swarm quantize %s %s %s", path, f32->path, path, cfg->quant_type);
            return -2;
        }
        requant_stats rs = { 0 };
        uint64_t t0 = util_now_ns();
        log_info("quantized arm: making %s (%s) from %s", path, cfg->quant_type, f32->path);
        if (requant_file(f32->path, path, cfg->quant_type, (int)cfg->threads, 0, &rs, why,
                         sizeof why)) {
            snprintf(err, errlen, "quantized arm: swarm quantize %s %s %s: %s", f32->path, path,
                     cfg->quant_type, why);
            return -1;
        }
        log_info("quantized arm: %s written in %.1f s (%llu -> %llu bytes of tensors)", path,
                 (util_now_ns() - t0) / 1e9, (unsigned long long)rs.bytes_in,
                 (unsigned long long)rs.bytes_out);
    }
    if (model_open_quant(qm, path, err, errlen))
        return -1;
    if (qm->n_layers != f32->n_layers || qm->dim != f32->dim || qm->w_type != (uint32_t)want) {
        snprintf(err, errlen, "%s: %u layers x %u, W %s; the f32 model %s is %u x %u and "
                 "[quantized] type says %s (delete it to have it made again)", path,
                 qm->n_layers, qm->dim, quant_type_name(qm->w_type), f32->path, f32->n_layers,
                 f32->dim, cfg->quant_type);
        model_close(qm);
        return -1;
    }
    return 0;
}

/* The relative rounding of one product y = W u, as an rms fraction of |y|'s rms:
 *   weights: a block's scale is s = max|w| / q (q the largest code: 127 for q8_0, 8 for q4_0,
 *   31/32 for q5_K/q6_K, 15 for q4_K), each weight off by at most s/2, uniformly, so its
 *   error's rms is s/sqrt(12); the lab's W is U(-a, a), rms a/sqrt(3) with max|w| <= a, so
 *   the error is 1/(2q) of a weight's rms, and (independent of u) the same fraction of y's.
 *   The K types round their 6-bit sub-block scales and mins too: counted as a second rounding
 *   of the same size (x sqrt(2)).
 *   activations: quant brings u to 8-bit blocks (q8_0 blocks of 32 for q8_0/q4_0, q8_K of 256
 *   for the K types), scale max|u| / 127, so an error of rms kappa / (127 sqrt(12)) of u's rms,
 *   kappa = max|u| / rms(u) in a block: 4 for 32 elements and 5 for 256 (u = rmsnorm(x) . g
 *   is near-Gaussian with g in [0.5, 1.5]; 4 and 5 rms are exceeded by about 1e-4 and 1e-6 of
 *   Gaussian draws).
 * The two are independent, so they add in quadrature. */
static double s_layer_eps(quant_type t)
{
    double q, k, kappa = 5;
    switch (t) {
    case QUANT_Q8_0: q = 127, k = 1, kappa = 4; break;
    case QUANT_Q4_0: q = 8, k = 1, kappa = 4; break;
    case QUANT_Q6_K: q = 32, k = sqrt(2); break;
    case QUANT_Q5_K: q = 31, k = sqrt(2); break;
    case QUANT_Q4_K: q = 15, k = sqrt(2); break;
    /* issue 20's types, by the same rule: with a min (q4_1, q5_1, q2_K) the codes span
     * max - min, up to 2 max|w|, so q is half the code count less one; q3_K's codes are
     * -4..3; IQ4's 16 codes are unevenly spaced (steps 11 to 24 of 127), the rms of a uniform
     * weight's error that of even steps of 17.6 of 127: q = 7; the super-block types round
     * their sub-block scales (x sqrt(2)) and meet q8_K activations (kappa 5), the blocks of
     * 32 q8_0 / q8_1 ones (kappa 4) */
    case QUANT_Q4_1: q = 7.5, k = 1, kappa = 4; break;
    case QUANT_Q5_0: q = 16, k = 1, kappa = 4; break;
    case QUANT_Q5_1: q = 15.5, k = 1, kappa = 4; break;
    case QUANT_IQ4_NL: q = 7, k = 1, kappa = 4; break;
    case QUANT_IQ4_XS: q = 7, k = sqrt(2); break;
    case QUANT_Q3_K: q = 4, k = sqrt(2); break;
    case QUANT_Q2_K: q = 1.5, k = sqrt(2); break;
    default: return 0;
    }
    double ew = k / (2 * q), eu = kappa / (127 * sqrt(12));
    return sqrt(ew * ew + eu * eu);
}

/* The gate's relative limit for L layers: each layer adds its own independent rounding to the
 * residual stream (sqrt(L) growth of the rms), and the largest of n = steps x dim errors is
 * taken, about sqrt(2 ln n) rms for Gaussian errors (5.6 at n = 32 x 4096); 6 is used. A
 * result above the limit is void: the limit is the type's, not tuned to any run. */
static double s_limit_rel(quant_type t, uint32_t layers)
{
    return 6.0 * sqrt((double)layers) * s_layer_eps(t);
}

void arm_quality(const arm_ctx *a, run_result *r)
{
    uint64_t n = (uint64_t)a->steps * a->model->dim;
    util_sha256 *h = util_sha256_new();
    if (h) {
        util_sha256_update(h, a->outputs, n * sizeof(float));
        util_sha256_final_hex(h, r->output_digest);
    }
    r->gate_parity = GATE_NA;
    if (!a->ref_outputs) {
        r->gate_quality = GATE_NA;
        return;
    }
    /* rms of the reference: the scale of "relative" (an output near 0 has no error scale of
     * its own: each element's relative error is taken against max(|ref|, rms(ref))) */
    double ss = 0, mx_abs = 0, mx_rel = 0;
    int nan = 0;
    for (uint64_t i = 0; i < n; i++)
        ss += (double)a->ref_outputs[i] * a->ref_outputs[i];
    double rms = sqrt(ss / (double)(n ? n : 1));
    for (uint64_t i = 0; i < n; i++) {
        double ref = a->ref_outputs[i], dlt = fabs((double)a->outputs[i] - ref);
        if (isnan(dlt)) {
            nan = 1;
            continue;
        }
        double rel = dlt / (fabs(ref) > rms ? fabs(ref) : rms);
        if (dlt > mx_abs)
            mx_abs = dlt;
        if (rel > mx_rel)
            mx_rel = rel;
    }
    double lim_rel = s_limit_rel((quant_type)a->model->w_type, a->model->n_layers);
    double lim_abs = lim_rel * rms;
    r->has_max_abs_diff = 1;
    r->max_abs_diff = mx_abs;
    json_t *x = r->extra;
    json_object_set_new(x, "quant_type", json_string(quant_type_name(a->model->w_type)));
    json_object_set_new(x, "quality_max_abs_err", json_real(mx_abs));
    json_object_set_new(x, "quality_max_rel_err", json_real(mx_rel));
    json_object_set_new(x, "quality_limit_abs", json_real(lim_abs));
    json_object_set_new(x, "quality_limit_rel", json_real(lim_rel));
    json_object_set_new(x, "quality_ref_rms", json_real(rms));
    if (nan || !(lim_rel > 0) || mx_abs > lim_abs || mx_rel > lim_rel)
        result_void(r, &r->gate_quality, "quality: %s outputs off the f32 reference by max abs "
                    "%g (limit %g), max rel %g (limit %g)%s", quant_type_name(a->model->w_type),
                    mx_abs, lim_abs, mx_rel, lim_rel, nan ? ", NaN present" : "");
    else
        r->gate_quality = GATE_PASS;
}
