/* serve.c — `swarm serve`: flags, listen, load, serve until SIGTERM, drain, exit. serve/
 *
 * The HTTP daemon starts before the model is loaded, so /health answers 503 "loading" while a
 * large file is faulted in; generation endpoints say the same. SIGTERM (or SIGINT) stops
 * accepting at once, lets in-flight requests finish for up to --grace seconds, cancels what is
 * left, and exits 0.
 */
#include <errno.h>
#include <limits.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include <microhttpd.h>

#include "text/chat.h"
#include "base/exitcode.h"
#include "gguf/gguf.h"
#include "base/util.h"
#include "dist/arm_open.h"
#include "serve/serve.h"
#include "serve/serve_int.h"

double serve_now(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + ts.tv_nsec * 1e-9;
}

static void s_usage(FILE *f)
{
    fprintf(f,
        "usage: swarm serve MODEL.gguf|CONFIG [options]\n"
        "  An OpenAI-compatible HTTP server: /v1/models, /v1/chat/completions, /v1/completions,\n"
        "  /health, /metrics, and a chat page at /. One access log line per request on stderr.\n"
        "  --listen HOST:PORT     address (default 127.0.0.1:8080; port 0 = any free port)\n"
        "  --port-file F          write the bound port to F once listening\n"
        "  The arm: ssd runs one session unless --parallel says more (each one's KV cache\n"
        "  under the cap, their passes batched); resident: every slot is a\n"
        "  session in flight, and a lost worker is respawned unless --no-respawn (/health says\n"
        "  degraded meanwhile).\n"
        ARM_FLAGS_USAGE
        "  --ctx N                context per session (default min(2048, the model's))\n"
        "  --parallel K           sessions generating at once, each with its KV cache (default 4)\n"
        "  --queue Q              requests waiting beyond those (default 16); more get 429\n"
        "  --api-key KEY | --api-key-file F | --no-auth\n"
        "                         Bearer key; required when listening off loopback\n"
        "  --chat-template NAME   use NAME when the file has none swarm recognises\n"
        "  --timeout S            idle seconds before a client that sends nothing is dropped (10)\n"
        "  --max-body BYTES       larger request bodies get 413 (default 1048576)\n"
        "  --grace S              seconds in-flight requests may finish after SIGTERM (10); then a\n"
        "                         stream ends with an error event and [DONE], a reply is a 503\n"
        "  --alias NAME           another name the model answers to (repeatable, up to 8)\n"
        "  --strict-model         refuse (404) a model name that is neither the file's nor an\n"
        "                         alias (default: any name is taken and echoed back)\n"
        "  --cors ORIGIN          let pages from ORIGIN call the API (repeatable; * = any)\n"
        "  --log-prompts          the access log shows request bodies (off: never the prompt)\n"
        "  --draft DRAFT.gguf     speculative decoding by default: a model with MODEL's\n"
        "                         vocabulary (e.g. its Q4_0 copy) drafts, the target verifies\n"
        "  --draft-lookup         speculative decoding by default with prompt lookup (no model)\n"
        "  --draft-max K          the most tokens drafted a pass (1..32; default 8 / 6)\n"
        "  --draft-greedy         the draft model drafts its argmax when a request samples\n"
        "                         (its tokens then plain generation's); default: sampled\n"
        "  --draft-fixed          draft K tokens every pass, nothing adapted\n"
        "                         A request's \"speculative\" field overrides (docs/serve.md)\n"
        "  Also /tokenize, /detokenize, /apply-template, /props, /slots (llama-server's shapes).\n");
}

static int s_loopback(const char *host)
{
    return !strcmp(host, "localhost") || !strncmp(host, "127.", 4) || !strcmp(host, "::1");
}

static int s_uint(const char *flag, const char *v, unsigned long lo, unsigned long hi,
                  unsigned long *out)
{
    char *end;
    errno = 0;
    unsigned long x = strtoul(v, &end, 10);
    if (errno || end == v || *end || x < lo || x > hi || v[0] == '-') {
        fprintf(stderr, "swarm serve: %s '%s' must be an integer in %lu..%lu\n", flag, v, lo, hi);
        return -1;
    }
    *out = x;
    return 0;
}

static char *s_read_key(const char *path)
{
    FILE *f = fopen(path, "r");
    if (!f) {
        fprintf(stderr, "swarm serve: --api-key-file %s: %s\n", path, strerror(errno));
        return NULL;
    }
    char buf[512];
    char *k = fgets(buf, sizeof buf, f) ? strdup(buf) : NULL;
    fclose(f);
    if (k)
        k[strcspn(k, "\r\n")] = 0;
    if (!k || !k[0]) {
        fprintf(stderr, "swarm serve: --api-key-file %s: empty\n", path);
        free(k);
        return NULL;
    }
    return k;
}

/* The file's chat template, or --chat-template's; "" (chat refused with a clear 400) when
 * neither names one swarm renders. Never silently another family's. */
static int s_template(serve *srv, const char *flag)
{
    char err[512];
    const char *const *names = chat_template_names();
    if (flag) {
        for (size_t i = 0; names[i]; i++)
            if (!strcmp(names[i], flag)) {
                snprintf(srv->chat_template, sizeof srv->chat_template, "%s", flag);
                return 0;
            }
        fprintf(stderr, "swarm serve: unknown --chat-template '%s' (names:", flag);
        for (size_t i = 0; names[i]; i++)
            fprintf(stderr, " %s", names[i]);
        fprintf(stderr, ")\n");
        return -1;
    }
    const char *jinja = NULL;
    if (gguf_get_str(llm_model_gguf(srv->model), "tokenizer.chat_template", &jinja, err,
                     sizeof err)) {
        fprintf(stderr, "serve: %s has no tokenizer.chat_template: /v1/chat/completions is "
                "refused unless --chat-template NAME is given\n", srv->model_path);
        return 0;
    }
    srv->tool_system = tool_default_system(jinja);
    if (chat_template_detect(jinja, srv->chat_template, sizeof srv->chat_template, err,
                             sizeof err)) {
        srv->chat_template[0] = 0;
        fprintf(stderr, "serve: %s: %s; /v1/chat/completions is refused unless "
                "--chat-template NAME is given\n", srv->model_path, err);
    }
    return 0;
}

/* ---------------------------------------------------------------- flags */

/* The command line, parsed; what the server is built from. */
typedef struct {
    const char *listen, *port_file, *key_file, *tmpl;
    const char *model_arg;        /* MODEL.gguf or a CONFIG, as given */
    char *key;
    unsigned long ctx, timeout, grace, port;
    int no_auth, parallel_set, n_pos;
    char host[256];
    arm_flags af;
    arm_handle h;                 /* the arm (dist/arm_open.h): owns the model and swarm */
} s_cmd;

/* serve's own flags that take a value: argv[*i] with v. 1 / 0 / -1 (printed). */
static int s_own_valued(serve *srv, s_cmd *c, const char *k, const char *v)
{
    unsigned long x;
    const char **to = !strcmp(k, "--listen") ? &c->listen : !strcmp(k, "--port-file")
                      ? &c->port_file : !strcmp(k, "--api-key-file") ? &c->key_file
                      : !strcmp(k, "--chat-template") ? &c->tmpl : NULL;
    if (to) {
        *to = v;
    } else if (!strcmp(k, "--api-key")) {
        free(c->key);
        c->key = strdup(v);
    } else if (!strcmp(k, "--alias") || !strcmp(k, "--cors")) {
        int al = !strcmp(k, "--alias");
        uint32_t *n = al ? &srv->n_alias : &srv->n_cors;
        if (*n == (al ? SERVE_MAX_ALIAS : SERVE_MAX_CORS) || !v[0] || strlen(v) >= 128) {
            fprintf(stderr, "swarm serve: %s '%s': at most %d, each 1..127 bytes\n", k, v,
                    al ? SERVE_MAX_ALIAS : SERVE_MAX_CORS);
            return -1;
        }
        (al ? srv->alias : srv->cors)[(*n)++] = v;
    } else if (!strcmp(k, "--ctx")) {
        return s_uint(k, v, 2, 1u << 20, &c->ctx) ? -1 : 1;
    } else if (!strcmp(k, "--timeout")) {
        return s_uint(k, v, 1, 3600, &c->timeout) ? -1 : 1;
    } else if (!strcmp(k, "--grace")) {
        return s_uint(k, v, 0, 3600, &c->grace) ? -1 : 1;
    } else if (!strcmp(k, "--parallel") || !strcmp(k, "--queue") || !strcmp(k, "--max-body")) {
        int par = !strcmp(k, "--parallel"), q = !strcmp(k, "--queue");
        if (s_uint(k, v, par ? 1 : q ? 0 : 1024, par ? 256 : q ? 65536 : 1ul << 30, &x))
            return -1;
        if (par) {
            srv->n_slots = (uint32_t)x;
            c->parallel_set = 1;
        } else if (q) {
            srv->n_queue = (uint32_t)x;
        } else {
            srv->max_body = x;
        }
    } else {
        return 0;
    }
    return 1;
}

/* One argument, argv[*i] (and its value). -1: go on; else an exit code (printed). */
static int s_arg(serve *srv, s_cmd *c, int argc, char **argv, int *i)
{
    char err[512], *k = argv[*i];
    if (!strcmp(k, "--help") || !strcmp(k, "-h")) {
        s_usage(stdout);
        return EXIT_OK;
    }
    int r = llm_cli_draft_flag(&srv->draft, argc, argv, i, err, sizeof err);
    if (r)
        return r > 0 ? -1 : (fprintf(stderr, "swarm serve: %s\n", err), EXIT_USAGE);
    if (!strcmp(k, "--no-auth") || !strcmp(k, "--strict-model") ||
        !strcmp(k, "--log-prompts")) {
        *(!strcmp(k, "--no-auth") ? &c->no_auth : !strcmp(k, "--strict-model")
          ? &srv->strict_model : &srv->log_prompts) = 1;
        return -1;
    }
    r = arm_flags_parse(&c->af, argc, argv, i, err, sizeof err);
    if (r < 0) {
        fprintf(stderr, "swarm serve: %s\n", err);
        return EXIT_USAGE;
    }
    if (r)
        return -1;
    if (k[0] != '-') {
        c->model_arg = k;
        c->n_pos++;
        return -1;
    }
    if (*i + 1 < argc && (r = s_own_valued(srv, c, k, argv[*i + 1])) != 0) {
        ++*i;
        return r < 0 ? EXIT_USAGE : -1;
    }
    fprintf(stderr, "swarm serve: unknown option or missing value '%s'\n", k);
    s_usage(stderr);
    return EXIT_USAGE;
}

/* Every argument; "--flag=value" is split first (getopt_long's spelling, still taken). An
 * exit code (printed), or -1: parsed, go on. */
static int s_args(serve *srv, s_cmd *c, int argc, char **argv)
{
    char **av = calloc((size_t)argc * 2 + 1, sizeof *av), *own[64];
    int n = 0, n_own = 0, rc = -1;
    if (!av)
        return EXIT_FAIL;
    for (int i = 0; i < argc; i++) {
        const char *eq = strchr(argv[i], '=');
        if (i && !strncmp(argv[i], "--", 2) && eq && n_own < 64) {
            av[n++] = own[n_own++] = strndup(argv[i], (size_t)(eq - argv[i]));
            av[n++] = (char *)eq + 1;
        } else {
            av[n++] = argv[i];
        }
    }
    for (int i = 1; i < n && rc < 0; i++)
        rc = s_arg(srv, c, n, av, &i);
    for (int i = 0; i < n_own; i++)
        free(own[i]);
    free(av);
    return rc;
}

/* "HOST:PORT", HOST may be [v6]; off loopback needs a key. 0 / -1 (printed). */
static int s_listen_addr(s_cmd *c)
{
    const char *listen = c->listen, *colon = strrchr(listen, ':');
    if (!colon || colon == listen || (size_t)(colon - listen) >= sizeof c->host) {
        fprintf(stderr, "swarm serve: --listen '%s' must be HOST:PORT\n", listen);
        return -1;
    }
    size_t hl = (size_t)(colon - listen);
    if (listen[0] == '[' && listen[hl - 1] == ']')
        snprintf(c->host, sizeof c->host, "%.*s", (int)hl - 2, listen + 1);
    else
        snprintf(c->host, sizeof c->host, "%.*s", (int)hl, listen);
    if (s_uint("--listen port", colon + 1, 0, 65535, &c->port))
        return -1;
    if (!s_loopback(c->host) && !c->key && !c->no_auth) {
        fprintf(stderr, "swarm serve: listening on %s (off loopback) needs --api-key KEY or "
                "--api-key-file F (or --no-auth to serve anyone who can reach it)\n", c->host);
        return -1;
    }
    return 0;
}

/* Parse and check everything that needs no file opened. EXIT_OK after --help, EXIT_USAGE
 * (printed), or -1: go on. */
static int s_parse(serve *srv, s_cmd *c, int argc, char **argv)
{
    static char model_buf[PATH_MAX];
    char err[768];
    int rc = s_args(srv, c, argc, argv);
    if (rc >= 0)
        return rc;
    if (c->n_pos != 1) {
        fprintf(stderr, "swarm serve: one model file expected\n");
        s_usage(stderr);
        return EXIT_USAGE;
    }
    /* a model file, or a config naming one ([llm] model of a text-lab config) */
    if (llm_cli_resolve(c->model_arg, model_buf, sizeof model_buf, err, sizeof err) ||
        /* faults are placed by generated token: generate's alone */
        arm_flags_check(&c->af, ARM_F_ALL & ~ARM_F_FAULTS, ARM_ARMS_ALL, "serve", err,
                        sizeof err)) {
        fprintf(stderr, "swarm serve: %s\n", err);
        return EXIT_USAGE;
    }
    srv->model_path = model_buf;
    srv->arm = c->af.arm_name;
    /* the SSD arm's plan holds every slot's KV cache under the cap (runtime/llm.h): one
     * unless asked; several share each streamed layer's read (continuous batching) */
    if (c->af.arm == LLM_ARM_SSD && !c->parallel_set)
        srv->n_slots = 1;
    if ((c->key_file && !(c->key = s_read_key(c->key_file))) || s_listen_addr(c))
        return EXIT_USAGE;
    srv->api_key = c->key;
    if (llm_cli_draft_check(&srv->draft, err, sizeof err)) {
        fprintf(stderr, "swarm serve: %s\n", err);
        return EXIT_USAGE;
    }
    srv->spec_on = llm_cli_draft_on(&srv->draft);
    if (access(srv->model_path, R_OK)) {
        fprintf(stderr, "swarm serve: %s: %s\n", srv->model_path, strerror(errno));
        return EXIT_USAGE;
    }
    const char *base = strrchr(srv->model_path, '/');
    snprintf(srv->model_id, sizeof srv->model_id, "%s", base ? base + 1 : srv->model_path);
    size_t il = strlen(srv->model_id);
    if (il > 5 && !strcmp(srv->model_id + il - 5, ".gguf"))
        srv->model_id[il - 5] = 0;
    return -1;
}

/* ---------------------------------------------------------------- listen, load, drain */

/* The daemon up before the model loads (/health says "loading"). NULL (printed). */
static struct MHD_Daemon *s_start(serve *srv, s_cmd *c)
{
    char err[512];
    unsigned bound = 0;
    if (!(srv->metrics = metrics_new())) {
        fprintf(stderr, "swarm serve: out of memory\n");
        return NULL;
    }
    struct MHD_Daemon *d = http_start(srv, c->host, (unsigned)c->port, (unsigned)c->timeout,
                                      &bound, err, sizeof err);
    if (!d) {
        fprintf(stderr, "swarm serve: %s\n", err);
        return NULL;
    }
    fprintf(stderr, "serve: listening on http://%s%s%s:%u (loading %s)\n",
            strchr(c->host, ':') ? "[" : "", c->host, strchr(c->host, ':') ? "]" : "", bound,
            srv->model_path);
    if (c->port_file) {
        FILE *pf = fopen(c->port_file, "w");
        if (!pf || fprintf(pf, "%u\n", bound) < 0 || fclose(pf)) {
            fprintf(stderr, "swarm serve: --port-file %s: %s\n", c->port_file, strerror(errno));
            MHD_stop_daemon(d);
            return NULL;
        }
    }
    return d;
}

/* The arm (the workers' caches planned for every slot's context before any starts), the
 * template, the scheduler. 0, or an exit code (printed). */
static int s_load(serve *srv, s_cmd *c)
{
    char err[768];
    double t0 = serve_now();
    /* the SSD arm's batch is sched's: min(n_ctx, 64) */
    arm_open_opts ao = { .cmd = "serve", .log_prefix = "serve: ", .model = c->model_arg,
                         .flags = &c->af, .n_ctx = (uint32_t)c->ctx, .ctx_max = 2048,
                         .n_batch = 64, .sessions = srv->n_slots, .respawn = 1 };
    if (arm_open(&ao, &c->h, err, sizeof err)) {
        fprintf(stderr, "swarm serve: %s\n", err);
        return arm_open_exit_code(&c->h, err);
    }
    srv->model = c->h.lm.m;
    srv->tok = c->h.lm.t;
    srv->n_vocab = (uint32_t)tokenizer_n_vocab(srv->tok);
    srv->swarm = c->h.swarm;
    srv->n_ctx = c->h.n_ctx;
    srv->nthreads = c->h.threads;
    if (s_template(srv, c->tmpl))
        return EXIT_USAGE;
    /* the draft model on the reference arm here, whatever the target's arm; every slot's
     * engine runs its own session over it */
    if (llm_cli_draft_open(&srv->draft, srv->model, err, sizeof err)) {
        fprintf(stderr, "swarm serve: %s\n", err);
        return EXIT_USAGE;
    }
    if (c->h.ssd) {
        const exec_plan *p = llm_model_plan(srv->model);
        fprintf(stderr, "serve: ssd arm: cap %.1f MiB (%s), %u layers resident, %u streamed "
                "(%.1f MiB per pass), %u session%s at a time%s\n",
                c->h.ssd->lo.cap_bytes / 1048576.0, c->h.ssd->cap_mode, p->n_resident,
                p->n_streamed, p->streamed_per_step / 1048576.0, srv->n_slots,
                srv->n_slots > 1 ? "s (their passes batched)" : "",
                c->parallel_set ? "" : " (--parallel 1)");
    }
    if (!(srv->sched = sched_new(srv, srv->n_slots, srv->n_queue, srv->n_ctx, srv->nthreads,
                                 err, sizeof err))) {
        fprintf(stderr, "swarm serve: %s\n", err);
        return EXIT_FAIL;
    }
    atomic_store(&srv->state, STATE_SERVING);
    fprintf(stderr, "serve: ready in %.2f s: %s, arm %s, %u slots x %u positions (KV %.1f MiB), "
            "queue %u, %d threads, chat template %s\n", serve_now() - t0, srv->model_id,
            srv->arm, srv->n_slots, srv->n_ctx, sched_kv_bytes(srv->sched) / 1048576.0,
            srv->n_queue, srv->nthreads, srv->chat_template[0] ? srv->chat_template : "(none)");
    return 0;
}

/* SIGTERM or SIGINT: stop accepting, let in-flight requests finish for up to grace seconds,
 * cancel what is left. */
static void s_drain(serve *srv, struct MHD_Daemon *d, int sig, unsigned long grace)
{
    atomic_store(&srv->state, STATE_DRAINING);
    MHD_socket lfd = MHD_quiesce_daemon(d);
    if (lfd != MHD_INVALID_SOCKET)
        close(lfd);
    uint32_t a = 0, q = 0;
    sched_counts(srv->sched, &a, &q);
    fprintf(stderr, "serve: %s: not accepting; %u active, %u queued get up to %lu s\n",
            strsignal(sig), a, q, grace);
    double until = serve_now() + (double)grace;
    while (sched_counts(srv->sched, &a, &q), a + q > 0 && serve_now() < until) {
        struct timespec ts = { 0, 20 * 1000 * 1000 };
        nanosleep(&ts, NULL);
    }
    if (a + q)
        fprintf(stderr, "serve: cancelling %u requests still running after %lu s\n", a + q,
                grace);
    sched_cancel_all(srv->sched, 1);
    /* The cancelled ones end with an error event (a stream) or a 503 (a whole reply): let
     * those last bytes reach their clients before the daemon closes every connection. A
     * slot stops within a token; the bound is for a client that stopped reading. */
    until = serve_now() + 5.0;
    while (atomic_load(&srv->n_live) > 0 && serve_now() < until) {
        struct timespec ts = { 0, 10 * 1000 * 1000 };
        nanosleep(&ts, NULL);
    }
}

int serve_main(int argc, char **argv)
{
    serve srv = { .n_slots = 4, .n_queue = 16, .max_body = 1u << 20 };
    s_cmd *c = calloc(1, sizeof *c); /* an arm_handle holds paths: not for the stack */
    struct MHD_Daemon *d = NULL;
    int rc = EXIT_FAIL;
    atomic_init(&srv.state, STATE_LOADING);
    atomic_init(&srv.n_live, 0);
    if (!c) {
        fprintf(stderr, "swarm serve: out of memory\n");
        return EXIT_FAIL;
    }
    *c = (s_cmd){ .listen = "127.0.0.1:8080", .timeout = 10, .grace = 10 };
    arm_flags_init(&c->af);
    if ((rc = s_parse(&srv, c, argc, argv)) >= 0)
        goto out;
    /* Signals are taken by sigwait in this thread only: every thread started below (the
     * daemon's, the slots', the quant pool's) inherits the mask. */
    sigset_t sigs;
    sigemptyset(&sigs);
    sigaddset(&sigs, SIGTERM);
    sigaddset(&sigs, SIGINT);
    pthread_sigmask(SIG_BLOCK, &sigs, NULL);
    signal(SIGPIPE, SIG_IGN);
    rc = EXIT_FAIL;
    if (!(d = s_start(&srv, c)) || (rc = s_load(&srv, c)) != 0)
        goto out;
    int sig = 0;
    sigwait(&sigs, &sig);
    s_drain(&srv, d, sig, c->grace);
    MHD_stop_daemon(d);
    d = NULL;
    fprintf(stderr, "serve: stopped\n");
    rc = EXIT_OK;
out:
    if (d) {
        if (srv.sched)
            sched_cancel_all(srv.sched, 0);
        MHD_stop_daemon(d);
    }
    sched_free(&srv.sched);
    llm_cli_draft_close(&srv.draft);
    arm_open_close(&c->h); /* the model before its swarm: its sessions end on the workers */
    metrics_free(&srv.metrics);
    grammar_vocab_free(&srv.gvocab);
    free(c->key);
    free(c);
    return rc;
}
