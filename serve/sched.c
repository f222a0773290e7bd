/* sched.c — K generation slots over one model, a bounded FIFO in front of them, and the jobs
 * that connect a request to its client. serve/
 *
 * Each slot is a thread with its own engine (text/engine.c: an llm session, KV cache of n_ctx
 * positions, allocated once at start: K x llm_session_kv_bytes is the server's KV memory,
 * reported at start). Jobs leave the queue in arrival order. The prompt cache: a slot keeps
 * its session's cache when a job ends (a cancelled one too: what was computed is valid), and
 * the job at the head of the queue goes to the idle slot whose cached tokens share the longest
 * prefix with its prompt, then the one idle longest (least recently used), as llama-server's
 * slots do; the engine then runs only the rest of the prompt (engine_reusable). A job with
 * "cache_prompt": false takes the least recently used idle slot and runs its whole prompt.
 * What each slot holds is counted here only (s_slot.n_cached, under mu: sched_slot_cached).
 */
#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <sys/eventfd.h>
#include <time.h>
#include <unistd.h>

#include "serve/serve_int.h"

typedef struct {
    serve_sched *s;
    pthread_t th;
    int started;
    engine *eng;                  /* its own llm session and KV cache */
    serve_job *job;               /* given to it or running now (under s->mu), NULL when idle */
    /* the prompt cache, under s->mu: what the engine holds while the slot is idle */
    uint32_t n_cached;            /* positions its KV cache holds (engine_cached) */
    uint64_t last_used;           /* the dispatch count when it last took a job (LRU) */
    int gone;                     /* its thread has ended (the server is stopping) */
} s_slot;

struct serve_sched {
    serve *srv;
    pthread_mutex_t mu;
    pthread_cond_t cv;
    serve_job *head, *tail;
    uint32_t n_slots, n_queue, n_queued, n_active, n_batch;
    int quit;
    double busy_s;                /* seconds finished jobs held a slot */
    uint64_t n_done;
    uint64_t n_dispatched;        /* jobs given to slots: the LRU clock */
    s_slot *slots;
};

/* ---- jobs ---- */

serve_job *job_new(serve *srv, char *err, size_t errlen)
{
    serve_job *j = calloc(1, sizeof *j);
    if (!j) {
        snprintf(err, errlen, "out of memory");
        return NULL;
    }
    j->srv = srv;
    j->sock = -1;
    j->efd = eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK);
    if (j->efd < 0) {
        snprintf(err, errlen, "eventfd: %s", strerror(errno));
        free(j);
        return NULL;
    }
    pthread_mutex_init(&j->mu, NULL);
    j->refs = 1;
    atomic_init(&j->cancel, 0);
    atomic_init(&j->shutdown, 0);
    atomic_init(&j->decoded, 0);
    atomic_init(&j->cached, 0);
    j->created = (long long)time(NULL);
    j->t_recv = serve_now();
    return j;
}

void job_unref(serve_job *job)
{
    if (!job)
        return;
    pthread_mutex_lock(&job->mu);
    int last = --job->refs == 0;
    pthread_mutex_unlock(&job->mu);
    if (!last)
        return;
    api_req_free(&job->req);
    for (uint32_t i = 0; i < SERVE_MAX_N; i++) {
        json_decref(job->ch[i].lp);
        json_decref(job->ch[i].calls);
        free(job->ch[i].content);
        free(job->ch[i].text);
    }
    free(job->out);
    close(job->efd);
    pthread_mutex_destroy(&job->mu);
    free(job);
}

static void s_wake(serve_job *job)
{
    uint64_t one = 1;
    if (write(job->efd, &one, sizeof one) < 0) {
        /* EAGAIN: the counter is already non-zero, the reader will wake anyway. */
    }
}

int job_emit(serve_job *job, const char *p, size_t n)
{
    pthread_mutex_lock(&job->mu);
    if (job->out_off == job->out_len)
        job->out_off = job->out_len = 0;
    if (job->out_len + n > job->out_cap) {
        size_t cap = job->out_cap ? job->out_cap : 1024;
        while (cap < job->out_len + n)
            cap *= 2;
        char *o = realloc(job->out, cap);
        if (!o) {
            pthread_mutex_unlock(&job->mu);
            return -1;
        }
        job->out = o;
        job->out_cap = cap;
    }
    memcpy(job->out + job->out_len, p, n);
    job->out_len += n;
    pthread_mutex_unlock(&job->mu);
    s_wake(job);
    return 0;
}

int job_keep(serve_choice *c, const char *p, size_t n)
{
    if (c->text_len + n + 1 > c->text_cap) {
        size_t cap = c->text_cap ? c->text_cap * 2 : 256;
        while (cap < c->text_len + n + 1)
            cap *= 2;
        char *t = realloc(c->text, cap);
        if (!t)
            return -1;
        c->text = t;
        c->text_cap = cap;
    }
    memcpy(c->text + c->text_len, p, n);
    c->text_len += n;
    c->text[c->text_len] = 0;
    return 0;
}

int job_emit_sse(serve_job *job, json_t *j)
{
    if (!j)
        return -1;
    char *s = json_dumps(j, JSON_COMPACT);
    json_decref(j);
    if (!s)
        return -1;
    size_t n = strlen(s);
    char *line = malloc(n + 9);
    int rc = -1;
    if (line) {
        memcpy(line, "data: ", 6);
        memcpy(line + 6, s, n);
        memcpy(line + 6 + n, "\n\n", 2);
        rc = job_emit(job, line, n + 8);
    }
    free(line);
    free(s);
    return rc;
}

void job_set_done(serve_job *job)
{
    pthread_mutex_lock(&job->mu);
    job->done = 1;
    pthread_mutex_unlock(&job->mu);
    s_wake(job);
}

/* The end of a job: the last chunks, or the whole response. */
static void s_finish(serve_job *job)
{
    serve *srv = job->srv;
    metrics_tokens(srv->metrics, job->req.n_prompt, job->n_gen);
    metrics_cached(srv->metrics, job->n_cached);
    if (job->finish == FINISH_CANCELLED && atomic_load(&job->shutdown)) {
        /* The server stopped under it (--grace ran out): the client is still there and is
         * told so; a stream ends as a stream should. A whole response's 503 is http.c's. */
        if (job->req.stream) {
            job_emit_sse(job, api_shutdown_error());
            job_emit(job, "data: [DONE]\n\n", 14);
        }
        return;
    }
    if (job->finish == FINISH_CANCELLED)
        return;
    if (job->finish == FINISH_ERROR) {
        /* Headers (200) are gone already: the error travels in the body, OpenAI's shape. */
        json_t *e = api_error(job->err, "server_error", NULL, "generation_failed");
        if (job->req.stream)
            job_emit_sse(job, e);
        else {
            char *s = json_dumps(e, JSON_COMPACT);
            json_decref(e);
            if (s)
                job_emit(job, s, strlen(s));
            free(s);
        }
        return;
    }
    if (job->req.stream) {
        /* each choice's calls and finish chunk went out as it ended (loop.c) */
        if (job->req.include_usage)
            job_emit_sse(job, api_usage_chunk(job));
        job_emit(job, "data: [DONE]\n\n", 14);
        return;
    }
    json_t *r = api_response(job);
    char *s = r ? json_dumps(r, JSON_COMPACT) : NULL;
    json_decref(r);
    if (s)
        job_emit(job, s, strlen(s));
    free(s);
}

/* ---- slots ---- */

/* The idle slot for job: the longest reusable prefix of its prompt, then the least recently
 * used; NULL when every slot is busy. An idle slot's engine is not touched by its thread
 * (it waits for a job under mu), so its cache can be read here. Under mu. */
static s_slot *s_pick(serve_sched *s, const serve_job *job)
{
    s_slot *best = NULL;
    uint32_t best_keep = 0;
    for (uint32_t i = 0; i < s->n_slots; i++) {
        s_slot *sl = &s->slots[i];
        if (sl->job || sl->gone)
            continue;
        uint32_t keep = job->req.no_cache ? 0 : engine_reusable(sl->eng, job->req.prompt,
                                                                job->req.n_prompt);
        if (!best || keep > best_keep || (keep == best_keep && sl->last_used < best->last_used)) {
            best = sl;
            best_keep = keep;
        }
    }
    return best;
}

/* Give queued jobs to idle slots, head first. Under mu. */
static void s_dispatch(serve_sched *s)
{
    int given = 0;
    while (s->head) {
        s_slot *sl = s_pick(s, s->head);
        if (!sl)
            break;
        serve_job *job = s->head;
        s->head = job->next;
        if (!s->head)
            s->tail = NULL;
        s->n_queued--;
        s->n_active++;
        sl->job = job;
        sl->last_used = ++s->n_dispatched;
        given = 1;
    }
    if (given)
        pthread_cond_broadcast(&s->cv);
}

static void *s_slot_main(void *p)
{
    s_slot *sl = p;
    serve_sched *s = sl->s;
    for (;;) {
        pthread_mutex_lock(&s->mu);
        while (!sl->job && !s->quit)
            pthread_cond_wait(&s->cv, &s->mu);
        serve_job *job = sl->job;
        sl->gone = !job; /* no job is given to it from now on */
        pthread_mutex_unlock(&s->mu);
        if (!job)
            break;

        job->t_start = serve_now();
        if (atomic_load(&job->cancel))
            job->finish = FINISH_CANCELLED;
        else
            loop_run(s->srv, sl->eng, job);
        /* The session is free before the client reads its last bytes: a client that has its
         * [DONE] never sees itself still counted active (/metrics, /health). Its cache stays
         * for the next job that shares a prefix with it. */
        pthread_mutex_lock(&s->mu);
        sl->n_cached = engine_cached(sl->eng, NULL);
        sl->job = NULL;
        s->n_active--;
        s->busy_s += serve_now() - job->t_start;
        s->n_done++;
        s_dispatch(s);
        pthread_mutex_unlock(&s->mu);
        s_finish(job);
        job_set_done(job);
        job_unref(job);
    }
    return NULL;
}

serve_sched *sched_new(serve *srv, uint32_t n_slots, uint32_t n_queue, uint32_t n_ctx,
                       int nthreads, char *err, size_t errlen)
{
    serve_sched *s = calloc(1, sizeof *s);
    if (!s || !(s->slots = calloc(n_slots, sizeof *s->slots))) {
        free(s);
        snprintf(err, errlen, "out of memory");
        return NULL;
    }
    s->srv = srv;
    s->n_slots = n_slots;
    s->n_queue = n_queue;
    /* 64 positions per prefill batch: matrix x matrix for the prompt, and a cancelled
     * request's prompt stops within one batch. */
    s->n_batch = n_ctx < 64 ? n_ctx : 64;
    pthread_mutex_init(&s->mu, NULL);
    pthread_cond_init(&s->cv, NULL);
    /* Continuous batching on the reference and resident arms: the slots' steps share each
     * pass (a prefill chunk of n_batch plus a decode step of every other slot; the resident
     * arm's one act per pass carries them all), each weight read once. */
    if (n_slots > 1 && (llm_model_arm(srv->model) == LLM_ARM_REFERENCE ||
                        llm_model_arm(srv->model) == LLM_ARM_RESIDENT) &&
        llm_model_batching(srv->model, s->n_batch + n_slots - 1, err, errlen))
        goto err;
    for (uint32_t i = 0; i < n_slots; i++) {
        s_slot *sl = &s->slots[i];
        sl->s = s;
        sl->eng = engine_new(srv->model, srv->tok, n_ctx, s->n_batch, nthreads, err, errlen);
        if (!sl->eng)
            goto err;
        if (pthread_create(&sl->th, NULL, s_slot_main, sl)) {
            snprintf(err, errlen, "cannot start slot thread %u", i);
            goto err;
        }
        sl->started = 1;
    }
    return s;
err:
    sched_free(&s);
    return NULL;
}

void sched_cancel_all(serve_sched *s, int shutdown)
{
    pthread_mutex_lock(&s->mu);
    for (serve_job *j = s->head; j; j = j->next) {
        atomic_store(&j->shutdown, shutdown);
        atomic_store(&j->cancel, 1);
    }
    for (uint32_t i = 0; i < s->n_slots; i++)
        if (s->slots[i].job) {
            atomic_store(&s->slots[i].job->shutdown, shutdown);
            atomic_store(&s->slots[i].job->cancel, 1);
        }
    pthread_mutex_unlock(&s->mu);
}

void sched_slot(serve_sched *s, uint32_t i, sched_slot_info *out)
{
    memset(out, 0, sizeof *out);
    pthread_mutex_lock(&s->mu);
    serve_job *j = i < s->n_slots ? s->slots[i].job : NULL;
    out->n_ctx = engine_n_ctx(s->slots[i < s->n_slots ? i : 0].eng);
    if (j) {
        out->busy = 1;
        memcpy(out->id, j->id, sizeof out->id);
        out->n_prompt = j->req.n_prompt;
        out->n_decoded = atomic_load(&j->decoded); /* a snapshot: the slot runs on */
        out->n_cached = atomic_load(&j->cached);
        out->so = j->req.so;
        out->max_tokens = j->req.max_set ? j->req.max_tokens : 0;
    } else if (i < s->n_slots) {
        out->n_cached = s->slots[i].n_cached; /* idle: the prompt cache it keeps */
    }
    pthread_mutex_unlock(&s->mu);
}

void sched_free(serve_sched **sp)
{
    serve_sched *s = *sp;
    if (!s)
        return;
    sched_cancel_all(s, 0);
    pthread_mutex_lock(&s->mu);
    s->quit = 1;
    pthread_cond_broadcast(&s->cv);
    pthread_mutex_unlock(&s->mu);
    for (uint32_t i = 0; i < s->n_slots; i++) {
        if (s->slots[i].started)
            pthread_join(s->slots[i].th, NULL);
        engine_free(&s->slots[i].eng);
    }
    pthread_cond_destroy(&s->cv);
    pthread_mutex_destroy(&s->mu);
    free(s->slots);
    free(s);
    *sp = NULL;
}

int sched_submit(serve_sched *s, serve_job *job)
{
    pthread_mutex_lock(&s->mu);
    if (s->quit || s->n_active + s->n_queued >= s->n_slots + s->n_queue) {
        pthread_mutex_unlock(&s->mu);
        return -1;
    }
    pthread_mutex_lock(&job->mu);
    job->refs++;
    pthread_mutex_unlock(&job->mu);
    job->next = NULL;
    if (s->tail)
        s->tail->next = job;
    else
        s->head = job;
    s->tail = job;
    s->n_queued++;
    s_dispatch(s);
    pthread_mutex_unlock(&s->mu);
    return 0;
}

void sched_withdraw(serve_sched *s, serve_job *job)
{
    pthread_mutex_lock(&s->mu);
    serve_job **pp = &s->head, *prev = NULL;
    while (*pp && *pp != job) {
        prev = *pp;
        pp = &(*pp)->next;
    }
    int found = *pp == job;
    if (found) {
        *pp = job->next;
        if (s->tail == job)
            s->tail = prev;
        s->n_queued--;
    }
    pthread_mutex_unlock(&s->mu);
    if (found) {
        job->finish = FINISH_CANCELLED;
        job_set_done(job);
        job_unref(job);
    }
}

void sched_counts(serve_sched *s, uint32_t *active, uint32_t *queued)
{
    pthread_mutex_lock(&s->mu);
    *active = s->n_active;
    *queued = s->n_queued;
    pthread_mutex_unlock(&s->mu);
}

double sched_mean_job_s(serve_sched *s)
{
    pthread_mutex_lock(&s->mu);
    double m = s->n_done ? s->busy_s / (double)s->n_done : 1.0;
    pthread_mutex_unlock(&s->mu);
    return m;
}

uint64_t sched_kv_bytes(serve_sched *s)
{
    uint64_t b = 0;
    for (uint32_t i = 0; i < s->n_slots; i++)
        b += llm_session_kv_bytes(engine_session(s->slots[i].eng));
    return b;
}

uint32_t sched_slot_cached(serve_sched *s, uint32_t slot)
{
    pthread_mutex_lock(&s->mu);
    uint32_t n = slot < s->n_slots ? s->slots[slot].n_cached : 0;
    pthread_mutex_unlock(&s->mu);
    return n;
}
