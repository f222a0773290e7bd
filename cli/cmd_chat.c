/* cmd_chat.c — `swarm chat MODEL`: a conversation read from stdin a line per user turn, kept in
 * one session, rendered with the file's chat template (or --chat-template NAME). cli/ */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "text/chat.h"
#include "base/exitcode.h"
#include "cli/cmd.h"
#include "dist/llm_cli.h"
#include "text/engine.h"
#include "quant/quant.h"

static void s_usage(FILE *f)
{
    fprintf(f,
            "usage: swarm chat MODEL.gguf|CONFIG [--chat-template NAME] [--system TEXT] [options]\n"
            "  Reads one user message per line from stdin and streams each reply to stdout; the\n"
            "  whole conversation stays in one session (each turn runs only its new tokens).\n"
            "  The template is recognised from the file's tokenizer.chat_template and named on\n"
            "  stderr; a template that is not recognised is an error unless --chat-template\n"
            "  NAME says which to use (names: swarm chat --list-templates).\n"
            "  --system TEXT        a system message before the first turn\n"
            "  A reply is at most 256 tokens unless -n says otherwise (the 64 below is generate's).\n"
            LLM_CLI_GEN_USAGE);
}

typedef struct {
    char *buf;
    size_t len, cap;
} s_text;

static int s_on_token(void *user, const engine_token *t)
{
    s_text *r = user;
    if (!t->len)
        return 0;
    fwrite(t->text, 1, t->len, stdout);
    fflush(stdout);
    if (r->len + t->len + 1 > r->cap) {
        size_t cap = (r->len + t->len + 1) * 2;
        char *nb = realloc(r->buf, cap);
        if (!nb)
            return 1; /* out of memory: end the turn rather than lose text silently */
        r->buf = nb;
        r->cap = cap;
    }
    memcpy(r->buf + r->len, t->text, t->len);
    r->len += t->len;
    r->buf[r->len] = '\0';
    return 0;
}

static void s_list(FILE *f)
{
    for (const char *const *n = chat_template_names(); *n; n++)
        fprintf(f, "  %-16s %s\n", *n, chat_template_describe(*n));
}

/* The family: --chat-template's, or the one recognised in the file. */
static int s_template(const llm_cli_model *lm, const char *override, char *name, size_t len,
                      char *err, size_t errlen)
{
    if (override) {
        if (!chat_template_describe(override)) {
            snprintf(err, errlen, "--chat-template '%s' is not one of the names below", override);
            return -1;
        }
        snprintf(name, len, "%s", override);
        return 0;
    }
    const char *jinja = NULL;
    char why[256];
    if (gguf_get_str(llm_model_gguf(lm->m), "tokenizer.chat_template", &jinja, why, sizeof why))
        jinja = NULL;
    if (chat_template_detect(jinja, name, len, why, sizeof why)) {
        snprintf(err, errlen, "%s: %s", lm->path, why);
        return -1;
    }
    return 0;
}

int cmd_chat(int argc, char **argv)
{
    const char *model = NULL, *override = NULL, *system = NULL;
    llm_cli_gen_opts o;
    char err[1024], name[64];
    llm_cli_gen_defaults(&o);
    o.n_predict = 256;
    for (int i = 1; i < argc; i++) {
        int r = llm_cli_gen_flag(&o, argc, argv, &i, err, sizeof err);
        if (r < 0) {
            fprintf(stderr, "swarm chat: %s\n", err);
            return EXIT_USAGE;
        }
        if (r)
            continue;
        const char *f = argv[i];
        if (!strcmp(f, "--help") || !strcmp(f, "-h")) {
            s_usage(stdout);
            return EXIT_OK;
        } else if (!strcmp(f, "--list-templates")) {
            s_list(stdout);
            return EXIT_OK;
        } else if (!strcmp(f, "--chat-template") && i + 1 < argc) {
            override = argv[++i];
        } else if (!strcmp(f, "--system") && i + 1 < argc) {
            system = argv[++i];
        } else if (f[0] == '-') {
            fprintf(stderr, "swarm chat: unknown option or missing value '%s'\n", f);
            s_usage(stderr);
            return EXIT_USAGE;
        } else if (!model) {
            model = f;
        } else {
            fprintf(stderr, "swarm chat: unexpected argument '%s'\n", f);
            return EXIT_USAGE;
        }
    }
    if (!model) {
        s_usage(stderr);
        return EXIT_USAGE;
    }
    int rc = EXIT_FAIL;
    llm_cli_model lm = { 0 };
    engine *e = NULL;
    chat_msg *msgs = NULL;
    size_t n_msgs = 0;
    char *line = NULL, *prompt = NULL;
    size_t line_cap = 0;
    int32_t *ids = NULL;
    s_text reply = { 0 };
    uint32_t n_ctx;
    if (llm_cli_open(&lm, model, err, sizeof err) || llm_cli_ctx(&o, lm.m, &n_ctx, err, sizeof err))
        goto fail;
    if (s_template(&lm, override, name, sizeof name, err, sizeof err)) {
        fprintf(stderr, "swarm chat: %s\n", err);
        s_list(stderr);
        goto out;
    }
    fprintf(stderr, "chat template: %s (%s), %s\n", name, chat_template_describe(name),
            override ? "as --chat-template says" : "recognised in tokenizer.chat_template");
    if (!(e = engine_new(lm.m, lm.t, n_ctx, o.n_batch, (int)o.threads, err, sizeof err)))
        goto fail;
    /* every turn adds a user and an assistant message; +1 for the system message */
    msgs = malloc((n_ctx + 1) * sizeof *msgs);
    if (!msgs)
        goto fail;
    if (system)
        msgs[n_msgs++] = (chat_msg){ .role = "system", .content = strdup(system) };
    int tty = isatty(0);
    for (;;) {
        if (tty)
            fputs("> ", stderr);
        ssize_t got = getline(&line, &line_cap, stdin);
        if (got < 0)
            break;
        while (got && (line[got - 1] == '\n' || line[got - 1] == '\r'))
            line[--got] = '\0';
        if (!got)
            continue;
        if (n_msgs + 2 > n_ctx + 1) {
            snprintf(err, sizeof err, "the conversation has outgrown the context of %u", n_ctx);
            goto fail;
        }
        msgs[n_msgs++] = (chat_msg){ .role = "user", .content = strdup(line) };
        size_t plen = 0, n = 0;
        free(prompt);
        prompt = NULL;
        if (chat_render(name, msgs, n_msgs, 1, 0, NULL, 0, &plen, err, sizeof err) ||
            !(prompt = malloc(plen + 1)) ||
            chat_render(name, msgs, n_msgs, 1, 0, prompt, plen + 1, &plen, err, sizeof err))
            goto fail;
        free(ids);
        ids = NULL;
        /* The template writes its markers as text: they must become their special tokens. */
        unsigned flags = TOKENIZER_PARSE_SPECIAL | (o.no_bos ? 0 : TOKENIZER_ADD_SPECIAL);
        if (tokenizer_encode(lm.t, prompt, plen, flags, &ids, &n, err, sizeof err))
            goto fail;
        uint32_t room = n < n_ctx ? n_ctx - (uint32_t)n : 0;
        engine_request q = { .prompt = ids, .n_prompt = (uint32_t)n,
                             .max_tokens = o.n_predict < room ? o.n_predict : room,
                             .sampling = o.so, .stop = o.stops, .n_stop = o.n_stop,
                             .on_token = s_on_token, .user = &reply };
        engine_stats st;
        reply.len = 0;
        if (reply.buf)
            reply.buf[0] = '\0';
        if (!q.max_tokens) {
            snprintf(err, sizeof err, "the conversation (%zu tokens) fills the context of %u", n,
                     n_ctx);
            goto fail;
        }
        if (engine_generate(e, &q, &st, err, sizeof err))
            goto fail;
        putchar('\n');
        fflush(stdout);
        fprintf(stderr, "[%u tokens, %s; prompt %u tokens, %u of them new; ttft %.1f ms, "
                        "%.2f tok/s]\n", st.n_gen, engine_finish_name(st.finish), st.n_prompt,
                st.n_prompt_eval, st.ttft_ms, st.gen_tok_s);
        msgs[n_msgs++] = (chat_msg){ .role = "assistant",
                                     .content = strdup(reply.buf ? reply.buf : "") };
    }
    rc = EXIT_OK;
    goto out;
fail:
    fprintf(stderr, "swarm chat: %s\n", err);
out:
    for (size_t i = 0; i < n_msgs; i++)
        free((char *)msgs[i].content);
    free(msgs);
    free(line);
    free(prompt);
    free(ids);
    free(reply.buf);
    engine_free(&e);
    llm_cli_close(&lm);
    quant_pool_shutdown();
    return rc;
}
