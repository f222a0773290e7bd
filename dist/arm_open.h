/* arm_open.h — the one way a command opens a real model's arm, and the flags every command
 * that runs a model shares (one parser: one spelling everywhere). dist/
 *
 * arm_open resolves the model (a .gguf or a config naming one), opens its tokenizer and brings
 * up the arm: reference (the file mapped), ssd (the plan checked against the cap, the memory
 * cgroup, the counters the cache and content gates start from: llm_cli.h's llm_ssd) or
 * resident (spawned workers, or a config's listed ones with CURVE; respawn, injected faults,
 * an emulated link profile: llm_swarm.h). It returns the llm_model ready to run: under the
 * resident arm, with the swarm's hook. generate, chat, perplexity and serve all open their arm
 * here, so their flags and defaults agree. The dense lab's `run` and `lab` keep their
 * config-driven arms (dist/arm.h).
 */
#ifndef SWARM_ARM_OPEN_H
#define SWARM_ARM_OPEN_H

#include <stddef.h>
#include <stdint.h>

#include "dist/llm_cli.h"
#include "dist/llm_swarm.h"
#include "netem/netem.h"
#include "runtime/llm.h"

/* The shared flags, one bit each: a command says which it honours (arm_flags_check); one
 * given but not honoured is refused by name. */
enum {
    ARM_F_ARM = 1u << 0,          /* --arm reference|ssd|resident */
    ARM_F_THREADS = 1u << 1,      /* --threads T */
    ARM_F_WORKERS = 1u << 2,      /* --workers N */
    ARM_F_WORKER_CAP = 1u << 3,   /* --worker-cap SIZE */
    ARM_F_RESPAWN = 1u << 4,      /* --respawn, --no-respawn */
    ARM_F_PROFILE = 1u << 5,      /* --profile NAME */
    ARM_F_SLOWDOWN = 1u << 6,     /* --worker-slowdown N */
    ARM_F_FAULTS = 1u << 7,       /* --kill-worker, --stop-worker, --cut-link */
    ARM_F_SSD = 1u << 8,          /* --cap, --queue-depth, --chunk, --buffered */
    ARM_F_PIPELINE = 1u << 9,     /* --no-pipeline */
    ARM_F_N = 10,
    ARM_F_ALL = (1u << ARM_F_N) - 1
};

/* The arm's flags as parsed (arm_flags_init, then arm_flags_parse for each argument). */
typedef struct {
    llm_arm arm;                  /* --arm (default reference) */
    const char *arm_name;         /* "reference", "ssd" or "resident" */
    uint32_t threads;             /* --threads; 0: not given (arm_open picks) */
    uint32_t workers;             /* --workers: spawned workers (default 3) */
    uint64_t worker_cap;          /* --worker-cap: each worker's cap, bytes (0: none) */
    int respawn;                  /* --respawn 1, --no-respawn 0, -1: the command's default */
    uint32_t slowdown;            /* --worker-slowdown: a test knob (default 1) */
    int no_pipeline;              /* --no-pipeline: a prompt's batches each awaited */
    netem_profile profile;        /* --profile (default none) */
    fault_t faults[FAULT_MAX];     /* at: the generated token, 1 = the first */
    uint32_t n_faults;
    llm_cli_ssd_flags ssd;        /* --cap, --queue-depth, --chunk, --buffered */
    unsigned given;               /* ARM_F_* of the flags given */
    const char *name[ARM_F_N];    /* each given group's first flag, as spelled */
} arm_flags;

#define ARM_FLAGS_USAGE                                                                       \
    "  --arm reference|ssd|resident  where the weights live (default reference: the file\n"  \
    "                        mapped; ssd: leading layers resident under --cap, the rest\n"    \
    "                        streamed every pass, cache and content gates judged;\n"          \
    "                        resident: the layers in --workers spawned workers (loopback)\n"  \
    "                        or a CONFIG's [worker.NAME] ones, partitioned by bytes under\n"  \
    "                        --worker-cap)\n"                                                 \
    "  --threads T           compute threads in the coordinator and in each resident\n"      \
    "                        worker (default: the machine's physical cores; resident\n"      \
    "                        workers 1 each when several sessions run at once); results\n"   \
    "                        are identical for any count\n"                                  \
    "  --workers N           resident: workers to spawn (default 3)\n"                        \
    "  --worker-cap SIZE     resident: each worker's cap (default: none)\n"                   \
    "  --respawn, --no-respawn\n"                                                             \
    "                        resident: start a fresh worker for a lost one's layers (it is\n" \
    "                        re-prefilled and the route moves back: serve's default), or\n"  \
    "                        keep them in the coordinator (the other commands' default)\n"   \
    "  --profile NAME        resident: emulate every data link (none, lan: RTT 0.4 ms,\n"     \
    "                        wifi: 4.5 ms with jitter, wan: 60 ms); workers + 1 hops\n"       \
    "  --worker-slowdown N   resident, a test knob: workers compute every pass N times\n"     \
    "                        (1..1024)\n"                                                  \
    "  --no-pipeline         resident: a prompt's batches one after another, each awaited\n" \
    "                        (default: several in flight through the workers, where\n"     \
    "                        their stages can overlap: listed workers, or threads x 2\n"    \
    "                        within the cores)\n"                                           \
    LLM_CLI_SSD_USAGE

/* Every arm (arm_flags_check's arms). */
#define ARM_ARMS_ALL (1u << LLM_ARM_REFERENCE | 1u << LLM_ARM_SSD | 1u << LLM_ARM_RESIDENT)

void arm_flags_init(arm_flags *f);
/* argv[*i] one of the shared flags? 1 (consumed, *i moved past its value), 0 (not one of
 * them), -1 with err (a bad or missing value, named). */
int arm_flags_parse(arm_flags *f, int argc, char **argv, int *i, char *err, size_t errlen);
/* After parsing: a flag the command does not honour (honours: ARM_F_* bits), an arm outside
 * arms (LLM_ARM_* bits: 1u << arm), or a flag of another arm than the one chosen: -1 with err
 * naming it. */
int arm_flags_check(const arm_flags *f, unsigned honours, unsigned arms, const char *cmd,
                    char *err, size_t errlen);

/* What a command asks of the arm besides its flags. */
typedef struct arm_handle arm_handle;
typedef struct {
    const char *cmd;              /* "generate": the cgroup's tag, log lines */
    const char *log_prefix;       /* before each worker's plan line ("serve: " or "") */
    const char *model;            /* MODEL.gguf or a CONFIG */
    const arm_flags *flags;
    uint32_t n_ctx;               /* positions per session; 0: the file's, at most ctx_max */
    uint32_t ctx_max;             /* the default's ceiling (generate 4096, serve 2048) */
    uint32_t n_batch;             /* prompt positions per pass */
    uint32_t sessions;            /* sessions at once (the resident arm's caches) */
    int respawn;                  /* the command's default when neither flag is given */
    uint64_t seed;                /* the resident arm's link draws */
    /* Called once the tokenizer is open and before any weight is read, to size the context
     * from the command's input (generate under the SSD arm: the prompt's tokens + -n; sets
     * h->n_ctx, else n_ctx above applies) and say where its generated tokens start (h->pos0:
     * the faults' tokens become positions). May be NULL. 0 / -1 with err. */
    int (*size)(void *user, arm_handle *h, char *err, size_t errlen);
    void *user;
} arm_open_opts;

/* An opened arm. lm.m is the model to run (lm.t its tokenizer); the rest says how it ran. */
struct arm_handle {
    llm_cli_model lm;             /* path, model, tokenizer, the file's trained context */
    llm_arm arm;
    const char *arm_name;
    uint32_t n_ctx;               /* positions per session, as opened */
    uint32_t pos0;                /* the first generated token's position (size() sets it) */
    int threads;                  /* the coordinator's compute threads per session */
    int worker_threads;           /* the resident arm's, per worker */
    double setup_ms;              /* opening, tokenizer to ready */
    uint64_t io0;                 /* storage read bytes when opening began */
    int refused;                  /* after a failed open: 1 when the arm refused the options
                                   * (the plan, a cap, the hosts): a usage error */
    llm_ssd *ssd;                 /* the SSD arm's plan, cgroup, counters, gates; NULL else */
    llm_swarm *swarm;             /* the resident arm's workers while they run; NULL else */
    netem_profile profile;        /* the resident arm's link profile */
    uint64_t worker_cap;
    const char *transport;        /* "loopback" (spawned), "plaintext" or "curve" (listed) */
    int curve;
    int shared_core;              /* llm_swarm_cpu, or -1 */
    /* the resident arm as it ended (arm_open_judge) */
    partition_llm_plan *plan;
    llm_worker_status wst[8];
    uint32_t n_wst;
    llm_failover *fos;
    uint32_t n_fo;
    uint64_t acts, wire, workers_rss;
    uint64_t deadline_replays;     /* passes replayed: their result never came */
    uint64_t prefill_chunks;       /* the pipelined prompts' chunks (0: none pipelined) */
};

/* Open o->model under o->flags' arm into h (zeroed here). 0, or -1 with err (h->refused set
 * when the arm refused the options); arm_open_close(h) either way. */
int arm_open(const arm_open_opts *o, arm_handle *h, char *err, size_t errlen);
/* The exit code for an arm_open that failed with err: EXIT_VOID when a layer failed its
 * checksum (a corrupt file, whichever arm found it: arch/sums.h, SUMS_MISMATCH), else
 * EXIT_USAGE when the arm refused the options (h->refused), else EXIT_FAIL. */
int arm_open_exit_code(const arm_handle *h, const char *err);
/* After the run, before anything that is not the arm's: the SSD arm's counters and gates
 * (printed; h->ssd->rr), the cgroup left; the resident arm's workers' peaks, states, acts,
 * plan and failovers kept (printed) and the swarm ended. Safe on the reference arm. */
void arm_open_judge(arm_handle *h);
/* Free what is left, in reverse: the model before its swarm. Safe twice. */
void arm_open_close(arm_handle *h);

#endif
