/* llm_cli.h — what generate, chat and perplexity share: a model named by file or config,
 * opened with its tokenizer; strict number flags. coordinator/ */
#ifndef SWARM_LLM_CLI_H
#define SWARM_LLM_CLI_H

#include <stddef.h>
#include <stdint.h>

#include "arch/llm.h"
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

/* The whole file in a NUL-terminated buffer (caller frees). NULL with err. */
char *llm_cli_read_file(const char *path, size_t *len, char *err, size_t errlen);

#endif
