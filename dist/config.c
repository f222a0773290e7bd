/* config.c — the one INI loader (libinih): one table of keys for every section, both labs'
 * included; every key validated, errors name file:line and key. dist/ */
#include "dist/config.h"

#include <errno.h>
#include <ini.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include "base/sec.h"
#include "base/util.h"
#include "quant/quant.h"
#include "dist/pirate.h"

typedef struct {
    config_t *c;
    char msg[512];            /* first error's text (inih reports its line) */
    int llm;                  /* the file has an [llm] section */
    int set_repeats, set_conditions; /* the file sets [lab] repeats, conditions */
} s_ctx;

void config_defaults(config_t *c)
{
    memset(c, 0, sizeof *c);
    snprintf(c->model, sizeof c->model, "%s", MODEL_LAB_PATH);
    c->layers = 24;
    c->dim = 4096;
    c->seed = 1;
    c->steps = 32;
    c->input_seed = 7;
    c->threads = 1;
    c->cap_bytes = 600ull << 20;
    /* Depth 8 x 4 MiB: 2.4 GB/s vs 1.4 GB/s at depth 1 on the dev machine, 2026-11-30
     * ("Measured facts" in docs/design.md); the ring costs (8+1) x 4 MiB = 36 MiB of the
     * cap, leaving room for 8 resident layers. */
    c->queue_depth = 8;
    c->chunk_bytes = 4ull << 20;
    c->overhead_bytes = 32ull << 20;
    c->workers = 3;
    c->inflight = 1;
    c->worker_cap_bytes = 600ull << 20;
    c->worker_threads = 1;
    snprintf(c->host, sizeof c->host, "127.0.0.1");
    c->heartbeat_ms = PIRATE_HEARTBEAT_MS;
    c->liveness = PIRATE_LIVENESS;
    c->step_deadline_ms = 5000;
    c->slowdown = 1;
    snprintf(c->profile, sizeof c->profile, "none");
    c->repeats = 5;
    snprintf(c->quant_type, sizeof c->quant_type, "q8_0");
    const char *conds[] = { "reference", "ssd", "resident/none", "resident/lan", "resident/wifi",
                            "resident/wan" };
    c->n_conditions = 6;
    for (int i = 0; i < 6; i++)
        snprintf(c->conditions[i], sizeof c->conditions[i], "%s", conds[i]);
    snprintf(c->lab_out, sizeof c->lab_out, "results");
    /* [llm]: TinyLlama-1.1B's shape in F16, the text lab's model (configs/llm.ini) */
    c->llm.dim = 2048, c->llm.layers = 22, c->llm.heads = 32, c->llm.kv_heads = 4;
    c->llm.ff = 5632, c->llm.ctx_train = 2048, c->llm.seed = 1;
    snprintf(c->llm.type, sizeof c->llm.type, "f16");
    snprintf(c->llm.arch, sizeof c->llm.arch, "llama");
    snprintf(c->llm.prompt, sizeof c->llm.prompt, "Once upon a time");
    c->llm.tokens = 32, c->llm.ctx = 512, c->llm.batch = 32, c->llm.threads = 1;
    c->llm.cap = 600ull << 20;
}

static int s_u32(const char *v, uint32_t lo, uint32_t hi, uint32_t *out, char *msg, size_t len)
{
    char *end;
    errno = 0;
    unsigned long long x = strtoull(v, &end, 10);
    if (errno || end == v || *end || v[0] == '-' || x < lo || x > hi) {
        snprintf(msg, len, "'%s' must be an integer in %u..%u", v, lo, hi);
        return -1;
    }
    *out = (uint32_t)x;
    return 0;
}

static int s_u64(const char *v, uint64_t *out, char *msg, size_t len)
{
    char *end;
    errno = 0;
    unsigned long long x = strtoull(v, &end, 0);
    if (errno || end == v || *end || v[0] == '-') {
        snprintf(msg, len, "'%s' is not an unsigned integer", v);
        return -1;
    }
    *out = x;
    return 0;
}

static int s_size(const char *v, uint64_t lo, uint64_t *out, char *msg, size_t len)
{
    if (util_parse_size(v, out) || *out < lo) {
        snprintf(msg, len, "'%s' is not a size of at least %llu bytes (e.g. 600M, 4M, 64K)", v,
                 (unsigned long long)lo);
        return -1;
    }
    return 0;
}

static int s_bool(const char *v, int *out, char *msg, size_t len)
{
    if (!strcmp(v, "1") || !strcmp(v, "true") || !strcmp(v, "yes") || !strcmp(v, "on"))
        *out = 1;
    else if (!strcmp(v, "0") || !strcmp(v, "false") || !strcmp(v, "no") || !strcmp(v, "off"))
        *out = 0;
    else {
        snprintf(msg, len, "'%s' is not a boolean (0/1, true/false)", v);
        return -1;
    }
    return 0;
}

static int s_str(const char *v, char *dst, size_t cap, char *msg, size_t len)
{
    if (strlen(v) >= cap) {
        snprintf(msg, len, "value too long (%zu bytes, at most %zu)", strlen(v), cap - 1);
        return -1;
    }
    snprintf(dst, cap, "%s", v);
    return 0;
}

/* tok's first n bytes are name, whole. */
static int s_is(const char *tok, size_t n, const char *name)
{
    return strlen(name) == n && !strncmp(tok, name, n);
}

/* [lab] conditions: a list of the forms either lab runs (reference, ssd, quantized, resident,
 * resident/PROFILE, resident/PROFILE+fault); each lab refuses those it cannot run, naming them
 * (the text lab has no quantized arm and no +fault, the dense lab knows its profiles). */
static int s_conditions(config_t *c, const char *v, char *msg, size_t len)
{
    char buf[1024];
    char *save = NULL, *tok;
    uint32_t n = 0;
    if (strlen(v) >= sizeof buf) {
        snprintf(msg, len, "list too long");
        return -1;
    }
    snprintf(buf, sizeof buf, "%s", v);
    for (tok = strtok_r(buf, ", \t", &save); tok; tok = strtok_r(NULL, ", \t", &save)) {
        if (n >= CONFIG_MAX_CONDITIONS) {
            snprintf(msg, len, "more than %d conditions", CONFIG_MAX_CONDITIONS);
            return -1;
        }
        /* a +SUFFIX (the text lab's +spec, +lookup; the dense lab's +fault) is the lab's */
        size_t bl = strcspn(tok, "+");
        if (!s_is(tok, bl, "reference") && !s_is(tok, bl, "ssd") && !s_is(tok, bl, "quantized") &&
            !s_is(tok, bl, "resident") && strncmp(tok, "resident/", 9)) {
            snprintf(msg, len, "unknown condition '%s' (conditions: reference, ssd, quantized, "
                     "resident, resident/PROFILE, resident/PROFILE+fault; the text lab: each "
                     "+spec or +lookup)", tok);
            return -1;
        }
        if (s_str(tok, c->conditions[n], sizeof c->conditions[n], msg, len))
            return -1;
        n++;
    }
    if (!n) {
        snprintf(msg, len, "empty condition list");
        return -1;
    }
    c->n_conditions = n;
    return 0;
}

/* [llm] type: a tensor type `swarm gen --type` takes; quant_type_parse lists them. */
static int s_llm_type(config_t *c, const char *v, char *msg, size_t len)
{
    quant_type t;
    if (quant_type_parse(v, &t, msg, len))
        return -1;
    return s_str(v, c->llm.type, sizeof c->llm.type, msg, len);
}

static int s_llm_temp(config_t *c, const char *v, char *msg, size_t len)
{
    char *end;
    float t = strtof(v, &end);
    if (end == v || *end || !(t >= 0 && t <= 2)) {
        snprintf(msg, len, "'%s' must be a number in [0, 2] (0: greedy)", v);
        return -1;
    }
    c->llm.temperature = t;
    return 0;
}

static config_worker *s_worker(config_t *c, const char *name, char *msg, size_t len)
{
    for (uint32_t i = 0; i < c->n_workers; i++)
        if (!strcmp(c->worker[i].name, name))
            return &c->worker[i];
    if (c->n_workers >= CONFIG_MAX_WORKERS) {
        snprintf(msg, len, "more than %d workers", CONFIG_MAX_WORKERS);
        return NULL;
    }
    config_worker *w = &c->worker[c->n_workers];
    memset(w, 0, sizeof *w);
    if (s_str(name, w->name, sizeof w->name, msg, len))
        return NULL;
    w->cap_bytes = 0; /* 0: [swarm] cap, resolved when the run starts */
    c->n_workers++;
    return w;
}

static netem_profile *s_profile(config_t *c, const char *name, char *msg, size_t len)
{
    for (uint32_t i = 0; i < c->n_profiles; i++)
        if (!strcmp(c->profiles[i].name, name))
            return &c->profiles[i];
    if (c->n_profiles >= CONFIG_MAX_PROFILES) {
        snprintf(msg, len, "more than %d profiles", CONFIG_MAX_PROFILES);
        return NULL;
    }
    netem_profile *p = &c->profiles[c->n_profiles];
    /* A custom profile named like a built-in starts from it, so "[profile.wan] loss = 1%"
     * changes only the loss. */
    if (netem_profile_builtin(name, p))
        memset(p, 0, sizeof *p);
    if (s_str(name, p->name, sizeof p->name, msg, len))
        return NULL;
    c->n_profiles++;
    return p;
}

/* ---------------------------------------------------------------- the table of keys */

typedef enum {
    K_U32,                    /* an integer in lo..hi */
    K_U64,                    /* any unsigned integer (0x.. too) */
    K_SIZE,                   /* a size (600M, 4K, ...) of at least lo bytes */
    K_BOOL,                   /* 0/1, true/false, yes/no, on/off into an int */
    K_STR,                    /* a string of fewer than size bytes */
    K_PICK,                   /* one of choices, exactly: its index into an int */
    K_NAME,                   /* one of choices, any case: its own spelling into a string */
    K_FN,                     /* fn checks and stores */
} s_kind;

typedef struct {
    const char *sec, *key;
    s_kind kind;
    size_t off, size;         /* the field: offsetof(config_t, ...), sizeof for strings */
    uint64_t lo, hi;
    const char *const *choices; /* K_PICK, K_NAME: NULL-terminated */
    int (*fn)(config_t *c, const char *v, char *msg, size_t len);
} s_key;

/* The field's offset, refused at compile time (a negative array size) unless the field has
 * type T: a row cannot write a uint64_t through a uint32_t. */
#define S_AT(f, T) \
    (offsetof(config_t, f) + 0 * sizeof(char[_Generic(((config_t *)0)->f, T: 1, default: -1)]))
#define S_U32(s, k, f, lo, hi) { s, k, K_U32, S_AT(f, uint32_t), 0, lo, hi, NULL, NULL }
#define S_U64(s, k, f)         { s, k, K_U64, S_AT(f, uint64_t), 0, 0, 0, NULL, NULL }
#define S_SIZE(s, k, f, lo)    { s, k, K_SIZE, S_AT(f, uint64_t), 0, lo, 0, NULL, NULL }
#define S_BOOL(s, k, f)        { s, k, K_BOOL, S_AT(f, int), 0, 0, 0, NULL, NULL }
#define S_STR(s, k, f) \
    { s, k, K_STR, S_AT(f, char *), sizeof(((config_t *)0)->f), 0, 0, NULL, NULL }
#define S_PICK(s, k, f, ch)    { s, k, K_PICK, S_AT(f, int), 0, 0, 0, ch, NULL }
#define S_NAME(s, k, f, ch) \
    { s, k, K_NAME, S_AT(f, char *), sizeof(((config_t *)0)->f), 0, 0, ch, NULL }
#define S_FN(s, k, fn)         { s, k, K_FN, 0, 0, 0, 0, NULL, fn }

static const char *const s_io[] = { "direct", "buffered", NULL };
static const char *const s_buffers[] = { "huge", "4k", NULL };
/* the types `swarm quantize` gives the dense model's W (the K types as themselves) */
static const char *const s_qtypes[] = { "q8_0", "q6_K", "q5_K", "q4_K", "q4_0", "q4_1", "q5_0",
                                        "q5_1", "iq4_nl", "iq4_xs", "q3_K", "q2_K", NULL };

/* Every key of every fixed section, in the order the "unknown key" message lists them; the
 * sections in the order the "unknown section" message lists them. [worker.NAME] and
 * [profile.NAME] are s_apply's own. */
static const s_key s_keys[] = {
    S_STR("model", "path", model),
    S_BOOL("model", "generate", generate),
    S_U32("model", "layers", layers, 1, 4096),
    S_U32("model", "dim", dim, 1, 65536),
    S_U64("model", "seed", seed),
    S_U32("run", "steps", steps, 1, 1000000),
    S_U64("run", "input_seed", input_seed),
    S_U32("run", "threads", threads, 1, 64),
    S_SIZE("ssd", "cap", cap_bytes, 1 << 20),
    S_U32("ssd", "queue_depth", queue_depth, 1, 256),
    S_SIZE("ssd", "chunk", chunk_bytes, 4096),
    S_SIZE("ssd", "overhead", overhead_bytes, 0),
    S_PICK("ssd", "io", buffered, s_io),
    S_PICK("ssd", "buffers", buffers_4k, s_buffers),
    S_NAME("quantized", "type", quant_type, s_qtypes),
    S_U32("swarm", "workers", workers, 1, CONFIG_MAX_WORKERS),
    S_U32("swarm", "inflight", inflight, 1, 64),
    S_SIZE("swarm", "cap", worker_cap_bytes, 1 << 20),
    S_U32("swarm", "threads", worker_threads, 1, 64),
    S_STR("swarm", "host", host),
    S_U32("swarm", "heartbeat_ms", heartbeat_ms, PIRATE_HEARTBEAT_MS_MIN, PIRATE_HEARTBEAT_MS_MAX),
    S_U32("swarm", "liveness", liveness, PIRATE_LIVENESS_MIN, PIRATE_LIVENESS_MAX),
    S_U32("swarm", "step_deadline_ms", step_deadline_ms, 10, 3600000),
    S_BOOL("swarm", "respawn", respawn),
    S_BOOL("swarm", "plaintext", plaintext),
    S_U32("swarm", "slowdown", slowdown, 1, 100000),
    S_STR("security", "key", key),
    S_STR("netem", "profile", profile),
    S_U32("lab", "repeats", repeats, 1, CONFIG_MAX_REPEATS),
    S_FN("lab", "conditions", s_conditions),
    S_STR("lab", "out", lab_out),
    /* the text lab's model and runs; the shape bounds are swarm gen's */
    S_STR("llm", "model", llm.model),
    S_BOOL("llm", "generate", llm.generate),
    S_STR("llm", "vocab", llm.vocab),
    S_U32("llm", "dim", llm.dim, 8, 65536),
    S_U32("llm", "layers", llm.layers, 1, 512),
    S_U32("llm", "heads", llm.heads, 1, 1024),
    S_U32("llm", "kv_heads", llm.kv_heads, 1, 1024),
    S_U32("llm", "ff", llm.ff, 8, 262144),
    S_U32("llm", "ctx_train", llm.ctx_train, 16, 1u << 20),
    S_STR("llm", "arch", llm.arch),
    S_U32("llm", "head_dim", llm.head_dim, 0, 1024),
    S_U32("llm", "experts", llm.experts, 0, 512),
    S_U32("llm", "experts_used", llm.experts_used, 0, 64),
    S_U32("llm", "ff_exp", llm.ff_exp, 0, 262144),
    S_FN("llm", "type", s_llm_type),
    S_U32("llm", "seed", llm.seed, 0, UINT32_MAX),
    S_STR("llm", "prompt", llm.prompt),
    S_U32("llm", "tokens", llm.tokens, 1, 4096),
    S_FN("llm", "temperature", s_llm_temp),
    S_U32("llm", "ctx", llm.ctx, 16, 1u << 20),
    S_U32("llm", "batch", llm.batch, 1, 4096),
    S_SIZE("llm", "cap", llm.cap, 1 << 20),
    S_U32("llm", "workers", llm.workers, 0, 8),
    S_U32("llm", "threads", llm.threads, 1, 64),
};
#define S_NKEYS (sizeof s_keys / sizeof s_keys[0])

static const s_key *s_find(const char *sec, const char *key)
{
    for (size_t i = 0; i < S_NKEYS; i++)
        if (!strcmp(s_keys[i].sec, sec) && !strcmp(s_keys[i].key, key))
            return &s_keys[i];
    return NULL;
}

/* Append s to buf (cut at its end: a message, not data). */
static void s_cat(char *buf, size_t len, const char *s)
{
    size_t n = strlen(buf);
    if (n + 1 < len)
        snprintf(buf + n, len - n, "%s", s);
}

int config_known_keys(const char *section, char *buf, size_t len)
{
    int found = 0;
    if (len)
        buf[0] = 0;
    for (size_t i = 0; i < S_NKEYS; i++) {
        if (strcmp(s_keys[i].sec, section))
            continue;
        s_cat(buf, len, found++ ? ", " : "");
        s_cat(buf, len, s_keys[i].key);
    }
    return found ? 0 : -1;
}

/* "model, run, ..., worker.NAME, profile.NAME": each table section once, first-seen order. */
static void s_sections(char *buf, size_t len)
{
    buf[0] = 0;
    for (size_t i = 0; i < S_NKEYS; i++) {
        if (i && !strcmp(s_keys[i].sec, s_keys[i - 1].sec))
            continue; /* the table keeps a section's keys together */
        s_cat(buf, len, s_keys[i].sec);
        s_cat(buf, len, ", ");
    }
    s_cat(buf, len, "worker.NAME, profile.NAME");
}

/* "unknown io 'mmap' (io: direct or buffered)" */
static int s_pick(const s_key *k, const char *v, void *field, char *msg, size_t len)
{
    for (int i = 0; k->choices[i]; i++) {
        if (k->kind == K_PICK ? strcmp(v, k->choices[i]) : strcasecmp(v, k->choices[i]))
            continue;
        if (k->kind == K_PICK)
            *(int *)field = i;
        else
            snprintf(field, k->size, "%s", k->choices[i]);
        return 0;
    }
    snprintf(msg, len, "unknown %s '%s' (%s: ", k->key, v, k->key);
    for (int i = 0; k->choices[i]; i++) {
        s_cat(msg, len, !i ? "" : k->choices[i + 1] ? ", " : " or ");
        s_cat(msg, len, k->choices[i]);
    }
    s_cat(msg, len, ")");
    return -1;
}

/* Check v for row k and store it in c; 0, or -1 with why in msg. */
static int s_apply_key(config_t *c, const s_key *k, const char *v, char *msg, size_t len)
{
    void *f = (char *)c + k->off;
    switch (k->kind) {
    case K_U32: return s_u32(v, (uint32_t)k->lo, (uint32_t)k->hi, f, msg, len);
    case K_U64: return s_u64(v, f, msg, len);
    case K_SIZE: return s_size(v, k->lo, f, msg, len);
    case K_BOOL: return s_bool(v, f, msg, len);
    case K_STR: return s_str(v, f, k->size, msg, len);
    case K_PICK:
    case K_NAME: return s_pick(k, v, f, msg, len);
    case K_FN: return k->fn(c, v, msg, len);
    }
    snprintf(msg, len, "internal: key kind %d", (int)k->kind);
    return -1;
}

/* A [worker.NAME] key. */
static int s_apply_worker(config_t *c, const char *name, const char *key, const char *v,
                          char *why, size_t len)
{
    config_worker *w = s_worker(c, name, why, len);
    if (!w)
        return -1;
    if (!strcmp(key, "endpoint"))
        return s_str(v, w->endpoint, sizeof w->endpoint, why, len);
    if (!strcmp(key, "cap"))
        return s_size(v, 1 << 20, &w->cap_bytes, why, len);
    if (!strcmp(key, "public_key")) {
        /* Checked here, not first at connect time, so a bad value names its line. */
        char pub[SEC_KEY_LEN];
        if (s_str(v, w->public_key, sizeof w->public_key, why, len))
            return -1;
        return v[0] ? sec_parse_pub(v, pub, why, len) : 0;
    }
    snprintf(why, len, "unknown key (known: endpoint, cap, public_key)");
    return -1;
}

/* Apply one key; returns 0 or -1 with msg ("[sec] key: why"). */
static int s_apply(config_t *c, const char *sec, const char *key, const char *v, char *msg,
                   size_t len)
{
    char why[384] = "", known[256];
    const s_key *k = s_find(sec, key);
    int rc = -1;

    if (k) {
        rc = s_apply_key(c, k, v, why, sizeof why);
    } else if (!strncmp(sec, "worker.", 7) && sec[7]) {
        rc = s_apply_worker(c, sec + 7, key, v, why, sizeof why);
    } else if (!strncmp(sec, "profile.", 8) && sec[8]) {
        netem_profile *p = s_profile(c, sec + 8, why, sizeof why);
        rc = p ? netem_profile_set(p, key, v, why, sizeof why) : -1;
    } else if (config_known_keys(sec, known, sizeof known) == 0) {
        snprintf(why, sizeof why, "unknown key (known: %s)", known);
    } else {
        s_sections(known, sizeof known);
        snprintf(why, sizeof why, "unknown section (sections: %s)", known);
    }
    if (rc)
        snprintf(msg, len, "[%s] %s: %s", sec, key, why);
    return rc;
}

static int s_handler(void *user, const char *section, const char *name, const char *value)
{
    s_ctx *x = user;
    char msg[512];
    if (x->msg[0])
        return 1; /* keep only the first error; inih returns its line */
    if (s_apply(x->c, section, name, value, msg, sizeof msg)) {
        snprintf(x->msg, sizeof x->msg, "%s", msg);
        return 0;
    }
    x->llm |= !strcmp(section, "llm");
    x->set_repeats |= !strcmp(section, "lab") && !strcmp(name, "repeats");
    x->set_conditions |= !strcmp(section, "lab") && !strcmp(name, "conditions");
    return 1;
}

int config_load(config_t *c, const char *path, char *err, size_t errlen)
{
    s_ctx x = { .c = c };
    FILE *f = fopen(path, "r");
    int line;

    if (!f) {
        snprintf(err, errlen, "%s: cannot open config: %s", path, strerror(errno));
        return -1;
    }
    line = ini_parse_file(f, s_handler, &x);
    fclose(f);
    if (line != 0 || x.msg[0]) {
        if (x.msg[0])
            snprintf(err, errlen, "%s:%d: %s", path, line, x.msg);
        else
            snprintf(err, errlen, "%s:%d: syntax error (expected [section] or key = value)",
                     path, line);
        return -1;
    }
    if (x.llm) {
        /* A text-lab config: for what the file leaves out, the text lab's [lab] defaults as
         * they were before one loader read both labs: 3 repeats, and no conditions
         * (lab_llm.c asks the file for them). */
        c->llm.on = 1;
        if (!x.set_repeats)
            c->repeats = 3;
        if (!x.set_conditions)
            c->n_conditions = 0;
    }
    snprintf(c->path, sizeof c->path, "%s", path);
    return 0;
}

int config_set(config_t *c, const char *assignment, char *err, size_t errlen)
{
    char sec[128], msg[512];
    const char *eq = strchr(assignment, '=');
    if (!eq) {
        snprintf(err, errlen, "--set %s: expected section.key=value", assignment);
        return -1;
    }
    /* The key is after the last '.' before '='; sections may contain dots (profile.wan). */
    const char *k = eq;
    while (k > assignment && k[-1] != '.')
        k--;
    if (k == assignment || (size_t)(k - 1 - assignment) >= sizeof sec) {
        snprintf(err, errlen, "--set %s: expected section.key=value", assignment);
        return -1;
    }
    memcpy(sec, assignment, (size_t)(k - 1 - assignment));
    sec[k - 1 - assignment] = 0;
    char key[128];
    if ((size_t)(eq - k) >= sizeof key || eq == k) {
        snprintf(err, errlen, "--set %s: bad key", assignment);
        return -1;
    }
    memcpy(key, k, (size_t)(eq - k));
    key[eq - k] = 0;
    if (s_apply(c, sec, key, eq + 1, msg, sizeof msg)) {
        snprintf(err, errlen, "--set %s: %s", assignment, msg);
        return -1;
    }
    if (!strcmp(sec, "model") && !strcmp(key, "path"))
        c->set_model_path = 1;
    if (!strcmp(sec, "model") && !strcmp(key, "generate"))
        c->set_generate = 1;
    return 0;
}

void config_model_source(const config_t *c, const char *model_flag, model_source *src)
{
    memset(src, 0, sizeof *src);
    src->path = model_flag ? model_flag : c->model;
    src->layers = c->layers;
    src->dim = c->dim;
    src->seed = c->seed;
    if (model_flag) {
        snprintf(src->named_by, sizeof src->named_by, "named by --model, which never generates");
    } else if (c->set_model_path) {
        snprintf(src->named_by, sizeof src->named_by, "[model] path from --set");
        src->generate = c->generate && c->set_generate;
        snprintf(src->gen_hint, sizeof src->gen_hint, "add --set model.generate=1");
    } else if (c->path[0]) {
        snprintf(src->named_by, sizeof src->named_by, "[model] path in %s", c->path);
        src->generate = c->generate;
        snprintf(src->gen_hint, sizeof src->gen_hint, "set [model] generate = 1 in %s", c->path);
    } else { /* no config file: only --set model.generate=1 can have said so */
        snprintf(src->named_by, sizeof src->named_by, "the built-in default [model] path");
        src->generate = c->generate;
    }
}

int config_profile(const config_t *c, const char *name, netem_profile *out, char *err,
                   size_t errlen)
{
    for (uint32_t i = 0; i < c->n_profiles; i++) {
        if (!strcmp(c->profiles[i].name, name)) {
            *out = c->profiles[i];
            return 0;
        }
    }
    if (netem_profile_builtin(name, out) == 0)
        return 0;
    char custom[512] = "";
    for (uint32_t i = 0; i < c->n_profiles; i++)
        if (strlen(custom) + strlen(c->profiles[i].name) + 3 < sizeof custom)
            snprintf(custom + strlen(custom), sizeof custom - strlen(custom), ", %s",
                     c->profiles[i].name);
    snprintf(err, errlen, "unknown profile '%s' (profiles: none, lan, wifi, wan%s; or define "
             "[profile.%s] in the config)", name, custom, name);
    return -1;
}

static int s_has_llm(void *user, const char *sec, const char *key, const char *v)
{
    (void)key, (void)v;
    if (!strcmp(sec, "llm"))
        *(int *)user = 1;
    return 1;
}

int config_has_llm(const char *path)
{
    int yes = 0;
    return ini_parse(path, s_has_llm, &yes) >= 0 && yes;
}

int config_model_path(const char *config, char *path, size_t len, char *err, size_t errlen)
{
    config_t *c = malloc(sizeof *c); /* several PATH_MAX paths: not for a caller's stack */
    int rc = -1;
    if (!c) {
        snprintf(err, errlen, "out of memory");
        return -1;
    }
    config_defaults(c);
    if (config_load(c, config, err, errlen))
        goto out;
    const char *model = c->llm.on ? c->llm.model : c->model;
    if (!model[0]) {
        snprintf(err, errlen, "%s: no %s", config, c->llm.on ? "[llm] model" : "[model] path");
        goto out;
    }
    snprintf(path, len, "%s", model);
    rc = 0;
out:
    free(c);
    return rc;
}
