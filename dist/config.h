/* config.h — swarm's INI configuration (libinih): defaults, file, and --set overrides. dist/
 *
 * The one loader for both labs' configs and every command's: the dense lab's sections and the
 * text lab's [llm] alike. Every key is known here; an unknown section or key, or a bad value,
 * is an error that names the file, the line and the key ("configs/x.ini:12: [ssd]
 * queue_depth: '0' must be an integer in 1..256"). Relative paths (model) are resolved against
 * the current directory.
 */
#ifndef SWARM_CONFIG_H
#define SWARM_CONFIG_H

#include <limits.h>
#include <stddef.h>
#include <stdint.h>

#include "arch/model.h"
#include "netem/netem.h"

#define CONFIG_MAX_WORKERS 64
#define CONFIG_MAX_PROFILES 16
#define CONFIG_MAX_CONDITIONS 16
#define CONFIG_MAX_REPEATS 1000   /* [lab] repeats: the most either lab takes */

typedef struct {
    char name[64];            /* [worker.NAME] */
    char endpoint[256];       /* control endpoint, e.g. tcp://198.18.0.2:7000 */
    uint64_t cap_bytes;
    char public_key[PATH_MAX];/* CURVE key: "z85:" + 40 Z85 chars, or a .pub path (checked
                               * when loaded); "" = plaintext */
} config_worker;

/* [llm]: a real model for the text lab (lab/lab_llm.c), and the model a CONFIG argument to
 * generate, chat, serve and perplexity names. The shape keys say what the lab generates when
 * the model is missing and generate = 1. */
typedef struct {
    int on;                   /* the file has an [llm] section: a text-lab config */
    char model[PATH_MAX];     /* the GGUF file */
    int generate;             /* 1: the text lab generates a missing model (a random llama) */
    char vocab[PATH_MAX];     /* the generated model's vocabulary: a GGUF (.gz unpacked first) */
    uint32_t dim, layers, heads, kv_heads, ff, ctx_train; /* the generated model's shape */
    char arch[16];            /* its family (swarm gen --arch): llama (default) or qwen3moe */
    uint32_t head_dim;        /* its attention.key_length (0: dim / heads) */
    uint32_t experts, experts_used, ff_exp; /* Mixture-of-Experts (0: dense; swarm gen) */
    char type[16];            /* its matrices' tensor type (swarm gen --type) */
    uint32_t seed;            /* its weights' seed */
    char prompt[512];         /* every run's prompt */
    uint32_t tokens;          /* tokens generated per run */
    float temperature;        /* every run's sampling temperature (0: greedy, the default);
                               * above 0 repeat r is seeded r, so each condition's repeat r
                               * draws with the same seed */
    uint32_t ctx, batch;      /* each session's KV positions; prompt positions per pass */
    uint64_t cap;             /* bytes: the SSD arm's cap and each worker's */
    uint32_t workers;         /* resident workers; 0: the fewest whose caps hold the model */
    uint32_t threads;         /* compute threads per process */
} config_llm;

typedef struct {
    char path[PATH_MAX];      /* the config file ("" = built-in defaults) */

    /* [model] */
    char model[PATH_MAX];     /* GGUF file */
    int generate;             /* 1: generate [model] path when missing (never by default) */
    uint32_t layers, dim;     /* what generate (and the `swarm gen` hint) makes */
    uint64_t seed;
    int set_model_path;       /* model.path / model.generate came from --set, not the file: */
    int set_generate;         /*   generate covers a command-line path only when both did */

    /* [run] */
    uint32_t steps;           /* steps per run (default 32) */
    uint64_t input_seed;      /* deterministic inputs per step */
    uint32_t threads;         /* BLAS threads in single-process arms */

    /* [ssd] */
    uint64_t cap_bytes;       /* working-set cap of capped processes (default 600 MiB) */
    uint32_t queue_depth;     /* O_DIRECT reads in flight */
    uint64_t chunk_bytes;     /* bytes per read (rounded down to whole 4-row blocks) */
    int buffered;             /* 1: buffered reads (labelled; cache gate decides) */
    int buffers_4k;           /* [ssd] buffers = 4k: read into 4 KiB pages, not huge pages */
    uint64_t overhead_bytes;  /* reserved in every cap for code, libs, BLAS, stacks */

    /* [quantized] */
    char quant_type[16];      /* W's type in the quantized arm's file (default "q8_0") */

    /* [swarm] */
    uint32_t workers;         /* local workers to spawn when none are listed */
    uint32_t inflight;        /* steps in the pipeline at once */
    uint64_t worker_cap_bytes;
    uint32_t worker_threads;  /* BLAS threads per worker */
    char host[64];            /* where local workers listen */
    uint32_t heartbeat_ms;    /* control-plane heartbeat interval */
    uint32_t liveness;        /* missed heartbeats before a worker is declared lost */
    uint32_t step_deadline_ms;/* a step not back by then marks its segment suspect */
    int plaintext;            /* allow plaintext on non-loopback links */
    int respawn;              /* respawn a lost local worker (it then rejoins) */
    uint32_t slowdown;        /* test knob: spawned workers compute each activation N times */
    uint32_t n_workers;       /* listed [worker.NAME] sections */
    config_worker worker[CONFIG_MAX_WORKERS];

    /* [security] */
    char key[PATH_MAX];       /* the coordinator's CURVE key pair file ("" = plaintext) */

    /* [netem] */
    char profile[NETEM_NAME_MAX]; /* default profile for `run` */
    uint32_t n_profiles;          /* custom [profile.NAME] sections */
    netem_profile profiles[CONFIG_MAX_PROFILES];

    /* [llm] */
    config_llm llm;

    /* [lab]: both labs' keys; the conditions each lab runs are its own to check (the dense
     * lab's in lab/lab.c, the text lab's in lab/lab_llm.c), the loader checks their form. */
    uint32_t repeats;         /* runs per condition (dense 5, text 3 by default) */
    uint32_t n_conditions;    /* 0 in a text-lab config that lists none: the lab asks for them */
    char conditions[CONFIG_MAX_CONDITIONS][64]; /* "ssd", "resident/lan", ... */
    char lab_out[PATH_MAX];   /* results root (default "results") */
} config_t;

void config_defaults(config_t *c);
/* Load path on top of the current values (call config_defaults first). A file with an [llm]
 * section is a text-lab config: the [lab] keys it leaves out take the text lab's defaults
 * (repeats 3, no conditions), not the dense lab's. 0 / -1. */
int config_load(config_t *c, const char *path, char *err, size_t errlen);
/* Apply "section.key=value" (from --set). 0 / -1. */
int config_set(config_t *c, const char *assignment, char *err, size_t errlen);
/* The model source for a run: the config's [model] path, generated when missing only if
 * [model] generate = 1 covers it. model_flag (--model FILE, or NULL) wins and is never
 * generated; a path from --set model.path is generated only with --set model.generate=1 too.
 * src->path points into c or at model_flag. */
void config_model_source(const config_t *c, const char *model_flag, model_source *src);
/* The keys a fixed section ("ssd") accepts, comma-separated, into buf. 0, or -1 for an
 * unknown section. */
int config_known_keys(const char *section, char *buf, size_t len);
/* 1 when the INI file at path has an [llm] section (`swarm lab` then runs the text lab); 0
 * otherwise, and when it cannot be read (config_load names that error). */
int config_has_llm(const char *path);
/* The GGUF a config names for generate, chat, serve and perplexity: a text-lab config's [llm]
 * model, any other's [model] path. 0, or -1 with err naming the file (and line). */
int config_model_path(const char *config, char *path, size_t len, char *err, size_t errlen);
/* Resolve a profile by name: custom sections first, then built-ins. 0 / -1. */
int config_profile(const config_t *c, const char *name, netem_profile *out, char *err,
                   size_t errlen);

#endif
