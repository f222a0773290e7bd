/* serve.c — `swarm serve`: flags, listen, load, serve until SIGTERM, drain, exit. serve/
 *
 * The HTTP daemon starts before the model is loaded, so /health answers 503 "loading" while a
 * large file is faulted in; generation endpoints say the same. SIGTERM (or SIGINT) stops
 * accepting at once, lets in-flight requests finish for up to --grace seconds, cancels what is
 * left, and exits 0.
 */
#include <errno.h>
#include <getopt.h>
#include <limits.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include <microhttpd.h>

#include "text/chat.h"
#include "base/cap.h"
#include "base/exitcode.h"
#include "gguf/gguf.h"
#include "base/util.h"
#include "dist/llm_cli.h"
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
        "  /health, /metrics, and a chat page at /.\n"
        "  --listen HOST:PORT     address (default 127.0.0.1:8080; port 0 = any free port)\n"
        "  --port-file F          write the bound port to F once listening\n"
        "  --arm reference|ssd|resident  the arm (default reference).\n"
        "                         ssd: leading layers resident under --cap, the rest streamed\n"
        "                         every pass (O_DIRECT); one session at a time (--parallel 1)\n"
        "                         resident: the layers in --workers spawned workers (loopback),\n"
        "                         partitioned by bytes; every slot is a session in flight\n"
        "  --cap SIZE             ssd: the working-set cap (default 600M; a memory cgroup where\n"
        "                         one can be made, else planned only)\n"
        "  --workers N            resident: workers to spawn (default 3)\n"
        "  --worker-cap SIZE      resident: each worker's cap (default: none)\n"
        "  --no-respawn           resident: a lost worker's layers stay in the coordinator\n"
        "                         (default: a fresh worker is started, re-prefilled and\n"
        "                         routed back; /health says degraded meanwhile)\n"
        "  --worker-slowdown N    resident, a test knob: workers compute every pass N times\n"
        "  --ctx N                context per session (default min(2048, the model's))\n"
        "  --parallel K           sessions generating at once, each with its KV cache (default 4)\n"
        "  --queue Q              requests waiting beyond those (default 16); more get 429\n"
        "  --threads T            threads per session's products (default: online CPUs)\n"
        "  --api-key KEY | --api-key-file F | --no-auth\n"
        "                         Bearer key; required when listening off loopback\n"
        "  --chat-template NAME   use NAME when the file has none swarm recognises\n"
        "  --timeout S            idle seconds before a client that sends nothing is dropped (10)\n"
        "  --max-body BYTES       larger request bodies get 413 (default 1048576)\n"
        "  --grace S              seconds in-flight requests may finish after SIGTERM (10)\n");
}

/* The file's context_length, from its header alone (no weight read). */
static int s_train_ctx(const char *path, uint32_t *train, char *err, size_t errlen)
{
    gguf_file *g = gguf_open(path, err, errlen);
    arch_model am;
    if (!g)
        return -1;
    int rc = arch_model_open(&am, g, err, errlen);
    if (rc == 0) {
        *train = am.hp.n_ctx_train;
        arch_model_close(&am);
    }
    gguf_close(&g);
    return rc;
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
    if (chat_template_detect(jinja, srv->chat_template, sizeof srv->chat_template, err,
                             sizeof err)) {
        srv->chat_template[0] = 0;
        fprintf(stderr, "serve: %s: %s; /v1/chat/completions is refused unless "
                "--chat-template NAME is given\n", srv->model_path, err);
    }
    return 0;
}

int serve_main(int argc, char **argv)
{
    serve srv = { .arm = "reference", .n_slots = 4, .n_queue = 16, .max_body = 1u << 20 };
    const char *listen = "127.0.0.1:8080", *port_file = NULL, *key_file = NULL,
               *tmpl = NULL;
    char *key = NULL;
    unsigned long ctx = 0, timeout = 10, grace = 10, v;
    int no_auth = 0, rc = EXIT_USAGE, parallel_set = 0, cap_set = 0, ssd, resident;
    int no_respawn = 0, wcap_set = 0;
    uint32_t n_workers = 3, slowdown = 1;
    uint64_t wcap = 0;
    uint64_t cap_bytes = 600ull << 20;
    cap_t cap = { 0 };
    struct MHD_Daemon *d = NULL;
    long cpus = sysconf(_SC_NPROCESSORS_ONLN);
    srv.nthreads = cpus > 0 ? (int)cpus : 1;
    atomic_init(&srv.state, STATE_LOADING);
    static const struct option opts[] = {
        { "listen", 1, 0, 'l' },  { "port-file", 1, 0, 'P' }, { "arm", 1, 0, 'a' },
        { "ctx", 1, 0, 'c' },     { "parallel", 1, 0, 'k' },  { "queue", 1, 0, 'q' },
        { "threads", 1, 0, 't' }, { "api-key", 1, 0, 'K' },   { "api-key-file", 1, 0, 'F' },
        { "no-auth", 0, 0, 'N' }, { "chat-template", 1, 0, 'T' }, { "timeout", 1, 0, 'o' },
        { "max-body", 1, 0, 'b' }, { "grace", 1, 0, 'g' },    { "help", 0, 0, 'h' },
        { "cap", 1, 0, 'C' },     { "workers", 1, 0, 'W' },   { "worker-cap", 1, 0, 'X' },
        { "no-respawn", 0, 0, 'R' }, { "worker-slowdown", 1, 0, 'S' },
        { 0, 0, 0, 0 } };
    int o;
    optind = 1;
    while ((o = getopt_long(argc, argv, "h", opts, NULL)) != -1) {
        switch (o) {
        case 'l': listen = optarg; break;
        case 'P': port_file = optarg; break;
        case 'a': srv.arm = optarg; break;
        case 'c': if (s_uint("--ctx", optarg, 2, 1u << 20, &ctx)) return EXIT_USAGE; break;
        case 'k': if (s_uint("--parallel", optarg, 1, 256, &v)) return EXIT_USAGE;
                  srv.n_slots = (uint32_t)v; parallel_set = 1; break;
        case 'C': if (util_parse_size(optarg, &cap_bytes) || !cap_bytes) {
                      fprintf(stderr, "swarm serve: --cap '%s': not a size (600M, ...)\n", optarg);
                      return EXIT_USAGE;
                  }
                  cap_set = 1; break;
        case 'W': if (s_uint("--workers", optarg, 1, 8, &v)) return EXIT_USAGE;
                  n_workers = (uint32_t)v; break;
        case 'X': if (util_parse_size(optarg, &wcap)) {
                      fprintf(stderr, "swarm serve: --worker-cap '%s': not a size (800M, ...)\n",
                              optarg);
                      return EXIT_USAGE;
                  }
                  wcap_set = 1; break;
        case 'R': no_respawn = 1; break;
        case 'S': if (s_uint("--worker-slowdown", optarg, 1, 64, &v)) return EXIT_USAGE;
                  slowdown = (uint32_t)v; break;
        case 'q': if (s_uint("--queue", optarg, 0, 65536, &v)) return EXIT_USAGE;
                  srv.n_queue = (uint32_t)v; break;
        case 't': if (s_uint("--threads", optarg, 1, 64, &v)) return EXIT_USAGE;
                  srv.nthreads = (int)v; break;
        case 'K': free(key); key = strdup(optarg); break;
        case 'F': key_file = optarg; break;
        case 'N': no_auth = 1; break;
        case 'T': tmpl = optarg; break;
        case 'o': if (s_uint("--timeout", optarg, 1, 3600, &timeout)) return EXIT_USAGE; break;
        case 'b': if (s_uint("--max-body", optarg, 1024, 1ul << 30, &v)) return EXIT_USAGE;
                  srv.max_body = v; break;
        case 'g': if (s_uint("--grace", optarg, 0, 3600, &grace)) return EXIT_USAGE; break;
        case 'h': s_usage(stdout); return EXIT_OK;
        default: s_usage(stderr); return EXIT_USAGE;
        }
    }
    if (optind != argc - 1) {
        fprintf(stderr, "swarm serve: one model file expected\n");
        s_usage(stderr);
        goto out;
    }
    /* a model file, or a config naming one ([llm] model of a text-lab config) */
    static char model_buf[PATH_MAX];
    char rerr[512];
    if (llm_cli_resolve(argv[optind], model_buf, sizeof model_buf, rerr, sizeof rerr)) {
        fprintf(stderr, "swarm serve: %s\n", rerr);
        goto out;
    }
    srv.model_path = model_buf;
    if (strcmp(srv.arm, "reference") && strcmp(srv.arm, "ssd") && strcmp(srv.arm, "resident")) {
        fprintf(stderr, "swarm serve: unknown arm '%s' (arms: reference, ssd, resident)\n",
                srv.arm);
        goto out;
    }
    ssd = !strcmp(srv.arm, "ssd");
    resident = !strcmp(srv.arm, "resident");
    if (!resident && (wcap_set || no_respawn || slowdown > 1)) {
        fprintf(stderr, "swarm serve: --worker-cap, --no-respawn and --worker-slowdown are the "
                "resident arm's (add --arm resident)\n");
        goto out;
    }
    if (ssd && parallel_set && srv.n_slots > 1) {
        /* the SSD arm's plan holds one session's KV cache under the cap (arch/llm.h) */
        fprintf(stderr, "swarm serve: --parallel %u: the SSD arm runs one session at a time "
                "(its plan holds one KV cache under the cap); use --parallel 1 and --queue for "
                "waiting requests\n", srv.n_slots);
        goto out;
    }
    if (ssd)
        srv.n_slots = 1;
    if (!ssd && cap_set) {
        fprintf(stderr, "swarm serve: --cap is the SSD arm's (add --arm ssd)\n");
        goto out;
    }
    if (key_file && !(key = s_read_key(key_file)))
        goto out;
    /* "HOST:PORT", HOST may be [v6]. */
    char host[256];
    const char *colon = strrchr(listen, ':');
    if (!colon || colon == listen || (size_t)(colon - listen) >= sizeof host) {
        fprintf(stderr, "swarm serve: --listen '%s' must be HOST:PORT\n", listen);
        goto out;
    }
    size_t hl = (size_t)(colon - listen);
    if (listen[0] == '[' && listen[hl - 1] == ']')
        snprintf(host, sizeof host, "%.*s", (int)hl - 2, listen + 1);
    else
        snprintf(host, sizeof host, "%.*s", (int)hl, listen);
    unsigned long port;
    if (s_uint("--listen port", colon + 1, 0, 65535, &port))
        goto out;
    if (!s_loopback(host) && !key && !no_auth) {
        fprintf(stderr, "swarm serve: listening on %s (off loopback) needs --api-key KEY or "
                "--api-key-file F (or --no-auth to serve anyone who can reach it)\n", host);
        goto out;
    }
    srv.api_key = key;
    if (access(srv.model_path, R_OK)) {
        fprintf(stderr, "swarm serve: %s: %s\n", srv.model_path, strerror(errno));
        goto out;
    }
    const char *base = strrchr(srv.model_path, '/');
    snprintf(srv.model_id, sizeof srv.model_id, "%s", base ? base + 1 : srv.model_path);
    size_t il = strlen(srv.model_id);
    if (il > 5 && !strcmp(srv.model_id + il - 5, ".gguf"))
        srv.model_id[il - 5] = 0;

    /* Signals are taken by sigwait in this thread only: every thread started below (the
     * daemon's, the slots', the quant pool's) inherits the mask. */
    sigset_t sigs;
    sigemptyset(&sigs);
    sigaddset(&sigs, SIGTERM);
    sigaddset(&sigs, SIGINT);
    pthread_sigmask(SIG_BLOCK, &sigs, NULL);
    signal(SIGPIPE, SIG_IGN);

    rc = EXIT_FAIL;
    char err[512];
    if (!(srv.metrics = metrics_new())) {
        fprintf(stderr, "swarm serve: out of memory\n");
        goto out;
    }
    unsigned bound = 0;
    d = http_start(&srv, host, (unsigned)port, (unsigned)timeout, &bound, err, sizeof err);
    if (!d) {
        fprintf(stderr, "swarm serve: %s\n", err);
        goto out;
    }
    fprintf(stderr, "serve: listening on http://%s%s%s:%u (loading %s)\n",
            strchr(host, ':') ? "[" : "", host, strchr(host, ':') ? "]" : "", bound,
            srv.model_path);
    if (port_file) {
        FILE *pf = fopen(port_file, "w");
        if (!pf || fprintf(pf, "%u\n", bound) < 0 || fclose(pf)) {
            fprintf(stderr, "swarm serve: --port-file %s: %s\n", port_file, strerror(errno));
            goto out;
        }
    }
    double t0 = serve_now();
    uint32_t train = 0;
    char cap_mode[96] = "";
    if (ssd) {
        /* the plan is sized for the session, so the context comes from the header first */
        if (s_train_ctx(srv.model_path, &train, err, sizeof err)) {
            fprintf(stderr, "swarm serve: %s\n", err);
            goto out;
        }
        srv.n_ctx = ctx ? (uint32_t)ctx : train < 2048 ? train : 2048;
        llm_opts lo = { .arm = LLM_ARM_SSD, .cap_bytes = cap_bytes, .n_ctx = srv.n_ctx,
                        .n_batch = 64 }; /* sched's batch: min(n_ctx, 64) */
        exec_plan plan;
        /* a cap the plan cannot hold is refused with its numbers, not by the OOM killer */
        if (llm_ssd_plan(srv.model_path, &lo, &plan, err, sizeof err)) {
            fprintf(stderr, "swarm serve: %s\n", err);
            goto out;
        }
        /* join the cgroup before the model allocates: v1 does not move earlier charges */
        cap_enter(&cap, cap_bytes, "serve", 0);
        cap_describe(&cap, cap_mode, sizeof cap_mode);
        srv.model = llm_model_open_opts(srv.model_path, &lo, err, sizeof err);
    } else if (resident) {
        /* the workers' caches are planned for every slot's context before any starts */
        if (s_train_ctx(srv.model_path, &train, err, sizeof err)) {
            fprintf(stderr, "swarm serve: %s\n", err);
            goto out;
        }
        srv.n_ctx = ctx ? (uint32_t)ctx : train < 2048 ? train : 2048;
        char self[4096];
        ssize_t sl = readlink("/proc/self/exe", self, sizeof self - 1);
        self[sl > 0 ? sl : 0] = 0;
        llm_swarm_opts so = { .model = srv.model_path, .self_exe = self, .workers = n_workers,
                              .cap_bytes = wcap, .sessions = srv.n_slots, .n_ctx = srv.n_ctx,
                              .max_batch = srv.n_ctx < 64 ? srv.n_ctx : 64, .threads = 1,
                              .respawn = !no_respawn, .slowdown = slowdown };
        /* a config that lists workers: those, at their endpoints, not spawned ones */
        if (llm_cli_hosts(argv[optind], &so, err, sizeof err)) {
            fprintf(stderr, "swarm serve: resident arm: %s\n", err);
            goto out;
        }
        if (!(srv.swarm = llm_swarm_new(&so, err, sizeof err))) {
            fprintf(stderr, "swarm serve: resident arm: %s\n", err);
            goto out;
        }
        const partition_llm_plan *pl = llm_swarm_plan(srv.swarm);
        llm_worker_status ws[8];
        uint32_t nfo, nws = llm_swarm_status(srv.swarm, ws, 8, &nfo);
        for (uint32_t i = 0; i < pl->n_workers && i < nws; i++)
            fprintf(stderr, "serve: %s%s%s: layers [%u, %u), %.1f MiB planned\n", ws[i].id,
                    ws[i].endpoint[0] ? " at " : "", ws[i].endpoint, pl->first[i],
                    pl->last[i], pl->need[i] / 1048576.0);
        llm_layers_hook h;
        llm_swarm_hook(srv.swarm, &h);
        llm_opts lo = { .arm = LLM_ARM_RESIDENT, .hook = &h };
        srv.model = llm_model_open_opts(srv.model_path, &lo, err, sizeof err);
    } else {
        srv.model = llm_model_open(srv.model_path, err, sizeof err);
    }
    if (!srv.model || !(srv.tok = tokenizer_open(llm_model_gguf(srv.model), err, sizeof err))) {
        fprintf(stderr, "swarm serve: %s\n", err);
        goto out;
    }
    if (s_template(&srv, tmpl)) {
        rc = EXIT_USAGE;
        goto out;
    }
    train = llm_model_arch(srv.model)->hp.n_ctx_train;
    srv.n_ctx = ctx ? (uint32_t)ctx : train < 2048 ? train : 2048;
    if (ssd) {
        const exec_plan *p = llm_model_plan(srv.model);
        fprintf(stderr, "serve: ssd arm: cap %.1f MiB (%s), %u layers resident, %u streamed "
                "(%.1f MiB per pass), one session at a time%s\n", cap_bytes / 1048576.0,
                cap_mode, p->n_resident, p->n_streamed, p->streamed_per_step / 1048576.0,
                parallel_set ? "" : " (--parallel 1)");
    }
    if (!(srv.sched = sched_new(&srv, srv.n_slots, srv.n_queue, srv.n_ctx, srv.nthreads, err,
                                sizeof err))) {
        fprintf(stderr, "swarm serve: %s\n", err);
        goto out;
    }
    atomic_store(&srv.state, STATE_SERVING);
    fprintf(stderr, "serve: ready in %.2f s: %s, arm %s, %u slots x %u positions (KV %.1f MiB), "
            "queue %u, %d threads, chat template %s\n", serve_now() - t0, srv.model_id, srv.arm,
            srv.n_slots, srv.n_ctx, sched_kv_bytes(srv.sched) / 1048576.0, srv.n_queue,
            srv.nthreads,
            srv.chat_template[0] ? srv.chat_template : "(none)");

    int sig = 0;
    sigwait(&sigs, &sig);
    atomic_store(&srv.state, STATE_DRAINING);
    MHD_socket lfd = MHD_quiesce_daemon(d);
    if (lfd != MHD_INVALID_SOCKET)
        close(lfd);
    uint32_t a = 0, q = 0;
    sched_counts(srv.sched, &a, &q);
    fprintf(stderr, "serve: %s: not accepting; %u active, %u queued get up to %lu s\n",
            strsignal(sig), a, q, grace);
    double until = serve_now() + (double)grace;
    while (sched_counts(srv.sched, &a, &q), a + q > 0 && serve_now() < until) {
        struct timespec ts = { 0, 20 * 1000 * 1000 };
        nanosleep(&ts, NULL);
    }
    if (a + q)
        fprintf(stderr, "serve: cancelling %u requests still running after %lu s\n", a + q,
                grace);
    sched_cancel_all(srv.sched);
    MHD_stop_daemon(d);
    d = NULL;
    fprintf(stderr, "serve: stopped\n");
    rc = EXIT_OK;
out:
    if (d) {
        if (srv.sched)
            sched_cancel_all(srv.sched);
        MHD_stop_daemon(d);
    }
    sched_free(&srv.sched);
    tokenizer_free(&srv.tok);
    llm_model_free(&srv.model);
    llm_swarm_free(&srv.swarm); /* after the model: its sessions end on the workers */
    cap_leave(&cap);
    metrics_free(&srv.metrics);
    free(key);
    return rc;
}
