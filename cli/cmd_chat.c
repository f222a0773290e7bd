/* cmd_chat.c — `swarm chat MODEL`: a conversation read from stdin a line per user turn, kept in
 * one session, rendered with the file's chat template (or --chat-template NAME). cli/ */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "text/chat.h"
#include "base/exitcode.h"
#include "cli/args.h"
#include "cli/cmd.h"
#include "dist/arm_open.h"
#include "text/engine.h"
#include "quant/quant.h"

static void s_usage(FILE *f);
static const cli_cmd s_cmd = { "chat", s_usage, NULL };

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
            "  --chat-template NAME use NAME instead of the one recognised in the file\n"
            "  --list-templates     the names, and exit\n"
            LLM_CLI_GEN_USAGE
            LLM_CLI_DRAFT_USAGE
            ARM_FLAGS_USAGE);
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

/* One run of the command: parse -> open -> converse. */
typedef struct {
    const char *model, *override, *system;
    llm_cli_gen_opts o;
    llm_cli_draft draft;          /* --draft / --draft-lookup / --draft-max */
    arm_flags af;
    arm_handle h;
    char name[64];                /* the template's family */
    engine *e;
    chat_msg *msgs;               /* the conversation, n_ctx + 1 of room */
    size_t n_msgs;
    char *prompt;
    int32_t *ids;
    s_text reply;
    char err[1024];
} s_chat;

/* EXIT_OK after --help or --list-templates, EXIT_USAGE (printed), or -1: parsed, go on. */
static int s_parse(s_chat *c, int argc, char **argv)
{
    for (int i = 1; i < argc; i++) {
        int r = llm_cli_gen_flag(&c->o, argc, argv, &i, c->err, sizeof c->err);
        if (!r)
            r = arm_flags_parse(&c->af, argc, argv, &i, c->err, sizeof c->err);
        if (!r)
            r = llm_cli_draft_flag(&c->draft, argc, argv, &i, c->err, sizeof c->err);
        if (r < 0) {
            fprintf(stderr, "swarm chat: %s\n", c->err);
            return EXIT_USAGE;
        }
        if (r)
            continue;
        const char *f = argv[i];
        if (!strcmp(f, "--list-templates")) {
            s_list(stdout);
            return EXIT_OK;
        } else if (!strcmp(f, "--chat-template") && i + 1 < argc) {
            c->override = argv[++i];
        } else if (!strcmp(f, "--system") && i + 1 < argc) {
            c->system = argv[++i];
        } else {
            int rc = cli_arg_rest(&s_cmd, f, &c->model);
            if (rc != CLI_ARG_NEXT)
                return rc;
        }
    }
    if (!c->model) {
        s_usage(stderr);
        return EXIT_USAGE;
    }
    /* faults are placed by generated token: generate's alone */
    if (arm_flags_check(&c->af, ARM_F_ALL & ~ARM_F_FAULTS, ARM_ARMS_ALL, "chat", c->err,
                        sizeof c->err) || llm_cli_draft_check(&c->draft, c->err, sizeof c->err)) {
        fprintf(stderr, "swarm chat: %s\n", c->err);
        return EXIT_USAGE;
    }
    return -1;
}

/* The arm, the template, the engine, room for the conversation. 0, or -1 with c->err ("" when
 * printed). */
static int s_open(s_chat *c)
{
    arm_open_opts ao = { .cmd = "chat", .log_prefix = "", .model = c->model, .flags = &c->af,
                         .n_ctx = c->o.n_ctx, .ctx_max = 4096, .n_batch = c->o.n_batch,
                         .sessions = 1, .respawn = 0, .seed = c->o.so.seed };
    if (arm_open(&ao, &c->h, c->err, sizeof c->err))
        return -1;
    if (s_template(&c->h.lm, c->override, c->name, sizeof c->name, c->err, sizeof c->err)) {
        fprintf(stderr, "swarm chat: %s\n", c->err);
        s_list(stderr);
        c->err[0] = 0;
        return -1;
    }
    if (llm_cli_draft_open(&c->draft, c->h.lm.m, c->err, sizeof c->err))
        return -1;
    fprintf(stderr, "chat template: %s (%s), %s\n", c->name, chat_template_describe(c->name),
            c->override ? "as --chat-template says" : "recognised in tokenizer.chat_template");
    uint32_t n_ctx = c->h.n_ctx;
    if (!(c->e = engine_new(c->h.lm.m, c->h.lm.t, n_ctx, c->o.n_batch, c->h.threads, c->err,
                            sizeof c->err)))
        return -1;
    /* every turn adds a user and an assistant message; +1 for the system message */
    if (!(c->msgs = malloc((n_ctx + 1) * sizeof *c->msgs))) {
        snprintf(c->err, sizeof c->err, "out of memory");
        return -1;
    }
    if (c->system)
        c->msgs[c->n_msgs++] = (chat_msg){ .role = "system", .content = strdup(c->system) };
    return 0;
}

/* The conversation so far, rendered and tokenized into c->ids. */
static int s_render(s_chat *c, size_t *n)
{
    size_t plen = 0;
    free(c->prompt);
    c->prompt = NULL;
    if (chat_render(c->name, c->msgs, c->n_msgs, 1, 0, NULL, 0, &plen, c->err, sizeof c->err) ||
        !(c->prompt = malloc(plen + 1)) ||
        chat_render(c->name, c->msgs, c->n_msgs, 1, 0, c->prompt, plen + 1, &plen, c->err,
                    sizeof c->err))
        return -1;
    free(c->ids);
    c->ids = NULL;
    /* The template writes its markers as text: they must become their special tokens. */
    unsigned flags = TOKENIZER_PARSE_SPECIAL | (c->o.no_bos ? 0 : TOKENIZER_ADD_SPECIAL);
    return tokenizer_encode(c->h.lm.t, c->prompt, plen, flags, &c->ids, n, c->err,
                            sizeof c->err);
}

/* One user line in, the reply streamed out and kept. 0, or -1 with c->err. */
static int s_turn(s_chat *c, const char *line)
{
    uint32_t n_ctx = c->h.n_ctx;
    if (c->n_msgs + 2 > n_ctx + 1) {
        snprintf(c->err, sizeof c->err, "the conversation has outgrown the context of %u",
                 n_ctx);
        return -1;
    }
    c->msgs[c->n_msgs++] = (chat_msg){ .role = "user", .content = strdup(line) };
    size_t n = 0;
    if (s_render(c, &n))
        return -1;
    uint32_t room = n < n_ctx ? n_ctx - (uint32_t)n : 0;
    engine_request q = { .prompt = c->ids, .n_prompt = (uint32_t)n,
                         .max_tokens = c->o.n_predict < room ? c->o.n_predict : room,
                         .sampling = c->o.so, .stop = c->o.stops, .n_stop = c->o.n_stop,
                         .on_token = s_on_token, .user = &c->reply,
                         .draft = llm_cli_draft_on(&c->draft) ? &c->draft.o : NULL };
    engine_stats st;
    c->reply.len = 0;
    if (c->reply.buf)
        c->reply.buf[0] = '\0';
    if (!q.max_tokens) {
        snprintf(c->err, sizeof c->err, "the conversation (%zu tokens) fills the context of %u",
                 n, n_ctx);
        return -1;
    }
    if (engine_generate(c->e, &q, &st, c->err, sizeof c->err))
        return -1;
    putchar('\n');
    fflush(stdout);
    fprintf(stderr, "[%u tokens, %s; prompt %u tokens, %u of them new; ttft %.1f ms, "
                    "%.2f tok/s", st.n_gen, engine_finish_name(st.finish), st.n_prompt,
            st.n_prompt_eval, st.ttft_ms, st.gen_tok_s);
    if (llm_cli_draft_on(&c->draft))
        fprintf(stderr, "; %u of %u drafts accepted, %.2f tokens a pass", st.n_accepted,
                st.n_drafted, st.n_passes ? (double)(st.n_passes + st.n_accepted) / st.n_passes
                                          : 0.0);
    fprintf(stderr, "]\n");
    c->msgs[c->n_msgs++] = (chat_msg){ .role = "assistant",
                                       .content = strdup(c->reply.buf ? c->reply.buf : "") };
    return 0;
}

static void s_free(s_chat *c)
{
    for (size_t i = 0; i < c->n_msgs; i++)
        free((char *)c->msgs[i].content);
    free(c->msgs);
    free(c->prompt);
    free(c->ids);
    free(c->reply.buf);
    engine_free(&c->e);
    llm_cli_draft_close(&c->draft);
    arm_open_close(&c->h);
}

int cmd_chat(int argc, char **argv)
{
    s_chat *c = calloc(1, sizeof *c); /* an arm_handle holds paths: not for the stack */
    char *line = NULL;
    size_t line_cap = 0;
    if (!c) {
        fprintf(stderr, "swarm chat: out of memory\n");
        return EXIT_FAIL;
    }
    llm_cli_gen_defaults(&c->o);
    c->o.n_predict = 256;
    arm_flags_init(&c->af);
    int rc = s_parse(c, argc, argv);
    if (rc >= 0)
        goto out;
    rc = EXIT_FAIL;
    if (s_open(c))
        goto fail;
    int tty = isatty(0);
    for (;;) {
        if (tty)
            fputs("> ", stderr);
        ssize_t got = getline(&line, &line_cap, stdin);
        if (got < 0)
            break;
        while (got && (line[got - 1] == '\n' || line[got - 1] == '\r'))
            line[--got] = '\0';
        if (got && s_turn(c, line))
            goto fail;
    }
    rc = EXIT_OK;
    goto out;
fail:
    if (c->h.refused) /* the arm refusing its options (the workers' plan): a usage error */
        rc = EXIT_USAGE;
    if (c->err[0])
        fprintf(stderr, "swarm chat: %s\n", c->err);
out:
    free(line);
    s_free(c);
    free(c);
    quant_pool_shutdown();
    return rc;
}
