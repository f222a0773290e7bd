/* llm_cli.h — what generate, chat and perplexity share: a model named by file or config,
 * opened with its tokenizer; strict number flags; the SSD arm around a run (the plan checked
 * against the cap from the header, the memory cgroup, the counters, the cache and content
 * gates by gate.c's rules, the result's SSD fields). dist/ */
#ifndef SWARM_LLM_CLI_H
#define SWARM_LLM_CLI_H

#include <stddef.h>
#include <stdint.h>

#include <jansson.h>

#include "runtime/llm.h"
#include "base/cap.h"
#include "base/devstat.h"
#include "dist/config.h"
#include "dist/llm_swarm.h"
#include "runtime/result.h"
#include "text/draft.h"
#include "text/engine.h"
#include "text/sample.h"
#include "text/tokenizer.h"

typedef struct {
    char path[4096];              /* the GGUF file */
    llm_model *m;
    tokenizer *t;
    uint32_t n_ctx_train;         /* the file's context_length (llm_cli_open_tok) */
} llm_cli_model;

/* arg is a .gguf file or a config whose [model] path names one. Opens both the model and its
 * tokenizer. 0, or -1 with err naming the file and problem. */
int llm_cli_open(llm_cli_model *lm, const char *arg, char *err, size_t errlen);
void llm_cli_close(llm_cli_model *lm);
/* The SSD arm's two steps: its plan is sized for the session (the prompt's tokens decide the
 * context), so the tokenizer comes first, from the file's header alone (no weight is read),
 * and the model after, under o. */
int llm_cli_open_tok(llm_cli_model *lm, const char *arg, char *err, size_t errlen);
/* The model file an argument names: a .gguf itself, a text-lab config's [llm] model, or a
 * dense config's [model] path. 0, or -1 with err. */
int llm_cli_resolve(const char *arg, char *path, size_t len, char *err, size_t errlen);
/* A config's listed workers for the resident arm: its [worker.NAME] sections (endpoint,
 * cap, public_key), [swarm] host (where results come back) and plaintext, [security] key,
 * checked the way `swarm run` checks them (CURVE on every link or on none; plaintext off
 * loopback only when the config says so). so->n_hosts 0 when arg is a .gguf, a text-lab
 * config or lists none. 0, or -1 with err naming the file and section. */
int llm_cli_hosts(const char *arg, llm_swarm_opts *so, char *err, size_t errlen);
/* The same from a config already loaded (arg: its name, for the messages). */
int llm_cli_hosts_cfg(const config_t *c, const char *arg, llm_swarm_opts *so, char *err,
                      size_t errlen);
int llm_cli_open_model(llm_cli_model *lm, const llm_opts *o, char *err, size_t errlen);

/* --arm ssd's knobs. A knob not given on the command line comes from a CONFIG's [ssd] section
 * when the model is named by one, else from the config defaults (cap 600M, queue_depth 8,
 * chunk 4M, overhead 32M, direct reads); *from says which ("configs/x.ini [ssd]" or
 * "defaults"). */
typedef struct {
    uint64_t cap_bytes, chunk_bytes;  /* 0: not given */
    uint32_t queue_depth;             /* 0: not given */
    int buffered;                     /* -1: not given */
    int experts_dense;                /* --stream-all-experts */
} llm_cli_ssd_flags;

#define LLM_CLI_SSD_USAGE                                                                     \
    "  --cap SIZE            SSD arm: the working-set cap (a memory cgroup where one can be\n" \
    "                        made, else planned only: cap_mode says which)\n"                 \
    "  --queue-depth N       SSD arm: reads in flight    --chunk SIZE  bytes per read\n"       \
    "  --buffered            SSD arm: read through the page cache (labelled; the cache gate\n" \
    "                        judges)\n"                                                        \
    "  --stream-all-experts  SSD arm: stream a layer's experts whole (the dense read), not\n" \
    "                        only the routed ones through the expert cache\n"               \
    "                        Not given: the CONFIG's [ssd] section when MODEL is a config,\n" \
    "                        else cap 600M, queue depth 8, chunk 4M, overhead 32M, direct\n"

void llm_cli_ssd_init(llm_cli_ssd_flags *f);
/* argv[*i] one of --cap, --queue-depth, --chunk, --buffered, --stream-all-experts? 1 / 0 / -1
 * with err. */
int llm_cli_ssd_flag(llm_cli_ssd_flags *f, int argc, char **argv, int *i, char *err,
                     size_t errlen);
/* The SSD arm's llm_opts for model argument arg (n_ctx, n_batch left to the caller). */
int llm_cli_ssd_opts(const llm_cli_ssd_flags *f, const char *arg, llm_opts *o, char *from,
                     size_t fromlen, char *err, size_t errlen);

/* Speculative decoding's flags, one parser for generate, chat and serve: --draft DRAFT.gguf
 * (a model with the target's vocabulary drafts, on the reference arm in this process, whatever
 * the target's arm), --draft-lookup (prompt lookup, no model), --draft-max K, --draft-ahead
 * auto|on|off (draft_opts.overlap), --draft-greedy, --draft-fixed. */
typedef struct {
    const char *path;             /* --draft (NULL: none) */
    draft_opts o;                 /* .lookup, .k_max from the flags; .model once opened */
} llm_cli_draft;

#define LLM_CLI_DRAFT_USAGE                                                                  \
    "  --draft DRAFT.gguf    speculative decoding: a model with MODEL's vocabulary (e.g.\n"   \
    "                        its Q4_0 copy: swarm quantize) drafts tokens here, in\n"       \
    "                        this process; the target verifies them, up to 1 + k\n"         \
    "                        positions in one pass\n"                                        \
    "  --draft-lookup        speculative decoding with prompt lookup (the context's\n"      \
    "                        n-grams; no model)\n"                                          \
    "  --draft-max K         the most tokens drafted per pass (1..32; default 8 with\n"     \
    "                        --draft, 6 with --draft-lookup; adapted: docs/cli.md)\n"     \
    "  --draft-ahead auto|on|off  the draft model drafts the next pass's tokens while\n"   \
    "                        the target verifies (auto: on the resident arm only)\n"       \
    "  --draft-greedy        the draft model drafts its argmax even when sampling (the\n"   \
    "                        tokens are then plain generation's, seed for seed); by\n"     \
    "                        default it samples its drafts (speculative sampling)\n"       \
    "  --draft-fixed         draft --draft-max tokens every pass, nothing adapted (a\n"   \
    "                        seed then reproduces a sampled speculative run)\n"

/* argv[*i] one of the draft flags? 1 (consumed, with its value) / 0 / -1 with err. */
int llm_cli_draft_flag(llm_cli_draft *d, int argc, char **argv, int *i, char *err,
                       size_t errlen);
/* After parsing: one drafter at most, --draft-max only with one. -1 with err. */
int llm_cli_draft_check(const llm_cli_draft *d, char *err, size_t errlen);
/* 1 when a drafter was asked for. */
int llm_cli_draft_on(const llm_cli_draft *d);
/* Open the draft model (when --draft) and check its vocabulary is target's. -1 with err. */
int llm_cli_draft_open(llm_cli_draft *d, const llm_model *target, char *err, size_t errlen);
/* The most tokens a pass drafts (--draft-max, else the drafter's default). */
uint32_t llm_cli_draft_max(const llm_cli_draft *d);
void llm_cli_draft_close(llm_cli_draft *d);

/* Whole-string number parsing for flag values: -1 with err naming the flag on junk, a sign
 * where none belongs, or a value out of [lo, hi]. */
int llm_cli_u32(const char *flag, const char *s, uint32_t lo, uint32_t hi, uint32_t *out,
                char *err, size_t errlen);
int llm_cli_f32(const char *flag, const char *s, float lo, float hi, float *out, char *err,
                size_t errlen);
int llm_cli_u64(const char *flag, const char *s, uint64_t *out, char *err, size_t errlen);

/* The options generate and chat share (--threads is every model-running command's:
 * dist/arm_open.h). */
typedef struct {
    sampler_opts so;              /* llama.cpp's defaults until a flag changes them */
    uint32_t n_predict;           /* -n: tokens to generate at most */
    uint32_t n_ctx;               /* --ctx: 0 = the model's context_length, at most 4096 */
    uint32_t n_batch;             /* --batch: prompt positions per pass */
    const char *stops[ENGINE_MAX_STOP];
    uint32_t n_stop;              /* --stop, repeatable */
    int no_bos;                   /* --no-bos */
} llm_cli_gen_opts;

#define LLM_CLI_GEN_USAGE                                                                     \
    "  -n N                  tokens to generate at most (default 64)\n"                       \
    "  --ctx N               context positions (default: the model's, at most 4096)\n"        \
    "  --batch N             prompt positions per forward pass (default 64)\n"                \
    "  --temp T              temperature, 0 = greedy (default 0.8)\n"                         \
    "  --top-k K             (default 40; 0 = off)   --top-p P  (default 0.95; 1 = off)\n"    \
    "  --min-p M             (default 0.05; 0 = off) --repeat-penalty R (default 1 = off)\n"  \
    "  --seed S              the sampler's seed (default 0)\n"                                \
    "  --stop STR            stop when STR is generated (not printed); repeatable, up to 8\n" \
    "  --no-bos              do not add BOS even where the file says to\n"

void llm_cli_gen_defaults(llm_cli_gen_opts *o);
/* argv[*i] one of the shared flags? 1 (consumed, *i moved past its value), 0 (not one of
 * them), -1 with err (a bad or missing value). */
int llm_cli_gen_flag(llm_cli_gen_opts *o, int argc, char **argv, int *i, char *err,
                     size_t errlen);
/* The context to use: --ctx, or the model's (at most 4096); err when --ctx exceeds it. */
int llm_cli_ctx(const llm_cli_gen_opts *o, const llm_model *m, uint32_t *n_ctx, char *err,
                size_t errlen);

/* The whole file in a NUL-terminated buffer (caller frees). NULL with err. */
char *llm_cli_read_file(const char *path, size_t *len, char *err, size_t errlen);

/* ---- the SSD arm around a command's run (generate, perplexity) ---- */

/* What the SSD arm measured around a run: the plan, the gates, the device. */
typedef struct {
    int on;
    const char *tag;              /* the command, in the cgroup's name */
    llm_opts lo;
    char from[4200];              /* where the knobs came from */
    cap_t cap;
    char cap_mode[96];
    devstat_dev dv;
    devstat_sample d0;
    int has_dev;
    char dverr[256];
    exec_stats s0, s1;
    uint64_t io0, io1;
    uint64_t cgroup_peak;         /* taken before the group is left (0: advisory) */
    uint64_t peak_rss;            /* VmHWM after the SSD run, before any parity reference */
    run_result rr;                /* gate_cache, gate_content, void_reason (gate.c's rules) */
} llm_ssd;

/* x->lo and x->from set (llm_cli_ssd_opts), lm opened by llm_cli_open_tok: checks the plan
 * for n_ctx / n_batch from the header (a cap too small: -1 with every term, nothing joined),
 * joins a cgroup of x->lo.cap_bytes (or labels the cap advisory), opens lm->m under the SSD
 * arm, prints the plan, and takes the counters the gates start from. 0 / -1 with err. */
int llm_ssd_open(llm_ssd *x, llm_cli_model *lm, uint32_t n_ctx, uint32_t n_batch, char *err,
                 size_t errlen);
/* After the run: drain, the counters again, x->rr's cache and content gates (printed). */
void llm_ssd_judge(llm_ssd *x, llm_model *m);
/* With experts streaming and a generated token: the expert bytes a generated token read
 * (one-position passes), the rate every expert read of the run ran at (bytes over the time
 * from submission to the last completion, hashes apart), and the disk bound of those bytes at
 * that rate (ms a token). 0 when there is nothing to say. */
int llm_ssd_expert_bound(const llm_ssd *x, double *bytes_per_token, double *gbps,
                         double *bound_ms);
/* Leave the cgroup (before anything that is not the SSD arm's runs). Safe twice. */
void llm_ssd_leave(llm_ssd *x);
/* The SSD fields of a result object. */
void llm_ssd_json(json_t *j, const llm_ssd *x, const llm_model *m);

#endif
