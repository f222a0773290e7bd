/* profile.c — link profiles: the built-ins, key=value setting from configs, [profile.NAME] INI sections. netem/ */
#include "netem/netem.h"

#include <errno.h>
#include <ini.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

/* Linux's TCP_RTO_MIN (200 ms): the smallest retransmission timeout a lost segment costs. */
#define NETEM_DEFAULT_RTO_NS 200000000ull

/* Built-ins. Delays are one-way means (RTT / 2); the mean of the sampled distribution is the
 * configured delay, so a measured mean can be compared to it directly.
 *   lan:  RTT 0.4 ms (switched gigabit, one hop), no jitter.
 *   wifi: RTT 4.5 ms, normal jitter sigma 0.5 ms one-way (802.11 contention; sigma chosen so the
 *         one-way delay stays positive by > 4 sigma and p95 is about 3.1 ms).
 *   wan:  RTT 60 ms (same continent), uniform +-1 ms one-way (queueing in a few routers). */
static const netem_profile s_builtins[] = {
    { .name = "none", .rto_ns = NETEM_DEFAULT_RTO_NS },
    { .name = "lan", .delay_ns = 200000, .rto_ns = NETEM_DEFAULT_RTO_NS },
    { .name = "wifi", .delay_ns = 2250000, .jitter_ns = 500000, .dist = NETEM_DIST_NORMAL,
      .rto_ns = NETEM_DEFAULT_RTO_NS },
    { .name = "wan", .delay_ns = 30000000, .jitter_ns = 1000000, .dist = NETEM_DIST_UNIFORM,
      .rto_ns = NETEM_DEFAULT_RTO_NS },
};

static const char *s_dist_names[] = { "none", "uniform", "normal", "pareto" };

int netem_profile_builtin(const char *name, netem_profile *out)
{
    for (size_t i = 0; i < sizeof s_builtins / sizeof s_builtins[0]; i++) {
        if (strcmp(name, s_builtins[i].name) == 0) {
            *out = s_builtins[i];
            return 0;
        }
    }
    return -1;
}

/* A finite, non-negative number with nothing after it but `suffix_ok` characters. */
static int s_parse_num(const char *val, double *out, char **end)
{
    char *e;

    errno = 0;
    *out = strtod(val, &e);
    if (errno || e == val || !isfinite(*out) || *out < 0)
        return -1;
    *end = e;
    return 0;
}

static int s_parse_ms(const char *val, uint64_t *ns)
{
    double v;
    char *end;

    if (s_parse_num(val, &v, &end) < 0 || *end || v > 3600e3)
        return -1;
    *ns = (uint64_t)llround(v * 1e6);
    return 0;
}

/* Rates use SI multipliers (as link rates do): "100M" = 100e6 bytes/s, "1Gbit" = 125e6 bytes/s,
 * "0" or "inf" = unlimited. */
static int s_parse_rate(const char *val, uint64_t *bps)
{
    double v, mul = 1;
    char *end;

    if (strcasecmp(val, "inf") == 0 || strcasecmp(val, "unlimited") == 0) {
        *bps = 0;
        return 0;
    }
    if (s_parse_num(val, &v, &end) < 0)
        return -1;
    switch (*end) {
    case 'k': case 'K': mul = 1e3; end++; break;
    case 'm': case 'M': mul = 1e6; end++; break;
    case 'g': case 'G': mul = 1e9; end++; break;
    default: break;
    }
    if (strcasecmp(end, "bit") == 0 || strcasecmp(end, "bps") == 0)
        mul /= 8;
    else if (*end && strcasecmp(end, "B") != 0 && strcasecmp(end, "B/s") != 0)
        return -1;
    v *= mul;
    if (v > 1e15 || (v > 0 && v < 1))
        return -1;
    *bps = (uint64_t)llround(v);
    return 0;
}

int netem_profile_set(netem_profile *p, const char *key, const char *val, char *err, size_t errlen)
{
    double v;
    char *end;
    const char *why = "not a number";

    if (strcmp(key, "rtt_ms") == 0 || strcmp(key, "delay_ms") == 0) {
        uint64_t ns;
        if (s_parse_ms(val, &ns) < 0)
            goto err;
        p->delay_ns = key[0] == 'r' ? ns / 2 : ns;
    } else if (strcmp(key, "jitter_ms") == 0) {
        if (s_parse_ms(val, &p->jitter_ns) < 0)
            goto err;
        if (p->jitter_ns && p->dist == NETEM_DIST_NONE)
            p->dist = NETEM_DIST_UNIFORM; /* jitter without a named distribution: uniform */
    } else if (strcmp(key, "jitter_dist") == 0) {
        uint32_t d;
        for (d = 0; d < 4; d++)
            if (strcasecmp(val, s_dist_names[d]) == 0)
                break;
        if (d == 4) {
            snprintf(err, errlen, "unknown jitter_dist '%s' (jitter_dist: none, uniform, normal, "
                     "pareto)", val);
            return -1;
        }
        p->dist = d;
    } else if (strcmp(key, "loss") == 0) {
        if (s_parse_num(val, &v, &end) < 0)
            goto err;
        if (*end == '%' && end[1] == '\0')
            v /= 100;
        else if (*end)
            goto err;
        why = "must be in [0, 1) (use `cut` or the BPF blackhole for a dead link)";
        if (v >= 1)
            goto err;
        p->loss = v;
    } else if (strcmp(key, "rate") == 0) {
        why = "expected e.g. 100M (bytes/s), 1Gbit (bits/s), inf";
        if (s_parse_rate(val, &p->rate_bps) < 0)
            goto err;
    } else if (strcmp(key, "rto_ms") == 0) {
        if (s_parse_ms(val, &p->rto_ns) < 0)
            goto err;
    } else if (strcmp(key, "control_plane") == 0) {
        why = "expected 0 or 1";
        if (strcmp(val, "0") != 0 && strcmp(val, "1") != 0)
            goto err;
        p->control_plane = val[0] == '1';
    } else {
        snprintf(err, errlen, "unknown profile key '%s' (rtt_ms, delay_ms, jitter_ms, jitter_dist, "
                 "loss, rate, rto_ms, control_plane)", key);
        return -1;
    }
    return 0;
err:
    snprintf(err, errlen, "profile key '%s': bad value '%s': %s", key, val, why);
    return -1;
}

const char *netem_profile_describe(const netem_profile *p, char *buf, size_t len)
{
    char rate[32] = "inf";

    if (p->rate_bps)
        snprintf(rate, sizeof rate, "%.1f MB/s", (double)p->rate_bps / 1e6);
    snprintf(buf, len, "%s: one-way %.3f ms, jitter %s %.3f ms, loss %g (rto %.0f ms), rate %s%s",
             p->name, (double)p->delay_ns / 1e6, s_dist_names[p->dist < 4 ? p->dist : 0],
             (double)p->jitter_ns / 1e6, p->loss, (double)p->rto_ns / 1e6, rate,
             p->control_plane ? ", control plane too" : "");
    return buf;
}

int netem_profile_is_none(const netem_profile *p)
{
    return p->delay_ns == 0 && p->jitter_ns == 0 && p->loss == 0 && p->rate_bps == 0;
}

/* ---- [profile.NAME] sections of an INI file ---- */
typedef struct {
    const char *section;      /* "profile.NAME" */
    netem_profile *p;
    int found;
    char err[256];            /* first error, without file and line (ini_parse gives the line) */
} s_ini_ctx;

static int s_ini_handler(void *user, const char *section, const char *name, const char *value)
{
    s_ini_ctx *c = user;

    if (strcmp(section, c->section) != 0)
        return 1;
    c->found = 1;
    if (c->err[0])
        return 1; /* keep the first error; ini_parse reports the first failing line */
    return netem_profile_set(c->p, name, value, c->err, sizeof c->err) == 0;
}

int netem_profile_resolve(const char *name, const char *config_path, netem_profile *out,
                          char *err, size_t errlen)
{
    s_ini_ctx c = { 0 };
    char section[NETEM_NAME_MAX + 16];
    int builtin, line;

    if (strlen(name) >= NETEM_NAME_MAX) {
        snprintf(err, errlen, "profile name '%s' longer than %d", name, NETEM_NAME_MAX - 1);
        return -1;
    }
    builtin = netem_profile_builtin(name, out) == 0;
    if (!builtin)
        netem_profile_builtin("none", out);
    snprintf(out->name, sizeof out->name, "%s", name);
    if (config_path) {
        snprintf(section, sizeof section, "profile.%s", name);
        c.section = section;
        c.p = out;
        line = ini_parse(config_path, s_ini_handler, &c);
        if (line < 0) {
            snprintf(err, errlen, "%s: cannot open", config_path);
            return -1;
        }
        if (line > 0) {
            snprintf(err, errlen, "%s:%d: %s", config_path, line,
                     c.err[0] ? c.err : "syntax error");
            return -1;
        }
    }
    if (!builtin && !c.found) {
        snprintf(err, errlen, "unknown profile '%s' (built-ins: none, lan, wifi, wan%s%s%s)", name,
                 config_path ? "; no [profile." : "", config_path ? name : "",
                 config_path ? "] in the config" : "");
        return -1;
    }
    return 0;
}

void netem_profile_link(const netem_profile *p, uint64_t seed, msg_link *l)
{
    memset(l, 0, sizeof *l);
    l->delay_ns = p->delay_ns;
    l->jitter_ns = p->jitter_ns;
    l->dist = p->dist;
    l->loss_ppm = (uint32_t)(p->loss * 1e6);
    l->rate_bps = p->rate_bps;
    l->seed = seed;
}
