/* config.c — INI parsing with libinih; every key validated, errors name file:line and key. dist/ */
#include "dist/config.h"

#include <errno.h>
#include <ini.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include "base/sec.h"
#include "base/util.h"
#include "dist/pirate.h"

typedef struct {
    config_t *c;
    char msg[512];            /* first error's text (inih reports its line) */
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
        if (strcmp(tok, "reference") && strcmp(tok, "ssd") && strcmp(tok, "quantized") &&
            strncmp(tok, "resident/", 9)) {
            snprintf(msg, len, "unknown condition '%s' (conditions: reference, ssd, quantized, "
                     "resident/PROFILE, resident/PROFILE+fault)", tok);
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

/* The keys of each fixed section, for the error that names an unknown one (s_apply below is
 * the authority; test_config checks that every key listed here is accepted). */
static const char *const s_sections[][2] = {
    { "model", "path, generate, layers, dim, seed" },
    { "run", "steps, input_seed, threads" },
    { "ssd", "cap, queue_depth, chunk, overhead, io, buffers" },
    { "quantized", "type" },
    { "swarm", "workers, inflight, cap, threads, host, heartbeat_ms, liveness, "
               "step_deadline_ms, respawn, plaintext, slowdown" },
    { "security", "key" },
    { "netem", "profile" },
    { "lab", "repeats, conditions, out" },
};

static const char *s_known_keys(const char *sec)
{
    for (size_t i = 0; i < sizeof s_sections / sizeof s_sections[0]; i++)
        if (!strcmp(sec, s_sections[i][0]))
            return s_sections[i][1];
    return NULL;
}

const char *config_known_keys(const char *section)
{
    return s_known_keys(section);
}

/* Apply one key; returns 0 or -1 with msg ("[sec] key: why"). */
static int s_apply(config_t *c, const char *sec, const char *key, const char *v, char *msg,
                   size_t len)
{
    char why[384] = "";
    int rc = -1;

#define KEY(s, k) (!strcmp(sec, s) && !strcmp(key, k))
    if (KEY("model", "path"))
        rc = s_str(v, c->model, sizeof c->model, why, sizeof why);
    else if (KEY("model", "generate"))
        rc = s_bool(v, &c->generate, why, sizeof why);
    else if (KEY("model", "layers"))
        rc = s_u32(v, 1, 4096, &c->layers, why, sizeof why);
    else if (KEY("model", "dim"))
        rc = s_u32(v, 1, 65536, &c->dim, why, sizeof why);
    else if (KEY("model", "seed"))
        rc = s_u64(v, &c->seed, why, sizeof why);
    else if (KEY("run", "steps"))
        rc = s_u32(v, 1, 1000000, &c->steps, why, sizeof why);
    else if (KEY("run", "input_seed"))
        rc = s_u64(v, &c->input_seed, why, sizeof why);
    else if (KEY("run", "threads"))
        rc = s_u32(v, 1, 64, &c->threads, why, sizeof why);
    else if (KEY("ssd", "cap"))
        rc = s_size(v, 1 << 20, &c->cap_bytes, why, sizeof why);
    else if (KEY("ssd", "queue_depth"))
        rc = s_u32(v, 1, 256, &c->queue_depth, why, sizeof why);
    else if (KEY("ssd", "chunk"))
        rc = s_size(v, 4096, &c->chunk_bytes, why, sizeof why);
    else if (KEY("ssd", "overhead"))
        rc = s_size(v, 0, &c->overhead_bytes, why, sizeof why);
    else if (KEY("ssd", "io")) {
        if (!strcmp(v, "direct") || !strcmp(v, "buffered")) {
            c->buffered = !strcmp(v, "buffered");
            rc = 0;
        } else
            snprintf(why, sizeof why, "unknown io '%s' (io: direct or buffered)", v);
    } else if (KEY("ssd", "buffers")) {
        if (!strcmp(v, "huge") || !strcmp(v, "4k")) {
            c->buffers_4k = !strcmp(v, "4k");
            rc = 0;
        } else
            snprintf(why, sizeof why, "unknown buffers '%s' (buffers: huge or 4k)", v);
    } else if (KEY("quantized", "type")) {
        /* the types `swarm quantize` gives the dense model's W (the K types as themselves) */
        static const char *const types[] = { "q8_0", "q6_K", "q5_K", "q4_K", "q4_0" };
        for (size_t i = 0; i < sizeof types / sizeof types[0] && rc; i++)
            if (!strcasecmp(v, types[i])) {
                snprintf(c->quant_type, sizeof c->quant_type, "%s", types[i]);
                rc = 0;
            }
        if (rc)
            snprintf(why, sizeof why,
                     "unknown type '%s' (type: q8_0, q6_K, q5_K, q4_K or q4_0)", v);
    } else if (KEY("swarm", "workers"))
        rc = s_u32(v, 1, CONFIG_MAX_WORKERS, &c->workers, why, sizeof why);
    else if (KEY("swarm", "inflight"))
        rc = s_u32(v, 1, 64, &c->inflight, why, sizeof why);
    else if (KEY("swarm", "cap"))
        rc = s_size(v, 1 << 20, &c->worker_cap_bytes, why, sizeof why);
    else if (KEY("swarm", "threads"))
        rc = s_u32(v, 1, 64, &c->worker_threads, why, sizeof why);
    else if (KEY("swarm", "host"))
        rc = s_str(v, c->host, sizeof c->host, why, sizeof why);
    else if (KEY("swarm", "heartbeat_ms"))
        rc = s_u32(v, PIRATE_HEARTBEAT_MS_MIN, PIRATE_HEARTBEAT_MS_MAX, &c->heartbeat_ms, why,
                   sizeof why);
    else if (KEY("swarm", "liveness"))
        rc = s_u32(v, PIRATE_LIVENESS_MIN, PIRATE_LIVENESS_MAX, &c->liveness, why, sizeof why);
    else if (KEY("swarm", "step_deadline_ms"))
        rc = s_u32(v, 10, 3600000, &c->step_deadline_ms, why, sizeof why);
    else if (KEY("swarm", "respawn"))
        rc = s_bool(v, &c->respawn, why, sizeof why);
    else if (KEY("swarm", "slowdown"))
        rc = s_u32(v, 1, 100000, &c->slowdown, why, sizeof why);
    else if (KEY("swarm", "plaintext"))
        rc = s_bool(v, &c->plaintext, why, sizeof why);
    else if (KEY("netem", "profile"))
        rc = s_str(v, c->profile, sizeof c->profile, why, sizeof why);
    else if (KEY("security", "key"))
        rc = s_str(v, c->key, sizeof c->key, why, sizeof why);
    else if (KEY("lab", "repeats"))
        rc = s_u32(v, 1, 1000, &c->repeats, why, sizeof why);
    else if (KEY("lab", "conditions"))
        rc = s_conditions(c, v, why, sizeof why);
    else if (KEY("lab", "out"))
        rc = s_str(v, c->lab_out, sizeof c->lab_out, why, sizeof why);
    else if (!strncmp(sec, "worker.", 7) && sec[7]) {
        config_worker *w = s_worker(c, sec + 7, why, sizeof why);
        if (!w)
            rc = -1;
        else if (!strcmp(key, "endpoint"))
            rc = s_str(v, w->endpoint, sizeof w->endpoint, why, sizeof why);
        else if (!strcmp(key, "cap"))
            rc = s_size(v, 1 << 20, &w->cap_bytes, why, sizeof why);
        else if (!strcmp(key, "public_key")) {
            /* Checked here, not first at connect time, so a bad value names its line. */
            char pub[SEC_KEY_LEN];
            rc = s_str(v, w->public_key, sizeof w->public_key, why, sizeof why);
            if (rc == 0 && v[0])
                rc = sec_parse_pub(v, pub, why, sizeof why);
        }
        else
            snprintf(why, sizeof why, "unknown key (known: endpoint, cap, public_key)");
    } else if (!strncmp(sec, "profile.", 8) && sec[8]) {
        netem_profile *p = s_profile(c, sec + 8, why, sizeof why);
        rc = p ? netem_profile_set(p, key, v, why, sizeof why) : -1;
    } else {
        const char *known = s_known_keys(sec);
        if (known)
            snprintf(why, sizeof why, "unknown key (known: %s)", known);
        else
            snprintf(why, sizeof why, "unknown section (sections: model, run, ssd, swarm, "
                     "security, netem, lab, worker.NAME, profile.NAME)");
    }
#undef KEY
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
