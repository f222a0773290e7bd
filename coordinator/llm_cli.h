/* llm_cli.h — what generate, chat and perplexity share: a model named by file or config,
 * opened with its tokenizer; strict number flags. coordinator/ */
#ifndef SWARM_LLM_CLI_H
#define SWARM_LLM_CLI_H

#include <stddef.h>
#include <stdint.h>

#include "arch/llm.h"
#include "engine/engine.h"
#include "sample/sample.h"
#include "tokenizer/tokenizer.h"

typedef struct {
    char path[4096];              /* the GGUF file */
    llm_model *m;
    tokenizer *t;
} llm_cli_model;

/* arg is a .gguf file or a config whose [model] path names one. Opens both the model and its
 * tokenizer. 0, or -1 with err naming the file and problem. */
int llm_cli_open(llm_cli_model *lm, const char *arg, char *err, size_t errlen);
void llm_cli_close(llm_cli_model *lm);

/* Whole-string number parsing for flag values: -1 with err naming the flag on junk, a sign
 * where none belongs, or a value out of [lo, hi]. */
int llm_cli_u32(const char *flag, const char *s, uint32_t lo, uint32_t hi, uint32_t *out,
                char *err, size_t errlen);
int llm_cli_f32(const char *flag, const char *s, float lo, float hi, float *out, char *err,
                size_t errlen);
int llm_cli_u64(const char *flag, const char *s, uint64_t *out, char *err, size_t errlen);

/* The options generate and chat share. */
typedef struct {
    sampler_opts so;              /* llama.cpp's defaults until a flag changes them */
    uint32_t n_predict;           /* -n: tokens to generate at most */
    uint32_t n_ctx;               /* --ctx: 0 = the model's context_length, at most 4096 */
    uint32_t n_batch;             /* --batch: prompt positions per pass */
    uint32_t threads;             /* --threads */
    const char *stops[ENGINE_MAX_STOP];
    uint32_t n_stop;              /* --stop, repeatable */
    int no_bos;                   /* --no-bos */
} llm_cli_gen_opts;

#define LLM_CLI_GEN_USAGE                                                                     \
    "  -n N                  tokens to generate at most (default 64)\n"                       \
    "  --ctx N               context positions (default: the model's, at most 4096)\n"        \
    "  --batch N             prompt positions per forward pass (default 64)\n"                \
    "  --threads T           threads (default 1; results are identical for any count)\n"      \
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

#endif
