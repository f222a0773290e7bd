/* test_serve_tools.c — serve/tools.c without HTTP or a model: a tool reply streamed with
 * tool_choice auto (text before the call marker streamed, the call held and sent as one
 * tool_calls delta), forced (nothing streamed as content), the non-streamed message, finish
 * reasons, Mistral's 9-character ids, two choices each with its own call. tests/ */
#include <stdlib.h>
#include <string.h>

#include "serve/serve_int.h"
#include "tests/check.h"

double serve_now(void)
{
    return 1000.0; /* serve.c is not linked in: a fixed clock is enough here */
}

/* The SSE events in job->out, parsed. */
static json_t *s_events(serve_job *job)
{
    json_t *a = json_array();
    const char *p = job->out ? job->out : "", *end = p + job->out_len;
    while (p < end) {
        const char *nl = memmem(p, (size_t)(end - p), "\n\n", 2);
        if (!nl)
            break;
        if (!strncmp(p, "data: {", 7))
            json_array_append_new(a, json_loadb(p + 6, (size_t)(nl - p - 6), 0, NULL));
        p = nl + 2;
    }
    return a;
}

/* Content joined, and the tool_calls deltas, from the events. */
static void s_join(json_t *ev, char *content, size_t len, json_t **calls)
{
    size_t i, k = 0;
    json_t *e;
    *calls = json_array();
    content[0] = 0;
    json_array_foreach(ev, i, e) {
        json_t *d = json_object_get(json_array_get(json_object_get(e, "choices"), 0), "delta");
        const char *c = json_string_value(json_object_get(d, "content"));
        if (c && k + strlen(c) < len) {
            memcpy(content + k, c, strlen(c) + 1);
            k += strlen(c);
        }
        size_t j;
        json_t *tc;
        json_array_foreach(json_object_get(d, "tool_calls"), j, tc) json_array_append(*calls, tc);
    }
}

static serve_job *s_job(serve *srv, tool_format f, int forced, int stream)
{
    char err[128];
    serve_job *job = job_new(srv, err, sizeof err);
    CHECK(job != NULL, "job_new: %s", err);
    if (job) {
        job->req.chat = 1;
        job->req.stream = stream;
        job->req.tl.fmt = f;
        job->req.tl.forced = forced;
        job->req.n = 1;
        job->n_gen = 1;
        job->finish = FINISH_EOG;
        for (uint32_t i = 0; i < SERVE_MAX_N; i++)
            job->ch[i].finish = FINISH_EOG;
        snprintf(job->id, sizeof job->id, "chatcmpl-t");
    }
    return job;
}

/* Feed the reply in pieces, as the engine releases it. */
static void s_feed(serve_job *job, const char *const *pieces)
{
    for (size_t i = 0; pieces[i]; i++)
        if (!tools_release(job, pieces[i], strlen(pieces[i])))
            CHECK(0, "tools_release did not take a piece of a streamed tool reply");
}

int main(void)
{
    serve srv = { .n_ctx = 64 };
    snprintf(srv.model_id, sizeof srv.model_id, "tiny");
    char content[512];
    json_t *calls, *ev;

    /* auto, Hermes: "Sure. " streams at once; "<to" is held (it may begin the marker) */
    serve_job *job = s_job(&srv, TOOL_FMT_HERMES, 0, 1);
    static const char *const hermes[] = { "Sure. <to", "ol_call>\n{\"name\": \"f\", ",
                                          "\"arguments\": {\"a\": [1]}}\n</tool_call>", NULL };
    s_feed(job, hermes);
    ev = s_events(job);
    s_join(ev, content, sizeof content, &calls);
    CHECK(!strcmp(content, "Sure. "), "auto: streamed before the marker: '%s'", content);
    json_decref(ev);
    json_decref(calls);
    tools_finish(job);
    CHECK(json_array_size(job->ch[0].calls) == 1, "auto: one call parsed");
    tools_stream_end(job);
    CHECK(!strcmp(tools_finish_name(job, 0), "tool_calls"), "auto: finish %s", tools_finish_name(job, 0));
    ev = s_events(job);
    s_join(ev, content, sizeof content, &calls);
    json_t *c0 = json_array_get(calls, 0);
    const char *id = json_string_value(json_object_get(c0, "id"));
    CHECK(json_array_size(calls) == 1 && json_integer_value(json_object_get(c0, "index")) == 0 &&
          !strcmp(json_string_value(json_object_get(json_object_get(c0, "function"), "name")), "f") &&
          !strcmp(json_string_value(json_object_get(json_object_get(c0, "function"), "arguments")),
                  "{\"a\":[1]}") && id && !strncmp(id, "call_", 5) && strlen(id) == 29,
          "auto: the call delta: %s", json_dumps(c0, JSON_COMPACT));
    CHECK(!strcmp(content, "Sure. "), "auto: no more content after the call: '%s'", content);
    json_decref(ev);
    json_decref(calls);
    job_unref(job);

    /* auto with no call: everything streams, a held tail is released at the end */
    job = s_job(&srv, TOOL_FMT_HERMES, 0, 1);
    static const char *const plain[] = { "Just text ", "and a <", NULL };
    s_feed(job, plain);
    tools_finish(job);
    tools_stream_end(job);
    ev = s_events(job);
    s_join(ev, content, sizeof content, &calls);
    CHECK(!strcmp(content, "Just text and a <") && !json_array_size(calls) && !job->ch[0].calls,
          "no call: all of it as content: '%s'", content);
    CHECK(!strcmp(tools_finish_name(job, 0), "stop"), "no call: finish %s", tools_finish_name(job, 0));
    json_decref(ev);
    json_decref(calls);
    job_unref(job);

    /* forced, Mistral: nothing as content; a 9-character id */
    job = s_job(&srv, TOOL_FMT_MISTRAL, 1, 1);
    static const char *const mistral[] = { "[TOOL_CALLS] [{\"name\": \"g\", ", "\"arguments\": {}}]", NULL };
    s_feed(job, mistral);
    tools_finish(job);
    tools_stream_end(job);
    ev = s_events(job);
    s_join(ev, content, sizeof content, &calls);
    id = json_string_value(json_object_get(json_array_get(calls, 0), "id"));
    CHECK(!content[0] && json_array_size(calls) == 1 && id && strlen(id) == 9,
          "forced mistral: content '%s', id %s", content, id ? id : "(none)");
    json_decref(ev);
    json_decref(calls);
    job_unref(job);

    /* auto, Llama 3: a reply opening with { is held whole */
    job = s_job(&srv, TOOL_FMT_LLAMA3, 0, 1);
    static const char *const llama[] = { "{\"name\": \"f\", \"parameters\": ", "{\"x\": 1}}", NULL };
    s_feed(job, llama);
    ev = s_events(job);
    s_join(ev, content, sizeof content, &calls);
    CHECK(!content[0], "llama3 auto: a { reply is held: '%s'", content);
    json_decref(ev);
    json_decref(calls);
    job_unref(job);

    /* not streamed: the message */
    job = s_job(&srv, TOOL_FMT_HERMES, 0, 0);
    const char *text = "<tool_call>\n{\"name\": \"f\", \"arguments\": {}}\n</tool_call>";
    job->ch[0].text = strdup(text);
    job->ch[0].text_len = strlen(text);
    tools_finish(job);
    json_t *m = tools_message(job, 0, json_string(text));
    CHECK(json_is_null(json_object_get(m, "content")) &&
          json_array_size(json_object_get(m, "tool_calls")) == 1 &&
          !strcmp(json_string_value(json_object_get(json_array_get(json_object_get(m, "tool_calls"), 0), "type")),
                  "function") &&
          !json_object_get(json_array_get(json_object_get(m, "tool_calls"), 0), "index"),
          "message: %s", json_dumps(m, JSON_COMPACT));
    json_decref(m);
    job_unref(job);

    /* n = 2, forced, streamed: each choice's reply held and parsed on its own, its calls sent
     * under its own choice index; the second choice's text does not join the first's */
    job = s_job(&srv, TOOL_FMT_HERMES, 1, 1);
    job->req.n = 2;
    static const char *const two[2][2] = {
        { "<tool_call>\n{\"name\": \"f\", \"arguments\": {\"a\": 1}}\n</tool_call>", NULL },
        { "<tool_call>\n{\"name\": \"g\", \"arguments\": {\"b\": 2}}\n</tool_call>", NULL },
    };
    for (job->cur = 0; job->cur < 2; job->cur++) {
        s_feed(job, two[job->cur]);
        tools_finish(job);
        tools_stream_end(job);
    }
    job->cur = 1;
    ev = s_events(job);
    int seen[2] = { 0, 0 };
    size_t k;
    json_t *e;
    json_array_foreach(ev, k, e) {
        json_t *ch = json_array_get(json_object_get(e, "choices"), 0);
        json_t *tc = json_array_get(json_object_get(json_object_get(ch, "delta"), "tool_calls"), 0);
        if (!tc)
            continue;
        int ix = (int)json_integer_value(json_object_get(ch, "index"));
        const char *nm = json_string_value(json_object_get(json_object_get(tc, "function"), "name"));
        if ((ix == 0 && nm && !strcmp(nm, "f")) || (ix == 1 && nm && !strcmp(nm, "g")))
            seen[ix]++;
    }
    CHECK(seen[0] == 1 && seen[1] == 1, "n 2: one call delta per choice (%d, %d)", seen[0], seen[1]);
    CHECK(json_array_size(job->ch[0].calls) == 1 && json_array_size(job->ch[1].calls) == 1 &&
          !strcmp(tools_finish_name(job, 0), "tool_calls") &&
          !strcmp(tools_finish_name(job, 1), "tool_calls") &&
          strcmp(json_string_value(json_object_get(json_array_get(job->ch[0].calls, 0), "id")),
                 json_string_value(json_object_get(json_array_get(job->ch[1].calls, 0), "id"))),
          "n 2: each choice its own call and id");
    json_decref(ev);
    job_unref(job);
    return CHECK_DONE("test_serve_tools");
}
