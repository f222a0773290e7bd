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
#include <openssl/crypto.h>
#include <openssl/sha.h>

#include "serve/serve_int.h"

typedef struct {
    serve_endpoint ep;
    char *body;
    size_t len, cap;
    int too_big;                  /* the body passed max_body: discarded, 413 at the end */
    /* the access log's line */
    double t0;                    /* monotonic seconds: the request's first call */
    unsigned status;              /* the response's, once queued */
    char method[8], path[96];
    serve_job *job;               /* a generation's (a reference): its tokens, at the end */
} s_conn;

static const struct {
    const char *path, *method;
    serve_endpoint ep;
} s_routes[] = {
    { "/v1/models", "GET", EP_MODELS },       { "/v1/chat/completions", "POST", EP_CHAT },
    { "/v1/completions", "POST", EP_COMPLETIONS }, { "/health", "GET", EP_HEALTH },
    { "/metrics", "GET", EP_METRICS },        { "/", "GET", EP_PAGE },
    { "/tokenize", "POST", EP_TOKENIZE },     { "/detokenize", "POST", EP_DETOKENIZE },
    { "/apply-template", "POST", EP_APPLY_TEMPLATE }, { "/props", "GET", EP_PROPS },
    { "/slots", "GET", EP_SLOTS },            { "/models", "GET", EP_MODELS },
};
#define N_ROUTES (sizeof s_routes / sizeof s_routes[0])

/* CORS: a request from an origin --cors allows gets it back in Access-Control-Allow-Origin
 * ("*" when --cors * allows any). The key travels in Authorization, not in a cookie, so no
 * Allow-Credentials is needed and "*" cannot lend a browser's cookies to another site. */
static void s_cors(serve *srv, struct MHD_Connection *c, struct MHD_Response *r)
{
    const char *origin = MHD_lookup_connection_value(c, MHD_HEADER_KIND, "Origin");
    if (!origin || !srv->n_cors)
        return;
    for (uint32_t i = 0; i < srv->n_cors; i++)
        if (!strcmp(srv->cors[i], "*") || !strcmp(srv->cors[i], origin)) {
            MHD_add_response_header(r, "Access-Control-Allow-Origin",
                                    strcmp(srv->cors[i], "*") ? origin : "*");
            MHD_add_response_header(r, "Vary", "Origin");
            MHD_add_response_header(r, "Access-Control-Expose-Headers", "Retry-After");
            return;
        }
}

static enum MHD_Result s_send(serve *srv, struct MHD_Connection *c, s_conn *cc,
                              unsigned status, const char *type, const char *body, size_t len,
                              const char *hk, const char *hv)
{
    struct MHD_Response *r =
        MHD_create_response_from_buffer(len, (void *)body, MHD_RESPMEM_MUST_COPY);
    if (!r)
        return MHD_NO;
    if (type)
        MHD_add_response_header(r, "Content-Type", type);
    if (hk)
        MHD_add_response_header(r, hk, hv);
    s_cors(srv, c, r);
    enum MHD_Result rc = MHD_queue_response(c, status, r);
    MHD_destroy_response(r);
    metrics_request(srv->metrics, cc->ep, status);
    cc->status = status;
    return rc;
}

/* Sends j (stolen) as JSON. */
static enum MHD_Result s_json(serve *srv, struct MHD_Connection *c, s_conn *cc,
                              unsigned status, json_t *j, const char *hk, const char *hv)
{
    char *s = j ? json_dumps(j, JSON_COMPACT) : NULL;
    json_decref(j);
    if (!s)
        return MHD_NO;
    enum MHD_Result rc = s_send(srv, c, cc, status, "application/json", s, strlen(s), hk, hv);
    free(s);
    return rc;
}

static enum MHD_Result s_err(serve *srv, struct MHD_Connection *c, s_conn *cc,
                             unsigned status, const char *msg, const char *type,
                             const char *code)
{
    return s_json(srv, c, cc, status, api_error(msg, type, NULL, code), NULL, NULL);
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

static void s_job_ref(serve_job *job)
{
    pthread_mutex_lock(&job->mu);
    job->refs++;
    pthread_mutex_unlock(&job->mu);
}

/* A whole (non-streamed) response waits here, in the connection's own thread, until its job
 * is done, so its status can say how it ended: 200, 500 when generation failed, 503 when the
 * server stopped under it. 0 when done, -1 when the client hung up first (cancelled). */
static int s_wait_done(serve_job *job)
{
    for (;;) {
        pthread_mutex_lock(&job->mu);
        int done = job->done;
        pthread_mutex_unlock(&job->mu);
        if (done)
            return 0;
        struct pollfd p[2] = { { .fd = job->efd, .events = POLLIN },
                               { .fd = job->sock, .events = POLLRDHUP } };
        if (poll(p, job->sock >= 0 ? 2 : 1, -1) < 0)
            continue;
        if (p[1].revents & (POLLRDHUP | POLLHUP | POLLERR)) {
            atomic_store(&job->cancel, 1);
            sched_withdraw(job->srv->sched, job);
            return -1;
        }
        uint64_t v;
        if (read(job->efd, &v, sizeof v) < 0) {
            /* EAGAIN: woken by a write already consumed; the loop re-checks. */
        }
    }
}

static enum MHD_Result s_whole(serve *srv, struct MHD_Connection *c, s_conn *cc,
                               serve_job *job)
{
    if (s_wait_done(job)) {
        job_unref(job);
        return MHD_NO;
    }
    enum MHD_Result rc;
    if (job->finish == FINISH_CANCELLED && atomic_load(&job->shutdown))
        rc = s_json(srv, c, cc, 503, api_shutdown_error(), "Retry-After", "1");
    else if (job->finish == FINISH_ERROR)
        /* a generation that failed (say on a layer that failed its checksum) is a 500 with
         * the error object, never a 200 */
        rc = s_err(srv, c, cc, 500, job->err[0] ? job->err : "generation failed",
                   "server_error", "generation_failed");
    else
        rc = s_send(srv, c, cc, 200, "application/json",
                    job->out ? job->out + job->out_off : "", job->out_len - job->out_off,
                    NULL, NULL);
    job_unref(job);
    return rc;
}

static enum MHD_Result s_generate(serve *srv, struct MHD_Connection *c, s_conn *cc)
{
    serve_req req;
    int status = 0;
    json_t *errj = NULL;
    char err[256];
    if (api_parse(srv, cc->ep, cc->body ? cc->body : "", cc->len, &req, &status, &errj))
        return s_json(srv, c, cc, (unsigned)status, errj, NULL, NULL);
    serve_job *job = job_new(srv, err, sizeof err);
    if (!job) {
        api_req_free(&req);
        return s_err(srv, c, cc, 500, err, "server_error", NULL);
    }
    job->req = req;
    static atomic_ulong s_seq;
    snprintf(job->id, sizeof job->id, "%s-%llx%04lx", req.chat ? "chatcmpl" : "cmpl",
             job->created, atomic_fetch_add(&s_seq, 1) & 0xffff);
    const union MHD_ConnectionInfo *ci =
        MHD_get_connection_info(c, MHD_CONNECTION_INFO_CONNECTION_FD);
    job->sock = ci ? ci->connect_fd : -1;
    if (sched_submit(srv->sched, job)) {
        /* Slots and queue are full: come back after about one job's time. */
        char ra[24];
        snprintf(ra, sizeof ra, "%.0f", ceil(sched_mean_job_s(srv->sched)));
        job_unref(job);
        return s_json(srv, c, cc, 429,
                      api_error("the server is busy: every slot and queue place is taken; "
                                "retry after the Retry-After seconds",
                                "rate_limit_exceeded", NULL, "server_busy"),
                      "Retry-After", ra);
    }
    /* the access log reads its tokens at the end; a drain waits for its last bytes */
    s_job_ref(job);
    cc->job = job;
    atomic_fetch_add(&srv->n_live, 1);
    /* From here the client only waits (its hang-up is watched by the reader): the slow-loris
     * timeout is for clients that send, not for ones waiting on a long generation. */
    MHD_set_connection_option(c, MHD_CONNECTION_OPTION_TIMEOUT, 0);
    if (!req.stream)
        return s_whole(srv, c, cc, job);
    struct MHD_Response *r = MHD_create_response_from_callback(MHD_SIZE_UNKNOWN, 16 * 1024,
                                                               s_reader, job, s_reader_free);
    if (!r) {
        atomic_store(&job->cancel, 1);
        job_unref(job);
        return MHD_NO;
    }
    MHD_add_response_header(r, "Content-Type", "text/event-stream");
    MHD_add_response_header(r, "Cache-Control", "no-cache");
    s_cors(srv, c, r);
    enum MHD_Result rc = MHD_queue_response(c, 200, r);
    MHD_destroy_response(r);
    metrics_request(srv->metrics, cc->ep, 200);
    cc->status = 200;
    return rc;
}

/* ---- the other endpoints ---- */

static const char *s_state_name(int st)
{
    return st == STATE_LOADING ? "loading" : st == STATE_SERVING ? "ok" : "draining";
}

static enum MHD_Result s_health(serve *srv, struct MHD_Connection *c, s_conn *cc)
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
            json_t *wj = json_array_get(ws, json_array_size(ws) - 1);
            json_object_set_new(wj, "respawns", json_integer(w[i].respawns));
            json_object_set_new(wj, "respawn_failures", json_integer(w[i].respawn_fails));
            if (w[i].retry_in_s >= 0)
                json_object_set_new(wj, "retry_in_s", json_real(w[i].retry_in_s));
            if (w[i].last_join_error[0])
                json_object_set_new(wj, "last_join_error", json_string(w[i].last_join_error));
            if (!w[i].live && !deg)
                deg = json_pack("{s:s,s:f}", "worker", w[i].id, "since_s", w[i].since_s);
        }
        if (deg && st == STATE_SERVING)
            status = "degraded";
    }
    /* Known-bad weights (a layer failed its checksum) or a swarm that can no longer serve:
     * unhealthy, naming why, so a balancer takes this server out. */
    const char *fault = srv->model ? llm_model_fault(srv->model) : NULL;
    if (!fault && srv->swarm)
        fault = llm_swarm_fault(srv->swarm);
    if (fault && st == STATE_SERVING)
        status = "unhealthy";
    json_t *j = json_pack("{s:s,s:s,s:s,s:i,s:i,s:i,s:i,s:o}", "status", status, "arm",
                          srv->arm, "model", srv->model_id, "slots", (int)srv->n_slots,
                          "active", (int)a, "queued", (int)q, "n_ctx", (int)srv->n_ctx,
                          "workers", ws);
    if (j && deg)
        json_object_set_new(j, "degraded", deg);
    else
        json_decref(deg);
    if (j && fault)
        json_object_set_new(j, "fault", json_string(fault));
    return s_json(srv, c, cc, st == STATE_SERVING && !fault ? 200 : 503, j, NULL, NULL);
}

/* The key compared in constant time: both sides are hashed (SHA-256) and the digests compared
 * with CRYPTO_memcmp, so neither a matching prefix nor the key's length shows in the time. */
static int s_authorized(serve *srv, struct MHD_Connection *c)
{
    if (!srv->api_key)
        return 1;
    const char *h = MHD_lookup_connection_value(c, MHD_HEADER_KIND, "Authorization");
    if (!h || strncasecmp(h, "Bearer ", 7))
        return 0;
    unsigned char a[SHA256_DIGEST_LENGTH], b[SHA256_DIGEST_LENGTH];
    SHA256((const unsigned char *)h + 7, strlen(h + 7), a);
    SHA256((const unsigned char *)srv->api_key, strlen(srv->api_key), b);
    return CRYPTO_memcmp(a, b, sizeof a) == 0;
}

/* A CORS preflight: what a browser may send to this route. Answered for anyone (a preflight
 * never carries the key); the allow-origin header only for an origin --cors names. */
static enum MHD_Result s_preflight(serve *srv, struct MHD_Connection *c, s_conn *cc,
                                   const char *allow)
{
    struct MHD_Response *r = MHD_create_response_from_buffer(0, (void *)"",
                                                             MHD_RESPMEM_PERSISTENT);
    if (!r)
        return MHD_NO;
    char methods[32];
    snprintf(methods, sizeof methods, "%s, OPTIONS", allow);
    MHD_add_response_header(r, "Allow", methods);
    s_cors(srv, c, r);
    if (MHD_lookup_connection_value(c, MHD_HEADER_KIND, "Origin") && srv->n_cors) {
        MHD_add_response_header(r, "Access-Control-Allow-Methods", methods);
        MHD_add_response_header(r, "Access-Control-Allow-Headers",
                                "Authorization, Content-Type, Accept, X-Requested-With");
        MHD_add_response_header(r, "Access-Control-Max-Age", "86400");
    }
    enum MHD_Result rc = MHD_queue_response(c, 204, r);
    MHD_destroy_response(r);
    metrics_request(srv->metrics, cc->ep, 204);
    cc->status = 204;
    return rc;
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
    cc->t0 = serve_now();
    snprintf(cc->method, sizeof cc->method, "%s", method);
    snprintf(cc->path, sizeof cc->path, "%s", url);
    size_t i;
    for (i = 0; i < N_ROUTES; i++)
        if (!strcmp(url, s_routes[i].path))
            break;
    if (i == N_ROUTES) {
        char m[300];
        snprintf(m, sizeof m, "no such endpoint: %s %.200s", method, url);
        return s_err(srv, c, cc, 404, m, "invalid_request_error", "not_found");
    }
    cc->ep = s_routes[i].ep;
    if (!strcmp(method, "OPTIONS"))
        return s_preflight(srv, c, cc, s_routes[i].method);
    if (strcmp(method, s_routes[i].method) &&
        !(!strcmp(method, "HEAD") && !strcmp(s_routes[i].method, "GET"))) {
        char m[300];
        snprintf(m, sizeof m, "%s %s: method not allowed (use %s)", method, url,
                 s_routes[i].method);
        return s_json(srv, c, cc, 405,
                      api_error(m, "invalid_request_error", NULL, "method_not_allowed"),
                      "Allow", s_routes[i].method);
    }
    const char *cl = MHD_lookup_connection_value(c, MHD_HEADER_KIND, "Content-Length");
    if (cl && strtoull(cl, NULL, 10) > srv->max_body) {
        char m[160];
        snprintf(m, sizeof m, "request body of %s bytes is over the limit of %zu bytes", cl,
                 srv->max_body);
        return s_err(srv, c, cc, 413, m, "invalid_request_error", "body_too_large");
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

static enum MHD_Result s_metrics(serve *srv, struct MHD_Connection *c, s_conn *cc, int st)
{
    uint32_t a = 0, q = 0;
    uint64_t passes = 0, rows = 0, cuts = 0;
    if (srv->sched)
        sched_counts(srv->sched, &a, &q);
    if (srv->model) {
        llm_model_batch_counts(srv->model, &passes, &rows);
        cuts = llm_model_batch_cuts(srv->model);
    }
    metrics_batch(srv->metrics, passes, rows, cuts);
    char *t = metrics_render(srv->metrics, a, q, srv->n_slots, srv->arm, st, srv->swarm);
    if (!t)
        return MHD_NO;
    enum MHD_Result rc = s_send(srv, c, cc, 200, "text/plain; version=0.0.4", t,
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
        return s_err(srv, c, cc, 413, m, "invalid_request_error", "body_too_large");
    }
    if (cc->status)
        return MHD_YES; /* answered at the first call (404, 405, 413, a preflight) */
    int st = atomic_load(&srv->state);
    if (cc->ep == EP_HEALTH)
        return s_health(srv, c, cc);
    if (cc->ep == EP_PAGE) {
        size_t n = 0;
        const char *p = page_html(&n);
        return s_send(srv, c, cc, 200, "text/html; charset=utf-8", p, n, NULL, NULL);
    }
    if (!s_authorized(srv, c))
        return s_json(srv, c, cc, 401,
                      api_error("missing or wrong API key (Authorization: Bearer KEY)",
                                "invalid_request_error", NULL, "invalid_api_key"),
                      "WWW-Authenticate", "Bearer");
    if (cc->ep == EP_METRICS)
        return s_metrics(srv, c, cc, st);
    if (st != STATE_SERVING)
        return s_json(srv, c, cc, 503,
                      api_error(st == STATE_LOADING ? "the model is loading" :
                                "the server is shutting down", "server_error", NULL,
                                st == STATE_LOADING ? "loading" : "shutting_down"),
                      "Retry-After", "1");
    if (cc->ep == EP_MODELS)
        return s_json(srv, c, cc, 200, api_models(srv), NULL, NULL);
    if (cc->ep != EP_CHAT && cc->ep != EP_COMPLETIONS) {
        json_t *out = NULL;
        int status = 200;
        native_handle(srv, cc->ep, cc->body ? cc->body : "", cc->len, &out, &status);
        return s_json(srv, c, cc, (unsigned)status, out, NULL, NULL);
    }
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

/* One line per request on stderr: method, path, status, tokens, seconds. Never the key; the
 * body (the prompt) only with --log-prompts. */
static void s_access_log(serve *srv, struct MHD_Connection *c, s_conn *cc,
                         enum MHD_RequestTerminationCode toe)
{
    char addr[64] = "?";
    const union MHD_ConnectionInfo *ci =
        MHD_get_connection_info(c, MHD_CONNECTION_INFO_CLIENT_ADDRESS);
    if (ci && ci->client_addr &&
        getnameinfo(ci->client_addr, ci->client_addr->sa_family == AF_INET6
                                         ? sizeof(struct sockaddr_in6)
                                         : sizeof(struct sockaddr_in),
                    addr, sizeof addr, NULL, 0, NI_NUMERICHOST))
        snprintf(addr, sizeof addr, "?");
    uint32_t in = cc->job ? cc->job->req.n_prompt : 0, out = cc->job ? cc->job->n_gen : 0;
    /* the body on the same line: control characters (a pretty-printed body's newlines) as
     * spaces, its first 4 KiB */
    char body[4097];
    size_t bl = srv->log_prompts && cc->body ? (cc->len < 4096 ? cc->len : 4096) : 0;
    for (size_t i = 0; i < bl; i++)
        body[i] = (unsigned char)cc->body[i] < 0x20 ? ' ' : cc->body[i];
    body[bl] = 0;
    fprintf(stderr, "serve: access %s %s %s %u in=%u out=%u %.3fs%s%s%s\n", addr, cc->method,
            cc->path, cc->status, in, out, serve_now() - cc->t0,
            toe == MHD_REQUEST_TERMINATED_COMPLETED_OK ? "" : " (connection closed early)",
            bl ? " body=" : "", body);
}

static void s_completed(void *cls, struct MHD_Connection *c, void **con_cls,
                        enum MHD_RequestTerminationCode toe)
{
    serve *srv = cls;
    s_conn *cc = *con_cls;
    if (!cc)
        return;
    s_access_log(srv, c, cc, toe);
    if (cc->job) {
        job_unref(cc->job);
        atomic_fetch_sub(&srv->n_live, 1);
    }
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
