/* test_config.c — INI config: defaults, a good file, errors naming file:line and key, --set, profiles. tests/ */
#include "dist/config.h"
#include "base/sec.h"
#include "tests/check.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>
#include <zmq.h>

static char s_dir[512];

/* Write text to SWARM_TEST_TMP/name; returns the path (static buffer per call site's copy). */
static const char *s_write(char *path, size_t len, const char *name, const char *text)
{
    snprintf(path, len, "%s/%s", s_dir, name);
    FILE *f = fopen(path, "w");
    if (!f) {
        CHECK(0, "cannot write %s", path);
        return path;
    }
    fputs(text, f);
    fclose(f);
    return path;
}

/* Load text as a file; expect failure whose message starts with "PATH:LINE: " and contains
 * every fragment in `want` (NULL-terminated). */
static void s_expect_error(const char *name, const char *text, int line, const char *const *want)
{
    char path[600], err[1024] = "", prefix[700];
    config_t c;
    config_defaults(&c);
    s_write(path, sizeof path, name, text);
    int rc = config_load(&c, path, err, sizeof err);
    CHECK(rc == -1, "%s: loaded a bad file", name);
    snprintf(prefix, sizeof prefix, "%s:%d: ", path, line);
    CHECK(strncmp(err, prefix, strlen(prefix)) == 0, "%s: error '%s' does not start with '%s'",
          name, err, prefix);
    for (int i = 0; want && want[i]; i++)
        CHECK(strstr(err, want[i]) != NULL, "%s: error '%s' lacks '%s'", name, err, want[i]);
    CHECK(c.path[0] == 0, "%s: a failed load set the config's path", name);
}

static void s_defaults(void)
{
    config_t c;
    config_defaults(&c);
    CHECK(!strcmp(c.model, "models/lab02.gguf"), "model %s", c.model);
    CHECK(c.layers == 24 && c.dim == 4096 && c.seed == 1, "model %u x %u seed %llu", c.layers,
          c.dim, (unsigned long long)c.seed);
    CHECK(c.steps == 32, "steps %u", c.steps);
    CHECK(c.threads == 1, "threads %u", c.threads);
    CHECK(c.cap_bytes == 600ull << 20, "cap %llu", (unsigned long long)c.cap_bytes);
    CHECK(c.queue_depth == 8 && c.chunk_bytes == 4ull << 20, "qd %u chunk %llu", c.queue_depth,
          (unsigned long long)c.chunk_bytes);
    CHECK(c.buffered == 0, "buffered by default");
    CHECK(c.workers == 3 && c.inflight == 1, "workers %u inflight %u", c.workers, c.inflight);
    CHECK(c.worker_cap_bytes == 600ull << 20, "worker cap %llu",
          (unsigned long long)c.worker_cap_bytes);
    CHECK(c.n_workers == 0 && c.n_profiles == 0, "workers/profiles listed by default");
    CHECK(!strcmp(c.profile, "none"), "profile %s", c.profile);
    CHECK(c.repeats == 5 && c.n_conditions == 6, "repeats %u conditions %u", c.repeats,
          c.n_conditions);
    CHECK(!strcmp(c.conditions[0], "reference") && !strcmp(c.conditions[5], "resident/wan"),
          "conditions %s .. %s", c.conditions[0], c.conditions[5]);
    CHECK(c.path[0] == 0, "defaults have a path");
    CHECK(c.generate == 0, "the defaults generate a missing model");
}

static void s_good_file(void)
{
    char path[600], err[1024] = "";
    config_t c;
    config_defaults(&c);
    s_write(path, sizeof path, "good.ini",
            "; a comment\n"
            "# another\n"
            "[model]\n"
            "path = /tmp/m.gguf   ; inline comment\n"
            "layers = 6\n"
            "dim = 256\n"
            "seed = 0x10\n"
            "\n"
            "[run]\n"
            "steps = 8\n"
            "input_seed = 99\n"
            "threads = 2\n"
            "[ssd]\n"
            "cap = 20M\n"
            "queue_depth = 4\n"
            "chunk = 64K\n"
            "overhead = 1M\n"
            "io = buffered\n"
            "[swarm]\n"
            "workers = 2\n"
            "inflight = 3\n"
            "cap = 1G\n"
            "threads = 1\n"
            "host = 10.0.0.1\n"
            "heartbeat_ms = 50\n"
            "liveness = 4\n"
            "step_deadline_ms = 1500\n"
            "plaintext = yes\n"
            "[worker.a]\n"
            "endpoint = tcp://10.0.0.2:7000\n"
            "cap = 300M\n"
            "[worker.b]\n"
            "endpoint = tcp://10.0.0.3:7000\n"
            "[netem]\n"
            "profile = wifi\n"
            "[profile.slow]\n"
            "rtt_ms = 100\n"
            "jitter_ms = 5\n"
            "jitter_dist = normal\n"
            "loss = 1%\n"
            "rate = 1Gbit\n"
            "[profile.wan]\n"
            "loss = 0.01\n"
            "[lab]\n"
            "repeats = 3\n"
            "conditions = reference, ssd,resident/slow\n"
            "out = /tmp/res\n");
    int rc = config_load(&c, path, err, sizeof err);
    CHECK(rc == 0, "good file: %s", err);
    CHECK(!strcmp(c.path, path), "path '%s'", c.path);
    CHECK(!strcmp(c.model, "/tmp/m.gguf"), "model '%s' (inline comment kept?)", c.model);
    CHECK(c.layers == 6 && c.dim == 256 && c.seed == 16, "model %u x %u seed %llu", c.layers,
          c.dim, (unsigned long long)c.seed);
    CHECK(c.steps == 8 && c.input_seed == 99 && c.threads == 2, "run %u %llu %u", c.steps,
          (unsigned long long)c.input_seed, c.threads);
    CHECK(c.cap_bytes == 20ull << 20, "cap %llu", (unsigned long long)c.cap_bytes);
    CHECK(c.queue_depth == 4 && c.chunk_bytes == 64ull << 10 && c.overhead_bytes == 1ull << 20,
          "ssd %u %llu %llu", c.queue_depth, (unsigned long long)c.chunk_bytes,
          (unsigned long long)c.overhead_bytes);
    CHECK(c.buffered == 1, "io = buffered not applied");
    CHECK(c.workers == 2 && c.inflight == 3 && c.worker_cap_bytes == 1ull << 30,
          "swarm %u %u %llu", c.workers, c.inflight, (unsigned long long)c.worker_cap_bytes);
    CHECK(!strcmp(c.host, "10.0.0.1") && c.heartbeat_ms == 50 && c.liveness == 4 &&
              c.step_deadline_ms == 1500 && c.plaintext == 1,
          "swarm host %s hb %u live %u deadline %u plaintext %d", c.host, c.heartbeat_ms,
          c.liveness, c.step_deadline_ms, c.plaintext);
    CHECK(c.n_workers == 2, "workers listed: %u", c.n_workers);
    CHECK(!strcmp(c.worker[0].name, "a") && !strcmp(c.worker[0].endpoint, "tcp://10.0.0.2:7000") &&
              c.worker[0].cap_bytes == 300ull << 20,
          "worker a: %s %s %llu", c.worker[0].name, c.worker[0].endpoint,
          (unsigned long long)c.worker[0].cap_bytes);
    CHECK(!strcmp(c.worker[1].name, "b") && c.worker[1].cap_bytes == 0,
          "worker b has no cap of its own (0: [swarm] cap at run time): %s %llu", c.worker[1].name,
          (unsigned long long)c.worker[1].cap_bytes);
    CHECK(!strcmp(c.profile, "wifi"), "netem profile %s", c.profile);
    CHECK(c.n_profiles == 2, "profiles %u", c.n_profiles);
    CHECK(c.repeats == 3 && c.n_conditions == 3 && !strcmp(c.conditions[2], "resident/slow"),
          "lab %u %u %s", c.repeats, c.n_conditions, c.conditions[2]);
    CHECK(!strcmp(c.lab_out, "/tmp/res"), "lab out %s", c.lab_out);

    netem_profile p;
    CHECK(config_profile(&c, "slow", &p, err, sizeof err) == 0, "slow: %s", err);
    CHECK(p.delay_ns == 50000000ull && p.jitter_ns == 5000000ull && p.dist == NETEM_DIST_NORMAL,
          "slow: delay %llu jitter %llu dist %u", (unsigned long long)p.delay_ns,
          (unsigned long long)p.jitter_ns, p.dist);
    CHECK(p.loss > 0.0099 && p.loss < 0.0101 && p.rate_bps == 125000000ull,
          "slow: loss %g rate %llu", p.loss, (unsigned long long)p.rate_bps);
    /* [profile.wan] starts from the built-in and changes only the loss. */
    CHECK(config_profile(&c, "wan", &p, err, sizeof err) == 0, "wan: %s", err);
    CHECK(p.delay_ns == 30000000ull && p.dist == NETEM_DIST_UNIFORM && p.loss > 0.0099 &&
              p.loss < 0.0101,
          "custom wan: delay %llu dist %u loss %g", (unsigned long long)p.delay_ns, p.dist,
          p.loss);
}

static void s_errors(void)
{
    s_expect_error("unknown_key.ini", "[ssd]\ncap = 20M\nbogus = 1\n", 3,
                   (const char *const[]){ "[ssd] bogus", "unknown key", NULL });
    s_expect_error("unknown_section.ini", "; c\n[model]\nlayers = 2\n[nope]\nx = 1\n", 5,
                   (const char *const[]){ "[nope] x", "unknown section", NULL });
    s_expect_error("bad_qtype.ini", "[quantized]\n; the arm's W\ntype = q8_1\n", 3,
                   (const char *const[]){ "[quantized] type", "unknown type 'q8_1'",
                                          "q8_0, q6_K, q5_K, q4_K, q4_0, q4_1, q5_0, q5_1, iq4_nl, iq4_xs, q3_K or q2_K", NULL });
    s_expect_error("bad_int.ini", "[run]\n\nsteps = abc\n", 3,
                   (const char *const[]){ "[run] steps", "'abc'", "integer", NULL });
    s_expect_error("bad_int2.ini", "[run]\nsteps = 12x\n", 2,
                   (const char *const[]){ "[run] steps", "'12x'", NULL });
    s_expect_error("negative.ini", "[model]\nlayers = -3\n", 2,
                   (const char *const[]){ "[model] layers", "'-3'", NULL });
    s_expect_error("range.ini", "[ssd]\nqueue_depth = 0\n", 2,
                   (const char *const[]){ "[ssd] queue_depth", "'0'", "1..256", NULL });
    s_expect_error("range2.ini", "[ssd]\nqueue_depth = 257\n", 2,
                   (const char *const[]){ "[ssd] queue_depth", "1..256", NULL });
    s_expect_error("range3.ini", "[swarm]\nliveness = 1\n", 2,
                   (const char *const[]){ "[swarm] liveness", NULL });
    s_expect_error("bad_size.ini", "[ssd]\ncap = 12Q\n", 2,
                   (const char *const[]){ "[ssd] cap", "'12Q'", "size", NULL });
    s_expect_error("small_size.ini", "[ssd]\ncap = 1K\n", 2,
                   (const char *const[]){ "[ssd] cap", "at least", NULL });
    s_expect_error("bad_chunk.ini", "[ssd]\nchunk = 100\n", 2,
                   (const char *const[]){ "[ssd] chunk", NULL });
    s_expect_error("bad_bool.ini", "[swarm]\nplaintext = maybe\n", 2,
                   (const char *const[]){ "[swarm] plaintext", "'maybe'", "boolean", NULL });
    s_expect_error("bad_io.ini", "[ssd]\nio = mmap\n", 2,
                   (const char *const[]){ "[ssd] io", "direct or buffered", NULL });
    s_expect_error("bad_cond.ini", "[lab]\nconditions = reference, fast\n", 2,
                   (const char *const[]){ "[lab] conditions", "'fast'", NULL });
    s_expect_error("worker_key.ini", "[worker.w1]\nendpoint = tcp://x:1\nport = 3\n", 3,
                   (const char *const[]){ "[worker.w1] port", "unknown key", NULL });
    s_expect_error("profile_key.ini", "[profile.x]\nrtt_ms = 3\nspeed = 3\n", 3,
                   (const char *const[]){ "[profile.x] speed", NULL });
    s_expect_error("profile_loss.ini", "[profile.x]\nloss = 1\n", 2,
                   (const char *const[]){ "[profile.x] loss", NULL });
    s_expect_error("syntax.ini", "[run]\nsteps = 3\nthis line has no equals sign\n", 3,
                   (const char *const[]){ "syntax error", NULL });
    /* Only the first error is reported, with its own line. */
    s_expect_error("two_errors.ini", "[run]\nsteps = 0\n[ssd]\nbogus = 1\n", 2,
                   (const char *const[]){ "[run] steps", NULL });

    char err[1024] = "", path[600];
    config_t c;
    config_defaults(&c);
    snprintf(path, sizeof path, "%s/does-not-exist.ini", s_dir);
    CHECK(config_load(&c, path, err, sizeof err) == -1, "loaded a missing file");
    CHECK(strstr(err, path) && strstr(err, "cannot open"), "missing file error: %s", err);
}

static void s_set(void)
{
    config_t c;
    char err[1024] = "";
    netem_profile p;
    config_defaults(&c);
    CHECK(config_set(&c, "ssd.cap=20M", err, sizeof err) == 0, "ssd.cap: %s", err);
    CHECK(c.cap_bytes == 20ull << 20, "cap %llu", (unsigned long long)c.cap_bytes);
    CHECK(config_set(&c, "run.steps=3", err, sizeof err) == 0 && c.steps == 3, "steps: %s", err);
    CHECK(config_set(&c, "model.path=/a.b/c.gguf", err, sizeof err) == 0 &&
              !strcmp(c.model, "/a.b/c.gguf"),
          "model.path: %s (%s)", err, c.model);
    CHECK(config_set(&c, "ssd.io=buffered", err, sizeof err) == 0 && c.buffered, "io: %s", err);
    CHECK(config_set(&c, "profile.wan.loss=0.01", err, sizeof err) == 0, "profile.wan.loss: %s",
          err);
    CHECK(config_profile(&c, "wan", &p, err, sizeof err) == 0 && p.loss > 0.0099 &&
              p.loss < 0.0101 && p.delay_ns == 30000000ull,
          "wan after --set: loss %g delay %llu", p.loss, (unsigned long long)p.delay_ns);
    CHECK(config_set(&c, "worker.w9.endpoint=tcp://1.2.3.4:5", err, sizeof err) == 0 &&
              c.n_workers == 1 && !strcmp(c.worker[0].endpoint, "tcp://1.2.3.4:5"),
          "worker.w9.endpoint: %s", err);

    static const char *const bad[] = { "ssd.cap=lots", "ssd.nope=1", "nope.x=1", "steps=3",
                                       "ssd.cap", ".cap=1M", "ssd.=1M", "run.steps=0",
                                       "swarm.plaintext=2", "profile.wan.loss=2" };
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        err[0] = 0;
        CHECK(config_set(&c, bad[i], err, sizeof err) == -1, "--set %s accepted", bad[i]);
        CHECK(strstr(err, bad[i]) != NULL, "--set %s: error '%s' does not quote it", bad[i], err);
    }
    err[0] = 0;
    config_set(&c, "ssd.nope=1", err, sizeof err);
    CHECK(strstr(err, "[ssd] nope") && strstr(err, "unknown key"), "unknown key via --set: %s",
          err);
    CHECK(c.cap_bytes == 20ull << 20 && c.steps == 3, "a refused --set changed the config");
}

static void s_profiles(void)
{
    config_t c;
    netem_profile p;
    char err[1024] = "";
    config_defaults(&c);
    static const char *const names[] = { "none", "lan", "wifi", "wan" };
    for (int i = 0; i < 4; i++) {
        CHECK(config_profile(&c, names[i], &p, err, sizeof err) == 0, "builtin %s: %s", names[i],
              err);
        CHECK(!strcmp(p.name, names[i]), "builtin %s named %s", names[i], p.name);
    }
    config_profile(&c, "none", &p, err, sizeof err);
    CHECK(netem_profile_is_none(&p), "none is not a no-op");
    config_profile(&c, "lan", &p, err, sizeof err);
    CHECK(p.delay_ns == 200000ull, "lan one-way %llu ns", (unsigned long long)p.delay_ns);
    config_profile(&c, "wifi", &p, err, sizeof err);
    CHECK(p.delay_ns == 2250000ull && p.dist == NETEM_DIST_NORMAL, "wifi %llu dist %u",
          (unsigned long long)p.delay_ns, p.dist);
    err[0] = 0;
    CHECK(config_profile(&c, "mars", &p, err, sizeof err) == -1, "unknown profile accepted");
    CHECK(strstr(err, "mars") != NULL, "unknown profile error: %s", err);
    /* A custom profile shadows nothing else and is found by name. */
    CHECK(config_set(&c, "profile.mars.rtt_ms=1200", err, sizeof err) == 0, "%s", err);
    CHECK(config_profile(&c, "mars", &p, err, sizeof err) == 0 && p.delay_ns == 600000000ull,
          "custom mars delay %llu", (unsigned long long)p.delay_ns);
    CHECK(config_profile(&c, "lan", &p, err, sizeof err) == 0 && p.delay_ns == 200000ull,
          "lan changed by an unrelated custom profile");
}

/* The shipped configs load and say what they claim (run from the repository root). */
static void s_shipped(void)
{
    config_t c;
    char err[1024] = "";
    config_defaults(&c);
    CHECK(config_load(&c, "configs/lab02.ini", err, sizeof err) == 0, "lab02.ini: %s", err);
    CHECK(c.layers == 24 && c.dim == 4096 && c.seed == 1 && !strcmp(c.model, "models/lab02.gguf"),
          "lab02 model %s %u x %u", c.model, c.layers, c.dim);
    CHECK(c.generate == 1, "lab02.ini must say [model] generate = 1 (make lab relies on it)");
    CHECK(c.steps == 32 && c.cap_bytes == 600ull << 20 && c.queue_depth == 8 &&
              c.chunk_bytes == 4ull << 20,
          "lab02 run/ssd %u %llu %u %llu", c.steps, (unsigned long long)c.cap_bytes,
          c.queue_depth, (unsigned long long)c.chunk_bytes);
    CHECK(c.workers == 3 && c.worker_cap_bytes == 600ull << 20 && c.inflight == 1,
          "lab02 swarm %u %llu %u", c.workers, (unsigned long long)c.worker_cap_bytes, c.inflight);
    CHECK(c.repeats == 5 && c.n_conditions == 7 && !strcmp(c.conditions[1], "ssd") &&
              !strcmp(c.conditions[2], "quantized") && !strcmp(c.conditions[6], "resident/wan"),
          "lab02 lab %u %u", c.repeats, c.n_conditions);
    CHECK(!strcmp(c.quant_type, "q8_0"), "lab02 [quantized] type %s", c.quant_type);

    config_defaults(&c);
    CHECK(config_load(&c, "configs/tiny.ini", err, sizeof err) == 0, "tiny.ini: %s", err);
    CHECK(c.layers == 6 && c.dim == 256 && !strcmp(c.model, "tests/tmp/tiny.gguf"),
          "tiny model %s %u x %u", c.model, c.layers, c.dim);
    CHECK(c.generate == 1, "tiny.ini must say [model] generate = 1 (make lab-quick)");
    CHECK(c.workers == 3 && c.repeats == 1 && c.steps == 8, "tiny %u %u %u", c.workers,
          c.repeats, c.steps);
    CHECK(c.chunk_bytes < (uint64_t)c.dim * c.dim * 4, "tiny: a layer fits in one chunk");

    config_defaults(&c);
    CHECK(config_load(&c, "configs/llm.ini", err, sizeof err) == 0, "llm.ini: %s", err);
    CHECK(c.llm.on && !strcmp(c.llm.model, "models/llm-tinyllama-f16.gguf") && c.llm.generate,
          "llm.ini [llm] %d %s %d", c.llm.on, c.llm.model, c.llm.generate);
    CHECK(c.llm.dim == 2048 && c.llm.layers == 22 && !strcmp(c.llm.type, "f16") &&
              c.llm.cap == 600ull << 20 && c.llm.workers == 0 && c.llm.tokens == 32,
          "llm.ini shape %u x %u %s", c.llm.layers, c.llm.dim, c.llm.type);
    CHECK(c.repeats == 3 && c.n_conditions == 6 && !strcmp(c.conditions[0], "reference") &&
              !strcmp(c.conditions[5], "resident/wan") && !strcmp(c.lab_out, "results"),
          "llm.ini [lab] %u %u", c.repeats, c.n_conditions);
}

/* Every key the "unknown key" message lists is one s_apply knows: a bad value gets a value
 * error (or, for free-form strings, is taken), never "unknown key". */
static void s_known_keys(void)
{
    static const char *const sections[] = { "model", "run", "ssd", "quantized", "swarm",
                                             "security", "netem", "lab", "llm" };
    for (size_t i = 0; i < sizeof sections / sizeof sections[0]; i++) {
        char known[512], list[512], *save = NULL;
        int rc = config_known_keys(sections[i], known, sizeof known);
        CHECK(rc == 0 && known[0], "[%s] has no key list", sections[i]);
        if (rc)
            continue;
        snprintf(list, sizeof list, "%s", known);
        for (char *k = strtok_r(list, ", ", &save); k; k = strtok_r(NULL, ", ", &save)) {
            config_t c;
            char set[256], err[1024] = "";
            config_defaults(&c);
            snprintf(set, sizeof set, "%s.%s=~bad~", sections[i], k);
            config_set(&c, set, err, sizeof err);
            CHECK(!strstr(err, "unknown key"), "listed key %s: %s", set, err);
        }
    }
    char buf[64] = "x";
    CHECK(config_known_keys("nope", buf, sizeof buf) == -1 && !buf[0],
          "an unknown section has keys: '%s'", buf);
    /* the old fixed lists, unchanged by the table that now makes them */
    CHECK(config_known_keys("swarm", buf, 0) == 0, "a zero-length buffer");
    char known[512];
    config_known_keys("swarm", known, sizeof known);
    CHECK(!strcmp(known, "workers, inflight, cap, threads, host, heartbeat_ms, liveness, "
                         "step_deadline_ms, respawn, plaintext, slowdown"),
          "[swarm] keys: %s", known);
    config_known_keys("ssd", known, sizeof known);
    CHECK(!strcmp(known, "cap, queue_depth, chunk, overhead, io, buffers"), "[ssd] keys: %s",
          known);
    config_known_keys("lab", known, sizeof known);
    CHECK(!strcmp(known, "repeats, conditions, out"), "[lab] keys: %s", known);
    s_expect_error("key_list.ini", "[model]\nlayers = 2\nwidth = 3\n", 3,
                   (const char *const[]){ "[model] width", "unknown key",
                                          "path, generate, layers, dim, seed", NULL });
    s_expect_error("section_list.ini", "[modle]\npath = x\n", 2,
                   (const char *const[]){ "unknown section", "model, run, ssd, quantized",
                                          "lab, llm, worker.NAME, profile.NAME", NULL });
}

/* The text lab's [llm] section, read by the same loader: every key, its defaults, and the
 * [lab] defaults a text-lab file takes where it leaves them out. */
static void s_llm_good(void)
{
    char path[600], err[1024] = "";
    config_t c;
    config_defaults(&c);
    CHECK(!c.llm.on && !c.llm.model[0] && c.llm.dim == 2048 && c.llm.layers == 22 &&
              c.llm.heads == 32 && c.llm.kv_heads == 4 && c.llm.ff == 5632 &&
              c.llm.ctx_train == 2048 && c.llm.seed == 1,
          "[llm] shape defaults (TinyLlama-1.1B): %u %u %u %u %u %u %u", c.llm.dim,
          c.llm.layers, c.llm.heads, c.llm.kv_heads, c.llm.ff, c.llm.ctx_train, c.llm.seed);
    CHECK(!strcmp(c.llm.type, "f16") && !strcmp(c.llm.prompt, "Once upon a time") &&
              c.llm.tokens == 32 && c.llm.ctx == 512 && c.llm.batch == 32 &&
              c.llm.threads == 1 && c.llm.workers == 0 && c.llm.cap == 600ull << 20 &&
              !c.llm.generate && c.llm.temperature == 0,
          "[llm] run defaults: %s '%s' %u %u %u %u %u %llu", c.llm.type, c.llm.prompt,
          c.llm.tokens, c.llm.ctx, c.llm.batch, c.llm.threads, c.llm.workers,
          (unsigned long long)c.llm.cap);
    s_write(path, sizeof path, "llm_good.ini",
            "[llm]\n"
            "model = /tmp/m.gguf   ; inline comment\n"
            "generate = 1\n"
            "vocab = tests/fixtures/tok/llama-spm.gguf.gz\n"
            "dim = 64\nlayers = 6\nheads = 4\nkv_heads = 2\nff = 96\nctx_train = 256\n"
            "type = q8_0\nseed = 9\nprompt = Hello there\ntokens = 12\nctx = 128\n"
            "batch = 8\ncap = 40M\nworkers = 3\nthreads = 2\ntemperature = 0.7\n"
            "[lab]\n"
            "conditions = reference, ssd, resident, resident/lan\n"
            "out = /tmp/llm-res\n");
    CHECK(config_load(&c, path, err, sizeof err) == 0, "llm_good.ini: %s", err);
    CHECK(c.llm.on && !strcmp(c.llm.model, "/tmp/m.gguf") && c.llm.generate &&
              !strcmp(c.llm.vocab, "tests/fixtures/tok/llama-spm.gguf.gz"),
          "[llm] %d '%s' %d '%s'", c.llm.on, c.llm.model, c.llm.generate, c.llm.vocab);
    CHECK(c.llm.dim == 64 && c.llm.layers == 6 && c.llm.heads == 4 && c.llm.kv_heads == 2 &&
              c.llm.ff == 96 && c.llm.ctx_train == 256 && !strcmp(c.llm.type, "q8_0") &&
              c.llm.seed == 9,
          "[llm] shape %u %u %u %u %u %u %s %u", c.llm.dim, c.llm.layers, c.llm.heads,
          c.llm.kv_heads, c.llm.ff, c.llm.ctx_train, c.llm.type, c.llm.seed);
    CHECK(c.llm.temperature == 0.7f, "[llm] temperature %g", (double)c.llm.temperature);
    CHECK(!strcmp(c.llm.prompt, "Hello there") && c.llm.tokens == 12 && c.llm.ctx == 128 &&
              c.llm.batch == 8 && c.llm.cap == 40ull << 20 && c.llm.workers == 3 &&
              c.llm.threads == 2,
          "[llm] run '%s' %u %u %u %llu %u %u", c.llm.prompt, c.llm.tokens, c.llm.ctx,
          c.llm.batch, (unsigned long long)c.llm.cap, c.llm.workers, c.llm.threads);
    CHECK(c.repeats == 3, "a text-lab file without [lab] repeats: %u, want the text lab's 3",
          c.repeats);
    CHECK(c.n_conditions == 4 && !strcmp(c.conditions[2], "resident") &&
              !strcmp(c.conditions[3], "resident/lan") && !strcmp(c.lab_out, "/tmp/llm-res"),
          "[lab] %u %s %s", c.n_conditions, c.conditions[2], c.lab_out);
    CHECK(!strcmp(c.model, "models/lab02.gguf") && c.steps == 32,
          "[llm] touched the dense sections: %s %u", c.model, c.steps);

    /* No [lab] conditions in a text-lab file: none (the lab asks), not the dense lab's six;
     * repeats from the file win over the text lab's default. */
    config_defaults(&c);
    s_write(path, sizeof path, "llm_nocond.ini", "[lab]\nrepeats = 7\n[llm]\nmodel = m.gguf\n");
    CHECK(config_load(&c, path, err, sizeof err) == 0, "llm_nocond.ini: %s", err);
    CHECK(c.llm.on && c.n_conditions == 0 && c.repeats == 7, "text lab: %d %u conditions, %u "
          "repeats", c.llm.on, c.n_conditions, c.repeats);
    /* A dense file keeps the dense lab's [lab] defaults and is no text-lab config. */
    config_defaults(&c);
    s_write(path, sizeof path, "dense.ini", "[run]\nsteps = 4\n");
    CHECK(config_load(&c, path, err, sizeof err) == 0, "dense.ini: %s", err);
    CHECK(!c.llm.on && c.repeats == 5 && c.n_conditions == 6, "dense: %d %u %u", c.llm.on,
          c.repeats, c.n_conditions);
    /* generate takes the bool words as [model] generate does */
    config_defaults(&c);
    CHECK(config_set(&c, "llm.generate=yes", err, sizeof err) == 0 && c.llm.generate, "%s",
          err);
}

/* Each bad [llm] value: its file, line, section, key, the value quoted and what it must be. */
static void s_llm_errors(void)
{
    static const struct { const char *key, *v, *want; } bad[] = {
        { "tokens", "0", "'0' must be an integer in 1..4096" },
        { "tokens", "4097", "'4097' must be an integer in 1..4096" },
        { "dim", "4", "'4' must be an integer in 8..65536" },
        { "layers", "513", "'513' must be an integer in 1..512" },
        { "heads", "0", "'0' must be an integer in 1..1024" },
        { "kv_heads", "1025", "'1025' must be an integer in 1..1024" },
        { "ff", "7", "'7' must be an integer in 8..262144" },
        { "ctx_train", "8", "'8' must be an integer in 16..1048576" },
        { "seed", "-1", "'-1' must be an integer in 0..4294967295" },
        { "seed", "4294967296", "'4294967296' must be an integer in 0..4294967295" },
        { "ctx", "15", "'15' must be an integer in 16..1048576" },
        { "batch", "0", "'0' must be an integer in 1..4096" },
        { "workers", "9", "'9' must be an integer in 0..8" },
        { "threads", "65", "'65' must be an integer in 1..64" },
        { "threads", "two", "'two' must be an integer in 1..64" },
        { "cap", "12Q", "'12Q' is not a size of at least 1048576 bytes" },
        { "cap", "0", "'0' is not a size of at least 1048576 bytes" },
        { "generate", "maybe", "'maybe' is not a boolean" },
        { "type", "q9_9", "unknown tensor type 'q9_9' (supported: f32, f16" },
        { "temperature", "2.5", "'2.5' must be a number in [0, 2] (0: greedy)" },
        { "temperature", "warm", "'warm' must be a number in [0, 2] (0: greedy)" },
    };
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        char text[256], name[64], head[64];
        snprintf(text, sizeof text, "; a text lab\n[llm]\nmodel = m.gguf\n%s = %s\n[lab]\n"
                 "conditions = reference\n", bad[i].key, bad[i].v);
        snprintf(name, sizeof name, "llm_bad_%zu.ini", i);
        snprintf(head, sizeof head, "[llm] %s: ", bad[i].key);
        s_expect_error(name, text, 4, (const char *const[]){ head, bad[i].want, NULL });
    }
    s_expect_error("llm_key.ini", "[llm]\nmodel = m.gguf\ntokenz = 3\n", 3,
                   (const char *const[]){ "[llm] tokenz: unknown key (known: model, generate, "
                                          "vocab, dim, layers, heads, kv_heads, ff, ctx_train, "
                                          "arch, head_dim, experts, experts_used, ff_exp, "
                                          "type, seed, prompt, tokens, temperature, ctx, "
                                          "batch, cap, workers, threads)", NULL });
    /* [lab] as the text lab writes it: the forms either lab runs pass, others are named */
    s_expect_error("llm_cond.ini", "[llm]\nmodel = m.gguf\n[lab]\nconditions = ssd, moon\n", 4,
                   (const char *const[]){ "[lab] conditions", "unknown condition 'moon'",
                                          "resident, resident/PROFILE", NULL });
    s_expect_error("llm_repeats.ini", "[llm]\nmodel = m.gguf\n[lab]\nrepeats = 0\n", 4,
                   (const char *const[]){ "[lab] repeats: '0' must be an integer in 1..1000",
                                          NULL });
}

/* --set reaches [llm] too; a refused one names itself and changes nothing. */
static void s_llm_set(void)
{
    config_t c;
    char err[1024] = "";
    config_defaults(&c);
    CHECK(config_set(&c, "llm.tokens=8", err, sizeof err) == 0 && c.llm.tokens == 8,
          "llm.tokens: %s", err);
    CHECK(config_set(&c, "llm.model=/a.b/m.gguf", err, sizeof err) == 0 &&
              !strcmp(c.llm.model, "/a.b/m.gguf"),
          "llm.model: %s", err);
    CHECK(config_set(&c, "llm.cap=64M", err, sizeof err) == 0 && c.llm.cap == 64ull << 20,
          "llm.cap: %s", err);
    CHECK(config_set(&c, "llm.type=Q8_0", err, sizeof err) == 0, "llm.type: %s", err);
    CHECK(!c.llm.on, "--set made a text-lab config (only a file's [llm] section does)");
    static const char *const bad[] = { "llm.tokens=0", "llm.tokenz=3", "llm.cap=lots",
                                       "llm.type=q9" };
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        err[0] = 0;
        CHECK(config_set(&c, bad[i], err, sizeof err) == -1, "--set %s accepted", bad[i]);
        CHECK(strstr(err, bad[i]) != NULL, "--set %s: error '%s' does not quote it", bad[i], err);
    }
    config_set(&c, "llm.tokens=0", err, sizeof err);
    CHECK(strstr(err, "[llm] tokens: '0' must be an integer in 1..4096"), "%s", err);
    config_set(&c, "llm.tokenz=3", err, sizeof err);
    CHECK(strstr(err, "[llm] tokenz: unknown key (known: model, "), "%s", err);
    CHECK(c.llm.tokens == 8 && c.llm.cap == 64ull << 20, "a refused --set changed the config");
}

/* The model a CONFIG argument names (generate, serve, chat), and which labs' file it is. */
static void s_llm_model_path(void)
{
    char path[600], model[600] = "", err[1024] = "";
    CHECK(config_has_llm("configs/llm.ini") == 1, "configs/llm.ini has no [llm]");
    CHECK(config_has_llm("configs/lab02.ini") == 0, "configs/lab02.ini has [llm]");
    snprintf(path, sizeof path, "%s/does-not-exist.ini", s_dir);
    CHECK(config_has_llm(path) == 0, "a missing file has [llm]");
    CHECK(config_model_path("configs/llm.ini", model, sizeof model, err, sizeof err) == 0 &&
              !strcmp(model, "models/llm-tinyllama-f16.gguf"),
          "llm.ini names '%s': %s", model, err);
    CHECK(config_model_path("configs/tiny.ini", model, sizeof model, err, sizeof err) == 0 &&
              !strcmp(model, "tests/tmp/tiny.gguf"),
          "tiny.ini names '%s': %s", model, err);
    s_write(path, sizeof path, "llm_nomodel.ini", "[llm]\ntokens = 3\n");
    err[0] = 0;
    CHECK(config_model_path(path, model, sizeof model, err, sizeof err) == -1 &&
              strstr(err, path) && strstr(err, "no [llm] model"),
          "a text-lab config without a model: %s", err);
    s_write(path, sizeof path, "llm_badline.ini", "[llm]\nmodel = m.gguf\nctx = 1\n");
    err[0] = 0;
    CHECK(config_model_path(path, model, sizeof model, err, sizeof err) == -1 &&
              strstr(err, ":3: [llm] ctx: '1' must be an integer in 16..1048576"),
          "a bad line: %s", err);
}

/* Enumerated values: the bad value quoted, every choice listed. */
static void s_enumerations(void)
{
    s_expect_error("io_enum.ini", "[ssd]\nio = mmap\n", 2,
                   (const char *const[]){ "unknown io 'mmap'", "direct", "buffered", NULL });
    s_expect_error("cond_enum.ini", "[lab]\nconditions = ssd, fast\n", 2,
                   (const char *const[]){ "unknown condition 'fast'", "reference", "ssd",
                                          "resident/PROFILE", NULL });
    s_expect_error("dist_enum.ini", "[profile.x]\njitter_dist = gauss\n", 2,
                   (const char *const[]){ "unknown jitter_dist 'gauss'", "none", "uniform",
                                          "normal", "pareto", NULL });
    config_t c;
    netem_profile p;
    char err[1024] = "";
    config_defaults(&c);
    CHECK(config_set(&c, "profile.mine.rtt_ms=3", err, sizeof err) == 0, "%s", err);
    CHECK(config_profile(&c, "moon", &p, err, sizeof err) == -1 &&
              strstr(err, "unknown profile 'moon'") && strstr(err, "none, lan, wifi, wan") &&
              strstr(err, "mine"),
          "unknown profile error lists built-in and custom profiles: %s", err);
}

/* Issue 9: a path of exactly 40 characters, every one in the Z85 alphabet (as `mktemp -d`
 * under /tmp plus "/coord.pub" easily is), was taken for an inline key. A path is a path;
 * inline keys are written z85:KEY; a value that is neither is refused, naming it. */
static void s_key_paths(void)
{
    static const char *z85 = "0123456789abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ"
                             ".-:+=^!/*?&<>()[]{}@%$#";
    char tmp[] = "/tmp/swkXXXXXX", dir[128], base[128], path[128], key[SEC_KEY_LEN] = "";
    char err[1024] = "", ini[600], text[1024], file_key[128] = "";
    if (!mkdtemp(tmp)) {
        CHECK(0, "mkdtemp: %s", strerror(errno));
        return;
    }
    /* Pad a folder's name so that DIR/coord.pub is exactly 40 characters. */
    size_t pad = 40 - strlen(tmp) - strlen("/") - strlen("/coord.pub");
    snprintf(dir, sizeof dir, "%s/%.*s", tmp, (int)pad, "pppppppppppppppppppppppppppppp");
    CHECK(mkdir(dir, 0700) == 0, "mkdir %s: %s", dir, strerror(errno));
    snprintf(base, sizeof base, "%s/coord", dir);
    snprintf(path, sizeof path, "%s.pub", base);
    CHECK(strlen(path) == 40 && strspn(path, z85) == 40, "'%s' is not 40 Z85 characters", path);
    CHECK(sec_keygen(base, err, sizeof err) == 0, "keygen %s: %s", base, err);
    FILE *f = fopen(path, "r");
    CHECK(f && fscanf(f, "%127s", file_key) == 1, "cannot read %s", path);
    if (f)
        fclose(f);

    /* The 40-character path is read as a file. */
    CHECK(sec_parse_pub(path, key, err, sizeof err) == 0, "40-char path: %s", err);
    CHECK(!strcmp(key, file_key) && strcmp(key, path), "40-char path gave key '%s', file has "
          "'%s'", key, file_key);
    /* The inline form. */
    char spec[64];
    snprintf(spec, sizeof spec, "z85:%s", file_key);
    key[0] = 0;
    CHECK(sec_parse_pub(spec, key, err, sizeof err) == 0 && !strcmp(key, file_key),
          "inline %s: %s", spec, err);
    /* Neither: a bare key (not a file here), a malformed inline key, a missing file, a folder,
     * a file without a key. Each error quotes the value. */
    struct { const char *v, *want; } bad[] = {
        { file_key, "write it inline as z85:" }, { "z85:abc", "40 Z85 characters" },
        { "z85:0123456789012345678901234567890123456789", NULL },
        { "/nonexistent/swarm/x.pub", "not a key file" }, { dir, "is a folder" },
        { "/dev/null", "no 40-char Z85 public key" },
    };
    bad[2].want = "outside the Z85 alphabet";
    bad[2].v = "z85:01234567890123456789012345678901234567_9";
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        err[0] = 0;
        CHECK(sec_parse_pub(bad[i].v, key, err, sizeof err) == -1, "'%s' accepted", bad[i].v);
        CHECK(strstr(err, bad[i].v) && strstr(err, bad[i].want), "'%s': error '%s' lacks '%s'",
              bad[i].v, err, bad[i].want);
    }

    /* The same through a config: accepted as a path, inline with z85:, refused at its line. */
    config_t c;
    config_defaults(&c);
    snprintf(text, sizeof text, "[worker.h1]\nendpoint = tcp://127.0.0.1:7000\npublic_key = %s\n",
             path);
    s_write(ini, sizeof ini, "key_path.ini", text);
    CHECK(config_load(&c, ini, err, sizeof err) == 0, "public_key = 40-char path: %s", err);
    config_defaults(&c);
    snprintf(text, sizeof text, "[worker.h1]\nendpoint = tcp://127.0.0.1:7000\npublic_key = %s\n",
             spec);
    s_write(ini, sizeof ini, "key_inline.ini", text);
    CHECK(config_load(&c, ini, err, sizeof err) == 0, "public_key = z85:KEY: %s", err);
    snprintf(text, sizeof text, "[worker.h1]\nendpoint = tcp://127.0.0.1:7000\npublic_key = %s\n",
             file_key);
    s_expect_error("key_bare.ini", text, 3,
                   (const char *const[]){ "[worker.h1] public_key", file_key, "z85:", NULL });
    s_expect_error("key_missing.ini", "[worker.h1]\npublic_key = keys/h1.pub\n", 2,
                   (const char *const[]){ "[worker.h1] public_key", "keys/h1.pub",
                                          "not a key file", NULL });

    /* --allow goes through sec_allow_path: the path, the inline form, a folder of keys. */
    void *ctx = zmq_ctx_new();
    sec_t *sec = ctx ? sec_zap_start(ctx, "test", err, sizeof err) : NULL;
    CHECK(sec != NULL, "ZAP handler: %s", err);
    if (sec) {
        CHECK(sec_allow_path(sec, path, err, sizeof err) == 0, "allow 40-char path: %s", err);
        CHECK(sec_allow_path(sec, spec, err, sizeof err) == 0, "allow z85:KEY: %s", err);
        CHECK(sec_allow_path(sec, dir, err, sizeof err) == 0, "allow a folder: %s", err);
        err[0] = 0;
        CHECK(sec_allow_path(sec, file_key, err, sizeof err) == -1 && strstr(err, "z85:"),
              "allow a bare key: '%s'", err);
    }
    if (ctx)
        zmq_ctx_term(ctx);
    sec_zap_stop(&sec);

    snprintf(text, sizeof text, "%s.key", base);
    unlink(text);
    unlink(path);
    rmdir(dir);
    rmdir(tmp);
}

/* Issue 14: which paths may be generated, and a missing one that may not names itself and
 * the command that makes it, creating nothing. */
static void s_model_sources(void)
{
    config_t c;
    model_source src;
    char err[2048] = "", missing[700], parent[700];
    struct stat st;

    config_defaults(&c);
    config_model_source(&c, NULL, &src);
    CHECK(!src.generate && !strcmp(src.path, "models/lab02.gguf"), "defaults: generate %d %s",
          src.generate, src.path);
    CHECK(config_load(&c, "configs/tiny.ini", err, sizeof err) == 0, "tiny.ini: %s", err);
    config_model_source(&c, NULL, &src);
    CHECK(src.generate && !strcmp(src.path, "tests/tmp/tiny.gguf") &&
              strstr(src.named_by, "configs/tiny.ini"),
          "tiny.ini says generate = 1: %d %s (%s)", src.generate, src.path, src.named_by);
    config_model_source(&c, "typo/x.gguf", &src);
    CHECK(!src.generate && !strcmp(src.path, "typo/x.gguf") && strstr(src.named_by, "--model"),
          "--model never generates: %d %s", src.generate, src.named_by);
    CHECK(config_set(&c, "model.path=typo/y.gguf", err, sizeof err) == 0, "%s", err);
    config_model_source(&c, NULL, &src);
    CHECK(!src.generate && strstr(src.gen_hint, "--set model.generate=1"),
          "--set model.path without --set model.generate: %d '%s'", src.generate, src.gen_hint);
    CHECK(config_set(&c, "model.generate=1", err, sizeof err) == 0, "%s", err);
    config_model_source(&c, NULL, &src);
    CHECK(src.generate, "--set model.path with --set model.generate=1 does not generate");

    /* A missing path in a missing folder: an error naming both, and nothing created. */
    snprintf(parent, sizeof parent, "%s/no-such-folder", s_dir);
    snprintf(missing, sizeof missing, "%s/typo.gguf", parent);
    config_defaults(&c);
    config_model_source(&c, missing, &src);
    err[0] = 0;
    CHECK(model_check_source(&src, err, sizeof err) == -1, "missing --model accepted");
    CHECK(strstr(err, missing) && strstr(err, "--model") &&
              strstr(err, "swarm gen --layers 24 --dim 4096 --seed 1 -o") &&
              !strstr(err, "generate = 1"),
          "missing --model error: %s", err);
    model_t m = { 0 };
    CHECK(model_open_source(&m, &src, err, sizeof err) == -1, "opened a missing --model");
    CHECK(stat(parent, &st) == -1 && errno == ENOENT, "%s was created", parent);
    /* The lab's default path says how the lab makes it. */
    config_model_source(&c, NULL, &src);
    if (stat("models/lab02.gguf", &st) != 0) {
        CHECK(model_check_source(&src, err, sizeof err) == -1 && strstr(err, "make lab") &&
                  strstr(err, "built-in"),
              "default model hint: %s", err);
    }
    /* Checking a path that is to be generated creates nothing either. */
    c.generate = 1;
    c.set_model_path = 0;
    snprintf(c.model, sizeof c.model, "%s", missing);
    config_model_source(&c, NULL, &src);
    CHECK(model_check_source(&src, err, sizeof err) == 1, "generate = 1: not to be generated");
    CHECK(stat(parent, &st) == -1 && errno == ENOENT, "checking created %s", parent);
    /* A folder is not a model, whatever the config says. */
    snprintf(c.model, sizeof c.model, "%s", s_dir);
    config_model_source(&c, NULL, &src);
    CHECK(model_check_source(&src, err, sizeof err) == -1 && strstr(err, "folder"),
          "a folder as the model: %s", err);
}

int main(void)
{
    const char *t = getenv("SWARM_TEST_TMP");
    snprintf(s_dir, sizeof s_dir, "%s/test_config", t && *t ? t : "tests/tmp");
    mkdir(t && *t ? t : "tests/tmp", 0755);
    mkdir(s_dir, 0755);
    s_defaults();
    s_good_file();
    s_errors();
    s_set();
    s_profiles();
    s_shipped();
    s_known_keys();
    s_enumerations();
    s_key_paths();
    s_model_sources();
    s_llm_good();
    s_llm_errors();
    s_llm_set();
    s_llm_model_path();
    return CHECK_DONE("test_config");
}
