/* lab_llm.c — the lab for text generation: `swarm lab configs/llm.ini`. lab/
 *
 * The dense lab's question asked of a real model: does the resident pipeline's advantage
 * over SSD streaming hold when the work is generating tokens? Order as in the dense lab
 * (docs/design.md, "Measurement rules and gates"): the machine is measured (a short
 * reference run for the per-token compute, the SSD arm's reader on the streamed layers for
 * the disk), every condition is predicted and the predictions printed, and only then does
 * anything run. Each condition x repeat is one `swarm generate` process (its own memory, its
 * own cgroup under --arm ssd, its own gates: parity against the reference arm on every
 * resident run, the cache and content gates on every SSD run); its result object is
 * wrapped with the condition and the prediction into results.jsonl, and table.md and the
 * plot are built from that file alone.
 */
#include "lab/lab_llm.h"

#include <errno.h>
#include <fcntl.h>
#include <getopt.h>
#include <limits.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include <jansson.h>

#include "arch/arch.h"
#include "runtime/llm.h"
#include "base/exitcode.h"
#include "gguf/gguf.h"
#include "base/log.h"
#include "base/util.h"
#include "lab/bench.h"
#include "lab/predict.h"
#include "dist/config.h"
#include "dist/llm_cli.h"
#include "dist/partition.h"
#include "netem/netem.h"

#define LL_ARTICLE_RATIO 13.70 /* the article's resident/lan over ssd, dense model */

#define LL_MAX_COND CONFIG_MAX_CONDITIONS

typedef struct {
    char name[sizeof ((config_t *)0)->conditions[0]];
    const char *arm;              /* reference | ssd | resident */
    netem_profile prof;
    double pred_ms;               /* predicted ms per generated token */
    double pred_read, pred_hit;   /* ssd: predicted bytes read a token, expert cache hit rate */
    double uni_ms, uni_read, uni_hit; /* the same under uniform routing (a bound) */
    double pred_read_ms, pred_hash_ms, pred_ring_ms; /* ssd: the prediction's terms, ms a token */
    const char *spec;             /* "+spec": the model's Q4_0 copy drafts; "+lookup": prompt
                                   * lookup; NULL: no speculation */
} ll_cond;

typedef struct {
    config_t cfg;                 /* [llm] and [lab] (dist/config.c) */
    ll_cond cond[LL_MAX_COND];
    char self[PATH_MAX], dir[PATH_MAX];
    char draft[PATH_MAX + 16];    /* +spec conditions' drafter: MODEL.q4_0.gguf beside it */
    uint32_t workers;             /* resident: the fewest the cap allows, or the config's */
    double ref_ms;                /* calibration: the reference's ITL p50 */
    double disk_gbps;             /* the SSD arm's reader on its streamed layers */
    uint64_t pass_bytes, streamed_bytes;
    uint32_t n_resident, n_layers;
    /* Mixture-of-Experts (expert_slots > 0): the experts' reads (predict_llm_routed) */
    uint32_t n_split, expert_slots, k;
    uint64_t routed_read, cache_experts;
    double hash_gbps;
    double disk_uni_gbps;         /* the disk at uniform routing's misses' depth */
    int has_sim;                  /* the calibration replayed its routing through the cache */
    double disk_first_gbps;       /* the replay's first pass (GB/s): the runs never see it */
    double replay_read_ms, replay_hash_ms; /* the replay's per generated token (0: none) */
    double ssd_ms;                /* the SSD arm's compute a token, every layer resident (NAN:
                                   * not measured; the reference's ref_ms stands in) */
    double sim_hit;               /* ... and hit this often on one-position passes */
} ll_lab;

/* ---------------------------------------------------------------- children */

/* Run argv (argv[0] the program) with stdout to /dev/null and stderr to log; its exit code,
 * or -1 when it could not start. */
static int s_run(char *const argv[], const char *log)
{
    pid_t pid = fork();
    if (pid < 0)
        return -1;
    if (pid == 0) {
        int fo = open("/dev/null", O_WRONLY), fe = open(log, O_WRONLY | O_CREAT | O_TRUNC, 0644);
        if (fo >= 0)
            dup2(fo, 1);
        if (fe >= 0)
            dup2(fe, 2);
        execv(argv[0], argv);
        _exit(127);
    }
    int st;
    if (waitpid(pid, &st, 0) < 0)
        return -1;
    return WIFEXITED(st) ? WEXITSTATUS(st) : 128 + WTERMSIG(st);
}

/* The last JSON object of a JSONL file (NULL when there is none). */
static json_t *s_last(const char *path)
{
    FILE *f = fopen(path, "r");
    char *line = NULL, *last = NULL;
    size_t cap = 0;
    if (!f)
        return NULL;
    while (getline(&line, &cap, f) > 0)
        if (line[0] == '{') {
            free(last);
            last = strdup(line);
        }
    free(line);
    fclose(f);
    json_t *j = last ? json_loads(last, 0, NULL) : NULL;
    free(last);
    return j;
}

/* `swarm generate` for one condition; its result object (NULL: failed, log says why). */
static json_t *s_generate(ll_lab *L, const ll_cond *cd, uint32_t tokens, const char *tag,
                          int *rc)
{
    char n[16], ctx[16], batch[16], thr[16], cap[32], w[16], temp[32], out[PATH_MAX + 64],
        log[PATH_MAX + 64], slug[sizeof cd->name];
    const char *argv[40];
    int a = 0;
    snprintf(slug, sizeof slug, "%s", cd->name);
    for (char *p = slug; *p; p++)
        if (*p == '/')
            *p = '-';
    snprintf(n, sizeof n, "%u", tokens);
    snprintf(temp, sizeof temp, "%g", (double)L->cfg.llm.temperature);
    snprintf(ctx, sizeof ctx, "%u", L->cfg.llm.ctx);
    snprintf(batch, sizeof batch, "%u", L->cfg.llm.batch);
    snprintf(thr, sizeof thr, "%u", L->cfg.llm.threads);
    snprintf(cap, sizeof cap, "%llu", (unsigned long long)L->cfg.llm.cap);
    snprintf(w, sizeof w, "%u", L->workers);
    snprintf(out, sizeof out, "%s/runs/%s-%s.jsonl", L->dir, slug, tag);
    snprintf(log, sizeof log, "%s/logs/%s-%s.err", L->dir, slug, tag);
    unlink(out);
    const char *base[] = { L->self, "generate", L->cfg.llm.model, "--prompt", L->cfg.llm.prompt,
                           "-n", n, "--temp", temp, "--ctx", ctx, "--batch", batch, "--threads",
                           thr, "--out", out, "--arm", cd->arm };
    for (size_t i = 0; i < sizeof base / sizeof base[0]; i++)
        argv[a++] = base[i];
    if (!strcmp(cd->arm, "ssd")) {
        argv[a++] = "--cap";
        argv[a++] = cap;
    } else if (!strcmp(cd->arm, "resident")) {
        argv[a++] = "--workers";
        argv[a++] = w;
        argv[a++] = "--worker-cap";
        argv[a++] = cap;
        argv[a++] = "--profile";
        argv[a++] = netem_profile_is_none(&cd->prof) ? "none" : cd->prof.name;
    }
    /* sampled runs: repeat r's seed is r (tag "rN"; the calibration's "cal" keeps 0), the same
     * for every condition, so plain and +spec runs of a repeat draw from the same seed */
    if (L->cfg.llm.temperature > 0 && tag[0] == 'r') {
        argv[a++] = "--seed";
        argv[a++] = tag + 1;
    }
    if (cd->spec && !strcmp(cd->spec, "lookup")) {
        argv[a++] = "--draft-lookup";
    } else if (cd->spec) {
        argv[a++] = "--draft";
        argv[a++] = L->draft;
    }
    argv[a] = NULL;
    *rc = s_run((char *const *)argv, log);
    return *rc == 0 || *rc == EXIT_VOID ? s_last(out) : NULL;
}

/* ---------------------------------------------------------------- setup */

static int s_make_model(ll_lab *L)
{
    struct stat sb;
    if (stat(L->cfg.llm.model, &sb) == 0)
        return 0;
    if (!L->cfg.llm.generate) {
        log_error("%s: missing; `swarm gen --arch llama ... -o %s` makes one, or set [llm] "
                  "generate = 1 in %s", L->cfg.llm.model, L->cfg.llm.model, L->cfg.path);
        return EXIT_USAGE;
    }
    char dir[PATH_MAX], vocab[PATH_MAX + 16], cmd[3 * PATH_MAX];
    snprintf(dir, sizeof dir, "%s", L->cfg.llm.model);
    char *slash = strrchr(dir, '/');
    if (slash) {
        *slash = 0;
        if (util_mkdir_p(dir)) {
            log_error("%s: cannot create: %s", dir, strerror(errno));
            return -1;
        }
    }
    /* the vocabulary is a GGUF's; a .gz one (the test fixture) is unpacked beside the model */
    snprintf(vocab, sizeof vocab, "%s", L->cfg.llm.vocab);
    size_t vl = strlen(vocab);
    if (vl > 3 && !strcmp(vocab + vl - 3, ".gz")) {
        snprintf(vocab, sizeof vocab, "%s.vocab.gguf", L->cfg.llm.model);
        snprintf(cmd, sizeof cmd, "gzip -dc '%s' > '%s'", L->cfg.llm.vocab, vocab);
        if (strchr(L->cfg.llm.vocab, '\'') || strchr(vocab, '\'') || system(cmd)) {
            log_error("%s: cannot unpack into %s", L->cfg.llm.vocab, vocab);
            return -1;
        }
    }
    char d[16], l[16], h[16], kv[16], ff[16], ct[16], sd[16];
    snprintf(d, sizeof d, "%u", L->cfg.llm.dim);
    snprintf(l, sizeof l, "%u", L->cfg.llm.layers);
    snprintf(h, sizeof h, "%u", L->cfg.llm.heads);
    snprintf(kv, sizeof kv, "%u", L->cfg.llm.kv_heads);
    snprintf(ff, sizeof ff, "%u", L->cfg.llm.ff);
    snprintf(ct, sizeof ct, "%u", L->cfg.llm.ctx_train);
    snprintf(sd, sizeof sd, "%u", L->cfg.llm.seed);
    const char *argv[40] = { L->self, "gen", "--arch", L->cfg.llm.arch, "--dim", d, "--layers",
                             l, "--heads", h, "--kv-heads", kv, "--ff", ff, "--ctx", ct,
                             "--seed", sd, "--type", L->cfg.llm.type, "--vocab-from", vocab,
                             "-o", L->cfg.llm.model };
    int a = 24;
    char hd[16], ne[16], nu[16], fe[16];
    snprintf(hd, sizeof hd, "%u", L->cfg.llm.head_dim);
    snprintf(ne, sizeof ne, "%u", L->cfg.llm.experts);
    snprintf(nu, sizeof nu, "%u", L->cfg.llm.experts_used);
    snprintf(fe, sizeof fe, "%u", L->cfg.llm.ff_exp);
    if (L->cfg.llm.head_dim) {
        argv[a++] = "--head-dim";
        argv[a++] = hd;
    }
    if (L->cfg.llm.experts) { /* a Mixture-of-Experts shape (configs/moe.ini) */
        argv[a++] = "--experts";
        argv[a++] = ne;
        if (L->cfg.llm.experts_used) {
            argv[a++] = "--experts-used";
            argv[a++] = nu;
        }
        if (L->cfg.llm.ff_exp) {
            argv[a++] = "--ff-exp";
            argv[a++] = fe;
        }
    }
    argv[a] = NULL;
    log_info("%s is missing: generating a random %s of %s layers x %s%s%s (%s, seed %s)",
             L->cfg.llm.model, L->cfg.llm.arch, l, d, L->cfg.llm.experts ? ", experts " : "",
             L->cfg.llm.experts ? ne : "", L->cfg.llm.type, sd);
    char glog[PATH_MAX + 16];
    snprintf(glog, sizeof glog, "%s/logs/gen.err", L->dir);
    int rc = s_run((char *const *)argv, glog);
    if (vocab[0] && strcmp(vocab, L->cfg.llm.vocab))
        unlink(vocab);
    if (rc) {
        log_error("generating %s failed (exit %d): see %s", L->cfg.llm.model, rc, glog);
        return -1;
    }
    return 0;
}

/* The +spec conditions' drafter: the model's Q4_0 copy, made beside it when missing. */
static int s_make_draft(ll_lab *L)
{
    int need = 0;
    for (uint32_t i = 0; i < L->cfg.n_conditions; i++)
        need |= L->cond[i].spec && !strcmp(L->cond[i].spec, "draft");
    size_t ml = strlen(L->cfg.llm.model);
    snprintf(L->draft, sizeof L->draft, "%.*s.q4_0.gguf",
             (int)(ml > 5 && !strcmp(L->cfg.llm.model + ml - 5, ".gguf") ? ml - 5 : ml),
             L->cfg.llm.model);
    struct stat sb;
    if (!need || stat(L->draft, &sb) == 0)
        return 0;
    const char *argv[] = { L->self, "quantize", L->cfg.llm.model, L->draft, "Q4_0", NULL };
    char qlog[PATH_MAX + 16];
    snprintf(qlog, sizeof qlog, "%s/logs/quantize.err", L->dir);
    log_info("%s is missing: quantizing the model to Q4_0 for the +spec conditions' drafter",
             L->draft);
    int rc = s_run((char *const *)argv, qlog);
    if (rc)
        log_error("quantizing %s failed (exit %d): see %s", L->draft, rc, qlog);
    return rc ? -1 : 0;
}

static int s_conditions(ll_lab *L)
{
    for (uint32_t i = 0; i < L->cfg.n_conditions; i++) {
        ll_cond *cd = &L->cond[i];
        char s[sizeof cd->name];
        memset(cd, 0, sizeof *cd);
        _Static_assert(sizeof cd->name == sizeof L->cfg.conditions[0], "same size: plain copy");
        memcpy(cd->name, L->cfg.conditions[i], sizeof cd->name);
        memcpy(s, cd->name, sizeof s);
        /* a suffix asks for speculative decoding on top of the arm */
        char *plus = strchr(s, '+');
        if (plus && (!strcmp(plus, "+spec") || !strcmp(plus, "+lookup"))) {
            cd->spec = !strcmp(plus, "+spec") ? "draft" : "lookup";
            *plus = 0;
        }
        netem_profile_builtin("none", &cd->prof);
        if (!strcmp(s, "reference") || !strcmp(s, "ssd")) {
            cd->arm = !strcmp(s, "ssd") ? "ssd" : "reference";
        } else if (!strcmp(s, "resident") || !strncmp(s, "resident/", 9)) {
            cd->arm = "resident";
            if (s[8] == '/' && netem_profile_builtin(s + 9, &cd->prof)) {
                log_error("%s: condition '%s': unknown profile (profiles: none, lan, wifi, "
                          "wan)", L->cfg.path, s);
                return -1;
            }
        } else if (!strcmp(s, "quantized")) {
            log_error("%s: condition 'quantized': a real model's quantized arm is its "
                      "quantized file (swarm quantize MODEL -t q8_0) given as [llm] model in a "
                      "lab of its own", L->cfg.path);
            return -1;
        } else {
            log_error("%s: unknown condition '%s' (conditions: reference, ssd, resident, "
                      "resident/none, resident/lan, resident/wifi, resident/wan; each may "
                      "end in +spec or +lookup)", L->cfg.path, s);
            return -1;
        }
    }
    return 0;
}

/* The fewest workers whose caps hold the model (partition_llm), or the config's count. */
static int s_workers(ll_lab *L)
{
    char err[1024];
    gguf_file *g = gguf_open(L->cfg.llm.model, err, sizeof err);
    arch_model am;
    int rc = -1;
    if (!g) {
        log_error("%s", err);
        return -1;
    }
    if (arch_model_open(&am, g, err, sizeof err)) {
        log_error("%s", err);
        gguf_close(&g);
        return -1;
    }
    L->n_layers = am.hp.n_layers;
    int resident = 0;
    for (uint32_t i = 0; i < L->cfg.n_conditions; i++)
        resident |= !strcmp(L->cond[i].arm, "resident");
    if (!resident) { /* no pipeline to plan (an SSD arm under a cap no worker could take) */
        arch_model_close(&am);
        gguf_close(&g);
        return 0;
    }
    partition_llm_opts po = { .sessions = 1, .n_ctx = L->cfg.llm.ctx,
                              .max_batch = L->cfg.llm.batch, .threads = L->cfg.llm.threads };
    partition_llm_plan plan;
    uint64_t caps[8];
    for (uint32_t n = L->cfg.llm.workers ? L->cfg.llm.workers : 1; n <= 8; n++) {
        for (uint32_t i = 0; i < n; i++)
            caps[i] = L->cfg.llm.cap;
        if (partition_llm(&am, &po, n, caps, &plan, err, sizeof err) == 0) {
            L->workers = n;
            rc = 0;
            break;
        }
        if (L->cfg.llm.workers)
            break;
    }
    if (rc)
        log_error("%s: no plan under %.0f MiB per worker: %s", L->cfg.llm.model,
                  L->cfg.llm.cap / 1048576.0, err);
    arch_model_close(&am);
    gguf_close(&g);
    return rc;
}

/* The experts' side of the SSD plan p (predict_llm_routed), the content hash's speed, and the
 * weight bytes a token's compute reads; nothing for a dense model. */
static int s_routed(ll_lab *L, const exec_plan *p)
{
    char err[1024];
    gguf_file *g = gguf_open(L->cfg.llm.model, err, sizeof err);
    arch_model am;
    if (!g || arch_model_open(&am, g, err, sizeof err)) {
        log_error("%s", err);
        gguf_close(&g);
        return -1;
    }
    L->k = am.hp.n_expert_used;
    if (p->expert_slots) {
        predict_llm_routed(&am, p, &L->routed_read, &L->cache_experts, &L->pass_bytes);
        if (predict_hash_gbps(64u << 20, 9, &L->hash_gbps, err, sizeof err))
            log_warn("%s: the hash is left out of the prediction", err);
    }
    arch_model_close(&am);
    gguf_close(&g);
    return 0;
}

/* The disk as the SSD arm's expert reads meet it (bench_experts_gguf): a layer's misses of a
 * token in flight together, (1 - hit) x k experts (at least one), at random places in the
 * file, then a wait. A decode step's few misses are latency-bound: on this VM the arm's reads
 * ran at 0.5-0.7 GB/s where a sequential scan in expert-sized chunks read 2.2-2.7 GB/s at
 * depth 3 to 24 (2026-12-02), so the scan is not the figure. */
static double s_disk_experts(ll_lab *L, const exec_plan *p, double hit, uint32_t *depth)
{
    char err[1024];
    uint32_t x = (uint32_t)ceil((1 - hit) * L->k - 1e-9);
    x = x < 1 ? 1 : x > L->k ? L->k : x;
    /* the median of 7 samples of 64 MiB: one sample on this shared VM ranged 0.9-1.9 GB/s */
    bench_disk_result d;
    double g[7];
    for (uint32_t i = 0; i < 7; i++) {
        if (bench_experts_gguf(L->cfg.llm.model, p->n_resident, x, 64ull << 20, i + 1, &d, err,
                               sizeof err)) {
            log_error("disk figure: %s", err);
            return NAN;
        }
        g[i] = d.gbps;
    }
    util_sort_doubles(g, 7);
    *depth = d.queue_depth;
    log_info("disk: %u expert%s of a layer at random in flight (%u reads): %.2f GB/s (median of "
             "7 x 64 MiB, %.2f-%.2f%s)", x, x == 1 ? "" : "s", d.queue_depth, g[3], g[0], g[6],
             d.cache_pass ? "" : "; WARNING: not all from storage");
    return g[3];
}

/* The disk for exactly the reads the SSD arm will make: the calibration's misses, in their
 * order, each layer's together, into huge pages as the arm's cache (bench_experts_replay),
 * timed over the generated tokens', the whole sequence once per SSD run and once before: the
 * figure is the median of the passes after the first. Every SSD run reads the same misses (the
 * same tokens, so the same routing, and a cold cache each run), and this VM's host caches a
 * region that is re-read: on 2026-12-02 a single replay drew 1.25 GB/s where the runs after it
 * drew about 2.7, each run's reads having been made before. Random experts
 * (s_disk_experts) at the replay's depth when the log is missing. */
static double s_disk_replay(ll_lab *L, const exec_plan *p, uint32_t *depth)
{
    char err[1024], log[PATH_MAX + 64], line[256];
    bench_disk_result d;
    uint32_t n = L->cfg.repeats + 1;
    double *v = calloc(n, sizeof *v);
    snprintf(log, sizeof log, "%s/logs/expert-misses.txt", L->dir);
    int rc = v ? bench_experts_replay(L->cfg.llm.model, log, p->expert_slots,
                                      p->expert_slot_bytes, L->cfg.llm.tokens - 1, n, v, &d,
                                      err, sizeof err) : -1;
    if (rc || !(d.gbps > 0)) {
        log_warn("disk figure from the replayed misses: %s; random experts instead",
                 !v ? "out of memory" : rc ? err : "no miss on a generated token");
        free(v);
        return s_disk_experts(L, p, L->sim_hit, depth);
    }
    size_t o = 0;
    for (uint32_t i = 0; i < n && o < sizeof line; i++)
        o += (size_t)snprintf(line + o, sizeof line - o, "%s%.2f", i ? ", " : "", v[i]);
    log_info("disk: the calibration's misses replayed %u times (the runs' %u and one before): "
             "%.2f GB/s over the generated tokens' (median of passes 2-%u; each pass %s GB/s; "
             "%.0f MiB in all, %s%s); hashed as read: %.2f GB/s (XXH3 over 64 MiB in memory: "
             "%.2f)", n, L->cfg.repeats, d.gbps, n, line, d.bytes / 1048576.0, d.io_buffers,
             d.cache_pass ? "" : "; WARNING: not all from storage", d.hash_gbps, L->hash_gbps);
    /* the slices just read are not in the CPU's caches, where the 64 MiB buffer of
     * predict_hash_gbps can be (this VM's L3 is 260 MiB): 4.96-11.1 GB/s between sittings */
    if (d.hash_gbps > 0)
        L->hash_gbps = d.hash_gbps;
    /* gen_tok_s times the passes after the first token's, n - 1 for n tokens: the replay
     * times the same passes (a prompt's last chunk of one position is not one of them) */
    L->replay_read_ms = d.read_ms;
    L->replay_hash_ms = d.hash_ms;
    if (d.timed_passes)
        log_info("disk: a generated token's misses (the last %u passes): reads %.2f ms (median "
                 "of passes 2-%u), hashes %.2f ms", d.timed_passes, d.read_ms, n, d.hash_ms);
    L->disk_first_gbps = v[0];
    free(v);
    *depth = 0;
    return d.gbps;
}

/* Machine figures, then every prediction, printed before any condition runs. */
/* The reference's per-token time (its ITL p50 over 8 tokens). With an expert cache of `slots`
 * in the SSD plan, the run is the runs' own tokens and its routing is replayed through the
 * cache's policy (SWARM_EXPERT_SIM, runtime/xsim.h): greedy decoding gives every arm the same
 * tokens, so the same routing, and the hit rate the SSD arm will see is known before it runs. */
static int s_calibrate(ll_lab *L, uint32_t slots)
{
    int rc;
    char n[16], log[PATH_MAX + 64];
    ll_cond ref = { .arm = "reference" };
    snprintf(ref.name, sizeof ref.name, "calibration");
    snprintf(n, sizeof n, "%u", slots);
    snprintf(log, sizeof log, "%s/logs/expert-misses.txt", L->dir);
    if (slots) {
        setenv("SWARM_EXPERT_SIM", n, 1);
        setenv("SWARM_EXPERT_SIM_LOG", log, 1);
    }
    json_t *r = s_generate(L, &ref, slots ? L->cfg.llm.tokens : 8, "cal", &rc);
    unsetenv("SWARM_EXPERT_SIM");
    unsetenv("SWARM_EXPERT_SIM_LOG");
    json_t *itl = r ? json_object_get(r, "itl_ms_p50") : NULL;
    if (!itl || !json_is_number(itl)) {
        log_error("calibration (reference) failed (exit %d): see %s/logs", rc, L->dir);
        json_decref(r);
        return -1;
    }
    L->ref_ms = json_number_value(itl);
    json_decref(r);
    snprintf(log, sizeof log, "%s/logs/calibration-cal.err", L->dir);
    FILE *f = slots ? fopen(log, "r") : NULL;
    char line[512];
    unsigned long long steps, h, m;
    while (f && fgets(line, sizeof line, f))
        if (sscanf(line, "expert cache sim: %*u slots (LRU), one-position passes %llu: hits %llu "
                         "misses %llu", &steps, &h, &m) == 3 && h + m) {
            L->has_sim = 1;
            L->sim_hit = (double)h / (double)(h + m);
        }
    if (f)
        fclose(f);
    if (slots && !L->has_sim)
        log_warn("calibration: no expert cache replay in %s: uniform routing's hit rate only",
                 log);
    return 0;
}

/* The SSD arm's compute a generated token: the arm itself with a cap that holds every layer
 * (no read on the token's path), the runs' prompt and tokens, its ITL p50. The reference's
 * time is the same work but not in the same memory: its weights are a 4 KiB-page mapping of
 * the file, the SSD arm's resident tensors and expert cache huge pages (runtime/exec.c), and
 * a page walk every 4 KiB costs: with every layer resident the SSD arm ran a token in
 * 22.3-22.7 ms where the reference took 23.4-24.0 (2026-12-02, alternating, 3 each), and the
 * split arm's compute came out 8-20% under the reference's in the sittings of
 * docs/measurements/2026-12-02-moecal.md. NAN when the plan at that cap keeps a layer out. */
static double s_calibrate_compute(ll_lab *L)
{
    struct stat sb;
    int rc;
    ll_cond c = { .arm = "ssd" };
    snprintf(c.name, sizeof c.name, "calibration-ssd");
    if (stat(L->cfg.llm.model, &sb))
        return NAN;
    uint64_t cap = L->cfg.llm.cap;
    /* the file, and room for the KV caches, scratch and the process (measured: 3200 MiB
     * made the 2659 MiB moe.ini model all resident, 2026-12-02) */
    L->cfg.llm.cap = (uint64_t)sb.st_size + (640ull << 20);
    json_t *r = s_generate(L, &c, L->cfg.llm.tokens, "cal", &rc);
    L->cfg.llm.cap = cap;
    json_t *itl = r ? json_object_get(r, "itl_ms_p50") : NULL;
    json_t *res = r ? json_object_get(r, "resident_layers") : NULL;
    double ms = NAN;
    if (!itl || !json_is_number(itl) || !json_is_integer(res) ||
        json_integer_value(res) != (json_int_t)L->n_layers)
        log_warn("compute: the SSD arm with every layer resident did not run (exit %d, see "
                 "%s/logs/calibration-ssd-cal.err): the reference's time instead", rc, L->dir);
    else
        ms = json_number_value(itl);
    json_decref(r);
    return ms;
}

/* Each condition's predicted time a token from the machine's figures and the SSD plan p. */
static void s_predict_conds(ll_lab *L, const exec_plan *p)
{
    /* A token reads every layer once: the reference's time is the memory's. The SSD arm adds
     * what its reads do not hide (lab/predict.h); the resident arm adds one one-way link delay
     * per hop. */
    for (uint32_t i = 0; i < L->cfg.n_conditions; i++) {
        ll_cond *cd = &L->cond[i];
        if (!strcmp(cd->arm, "reference")) {
            cd->pred_ms = L->ref_ms;
        } else if (!strcmp(cd->arm, "ssd")) {
            predict_llm_in in = { .ref_ms = isfinite(L->ssd_ms) ? L->ssd_ms : L->ref_ms,
                                  .disk_gbps = L->disk_gbps,
                                  .hash_gbps = L->hash_gbps, .pass_bytes = L->pass_bytes,
                                  .ring_bytes = L->streamed_bytes,
                                  .routed_read_bytes = L->routed_read,
                                  .cache_slots = p->expert_slots,
                                  .cache_experts = L->cache_experts };
            predict_llm_out po;
            in.disk_gbps = p->expert_slots ? L->disk_uni_gbps : L->disk_gbps;
            predict_llm_ssd(&in, &po); /* uniform routing first: the bound */
            in.disk_gbps = L->disk_gbps;
            cd->uni_ms = po.ms;
            cd->uni_read = po.read_bytes;
            cd->uni_hit = po.hit_rate;
            if (p->expert_slots)
                log_info("ssd under uniform routing: %s", po.formula);
            in.has_hit = L->has_sim;
            in.hit = L->sim_hit;
            in.read_ms = L->replay_read_ms;
            in.hash_ms = L->replay_hash_ms;
            predict_llm_ssd(&in, &po);
            cd->pred_ms = po.ms;
            cd->pred_read = po.read_bytes;
            cd->pred_hit = po.hit_rate;
            cd->pred_read_ms = po.read_ms;
            cd->pred_hash_ms = po.hash_ms;
            cd->pred_ring_ms = po.ring_ms;
            log_info("ssd: %s", po.formula);
            if (p->expert_slots)
                log_info("ssd: predicted %.1f MiB read a token, expert cache hit rate %.3f "
                         "(%s); uniform routing: %.1f MiB, %.3f, %.1f ms",
                         po.read_bytes / 1048576.0, po.hit_rate,
                         L->has_sim ? "the reference's routing replayed" : "uniform routing",
                         cd->uni_read / 1048576.0, cd->uni_hit, cd->uni_ms);
        } else {
            cd->pred_ms = L->ref_ms + (L->workers + 1) * (double)cd->prof.delay_ns / 1e6;
        }
        log_info("predicted %-16s %8.1f ms a token, %7.2f tokens/s", cd->name, cd->pred_ms,
                 1000.0 / cd->pred_ms);
    }
}

static int s_predict(ll_lab *L)
{
    char err[1024];
    exec_plan p;
    llm_opts lo;
    llm_cli_ssd_flags sf;
    char from[256];
    /* the SSD arm's options exactly as `swarm generate --arm ssd --cap CAP` makes them */
    llm_cli_ssd_init(&sf);
    sf.cap_bytes = L->cfg.llm.cap;
    if (llm_cli_ssd_opts(&sf, L->cfg.llm.model, &lo, from, sizeof from, err, sizeof err)) {
        log_error("the SSD arm's options: %s", err);
        return -1;
    }
    lo.n_ctx = L->cfg.llm.ctx;
    lo.n_batch = L->cfg.llm.batch;
    if (llm_ssd_plan(L->cfg.llm.model, &lo, &p, err, sizeof err)) {
        log_error("the SSD arm's plan: %s", err);
        return -1;
    }
    L->n_resident = p.n_resident;
    L->n_split = p.n_split;
    L->expert_slots = p.expert_slots;
    L->streamed_bytes = p.streamed_per_step;
    L->pass_bytes = p.resident_bytes + p.streamed_per_step;
    if (s_routed(L, &p) || s_calibrate(L, p.expert_slots))
        return -1;
    L->ssd_ms = p.expert_slots ? s_calibrate_compute(L) : NAN;
    if (isfinite(L->ssd_ms))
        log_info("compute: the SSD arm with every layer resident %.2f ms a token (ITL p50), the "
                 "reference %.2f", L->ssd_ms, L->ref_ms);
    /* The disk in the arm's own pattern: the ring's chunks at its depth, or, where experts
     * stream, expert-sized reads with a token's worth of a layer's experts in flight. */
    bench_disk_opts bo = { .first = p.n_resident + p.n_split, .chunk_bytes = lo.chunk_bytes,
                           .queue_depth = lo.queue_depth, .passes = 2,
                           .ring_slots = p.ring_slots };
    bench_disk_result d;
    if (p.expert_slots) {
        /* uniform routing's misses first, then the replay's (their depth decides the figure) */
        double uni = (double)p.expert_slots / (double)L->cache_experts;
        L->disk_uni_gbps = s_disk_experts(L, &p, uni < 1 ? uni : 1, &bo.queue_depth);
        L->disk_gbps = L->has_sim ? s_disk_replay(L, &p, &bo.queue_depth) : L->disk_uni_gbps;
    } else if (p.n_streamed &&
               bench_disk_run_gguf(L->cfg.llm.model, &bo, &d, err, sizeof err) == 0) {
        L->disk_gbps = d.gbps;
    } else {
        L->disk_gbps = NAN;
    }
    log_info("machine: reference %.1f ms a token (%u threads); SSD plan %u of %u layers "
             "resident, %u split, %.1f MiB streamed a token; disk %.2f GB/s (the arm's reader, "
             "%s chunks, depth %u)", L->ref_ms, L->cfg.llm.threads, p.n_resident, L->n_layers,
             p.n_split, L->streamed_bytes / 1048576.0, L->disk_gbps,
             p.expert_slots ? "expert-sized" : "its", bo.queue_depth);
    if (p.expert_slots)
        log_info("experts: %u of %llu routed a layer; %.1f MiB of routed reads a token "
                 "uncached; cache %u slots of %llu experts; hash %.2f GB/s", L->k,
                 (unsigned long long)(L->cache_experts / (L->n_layers - p.n_resident)),
                 L->routed_read / 1048576.0, p.expert_slots,
                 (unsigned long long)L->cache_experts, L->hash_gbps);
    s_predict_conds(L, &p);
    return 0;
}

/* ---------------------------------------------------------------- report */

static double s_num(json_t *o, const char *k)
{
    json_t *v = json_object_get(o, k);
    return json_is_number(v) ? json_number_value(v) : NAN;
}

static int s_cmp(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return x < y ? -1 : x > y;
}

/* Median, min and max of the finite values among v[0..n). */
static void s_stats(double *v, size_t n, double *med, double *mn, double *mx)
{
    size_t k = 0;
    for (size_t i = 0; i < n; i++)
        if (isfinite(v[i]))
            v[k++] = v[i];
    qsort(v, k, sizeof *v, s_cmp);
    *med = k ? (k % 2 ? v[k / 2] : (v[k / 2 - 1] + v[k / 2]) / 2) : NAN;
    *mn = k ? v[0] : NAN;
    *mx = k ? v[k - 1] : NAN;
}

static void s_plot(const ll_lab *L, const double *med, const double *mn, const double *mx)
{
    char path[PATH_MAX + 32];
    FILE *f;
    snprintf(path, sizeof path, "%s/gen_tok_s.dat", L->dir);
    if (!(f = fopen(path, "w")))
        return;
    fprintf(f, "# index condition median min max predicted (generated tokens/s)\n");
    for (uint32_t i = 0; i < L->cfg.n_conditions; i++)
        fprintf(f, "%u %s %g %g %g %g\n", i, L->cond[i].name, med[i], mn[i], mx[i],
                1000.0 / L->cond[i].pred_ms);
    fclose(f);
    snprintf(path, sizeof path, "%s/plots.gp", L->dir);
    if (!(f = fopen(path, "w")))
        return;
    fprintf(f, "# plots.gp — written by `swarm lab` (text generation)\n"
               "set terminal pngcairo size 960,560 noenhanced font \",10\"\n"
               "set datafile missing \"nan\"\nset grid ytics\nset key outside right top\n"
               "set xtics rotate by -25\nset style fill solid 0.6 border -1\nset boxwidth 0.6\n"
               "set output \"gen_tok_s.png\"\nset logscale y\n"
               "set title \"generated tokens/s (median of %u; bars: min-max; x: predicted)\"\n"
               "set ylabel \"tokens/s (log)\"\n"
               "plot \"gen_tok_s.dat\" using 1:3:xtic(2) with boxes title \"measured\", \\\n"
               "     \"\" using 1:3:4:5 with yerrorbars lc rgb \"black\" pt 0 title \"min-max\", \\\n"
               "     \"\" using 1:6 with points pt 2 ps 2 lc rgb \"red\" title \"predicted\"\n",
            L->cfg.repeats);
    fclose(f);
    char cmd[PATH_MAX + 64];
    snprintf(cmd, sizeof cmd, "cd '%s' && gnuplot plots.gp 1>&2", L->dir);
    if (strchr(L->dir, '\'') || system(cmd))
        log_warn("plots: gnuplot failed or is missing; the data and plots.gp are in %s", L->dir);
}

/* A row printer of results.jsonl: one good (not void) run's line o and its result r; rows
 * printed so far (0: print the table's head first); returns 1 if it printed a row. */
typedef int (*s_row_fn)(const ll_lab *L, json_t *o, json_t *r, FILE *f, int rows);

/* Every good run of results.jsonl through row (the report's tables share the reading); the
 * rows it printed. */
static int s_each_result(const ll_lab *L, FILE *f, s_row_fn row)
{
    char path[PATH_MAX + 32];
    snprintf(path, sizeof path, "%s/results.jsonl", L->dir);
    FILE *in = fopen(path, "r");
    char *line = NULL;
    size_t cap = 0;
    int rows = 0;
    while (in && getline(&line, &cap, in) > 0) {
        json_t *o = json_loads(line, 0, NULL), *r = o ? json_object_get(o, "result") : NULL;
        if (json_is_object(r) && !json_is_true(json_object_get(r, "void")))
            rows += row(L, o, r, f, rows);
        json_decref(o);
    }
    free(line);
    if (in)
        fclose(in);
    return rows;
}

/* The SSD runs' generated tokens against the prediction's terms (ms a token): compute (the
 * reference's calibration), expert reads, their hashes, the ring; measured from the run's own
 * clocks (expert_read_ms_1, expert_hash_ms_1 over steps_1), the rest of its mean token time
 * (1000 / gen_tok_s) is compute and what the ring left on the step. */
static int s_row_terms(const ll_lab *L, json_t *o, json_t *r, FILE *f, int rows)
{
    (void)L;
    double steps = s_num(r, "steps_1"), rd = s_num(r, "expert_read_ms_1");
    double hs = s_num(r, "expert_hash_ms_1"), tok = 1000.0 / s_num(r, "gen_tok_s");
    if (!(steps > 0) || !isfinite(rd) || !isfinite(tok))
        return 0;
    if (!rows)
        fprintf(f, "\n## SSD: where a generated token's time went (ms), predicted / measured\n\n"
                   "| run | token | compute (+ ring) | expert reads | hashes | expert read "
                   "GB/s |\n|---|---|---|---|---|---|\n");
    rd /= steps;
    hs /= steps;
    double pc = s_num(o, "predicted_compute_ms") + s_num(o, "predicted_ring_ms");
    double xb = s_num(r, "expert_read_bytes_1") / steps;
    fprintf(f, "| %s, repeat %lld | %.2f / %.2f | %.2f / %.2f | %.2f / %.2f | "
               "%.2f / %.2f | %.2f / %.2f |\n",
            json_string_value(json_object_get(o, "condition")),
            (long long)json_integer_value(json_object_get(o, "repeat")),
            s_num(o, "predicted_ms_per_token"), tok, pc, tok - rd - hs,
            s_num(o, "predicted_expert_read_ms"), rd, s_num(o, "predicted_expert_hash_ms"), hs,
            s_num(o, "disk_gbps"), rd > 0 ? xb / (rd * 1e6) : NAN);
    return 1;
}

static void s_report_terms(const ll_lab *L, FILE *f)
{
    if (s_each_result(L, f, s_row_terms))
        fprintf(f, "\nToken: 1000 / gen_tok_s (the mean over the generated tokens). Compute: the "
                   "SSD arm's calibration with every layer resident (ITL p50; the reference's "
                   "where it could not run), plus the ring's reads not hidden behind it; "
                   "measured as the token less the run's own expert read and hash clocks. "
                   "Measured reads and hashes are a one-position pass's mean (steps_1: with a "
                   "prompt's last chunk of one position, which misses more than a generated "
                   "token's pass, so they run high and compute low); predicted ones the replay's "
                   "over the passes gen_tok_s times. Expert read GB/s: predicted, the replay's "
                   "passes after its first (docs/lab.md); measured, the run's expert bytes over "
                   "its read clock.\n");
}

/* The SSD arm's expert figures, per generated token (one-position steps: the prompt's passes
 * apart): bytes read against what it must read (each miss's expert read) and against the
 * prediction, the cache's hit rate, the disk bound of those bytes. */
static int s_row_experts(const ll_lab *L, json_t *o, json_t *r, FILE *f, int rows)
{
    double steps = s_num(r, "steps_1"), xb = s_num(r, "expert_read_bytes_1");
    double h = s_num(r, "expert_cache_hits_1"), m = s_num(r, "expert_cache_misses_1");
    double routed = s_num(o, "routed_read_bytes_per_token"), disk = s_num(o, "disk_gbps");
    if (!(steps > 0) || !isfinite(xb) || !(routed > 0))
        return 0;
    if (!rows)
        fprintf(f, "\n## Experts: what the SSD arm read a generated token\n\n"
                   "| run | MiB read | must read (misses x expert) | ratio | predicted MiB "
                   "(replay / uniform) | uncached routed MiB | hit rate | predicted (replay "
                   "/ uniform) | disk bound ms (tok/s) | gen tok/s | predicted tok/s "
                   "(replay / uniform) |\n"
                   "|---|---|---|---|---|---|---|---|---|---|---|\n");
    double per_x = routed / L->k / (double)(L->n_layers - L->n_resident); /* one expert */
    double ring = s_num(r, "streamed_per_pass_bytes");
    double got = (xb + (isfinite(ring) ? ring * steps : 0)) / steps;
    double must = (m * per_x + (isfinite(ring) ? ring * steps : 0)) / steps;
    double bound = got / (disk * 1e6);
    fprintf(f, "| %s r%lld | %.1f | %.1f | %.3f | %.1f / %.1f | %.1f | %.3f | %.3f / %.3f | "
               "%.1f (%.1f) | %.2f | %.2f / %.2f |\n",
            json_string_value(json_object_get(o, "condition")),
            (long long)json_integer_value(json_object_get(o, "repeat")), got / 1048576.0,
            must / 1048576.0, got / must, s_num(o, "predicted_read_bytes_per_token") / 1048576.0,
            s_num(o, "uniform_read_bytes_per_token") / 1048576.0, routed / 1048576.0,
            h + m > 0 ? h / (h + m) : NAN, s_num(o, "predicted_hit_rate"),
            s_num(o, "uniform_hit_rate"), bound, 1000.0 / bound, s_num(r, "gen_tok_s"),
            1000.0 / s_num(o, "predicted_ms_per_token"), 1000.0 / s_num(o, "uniform_ms_per_token"));
    return 1;
}

static void s_report_experts(const ll_lab *L, FILE *f)
{
    if (s_each_result(L, f, s_row_experts))
        fprintf(f, "\nPer one-position pass (the generated tokens'; a prompt's last chunk of one "
                   "position counts too). Must read: each cache miss's expert (its slices' "
                   "aligned reads) plus the ring. Predicted hit rate, replay: the calibration's "
                   "routing of the same greedy tokens through the cache's policy (LRU; "
                   "runtime/xsim.h), known before the SSD arm runs; uniform: slots / experts, "
                   "what independent uniform routing hits (the bound a model that routes near "
                   "uniformly approaches). The disk bound is the bytes read over the disk figure "
                   "measured before the runs.\n");
}

/* The speculative conditions: acceptance, tokens per pass and drafter time summed over their
 * good runs (results.jsonl again), and each against its arm without speculation. */
static void s_report_spec(const ll_lab *L, FILE *f, const double *med)
{
    double sum[LL_MAX_COND][5] = { { 0 } }; /* drafted, accepted, passes, draft ms, runs */
    char path[PATH_MAX + 32], *line = NULL;
    size_t cap = 0;
    snprintf(path, sizeof path, "%s/results.jsonl", L->dir);
    FILE *in = fopen(path, "r");
    while (in && getline(&line, &cap, in) > 0) {
        json_t *o = json_loads(line, 0, NULL), *r = o ? json_object_get(o, "result") : NULL;
        json_t *sp = r ? json_object_get(r, "speculative") : NULL;
        const char *cn = o ? json_string_value(json_object_get(o, "condition")) : NULL;
        for (uint32_t i = 0; sp && cn && i < L->cfg.n_conditions; i++)
            if (!strcmp(cn, L->cond[i].name) && !json_is_true(json_object_get(r, "void"))) {
                const char *k[4] = { "drafted", "accepted", "passes", "draft_ms" };
                for (int j = 0; j < 4; j++)
                    sum[i][j] += s_num(sp, k[j]);
                sum[i][4]++;
            }
        json_decref(o);
    }
    free(line);
    if (in)
        fclose(in);
    fprintf(f, "\n## Speculative decoding\n\n");
    for (uint32_t i = 0; i < L->cfg.n_conditions; i++) {
        const ll_cond *cd = &L->cond[i];
        if (!cd->spec || !sum[i][4])
            continue;
        double base = NAN;
        size_t bl = strcspn(cd->name, "+");
        for (uint32_t j = 0; j < L->cfg.n_conditions; j++)
            if (!L->cond[j].spec && strlen(L->cond[j].name) == bl &&
                !strncmp(L->cond[j].name, cd->name, bl))
                base = med[j];
        fprintf(f, "- %s: %.1f%% of %.0f drafts accepted, %.2f tokens a pass, drafter %.0f ms "
                   "a run; **%.2fx** the tokens/s of %.*s\n", cd->name,
                sum[i][0] ? 100 * sum[i][1] / sum[i][0] : 0, sum[i][0] / sum[i][4],
                sum[i][2] ? (sum[i][2] + sum[i][1]) / sum[i][2] : 0, sum[i][3] / sum[i][4],
                med[i] / base, (int)bl, cd->name);
    }
    fprintf(f, "\n(+spec: the model's Q4_0 copy drafts; +lookup: prompt lookup. The token ids "
               "and logits are plain generation's: the parity gate checks every such run. "
               "Predictions leave speculation out.)\n");
}

/* table.md from results.jsonl alone. */
static int s_report(ll_lab *L)
{
    char path[PATH_MAX + 32];
    snprintf(path, sizeof path, "%s/results.jsonl", L->dir);
    FILE *in = fopen(path, "r");
    if (!in)
        return -1;
    enum { K_TOK, K_TTFT, K_P50, K_P95, K_PROMPT, K_RAM, K_SSD, K_N };
    static double v[LL_MAX_COND][K_N][CONFIG_MAX_REPEATS]; /* 0.9 MB: static, not stack */
    uint32_t n[LL_MAX_COND] = { 0 }, bad[LL_MAX_COND] = { 0 };
    char *line = NULL;
    size_t cap = 0;
    while (getline(&line, &cap, in) > 0) {
        json_t *o = json_loads(line, 0, NULL);
        const char *cn = o ? json_string_value(json_object_get(o, "condition")) : NULL;
        json_t *r = o ? json_object_get(o, "result") : NULL;
        for (uint32_t i = 0; cn && i < L->cfg.n_conditions; i++) {
            if (strcmp(cn, L->cond[i].name))
                continue;
            if (!json_is_object(r) || json_is_true(json_object_get(r, "void")) || n[i] >= CONFIG_MAX_REPEATS) {
                bad[i]++;
                break;
            }
            const char *keys[K_N] = { "gen_tok_s", "ttft_ms", "itl_ms_p50", "itl_ms_p95",
                                      "prompt_tok_s", "aggregate_peak_rss_bytes",
                                      "ssd_read_bytes" };
            for (int k = 0; k < K_N; k++)
                v[i][k][n[i]] = s_num(r, keys[k]);
            n[i]++;
        }
        json_decref(o);
    }
    free(line);
    fclose(in);
    snprintf(path, sizeof path, "%s/table.md", L->dir);
    FILE *f = fopen(path, "w");
    if (!f)
        return -1;
    char how[64] = "greedy";
    if (L->cfg.llm.temperature > 0)
        snprintf(how, sizeof how, "sampled at temperature %g, repeat r seeded r",
                 (double)L->cfg.llm.temperature);
    fprintf(f, "# swarm lab: text generation\n\n%s, %u generated tokens a run (%s), "
               "context %u, batch %u, %u thread(s); cap %.0f MiB a process; resident: %u "
               "workers; %u repeat(s). Medians (min-max); predicted before any run.\n\n",
            L->cfg.llm.model, L->cfg.llm.tokens, how, L->cfg.llm.ctx, L->cfg.llm.batch,
            L->cfg.llm.threads, L->cfg.llm.cap / 1048576.0, L->workers, L->cfg.repeats);
    fprintf(f, "| condition | runs ok / void or failed | gen tok/s | predicted | error | TTFT "
               "ms | ITL p50 ms | ITL p95 ms | prompt tok/s | RAM MiB (all processes) | SSD "
               "read MiB |\n|---|---|---|---|---|---|---|---|---|---|---|\n");
    double med[LL_MAX_COND], mn[LL_MAX_COND], mx[LL_MAX_COND], ssd = NAN;
    for (uint32_t i = 0; i < L->cfg.n_conditions; i++) {
        double m[K_N], lo, hi;
        for (int k = 0; k < K_N; k++)
            s_stats(v[i][k], n[i], &m[k], k == K_TOK ? &mn[i] : &lo, k == K_TOK ? &mx[i] : &hi);
        med[i] = m[K_TOK];
        double pred = 1000.0 / L->cond[i].pred_ms;
        fprintf(f, "| %s | %u / %u | %.2f (%.2f-%.2f) | %.2f | %+.0f%% | %.0f | %.1f | %.1f | "
                   "%.1f | %.0f | %.0f |\n", L->cond[i].name, n[i], bad[i], m[K_TOK], mn[i],
                mx[i], pred, (m[K_TOK] / pred - 1) * 100, m[K_TTFT], m[K_P50], m[K_P95],
                m[K_PROMPT], m[K_RAM] / 1048576.0, m[K_SSD] / 1048576.0);
        if (!strcmp(L->cond[i].arm, "ssd"))
            ssd = m[K_TOK];
    }
    fprintf(f, "\n## Does the resident pipeline's advantage over SSD streaming hold?\n\n");
    for (uint32_t i = 0; i < L->cfg.n_conditions; i++) {
        if (strcmp(L->cond[i].arm, "resident") || !isfinite(ssd) || !isfinite(med[i]))
            continue;
        double q = med[i] / ssd;
        fprintf(f, "- %s / ssd: **%.2fx** generated tokens/s (%s)%s\n", L->cond[i].name, q,
                q > 1 ? "the resident pipeline is ahead" : "SSD streaming is ahead",
                strstr(L->cond[i].name, "/lan") ? "; the article's dense lab: 13.70x" : "");
    }
    if (!isfinite(ssd))
        fprintf(f, "- no finished ssd run: no ratio\n");
    s_report_spec(L, f, med);
    fprintf(f, "\nGates: every resident run checked its token ids and logits against the "
               "reference arm (parity), every SSD run its cache and content gates; a run that "
               "failed one counts under void and is left out of the figures. The article's "
               "%.2fx is the dense model's resident/lan over ssd steps/s.\n", LL_ARTICLE_RATIO);
    s_report_experts(L, f);
    s_report_terms(L, f);
    fclose(f);
    s_plot(L, med, mn, mx);
    snprintf(path, sizeof path, "%s/table.md", L->dir);
    FILE *t = fopen(path, "r");
    int ch;
    while (t && (ch = fgetc(t)) != EOF)
        fputc(ch, stdout);
    if (t)
        fclose(t);
    return 0;
}

/* ---------------------------------------------------------------- main */

/* The text lab's command line: CONFIG.ini [--quick] [--repeats N] [--out DIR] [--set ...]. */
typedef struct {
    const char *config, *out;
    int quick;
    uint32_t repeats;             /* 0: [lab] repeats */
    int n_sets;
    const char *sets[64];         /* SECTION.KEY=VALUE, applied over the file in order */
} ll_args;

static int s_args(int argc, char **argv, ll_args *a)
{
    static const struct option opts[] = { { "quick", no_argument, 0, 'q' },
                                          { "out", required_argument, 0, 'o' },
                                          { "repeats", required_argument, 0, 'r' },
                                          { "set", required_argument, 0, 'S' },
                                          { 0, 0, 0, 0 } };
    int c;
    memset(a, 0, sizeof *a);
    optind = 1;
    while ((c = getopt_long(argc, argv, "", opts, NULL)) != -1) {
        switch (c) {
        case 'q': a->quick = 1; break;
        case 'o': a->out = optarg; break;
        case 'r': a->repeats = (uint32_t)strtoul(optarg, NULL, 10); break;
        case 'S':
            if (a->n_sets == (int)(sizeof a->sets / sizeof a->sets[0]))
                goto usage;
            a->sets[a->n_sets++] = optarg;
            break;
        default: goto usage;
        }
    }
    if (optind != argc - 1)
        goto usage;
    a->config = argv[optind];
    return 0;
usage:
    fprintf(stderr, "usage: swarm lab CONFIG.ini [--quick] [--repeats N] [--out DIR] "
                    "[--set SECTION.KEY=VALUE]...\n");
    return -1;
}

/* The config (dist/config.c, the one loader), --set over it, then --quick and --repeats. */
static int s_load(ll_lab *L, const ll_args *a)
{
    char err[1024];
    config_defaults(&L->cfg);
    if (config_load(&L->cfg, a->config, err, sizeof err))
        goto err;
    for (int i = 0; i < a->n_sets; i++)
        if (config_set(&L->cfg, a->sets[i], err, sizeof err))
            goto err;
    if (!L->cfg.llm.model[0] || !L->cfg.n_conditions) {
        log_error("%s: needs [llm] model and [lab] conditions", a->config);
        return -1;
    }
    if (a->quick) { /* a look, not a measurement: one short repeat */
        L->cfg.llm.tokens = 8;
        L->cfg.repeats = 1;
    }
    if (a->repeats)
        L->cfg.repeats = a->repeats;
    return 0;
err:
    log_error("%s", err);
    return -1;
}

int lab_llm_main(int argc, char **argv)
{
    static ll_lab lab;
    ll_lab *L = &lab;
    ll_args args;
    const char *out;
    if (s_args(argc, argv, &args))
        return EXIT_USAGE;
    out = args.out;
    memset(L, 0, sizeof *L);
    if (s_load(L, &args))
        return EXIT_USAGE;
    if (s_conditions(L))
        return EXIT_USAGE;
    ssize_t sl = readlink("/proc/self/exe", L->self, sizeof L->self - 1);
    L->self[sl > 0 ? sl : 0] = 0;
    if (out) {
        snprintf(L->dir, sizeof L->dir, "%s", out);
    } else {
        char stamp[32];
        time_t now = time(NULL);
        strftime(stamp, sizeof stamp, "%Y%m%d-%H%M%S", localtime(&now));
        snprintf(L->dir, sizeof L->dir, "%s/llm-%s", L->cfg.lab_out, stamp);
    }
    char sub[PATH_MAX + 16];
    snprintf(sub, sizeof sub, "%s/logs", L->dir);
    if (util_mkdir_p(sub) || (snprintf(sub, sizeof sub, "%s/runs", L->dir), util_mkdir_p(sub))) {
        log_error("%s: cannot create: %s", sub, strerror(errno));
        return EXIT_FAIL;
    }
    int mrc = s_make_model(L);
    if (mrc)
        return mrc > 0 ? mrc : EXIT_FAIL;
    if (s_make_draft(L) || s_workers(L) || s_predict(L))
        return EXIT_FAIL;
    char path[PATH_MAX + 32];
    snprintf(path, sizeof path, "%s/results.jsonl", L->dir);
    log_info("%u condition(s) x %u repeat(s), %u tokens each, into %s", L->cfg.n_conditions,
             L->cfg.repeats, L->cfg.llm.tokens, L->dir);
    int failed = 0;
    for (uint32_t r = 0; r < L->cfg.repeats; r++)
        for (uint32_t i = 0; i < L->cfg.n_conditions; i++) {
            char tag[16];
            int rc;
            snprintf(tag, sizeof tag, "r%u", r + 1);
            json_t *res = s_generate(L, &L->cond[i], L->cfg.llm.tokens, tag, &rc);
            json_t *o = json_object();
            json_object_set_new(o, "condition", json_string(L->cond[i].name));
            json_object_set_new(o, "repeat", json_integer(r + 1));
            json_object_set_new(o, "predicted_ms_per_token", json_real(L->cond[i].pred_ms));
            if (L->expert_slots && !strcmp(L->cond[i].arm, "ssd")) {
                json_object_set_new(o, "predicted_read_bytes_per_token",
                                    json_real(L->cond[i].pred_read));
                json_object_set_new(o, "predicted_hit_rate", json_real(L->cond[i].pred_hit));
                json_object_set_new(o, "hit_rate_from", json_string(L->has_sim ? "replay"
                                                                               : "uniform"));
                json_object_set_new(o, "uniform_ms_per_token", json_real(L->cond[i].uni_ms));
                json_object_set_new(o, "uniform_read_bytes_per_token",
                                    json_real(L->cond[i].uni_read));
                json_object_set_new(o, "uniform_hit_rate", json_real(L->cond[i].uni_hit));
                json_object_set_new(o, "disk_gbps", json_real(L->disk_gbps));
                json_object_set_new(o, "uniform_disk_gbps", json_real(L->disk_uni_gbps));
                json_object_set_new(o, "routed_read_bytes_per_token",
                                    json_integer((json_int_t)L->routed_read));
                json_object_set_new(o, "predicted_compute_ms",
                                    json_real(isfinite(L->ssd_ms) ? L->ssd_ms : L->ref_ms));
                json_object_set_new(o, "predicted_expert_read_ms",
                                    json_real(L->cond[i].pred_read_ms));
                json_object_set_new(o, "predicted_expert_hash_ms",
                                    json_real(L->cond[i].pred_hash_ms));
                json_object_set_new(o, "predicted_ring_ms", json_real(L->cond[i].pred_ring_ms));
                json_object_set_new(o, "disk_first_pass_gbps", json_real(L->disk_first_gbps));
            }
            json_object_set_new(o, "exit_code", json_integer(rc));
            json_object_set_new(o, "result", res ? res : json_null());
            if (!res)
                failed++;
            char *s = json_dumps(o, JSON_COMPACT);
            FILE *f = fopen(path, "a");
            if (s && f)
                fprintf(f, "%s\n", s);
            if (f)
                fclose(f);
            free(s);
            json_decref(o);
            log_info("%s repeat %u: %s", L->cond[i].name, r + 1,
                     res ? "done" : "failed (see its log under logs/)");
        }
    if (s_report(L))
        log_warn("cannot write %s/table.md", L->dir);
    log_info("results in %s (%d failed run%s)", L->dir, failed, failed == 1 ? "" : "s");
    return failed ? EXIT_FAIL : EXIT_OK;
}
