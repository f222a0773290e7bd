/* arm.h — the arms behind `swarm run` and `swarm lab` (reference, ssd, resident, quantized). dist/
 *
 * Every arm runs the same steps on the same deterministic inputs and fills the same
 * run_result; arm_parity compares its outputs with the reference arm's, bit for bit (the
 * quantized arm's W is rounded: arm_quality compares them within the type's limits).
 */
#ifndef SWARM_ARM_H
#define SWARM_ARM_H

#include <signal.h>
#include <stddef.h>
#include <stdint.h>

#include "dist/config.h"
#include "dist/fault.h"
#include "arch/model.h"
#include "runtime/result.h"
#include "netem/netem.h"
#include "proto/proto.h"

typedef struct {
    const config_t *cfg;
    const model_t *model;
    uint32_t steps;
    const float *inputs;       /* (steps, dim), owned by caller */
    float *outputs;            /* (steps, dim), filled by the arm */
    const float *ref_outputs;  /* (steps, dim) reference outputs, or NULL: parity n/a */
    netem_profile profile;     /* resident arm: applied to each data link */
    uint32_t inflight;
    uint32_t workers;          /* local workers to spawn */
    int progress;              /* progress line on stderr */
    uint32_t n_faults;
    fault_t faults[FAULT_MAX]; /* at = the step whose send injects it */
} arm_ctx;

/* Set by SIGINT/SIGTERM (arm_install_signals): every arm stops at its next step and cleans up. */
extern volatile sig_atomic_t arm_stop;
/* Install the handlers early (a background job starts with SIGINT ignored). */
void arm_install_signals(void);

int arm_run_reference(arm_ctx *a, run_result *r, char *err, size_t errlen);
int arm_run_ssd(arm_ctx *a, run_result *r, char *err, size_t errlen);
int arm_run_resident(arm_ctx *a, run_result *r, char *err, size_t errlen);
/* The quantized arm: a->model is the quantized file (arm_quant_open), every layer resident
 * under [ssd] cap in one capped process; judged by arm_quality against a->ref_outputs. A
 * model that does not fit the cap is refused before any step, with the figures. */
int arm_run_quantized(arm_ctx *a, run_result *r, char *err, size_t errlen);
/* 0 if every layer of m fits resident under cfg's [ssd] cap; -1 with the figures. */
int arm_quant_fit(const config_t *cfg, const model_t *m, char *err, size_t errlen);

/* arm_quant.c: the quantized file's path beside the f32 model ("m.gguf" -> "m.q8_0.gguf"). */
void arm_quant_path(const char *f32_path, const char *type, char *out, size_t outlen);
/* Open the quantized model of cfg's [quantized] type for f32, making it with swarm quantize
 * first when missing if may_generate. 0; -2 missing and not to be made (err names the command
 * that makes it: a usage error, as a missing model path is); -1 any other failure. */
int arm_quant_open(const config_t *cfg, const model_t *f32, int may_generate, model_t *qm,
                   char *err, size_t errlen);
/* Digest, and the quality gate instead of parity: max abs and relative error against
 * ref_outputs, limits from the type's rounding (n/a without a reference). */
void arm_quality(const arm_ctx *a, run_result *r);

/* sha256 over outputs -> r->output_digest; parity gate and max_abs_diff vs ref_outputs. */
void arm_parity(const arm_ctx *a, run_result *r);
/* Fill inputs (steps, dim) deterministically from the config's input seed. */
void arm_make_inputs(const config_t *cfg, uint32_t steps, uint32_t dim, float *inputs);
/* stderr progress line ("\r[ssd] step 12/32  1.41 steps/s"), only when a is interactive. */
void arm_progress(const arm_ctx *a, const char *what, uint32_t done, uint32_t total,
                  double elapsed_ms);

#endif
