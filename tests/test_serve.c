/* test_serve.c — serve's pieces without HTTP: request validation (the bad-input table, with
 * the field each refusal names), JSON strings from invalid UTF-8, error objects, the
 * Prometheus text. tests/ */
#include <stdlib.h>
#include <string.h>

#include "serve/serve_int.h"
#include "tests/check.h"

#define FIX "tests/fixtures/tok/llama-spm.gguf"

double serve_now(void)
{
    return 1000.0; /* serve.c is not linked in: a fixed clock is enough here */
}

/* body for endpoint ep: wanted status (0 = accepted) and error code / param. */
static void s_case(serve *srv, serve_endpoint ep, const char *body, int want, const char *code,
                   const char *param)
{
    serve_req r;
    int st = 0;
    json_t *e = NULL;
    int rc = api_parse(srv, ep, body, strlen(body), &r, &st, &e);
    if (!want) {
        CHECK(rc == 0, "%s: refused (%d)", body, st);
        if (!rc)
            api_req_free(&r);
        json_decref(e);
        return;
    }
    CHECK(rc == -1 && st == want, "%s: rc %d status %d, wanted %d", body, rc, st, want);
    json_t *err = json_object_get(e, "error");
    const char *c = json_string_value(json_object_get(err, "code"));
    const char *p = json_string_value(json_object_get(err, "param"));
    CHECK(json_is_string(json_object_get(err, "message")) && json_object_get(err, "type") &&
          json_object_get(err, "param") && json_object_get(err, "code"),
          "%s: error object lacks a field", body);
    CHECK(c && !strcmp(c, code), "%s: code %s, wanted %s", body, c ? c : "(null)", code);
    if (param)
        CHECK(p && !strcmp(p, param), "%s: param %s, wanted %s", body, p ? p : "(null)", param);
    json_decref(e);
}

int main(void)
{
    /* ---- api_string: JSON needs Unicode; a random model's bytes are not always that ---- */
    const struct { const char *in; size_t n; const char *out; } u[] = {
        { "plain", 5, "plain" },
        { "caf\xc3\xa9", 5, "caf\xc3\xa9" },
        { "a\x80z", 3, "a\xef\xbf\xbdz" },                /* a stray continuation byte */
        { "x\xe2\x82", 3, "x\xef\xbf\xbd\xef\xbf\xbd" },  /* a sequence cut short */
        { "\xf0\x9f\x98\x80!", 5, "\xf0\x9f\x98\x80!" },  /* a 4-byte emoji */
        { "\xc0\xaf", 2, "\xef\xbf\xbd\xef\xbf\xbd" },    /* overlong '/' */
    };
    for (size_t i = 0; i < sizeof u / sizeof u[0]; i++) {
        json_t *j = api_string(u[i].in, u[i].n);
        CHECK(j && !strcmp(json_string_value(j), u[i].out), "api_string case %zu", i);
        json_decref(j);
    }

    /* ---- the bad-input table ---- */
    char err[512];
    system("mkdir -p tests/tmp && gzip -dc " FIX ".gz > tests/tmp/test_serve_vocab.gguf");
    serve srv = { .n_ctx = 64, .arm = "reference" };
    snprintf(srv.model_id, sizeof srv.model_id, "tiny");
    snprintf(srv.chat_template, sizeof srv.chat_template, "chatml");
    srv.tok = tokenizer_load("tests/tmp/test_serve_vocab.gguf", err, sizeof err);
    CHECK(srv.tok != NULL, "%s", err);
    if (!srv.tok)
        return CHECK_DONE("test_serve");
    srv.n_vocab = (uint32_t)tokenizer_n_vocab(srv.tok);
    s_case(&srv, EP_COMPLETIONS, "{\"prompt\":\"hi\"}", 0, NULL, NULL);
    s_case(&srv, EP_COMPLETIONS, "{\"prompt\":[1,2,3],\"model\":\"tiny\",\"n\":1}", 0, NULL, NULL);
    s_case(&srv, EP_CHAT, "{\"messages\":[{\"role\":\"user\",\"content\":[{\"type\":\"text\","
                          "\"text\":\"hi\"}]}],\"logprobs\":true,\"top_logprobs\":20}",
           0, NULL, NULL);
    s_case(&srv, EP_COMPLETIONS, "{\"prompt\":", 400, "invalid_json", NULL);
    s_case(&srv, EP_COMPLETIONS, "{\"prompt\":\"a\",\"prompt\":\"b\"}", 400, "invalid_json",
           NULL);
    /* jansson reads only an object or an array at the top */
    s_case(&srv, EP_COMPLETIONS, "\"text\"", 400, "invalid_json", NULL);
    s_case(&srv, EP_COMPLETIONS, "[1]", 400, "invalid_type", NULL);
    s_case(&srv, EP_COMPLETIONS, "{\"prompt\":\"x\",\"temperature\":\"hot\"}", 400,
           "invalid_value", "temperature");
    s_case(&srv, EP_COMPLETIONS, "{\"prompt\":\"x\",\"top_p\":0}", 400, "invalid_value",
           "top_p");
    s_case(&srv, EP_COMPLETIONS, "{\"prompt\":\"x\",\"max_tokens\":1.5}", 400, "invalid_value",
           "max_tokens");
    s_case(&srv, EP_COMPLETIONS, "{\"prompt\":\"x\",\"seed\":\"7\"}", 400, "invalid_value",
           "seed");
    s_case(&srv, EP_COMPLETIONS, "{\"prompt\":\"x\",\"stream\":1}", 400, "invalid_value",
           "stream");
    s_case(&srv, EP_COMPLETIONS, "{\"prompt\":\"x\",\"model\":\"gpt-4o\"}", 0, NULL, NULL);
    srv.strict_model = 1;
    s_case(&srv, EP_COMPLETIONS, "{\"prompt\":\"x\",\"model\":\"gpt-4o\"}", 404,
           "model_not_found", "model");
    s_case(&srv, EP_COMPLETIONS, "{\"prompt\":\"x\",\"model\":\"tiny\"}", 0, NULL, NULL);
    srv.strict_model = 0;
    s_case(&srv, EP_COMPLETIONS, "{\"prompt\":\"x\",\"model\":7}", 400, "invalid_type", "model");
    s_case(&srv, EP_COMPLETIONS, "{\"prompt\":\"x\",\"n\":3}", 0, NULL, NULL);
    s_case(&srv, EP_COMPLETIONS, "{\"prompt\":\"x\",\"n\":17}", 400, "invalid_value", "n");
    /* every field is in the table: unknown and refused ones are 400s naming them */
    s_case(&srv, EP_COMPLETIONS, "{\"prompt\":\"x\",\"frobnicate\":1}", 400,
           "unknown_parameter", "frobnicate");
    s_case(&srv, EP_CHAT, "{\"messages\":[{\"role\":\"user\",\"content\":\"x\"}],"
                          "\"echo\":true}", 400, "unknown_parameter", "echo");
    s_case(&srv, EP_COMPLETIONS, "{\"prompt\":\"x\",\"echo\":true}", 400,
           "unsupported_parameter", "echo");
    s_case(&srv, EP_COMPLETIONS, "{\"prompt\":\"x\",\"echo\":false,\"best_of\":1,"
                                 "\"mirostat\":0,\"user\":\"u\"}", 0, NULL, NULL);
    s_case(&srv, EP_COMPLETIONS, "{\"prompt\":\"x\",\"typical_p\":0.5}", 400,
           "unsupported_parameter", "typical_p");
    s_case(&srv, EP_COMPLETIONS, "{\"prompt\":\"x\",\"logit_bias\":{\"7256\":\"x\"}}", 400,
           "invalid_value", "logit_bias");
    s_case(&srv, EP_COMPLETIONS, "{\"prompt\":\"x\",\"logit_bias\":{\"32000\":1}}", 400,
           "invalid_value", "logit_bias");
    s_case(&srv, EP_COMPLETIONS, "{\"prompt\":\"x\",\"logit_bias\":{\"7x\":1}}", 400,
           "invalid_value", "logit_bias");
    s_case(&srv, EP_COMPLETIONS, "{\"prompt\":\"x\",\"logit_bias\":{\"5\":101}}", 400,
           "invalid_value", "logit_bias");
    s_case(&srv, EP_COMPLETIONS, "{\"prompt\":\"x\",\"logit_bias\":[[5,false],[6,-2.5]]}", 0,
           NULL, NULL);
    s_case(&srv, EP_COMPLETIONS, "{\"prompt\":\"x\",\"top_k\":-2}", 400, "invalid_value",
           "top_k");
    s_case(&srv, EP_COMPLETIONS, "{\"prompt\":\"x\",\"repeat_penalty\":0}", 400,
           "invalid_value", "repeat_penalty");
    s_case(&srv, EP_CHAT, "{\"messages\":[{\"role\":\"developer\",\"content\":\"x\"}]}", 0,
           NULL, NULL);
    s_case(&srv, EP_COMPLETIONS, "{\"prompt\":\"x\",\"logprobs\":6}", 400, "invalid_value",
           "logprobs");
    s_case(&srv, EP_CHAT, "{\"messages\":[{\"role\":\"user\",\"content\":\"x\"}],"
                          "\"top_logprobs\":2}", 400, "invalid_value", "top_logprobs");
    s_case(&srv, EP_CHAT, "{\"messages\":[{\"role\":\"user\",\"content\":\"x\"}],"
                          "\"response_format\":{\"type\":\"json_object\"}}", 0, NULL, NULL);
    s_case(&srv, EP_CHAT, "{\"messages\":[{\"role\":\"user\",\"content\":\"x\"}],"
                          "\"response_format\":{\"type\":\"xml\"}}", 400, "invalid_value",
           "response_format");
    s_case(&srv, EP_CHAT, "{\"messages\":[{\"role\":\"user\",\"content\":\"x\"}],"
                          "\"response_format\":{\"type\":\"json_schema\",\"json_schema\":{\"schema\":"
                          "{\"type\":\"string\",\"pattern\":\"a\"}}}}", 400, "unsupported_schema",
           "response_format");
    s_case(&srv, EP_COMPLETIONS, "{\"prompt\":\"x\",\"grammar\":\"root ::= foo\"}", 400,
           "invalid_grammar", "grammar");
    s_case(&srv, EP_COMPLETIONS, "{\"prompt\":\"x\",\"tools\":[]}", 400, "invalid_value", "tools");
    s_case(&srv, EP_CHAT, "{\"messages\":[{\"role\":\"user\",\"content\":\"x\"}],"
                          "\"tools\":[{\"type\":\"function\",\"function\":{\"name\":\"f\"}}],"
                          "\"tool_choice\":\"sometimes\"}", 400, "invalid_value", "tool_choice");
    s_case(&srv, EP_CHAT, "{\"messages\":[]}", 400, "invalid_type", "messages");
    s_case(&srv, EP_CHAT, "{\"messages\":[{\"role\":\"user\",\"content\":5}]}", 400,
           "invalid_type", "messages[0]");
    s_case(&srv, EP_CHAT, "{\"messages\":[{\"role\":\"tool\",\"content\":\"x\"}]}", 400,
           "invalid_value", "messages[0]");
    s_case(&srv, EP_COMPLETIONS, "{\"prompt\":\"x\",\"stop\":[\"\"]}", 400, "invalid_value",
           "stop");
    s_case(&srv, EP_COMPLETIONS, "{\"prompt\":\"x\",\"stop\":7}", 400, "invalid_type", "stop");
    s_case(&srv, EP_COMPLETIONS, "{\"prompt\":[5,-1]}", 400, "invalid_value", "prompt");
    s_case(&srv, EP_COMPLETIONS, "{\"prompt\":\"\"}", 0, NULL, NULL); /* BOS alone */
    s_case(&srv, EP_COMPLETIONS, "{\"prompt\":\"x\",\"max_tokens\":64}", 400,
           "context_length_exceeded", "prompt");
    /* 64 ids fill the context: nothing is left to generate */
    char big[512] = "{\"prompt\":[1";
    for (int i = 1; i < 64; i++)
        strcat(big, ",1");
    strcat(big, "]}");
    s_case(&srv, EP_COMPLETIONS, big, 400, "context_length_exceeded", "prompt");
    srv.chat_template[0] = 0;
    s_case(&srv, EP_CHAT, "{\"messages\":[{\"role\":\"user\",\"content\":\"x\"}]}", 400,
           "no_chat_template", "messages");

    /* a defaulted request: OpenAI's sampling defaults, max_tokens the rest of the context */
    serve_req r;
    int st;
    json_t *e = NULL;
    const char *ok = "{\"prompt\":\"hi\",\"stop\":\"\\n\\n\"}";
    CHECK(api_parse(&srv, EP_COMPLETIONS, ok, strlen(ok), &r, &st, &e) == 0, "defaults");
    CHECK(r.so.temperature == 1.0f && r.so.top_p == 1.0f && r.so.top_k == 0 && r.so.min_p == 0,
          "OpenAI's sampling defaults");
    CHECK(r.max_tokens == srv.n_ctx - r.n_prompt && r.n_stop == 1 && !strcmp(r.stop[0], "\n\n"),
          "max_tokens %u, stops %u", r.max_tokens, r.n_stop);
    uint64_t seed1 = r.so.seed;
    api_req_free(&r);
    CHECK(api_parse(&srv, EP_COMPLETIONS, ok, strlen(ok), &r, &st, &e) == 0 &&
          r.so.seed != seed1 && r.so.seed <= UINT32_MAX, "no seed: a fresh one each (%llu, %llu)",
          (unsigned long long)seed1, (unsigned long long)r.so.seed);
    api_req_free(&r);
    /* null is unset: max_completion_tokens null leaves max_tokens 3 in force */
    const char *m3 = "{\"prompt\":\"hi\",\"max_tokens\":3,\"max_completion_tokens\":null,"
                     "\"n\":2,\"seed\":9,\"logit_bias\":{\"5\":-100,\"6\":2}}";
    CHECK(api_parse(&srv, EP_COMPLETIONS, m3, strlen(m3), &r, &st, &e) == 0 &&
          r.max_tokens == 3 && r.max_set && r.n == 2 && r.so.seed == 9 && r.so.n_bias == 2 &&
          r.so.bias[0].token == 5 && r.so.bias[0].bias == -100.0f && r.so.bias[1].bias == 2.0f,
          "max_tokens %u, n %u, seed %llu, %u biases", r.max_tokens, r.n,
          (unsigned long long)r.so.seed, r.so.n_bias);
    api_req_free(&r);

    /* ---- Prometheus text ---- */
    serve_metrics *m = metrics_new();
    metrics_request(m, EP_CHAT, 200);
    metrics_request(m, EP_CHAT, 429);
    metrics_request(m, EP_OTHER, 404);
    metrics_request(m, EP_SLOTS, 200);
    metrics_request(m, EP_TOKENIZE, 204);
    metrics_ttft(m, 0.003);
    metrics_itl(m, 0.0005);
    metrics_itl(m, 20);
    metrics_tokens(m, 5, 3);
    char *t = metrics_render(m, 2, 1, 4, "reference", STATE_SERVING, NULL);
    CHECK(t && strstr(t, "swarm_serve_requests_total{endpoint=\"/v1/chat/completions\","
                         "status=\"429\"} 1\n"), "requests by endpoint and status");
    CHECK(t && strstr(t, "swarm_serve_requests_total{endpoint=\"/slots\",status=\"200\"} 1\n") &&
          strstr(t, "swarm_serve_requests_total{endpoint=\"/tokenize\",status=\"204\"} 1\n") &&
          strstr(t, "swarm_serve_requests_total{endpoint=\"other\",status=\"404\"} 1\n"),
          "llama-server's endpoints have their own labels");
    CHECK(t && strstr(t, "swarm_serve_ttft_seconds_bucket{le=\"0.0025\"} 0\n") &&
          strstr(t, "swarm_serve_ttft_seconds_bucket{le=\"0.005\"} 1\n"), "ttft buckets");
    CHECK(t && strstr(t, "swarm_serve_itl_seconds_bucket{le=\"10\"} 1\n") &&
          strstr(t, "swarm_serve_itl_seconds_bucket{le=\"+Inf\"} 2\n") &&
          strstr(t, "swarm_serve_itl_seconds_count 2\n"), "itl buckets are cumulative");
    CHECK(t && strstr(t, "swarm_serve_sessions_active 2\n") &&
          strstr(t, "swarm_serve_sessions_queued 1\n") &&
          strstr(t, "swarm_serve_generated_tokens_total 3\n"), "gauges and counters");
    free(t);
    metrics_free(&m);
    tokenizer_free(&srv.tok);
    return CHECK_DONE("test_serve");
}
