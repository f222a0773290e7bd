/* cmd_plan.c — `swarm plan MODEL.gguf`: a real model's layers over workers by bytes (weights,
 * KV caches, buffers), or the refusal with its numbers. cli/ */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <jansson.h>

#include "arch/arch.h"
#include "base/exitcode.h"
#include "gguf/gguf.h"
#include "base/util.h"
#include "cli/cmd.h"
#include "dist/partition.h"

static void s_usage(FILE *f)
{
    fprintf(f,
            "usage: swarm plan MODEL.gguf --workers N (--cap SIZE | --caps S1,S2,...)\n"
            "                  [--sessions S] [--ctx N] [--batch B] [--threads T]\n"
            "  Partitions a llama/qwen2 (or dense) file's layers over N workers by bytes: each\n"
            "  layer's resident weights plus its KV cache for S sessions of N positions, and\n"
            "  each worker's overhead and buffers (a message of B positions in and out, the\n"
            "  layer run's scratch). Prints one JSON object: every worker's range and bytes,\n"
            "  and where the embedding and the head live (the coordinator). A plan that cannot\n"
            "  fit exits 2 with every term of the refusal.\n"
            "  --cap SIZE       every worker's cap (600M, 1G; 0 = none)\n"
            "  --caps LIST      one cap per worker, comma-separated (sets N)\n"
            "  --sessions S     sessions in flight (default 1)\n"
            "  --ctx N          positions per session (default 2048)\n"
            "  --batch B        positions per activation message (default 64)\n"
            "  --threads T      a worker's compute threads (default 1)\n");
}

static int s_uint(const char *flag, const char *v, uint32_t lo, uint32_t *out)
{
    char *end;
    errno = 0;
    unsigned long x = strtoul(v, &end, 10);
    if (errno || end == v || *end || x < lo || x > UINT32_MAX) {
        fprintf(stderr, "swarm plan: %s: '%s' must be an integer >= %u\n", flag, v, lo);
        return -1;
    }
    *out = (uint32_t)x;
    return 0;
}

static int s_caps(const char *v, uint64_t *caps, uint32_t *n)
{
    char buf[4096], *save = NULL;
    snprintf(buf, sizeof buf, "%s", v);
    *n = 0;
    for (char *t = strtok_r(buf, ",", &save); t; t = strtok_r(NULL, ",", &save)) {
        if (*n == PARTITION_MAX_WORKERS || util_parse_size(t, &caps[*n])) {
            fprintf(stderr, "swarm plan: --caps: '%s' is not a size (or more than %u)\n", t,
                    PARTITION_MAX_WORKERS);
            return -1;
        }
        (*n)++;
    }
    return *n ? 0 : -1;
}

static json_t *s_plan_json(const char *path, const partition_llm_plan *p,
                           const partition_llm_opts *o)
{
    json_t *r = json_object(), *ws = json_array();
    json_object_set_new(r, "model", json_string(path));
    json_object_set_new(r, "layers", json_integer(p->n_layers));
    json_object_set_new(r, "sessions", json_integer(o->sessions));
    json_object_set_new(r, "ctx", json_integer(o->n_ctx));
    json_object_set_new(r, "batch", json_integer(o->max_batch));
    json_object_set_new(r, "kv_bytes_per_pos_layer", json_integer((json_int_t)p->kv_per_pos));
    json_object_set_new(r, "embedding_at", json_string(p->embedding_at));
    json_object_set_new(r, "embedding_bytes", json_integer((json_int_t)p->embd_bytes));
    json_object_set_new(r, "head_at", json_string(p->head_at));
    json_object_set_new(r, "head_bytes", json_integer((json_int_t)p->head_bytes));
    for (uint32_t i = 0; i < p->n_workers; i++) {
        json_t *w = json_object();
        uint64_t wb = 0, kb = 0;
        for (uint32_t l = p->first[i]; l < p->last[i]; l++) {
            wb += p->layer_weight[l];
            kb += p->layer_kv[l];
        }
        json_object_set_new(w, "first", json_integer(p->first[i]));
        json_object_set_new(w, "last", json_integer(p->last[i]));
        json_object_set_new(w, "weight_bytes", json_integer((json_int_t)wb));
        json_object_set_new(w, "kv_bytes", json_integer((json_int_t)kb));
        json_object_set_new(w, "overhead_bytes", json_integer((json_int_t)p->overhead_bytes));
        json_object_set_new(w, "buffer_bytes", json_integer((json_int_t)p->buffer_bytes));
        json_object_set_new(w, "need_bytes", json_integer((json_int_t)p->need[i]));
        json_object_set_new(w, "cap_bytes", json_integer((json_int_t)p->cap[i]));
        json_array_append_new(ws, w);
    }
    json_object_set_new(r, "workers", ws);
    return r;
}

int cmd_plan(int argc, char **argv)
{
    partition_llm_opts o = { .sessions = 1, .n_ctx = 2048, .max_batch = 64, .threads = 1 };
    uint64_t caps[PARTITION_MAX_WORKERS] = { 0 }, cap = 0;
    uint32_t n = 0, n_caps = 0;
    int have_cap = 0, rc = EXIT_FAIL;
    const char *path = NULL;
    char err[1024];
    gguf_file *g = NULL;
    arch_model am = { 0 };
    partition_llm_plan *p = NULL;
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i], *v = i + 1 < argc ? argv[i + 1] : NULL;
        if (!strcmp(a, "-h") || !strcmp(a, "--help")) {
            s_usage(stdout);
            return EXIT_OK;
        }
        int bad = 0;
        if (!strcmp(a, "--workers") && v)
            bad = s_uint(a, v, 1, &n);
        else if (!strcmp(a, "--cap") && v) {
            bad = util_parse_size(v, &cap);
            if (bad)
                fprintf(stderr, "swarm plan: --cap: '%s' is not a size (600M, 1G)\n", v);
            have_cap = 1;
        } else if (!strcmp(a, "--caps") && v)
            bad = s_caps(v, caps, &n_caps);
        else if (!strcmp(a, "--sessions") && v)
            bad = s_uint(a, v, 1, &o.sessions);
        else if (!strcmp(a, "--ctx") && v)
            bad = s_uint(a, v, 1, &o.n_ctx);
        else if (!strcmp(a, "--batch") && v)
            bad = s_uint(a, v, 1, &o.max_batch);
        else if (!strcmp(a, "--threads") && v)
            bad = s_uint(a, v, 1, &o.threads);
        else if (a[0] != '-' && !path) {
            path = a;
            continue;
        } else {
            fprintf(stderr, "swarm plan: unknown or incomplete option '%s'\n", a);
            bad = 1;
        }
        if (bad) {
            s_usage(stderr);
            return EXIT_USAGE;
        }
        i++;
    }
    if (n_caps && n && n != n_caps) {
        fprintf(stderr, "swarm plan: --workers %u but --caps names %u caps\n", n, n_caps);
        return EXIT_USAGE;
    }
    if (n_caps)
        n = n_caps;
    else
        for (uint32_t i = 0; i < n && i < PARTITION_MAX_WORKERS; i++)
            caps[i] = cap;
    if (!path || !n || (!have_cap && !n_caps)) {
        fprintf(stderr, "swarm plan: a model, --workers and --cap (or --caps) are needed\n");
        s_usage(stderr);
        return EXIT_USAGE;
    }
    if (!(g = gguf_open(path, err, sizeof err)) || arch_model_open(&am, g, err, sizeof err)) {
        fprintf(stderr, "swarm plan: %s\n", err);
        goto out;
    }
    if (!(p = calloc(1, sizeof *p))) {
        fprintf(stderr, "swarm plan: out of memory\n");
        goto out;
    }
    if (partition_llm(&am, &o, n, caps, p, err, sizeof err)) {
        fprintf(stderr, "swarm plan: %s: %s\n", path, err);
        rc = EXIT_USAGE;
        goto out;
    }
    json_t *j = s_plan_json(path, p, &o);
    char *s = json_dumps(j, JSON_COMPACT);
    if (s)
        puts(s);
    free(s);
    json_decref(j);
    rc = s ? EXIT_OK : EXIT_FAIL;
out:
    free(p);
    arch_model_close(&am);
    gguf_close(&g);
    return rc;
}
