/* http.c — the HTTP side of `swarm serve` on libmicrohttpd: routes, methods, auth, body caps,
 * OpenAI error objects, and the reader that streams a job's output to its client. serve/
 *
 * A generation response is a callback response of unknown length (chunked): its reader blocks
 * on poll() over two fds, the job's eventfd (output or done) and the client's socket for
 * POLLRDHUP. A client that hangs up is seen at once, not at the next failed write, and its
 * job is cancelled: the slot stops at the next token (or prefill batch) and resets its session.
 */
#include <math.h>
#include <netdb.h>
#include <poll.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/socket.h>
#include <unistd.h>

#include <microhttpd.h>

#include "serve/serve_int.h"

typedef struct {
    serve_endpoint ep;
    char *body;
    size_t len, cap;
    int too_big;                  /* the body passed max_body: discarded, 413 at the end */
} s_conn;

static const struct {
    const char *path, *method;
    serve_endpoint ep;
} s_routes[] = {
    { "/v1/models", "GET", EP_MODELS },       { "/v1/chat/completions", "POST", EP_CHAT },
    { "/v1/completions", "POST", EP_COMPLETIONS }, { "/health", "GET", EP_HEALTH },
    { "/metrics", "GET", EP_METRICS },        { "/", "GET", EP_PAGE },
};
#define N_ROUTES (sizeof s_routes / sizeof s_routes[0])

static enum MHD_Result s_send(serve *srv, struct MHD_Connection *c, serve_endpoint ep,
                              unsigned status, const char *type, const char *body, size_t len,
                              const char *hk, const char *hv)
{
    struct MHD_Response *r =
        MHD_create_response_from_buffer(len, (void *)body, MHD_RESPMEM_MUST_COPY);
    if (!r)
        return MHD_NO;
    MHD_add_response_header(r, "Content-Type", type);
    if (hk)
        MHD_add_response_header(r, hk, hv);
    enum MHD_Result rc = MHD_queue_response(c, status, r);
    MHD_destroy_response(r);
    metrics_request(srv->metrics, ep, status);
    return rc;
}

/* Sends j (stolen) as JSON. */
static enum MHD_Result s_json(serve *srv, struct MHD_Connection *c, serve_endpoint ep,
                              unsigned status, json_t *j, const char *hk, const char *hv)
{
    char *s = j ? json_dumps(j, JSON_COMPACT) : NULL;
    json_decref(j);
    if (!s)
        return MHD_NO;
    enum MHD_Result rc = s_send(srv, c, ep, status, "application/json", s, strlen(s), hk, hv);
    free(s);
    return rc;
}

static enum MHD_Result s_err(serve *srv, struct MHD_Connection *c, serve_endpoint ep,
                             unsigned status, const char *msg, const char *type,
                             const char *code)
{
    return s_json(srv, c, ep, status, api_error(msg, type, NULL, code), NULL, NULL);
}

/* ---- streaming a job ---- */

static ssize_t s_reader(void *cls, uint64_t pos, char *buf, size_t max)
{
    (void)pos;
    serve_job *job = cls;
    for (;;) {
        pthread_mutex_lock(&job->mu);
        if (job->out_off < job->out_len) {
            size_t n = job->out_len - job->out_off;
            if (n > max)
                n = max;
            memcpy(buf, job->out + job->out_off, n);
            job->out_off += n;
            pthread_mutex_unlock(&job->mu);
            return (ssize_t)n;
        }
        int done = job->done;
        pthread_mutex_unlock(&job->mu);
        if (done)
            return MHD_CONTENT_READER_END_OF_STREAM;
        struct pollfd p[2] = { { .fd = job->efd, .events = POLLIN },
                               { .fd = job->sock, .events = POLLRDHUP } };
        if (poll(p, job->sock >= 0 ? 2 : 1, -1) < 0)
            continue;
        if (p[1].revents & (POLLRDHUP | POLLHUP | POLLERR)) {
            atomic_store(&job->cancel, 1);
            return MHD_CONTENT_READER_END_WITH_ERROR;
        }
        uint64_t v;
        if (read(job->efd, &v, sizeof v) < 0) {
            /* EAGAIN: woken by a write already consumed; the loop re-checks. */
        }
    }
}

static void s_reader_free(void *cls)
{
    serve_job *job = cls;
    atomic_store(&job->cancel, 1);
    sched_withdraw(job->srv->sched, job);
    job_unref(job);
}

static enum MHD_Result s_generate(serve *srv, struct MHD_Connection *c, s_conn *cc)
{
    serve_req req;
    int status = 0;
    json_t *errj = NULL;
    char err[256];
    if (api_parse(srv, cc->ep, cc->body ? cc->body : "", cc->len, &req, &status, &errj))
        return s_json(srv, c, cc->ep, (unsigned)status, errj, NULL, NULL);
    serve_job *job = job_new(srv, err, sizeof err);
    if (!job) {
        api_req_free(&req);
        return s_err(srv, c, cc->ep, 500, err, "server_error", NULL);
    }
    job->req = req;
    static atomic_ulong s_seq;
    snprintf(job->id, sizeof job->id, "%s-%llx%04lx", req.chat ? "chatcmpl" : "cmpl",
             job->created, atomic_fetch_add(&s_seq, 1) & 0xffff);
    if (req.logprobs)
        job->lp = json_array();
    const union MHD_ConnectionInfo *ci =
        MHD_get_connection_info(c, MHD_CONNECTION_INFO_CONNECTION_FD);
    job->sock = ci ? ci->connect_fd : -1;
    if (sched_submit(srv->sched, job)) {
        /* Slots and queue are full: come back after about one job's time. */
        char ra[24];
        snprintf(ra, sizeof ra, "%.0f", ceil(sched_mean_job_s(srv->sched)));
        job_unref(job);
        return s_json(srv, c, cc->ep, 429,
                      api_error("the server is busy: every slot and queue place is taken; "
                                "retry after the Retry-After seconds",
                                "rate_limit_exceeded", NULL, "server_busy"),
                      "Retry-After", ra);
    }
    /* From here the client only waits (its hang-up is watched by the reader): the slow-loris
     * timeout is for clients that send, not for ones waiting on a long generation. */
    MHD_set_connection_option(c, MHD_CONNECTION_OPTION_TIMEOUT, 0);
    struct MHD_Response *r = MHD_create_response_from_callback(MHD_SIZE_UNKNOWN, 16 * 1024,
                                                               s_reader, job, s_reader_free);
    if (!r) {
        atomic_store(&job->cancel, 1);
        job_unref(job);
        return MHD_NO;
    }
    MHD_add_response_header(r, "Content-Type",
                            req.stream ? "text/event-stream" : "application/json");
    MHD_add_response_header(r, "Cache-Control", "no-cache");
    enum MHD_Result rc = MHD_queue_response(c, 200, r);
    MHD_destroy_response(r);
    metrics_request(srv->metrics, cc->ep, 200);
    return rc;
}

/* ---- the other endpoints ---- */

static const char *s_state_name(int st)
{
    return st == STATE_LOADING ? "loading" : st == STATE_SERVING ? "ok" : "draining";
}

static enum MHD_Result s_health(serve *srv, struct MHD_Connection *c)
{
    int st = atomic_load(&srv->state);
    uint32_t a = 0, q = 0;
    if (srv->sched)
        sched_counts(srv->sched, &a, &q);
    /* A single-process arm is serving or not and has no workers to list; the resident arm
     * lists each worker, and says "degraded" (still 200: every request is served) while a
     * lost worker's layers run in the coordinator, naming it and since when. */
    const char *status = s_state_name(st);
    json_t *ws = json_array(), *deg = NULL;
    if (srv->swarm) {
        llm_worker_status w[8];
        uint32_t fo = 0, nw = llm_swarm_status(srv->swarm, w, 8, &fo);
        for (uint32_t i = 0; i < nw && i < 8; i++) {
            char layers[32];
            snprintf(layers, sizeof layers, "%u-%u", w[i].first, w[i].last);
            json_array_append_new(ws, json_pack("{s:s,s:s?,s:s,s:s,s:b,s:f,s:s}", "id",
                                                w[i].id, "endpoint",
                                                w[i].endpoint[0] ? w[i].endpoint : NULL,
                                                "layers", layers, "state", w[i].state, "live",
                                                w[i].live, "since_s", w[i].since_s, "last_lost",
                                                w[i].last_how));
            if (!w[i].live && !deg)
                deg = json_pack("{s:s,s:f}", "worker", w[i].id, "since_s", w[i].since_s);
        }
        if (deg && st == STATE_SERVING)
            status = "degraded";
    }
    json_t *j = json_pack("{s:s,s:s,s:s,s:i,s:i,s:i,s:i,s:o}", "status", status, "arm",
                          srv->arm, "model", srv->model_id, "slots", (int)srv->n_slots,
                          "active", (int)a, "queued", (int)q, "n_ctx", (int)srv->n_ctx,
                          "workers", ws);
    if (j && deg)
        json_object_set_new(j, "degraded", deg);
    else
        json_decref(deg);
    return s_json(srv, c, EP_HEALTH, st == STATE_SERVING ? 200 : 503, j, NULL, NULL);
}

static int s_authorized(serve *srv, struct MHD_Connection *c)
{
    if (!srv->api_key)
        return 1;
    const char *h = MHD_lookup_connection_value(c, MHD_HEADER_KIND, "Authorization");
    return h && !strncasecmp(h, "Bearer ", 7) && !strcmp(h + 7, srv->api_key);
}

/* A connection's first call: its route, method and announced size, before any body. */
static enum MHD_Result s_route(serve *srv, struct MHD_Connection *c, const char *url,
                               const char *method, void **con_cls)
{
    s_conn *cc = calloc(1, sizeof *cc);
    if (!cc)
        return MHD_NO;
    *con_cls = cc;
    cc->ep = EP_OTHER;
    size_t i;
    for (i = 0; i < N_ROUTES; i++)
        if (!strcmp(url, s_routes[i].path))
            break;
    if (i == N_ROUTES) {
        char m[300];
        snprintf(m, sizeof m, "no such endpoint: %s %.200s", method, url);
        return s_err(srv, c, EP_OTHER, 404, m, "invalid_request_error", "not_found");
    }
    cc->ep = s_routes[i].ep;
    if (strcmp(method, s_routes[i].method) &&
        !(!strcmp(method, "HEAD") && !strcmp(s_routes[i].method, "GET"))) {
        char m[300];
        snprintf(m, sizeof m, "%s %s: method not allowed (use %s)", method, url,
                 s_routes[i].method);
        return s_json(srv, c, cc->ep, 405,
                      api_error(m, "invalid_request_error", NULL, "method_not_allowed"),
                      "Allow", s_routes[i].method);
    }
    const char *cl = MHD_lookup_connection_value(c, MHD_HEADER_KIND, "Content-Length");
    if (cl && strtoull(cl, NULL, 10) > srv->max_body) {
        char m[160];
        snprintf(m, sizeof m, "request body of %s bytes is over the limit of %zu bytes", cl,
                 srv->max_body);
        return s_err(srv, c, cc->ep, 413, m, "invalid_request_error", "body_too_large");
    }
    return MHD_YES;
}

/* A piece of the body: kept up to max_body, the rest counted as too big. */
static enum MHD_Result s_upload(serve *srv, s_conn *cc, const char *upload, size_t *upload_size)
{
    if (cc->len + *upload_size > srv->max_body)
        cc->too_big = 1;
    if (!cc->too_big) {
        if (cc->len + *upload_size > cc->cap) {
            size_t cap = (cc->len + *upload_size) * 2;
            char *b = realloc(cc->body, cap);
            if (!b)
                return MHD_NO;
            cc->body = b;
            cc->cap = cap;
        }
        memcpy(cc->body + cc->len, upload, *upload_size);
        cc->len += *upload_size;
    }
    *upload_size = 0;
    return MHD_YES;
}

static enum MHD_Result s_metrics(serve *srv, struct MHD_Connection *c, int st)
{
    uint32_t a = 0, q = 0;
    uint64_t passes = 0, rows = 0;
    if (srv->sched)
        sched_counts(srv->sched, &a, &q);
    if (srv->model)
        llm_model_batch_counts(srv->model, &passes, &rows);
    metrics_batch(srv->metrics, passes, rows);
    char *t = metrics_render(srv->metrics, a, q, srv->n_slots, srv->arm, st, srv->swarm);
    if (!t)
        return MHD_NO;
    enum MHD_Result rc = s_send(srv, c, EP_METRICS, 200, "text/plain; version=0.0.4", t,
                                strlen(t), NULL, NULL);
    free(t);
    return rc;
}

/* The whole request is in: health and the page for anyone; the rest behind the key, and
 * all but metrics only while serving. */
static enum MHD_Result s_dispatch(serve *srv, struct MHD_Connection *c, s_conn *cc)
{
    if (cc->too_big) {
        char m[160];
        snprintf(m, sizeof m, "request body is over the limit of %zu bytes", srv->max_body);
        return s_err(srv, c, cc->ep, 413, m, "invalid_request_error", "body_too_large");
    }
    int st = atomic_load(&srv->state);
    if (cc->ep == EP_HEALTH)
        return s_health(srv, c);
    if (cc->ep == EP_PAGE) {
        size_t n = 0;
        const char *p = page_html(&n);
        return s_send(srv, c, EP_PAGE, 200, "text/html; charset=utf-8", p, n, NULL, NULL);
    }
    if (!s_authorized(srv, c))
        return s_json(srv, c, cc->ep, 401,
                      api_error("missing or wrong API key (Authorization: Bearer KEY)",
                                "invalid_request_error", NULL, "invalid_api_key"),
                      "WWW-Authenticate", "Bearer");
    if (cc->ep == EP_METRICS)
        return s_metrics(srv, c, st);
    if (st != STATE_SERVING)
        return s_json(srv, c, cc->ep, 503,
                      api_error(st == STATE_LOADING ? "the model is loading" :
                                "the server is shutting down", "server_error", NULL,
                                st == STATE_LOADING ? "loading" : "shutting_down"),
                      "Retry-After", "1");
    if (cc->ep == EP_MODELS)
        return s_json(srv, c, EP_MODELS, 200, api_models(srv), NULL, NULL);
    return s_generate(srv, c, cc);
}

static enum MHD_Result s_access(void *cls, struct MHD_Connection *c, const char *url,
                                const char *method, const char *version,
                                const char *upload, size_t *upload_size, void **con_cls)
{
    (void)version;
    serve *srv = cls;
    s_conn *cc = *con_cls;
    if (!cc)
        return s_route(srv, c, url, method, con_cls);
    if (*upload_size)
        return s_upload(srv, cc, upload, upload_size);
    return s_dispatch(srv, c, cc);
}

static void s_completed(void *cls, struct MHD_Connection *c, void **con_cls,
                        enum MHD_RequestTerminationCode toe)
{
    (void)cls;
    (void)c;
    (void)toe;
    s_conn *cc = *con_cls;
    if (!cc)
        return;
    free(cc->body);
    free(cc);
    *con_cls = NULL;
}

struct MHD_Daemon *http_start(serve *srv, const char *host, unsigned port, unsigned timeout_s,
                              unsigned *bound_port, char *err, size_t errlen)
{
    struct addrinfo hints = { .ai_family = AF_UNSPEC, .ai_socktype = SOCK_STREAM,
                              .ai_flags = AI_NUMERICSERV }, *ai = NULL;
    char ps[8];
    snprintf(ps, sizeof ps, "%u", port);
    int gai = getaddrinfo(host, ps, &hints, &ai);
    if (gai) {
        snprintf(err, errlen, "--listen %s:%u: %s", host, port, gai_strerror(gai));
        return NULL;
    }
    unsigned flags = MHD_USE_THREAD_PER_CONNECTION | MHD_USE_INTERNAL_POLLING_THREAD |
                     MHD_USE_ITC | MHD_USE_ERROR_LOG |
                     (ai->ai_family == AF_INET6 ? MHD_USE_IPv6 : 0);
    /* 64 KiB per connection: headers and libmicrohttpd's buffers (the body is copied out as
     * it arrives, capped by max_body); a 16 KiB response block fits with room. */
    struct MHD_Daemon *d = MHD_start_daemon(
        flags, (uint16_t)port, NULL, NULL, s_access, srv, MHD_OPTION_SOCK_ADDR, ai->ai_addr,
        MHD_OPTION_CONNECTION_TIMEOUT, timeout_s, MHD_OPTION_CONNECTION_MEMORY_LIMIT,
        (size_t)64 * 1024, MHD_OPTION_CONNECTION_LIMIT, 512u, MHD_OPTION_NOTIFY_COMPLETED,
        s_completed, srv, MHD_OPTION_END);
    freeaddrinfo(ai);
    if (!d) {
        snprintf(err, errlen, "cannot listen on %s:%u (in use, or not an address of this "
                 "machine)", host, port);
        return NULL;
    }
    const union MHD_DaemonInfo *di = MHD_get_daemon_info(d, MHD_DAEMON_INFO_BIND_PORT);
    *bound_port = di ? di->port : port;
    return d;
}
