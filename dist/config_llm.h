/* config_llm.h — a text-lab config (an INI file with an [llm] section): the real model it
 * names and the lab's conditions, read with libinih; every key validated, errors name file,
 * line and key. dist/ */
#ifndef SWARM_CONFIG_LLM_H
#define SWARM_CONFIG_LLM_H

#include <limits.h>
#include <stddef.h>
#include <stdint.h>

#define CONFIG_LLM_MAX_COND 16

typedef struct {
    char path[PATH_MAX];
    /* [llm] */
    char model[PATH_MAX], vocab[PATH_MAX], type[16], prompt[512];
    int generate;
    uint32_t dim, layers, heads, kv_heads, ff, ctx_train, seed;
    uint32_t tokens, ctx, batch, workers, threads;
    uint64_t cap;
    /* [lab] */
    uint32_t repeats;
    char out[PATH_MAX];
    char cond[CONFIG_LLM_MAX_COND][32];
    uint32_t n_cond;
    char why[512];                /* the first bad line's complaint */
} config_llm;

/* 1 when the INI file at path has an [llm] section (0 otherwise, and when it cannot be
 * read: the dense lab's parser names that error). */
int config_llm_wants(const char *path);
/* Defaults, then the file. 0, or -1 with the first bad line logged (file:line: why). */
int config_llm_load(config_llm *c, const char *path);
/* A text-lab config's [llm] model into path (generate, serve and the others take a CONFIG
 * for a model). 0, or -1 with err naming the file and what is missing. */
int config_llm_model_path(const char *config, char *path, size_t len, char *err, size_t errlen);

#endif
