/* chat.c — chat template families: detection by markers and llama.cpp's renderings, byte for byte. text/ */
#include "text/chat.h"

#include <stdarg.h>
#include <stdio.h>
#include <string.h>
#include <time.h>

typedef enum {
    S_CHATML,
    S_LLAMA2,
    S_LLAMA2_SYS,
    S_LLAMA2_SYS_BOS,
    S_LLAMA2_SYS_STRIP,
    S_MISTRAL_V1,
    S_MISTRAL_V3,
    S_MISTRAL_V3_TEKKEN,
    S_MISTRAL_V7,
    S_LLAMA3,
    S_ZEPHYR,
    S_TINYLLAMA,
    S_GEMMA,
    S_GEMMA3,
    S_QWEN3,
    S_QWEN3_NO_THINK,
    S_PHI3,
    S_PHI3_4K,
    S_PHI4,
    S_PHI4_MINI,
    S_GPT_OSS,
} s_family;

static const struct {
    const char *name;
    s_family fam;
    const char *bos;          /* the BOS text the family's own template writes ("" = none) */
    const char *what;
} s_tmpl[] = {
    {"chatml", S_CHATML, "", "ChatML <|im_start|>role ... <|im_end|>: Qwen2, Qwen2.5, SmolLM2, OpenHermes"},
    {"llama2", S_LLAMA2, "<s>", "[INST] ... [/INST] without <<SYS>>: Mistral-7B-Instruct v0.1/v0.2 (system text joins the first turn)"},
    {"llama2-sys", S_LLAMA2_SYS, "<s>", "Llama 2 chat: [INST] <<SYS>> ... <</SYS>>"},
    {"llama2-sys-bos", S_LLAMA2_SYS_BOS, "<s>", "Llama 2 with <s> before each later [INST]"},
    {"llama2-sys-strip", S_LLAMA2_SYS_STRIP, "<s>", "Llama 2 with every message stripped (content.strip())"},
    {"mistral-v1", S_MISTRAL_V1, "<s>", "Mistral's v1 template: ' [INST] ' ... ' [/INST]'"},
    {"mistral-v3", S_MISTRAL_V3, "<s>", "Mistral's v3 template ([AVAILABLE_TOOLS]): Mistral-7B-Instruct v0.3"},
    {"mistral-v3-tekken", S_MISTRAL_V3_TEKKEN, "<s>", "Mistral's v3 Tekken template: Mistral-Nemo"},
    {"mistral-v7", S_MISTRAL_V7, "<s>", "Mistral's v7 template ([SYSTEM_PROMPT])"},
    {"llama3", S_LLAMA3, "<|begin_of_text|>", "Llama 3, 3.1, 3.2: <|start_header_id|>role<|end_header_id|> ... <|eot_id|>"},
    {"zephyr", S_ZEPHYR, "", "Zephyr with <|endoftext|> ending each turn (StableLM Zephyr); llama.cpp's zephyr"},
    {"tinyllama", S_TINYLLAMA, "", "Zephyr with eos_token </s> ending each turn: TinyLlama-1.1B-Chat, zephyr-7b"},
    {"gemma", S_GEMMA, "<bos>", "Gemma <start_of_turn>user/model ... <end_of_turn> (system joins the first user turn)"},
    {"gemma3", S_GEMMA3, "<bos>", "Gemma 3's own template: the system text, untrimmed, opens the first user turn; roles must alternate"},
    {"qwen3", S_QWEN3, "", "Qwen3's own template: ChatML, <think> reasoning dropped from earlier assistant turns, kept after the last user turn"},
    {"qwen3-no-think", S_QWEN3_NO_THINK, "", "Qwen3's template with enable_thinking false: an empty <think></think> opens the answer"},
    {"phi3", S_PHI3, "", "Phi-3.5-mini / Phi-3 128k: <|system|>, <|user|>, <|assistant|> each on its own line, <|end|> after each"},
    {"phi3-4k", S_PHI3_4K, "<s>", "Phi-3-mini-4k: <|user|> ... <|end|> then <|assistant|>, no system role"},
    {"phi4", S_PHI4, "", "Phi-4: <|im_start|>role<|im_sep|> ... <|im_end|>"},
    {"phi4-mini", S_PHI4_MINI, "", "Phi-4-mini: <|role|> ... <|end|>, no newlines"},
    {"gpt-oss", S_GPT_OSS, "", "gpt-oss's harmony: <|start|>role<|message|> ... <|end|>, its system message with today's date, the first system message as the developer's instructions"},
};
#define S_NTMPL (sizeof s_tmpl / sizeof s_tmpl[0])

static void s_fail(char *err, size_t errlen, const char *fmt, ...) __attribute__((format(printf, 3, 4)));
static void s_fail(char *err, size_t errlen, const char *fmt, ...)
{
    if (!err || errlen == 0)
        return;
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(err, errlen, fmt, ap);
    va_end(ap);
}

/* The same names in the same order as s_tmpl (test_chat checks that each one is known). A
 * constant array rather than one filled on first use: callable from any thread. */
static const char *const s_names[] = {
    "chatml", "llama2", "llama2-sys", "llama2-sys-bos", "llama2-sys-strip", "mistral-v1",
    "mistral-v3", "mistral-v3-tekken", "mistral-v7", "llama3", "zephyr", "tinyllama", "gemma",
    "gemma3", "qwen3", "qwen3-no-think", "phi3", "phi3-4k", "phi4", "phi4-mini", "gpt-oss", NULL,
};
_Static_assert(sizeof s_names / sizeof s_names[0] == S_NTMPL + 1, "s_names and s_tmpl differ");

const char *const *chat_template_names(void)
{
    return s_names;
}

static int s_find(const char *name)
{
    for (size_t i = 0; name && i < S_NTMPL; i++)
        if (strcmp(name, s_tmpl[i].name) == 0)
            return (int)i;
    return -1;
}

const char *chat_template_describe(const char *name)
{
    int i = s_find(name);
    return i < 0 ? NULL : s_tmpl[i].what;
}

/* "chatml, llama2, ..." into buf, for error messages. */
static const char *s_name_list(char *buf, size_t len)
{
    size_t off = 0;
    buf[0] = '\0';
    for (size_t i = 0; i < S_NTMPL && off < len; i++) {
        int n = snprintf(buf + off, len - off, "%s%s", i ? ", " : "", s_tmpl[i].name);
        if (n < 0)
            break;
        off += (size_t)n;
    }
    return buf;
}

/* ---- detection */

static int s_has(const char *j, const char *marker)
{
    return strstr(j, marker) != NULL;
}

/* How a Zephyr-style template ends a user turn, read from the Jinja expression that writes it
 * (from the user tag to the next "}}"): 1 <|endoftext|>, 2 eos_token or </s>, 0 something else
 * (Falcon 3 ends it with '\n') or no such expression. Judged by the turn's own expression
 * because Falcon 3's template also has eos_token, after assistant turns only. */
static int s_user_turn_end(const char *j)
{
    static const char *const tags[] = {"<|user|>", "'<|' + message['role'] + '|>'",
                                       "\"<|\" + message[\"role\"] + \"|>\"",
                                       "'<|' + message.role + '|>'"};
    for (size_t t = 0; t < sizeof tags / sizeof tags[0]; t++) {
        for (const char *p = strstr(j, tags[t]); p; p = strstr(p + 1, tags[t])) {
            const char *e = strstr(p, "}}");
            size_t n = e ? (size_t)(e - p) : strlen(p);
            if (!memmem(p, n, "content", 7))
                continue; /* a tag alone, e.g. in a generation prompt */
            if (memmem(p, n, "<|endoftext|>", 13))
                return 1;
            if (memmem(p, n, "eos_token", 9) || memmem(p, n, "</s>", 4))
                return 2;
            return 0;
        }
    }
    return 0;
}

/* The markers, in llama.cpp's order of precedence (llm_chat_detect_template upstream), so a
 * template both would recognise gets the same family. -1 with why[] when nothing matches. */
static int s_detect(const char *j, const char **why)
{
    *why = NULL;
    if (s_has(j, "<|channel|>")) /* llama.cpp: LLM_CHAT_TEMPLATE_OPENAI_MOE */
        return S_GPT_OSS;
    if (s_has(j, "<|im_start|>")) {
        if (s_has(j, "<|im_sep|>"))
            return S_PHI4;
        /* Qwen3's own template: ChatML that splits reasoning at </think> */
        if (s_has(j, "</think>") && s_has(j, "last_query_index"))
            return S_QWEN3;
        if (s_has(j, "<end_of_utterance>")) {
            *why = "looks like SmolVLM (<end_of_utterance>), which swarm does not render";
            return -1;
        }
        return S_CHATML;
    }
    if (s_has(j, "[INST]")) {
        if (s_has(j, "[SYSTEM_PROMPT]"))
            return S_MISTRAL_V7;
        if (s_has(j, "' [INST] ' + system_message") || s_has(j, "[AVAILABLE_TOOLS]")) {
            if (s_has(j, " [INST]"))
                return S_MISTRAL_V1;
            if (s_has(j, "\"[INST]\""))
                return S_MISTRAL_V3_TEKKEN;
            return S_MISTRAL_V3;
        }
        if (s_has(j, "content.strip()"))
            return S_LLAMA2_SYS_STRIP;
        if (s_has(j, "bos_token + '[INST]"))
            return S_LLAMA2_SYS_BOS;
        if (s_has(j, "<<SYS>>"))
            return S_LLAMA2_SYS;
        return S_LLAMA2;
    }
    if (s_has(j, "<|end|>") &&
        (s_has(j, "<|tool|>") || s_has(j, "'<|' + message['role'] + '|>' + message['content']")))
        return S_PHI4_MINI; /* Phi-4-mini: the role tag written from the role, no newline */
    if (s_has(j, "<|user|>") || s_has(j, "<|assistant|>")) {
        /* Phi-3 and ChatGLM share the role tags; their turn ends differ. Phi-3-mini-4k's
         * template has no system role and opens the assistant's turn after each user turn;
         * Phi-3.5's and the 128k ones' have <|system|> */
        if (s_has(j, "<|end|>"))
            return s_has(j, "<|system|>") ? S_PHI3 : S_PHI3_4K;
        if (s_has(j, "[gMASK]")) {
            *why = "looks like ChatGLM ([gMASK]), which swarm does not render";
            return -1;
        }
        /* llama.cpp's own detector takes any template with both tags for Falcon 3 (literal
         * </s>) or GLM-Edge, TinyLlama's included; swarm decides by how a user turn ends. */
        int end = s_user_turn_end(j);
        if (end == 1)
            return S_ZEPHYR;
        if (end == 2)
            return S_TINYLLAMA;
        *why = "has <|user|>/<|assistant|> but its user turn does not end with <|endoftext|>, "
               "eos_token or </s>: Falcon 3 / GLM-Edge style, not rendered";
        return -1;
    }
    if (s_has(j, "<start_of_turn>"))
        return s_has(j, "first_user_prefix") ? S_GEMMA3 : S_GEMMA;
    if (s_has(j, "<|start_header_id|>") && s_has(j, "<|end_header_id|>"))
        return S_LLAMA3;
    if (s_has(j, "<|header_start|>")) {
        *why = "looks like Llama 4 (<|header_start|>), which swarm does not render";
        return -1;
    }
    return -1;
}

int chat_template_detect(const char *jinja, char *name, size_t len, char *err, size_t errlen)
{
    char names[512];
    if (!jinja || !jinja[0]) {
        s_fail(err, errlen, "the model has no tokenizer.chat_template; choose one with "
               "--chat-template NAME (%s)", s_name_list(names, sizeof names));
        return -1;
    }
    const char *why;
    int f = s_detect(jinja, &why);
    if (f < 0) {
        /* The template's opening, on one line, so the user can see what it was. */
        char head[61];
        size_t i = 0;
        for (; i < sizeof head - 1 && jinja[i]; i++)
            head[i] = (unsigned char)jinja[i] < 0x20 ? ' ' : jinja[i];
        head[i] = '\0';
        s_fail(err, errlen, "unrecognised chat template \"%s%s\": %s; choose one with "
               "--chat-template NAME (%s)", head, jinja[i] ? "..." : "",
               why ? why : "none of the markers of a known family (<|im_start|>, [INST], "
               "<|start_header_id|>, <start_of_turn>, <|user|>)",
               s_name_list(names, sizeof names));
        return -1;
    }
    for (size_t i = 0; i < S_NTMPL; i++) {
        if (s_tmpl[i].fam != (s_family)f)
            continue;
        if (!name || strlen(s_tmpl[i].name) + 1 > len) {
            s_fail(err, errlen, "chat template name '%s' does not fit %zu bytes", s_tmpl[i].name, len);
            return -1;
        }
        memcpy(name, s_tmpl[i].name, strlen(s_tmpl[i].name) + 1);
        return 0;
    }
    s_fail(err, errlen, "chat template family %d has no name", f);
    return -1;
}

/* ---- rendering */

/* Writes into the caller's buffer as far as it goes and counts every byte, so a too-small
 * buffer still learns the size it needs. */
typedef struct {
    char *out;
    size_t cap, len;
} s_buf;

static void s_put(s_buf *b, const char *s, size_t n)
{
    if (b->len < b->cap) {
        size_t room = b->cap - b->len;
        memcpy(b->out + b->len, s, n < room ? n : room);
    }
    b->len += n;
}

static void s_puts(s_buf *b, const char *s)
{
    s_put(b, s, strlen(s));
}

/* llama.cpp's trim(): drops isspace() bytes (C locale: space, \t \n \v \f \r) at both ends. */
static int s_space(char c)
{
    return c == ' ' || c == '\t' || c == '\n' || c == '\v' || c == '\f' || c == '\r';
}

static void s_put_trim(s_buf *b, const char *s)
{
    size_t a = 0, z = strlen(s);
    while (a < z && s_space(s[a]))
        a++;
    while (z > a && s_space(s[z - 1]))
        z--;
    s_put(b, s + a, z - a);
}

/* Llama 2 and its variants (llm_chat_apply_template, LLM_CHAT_TEMPLATE_LLAMA_2*): the text
 * opens inside the first turn ("[INST] ", no BOS: the tokenizer adds it). */
static void s_llama2(s_buf *b, s_family f, const chat_msg *m, size_t n)
{
    int sys = f != S_LLAMA2, bos_inside = f == S_LLAMA2_SYS_BOS, strip = f == S_LLAMA2_SYS_STRIP;
    int inside = 1;
    s_puts(b, "[INST] ");
    for (size_t i = 0; i < n; i++) {
        if (!inside) {
            inside = 1;
            s_puts(b, bos_inside ? "<s>[INST] " : "[INST] ");
        }
        void (*put)(s_buf *, const char *) = strip ? s_put_trim : s_puts;
        if (strcmp(m[i].role, "system") == 0) {
            if (sys) {
                s_puts(b, "<<SYS>>\n");
                put(b, m[i].content);
                s_puts(b, "\n<</SYS>>\n\n");
            } else {
                /* no <<SYS>>: the system text opens the first turn on its own line */
                put(b, m[i].content);
                s_puts(b, "\n");
            }
        } else if (strcmp(m[i].role, "user") == 0) {
            put(b, m[i].content);
            s_puts(b, " [/INST]");
        } else {
            put(b, m[i].content);
            s_puts(b, "</s>");
            inside = 0;
        }
    }
}

/* Mistral's v1, v3 and v3-Tekken (LLM_CHAT_TEMPLATE_MISTRAL_V1/V3/V3_TEKKEN): they differ only
 * in the spaces around [INST]/[/INST] and v3 trimming the assistant's text. */
static void s_mistral(s_buf *b, s_family f, const chat_msg *m, size_t n)
{
    const char *lead = f == S_MISTRAL_V1 ? " " : "";
    const char *trail = f == S_MISTRAL_V3_TEKKEN ? "" : " ";
    int inside = 0;
    for (size_t i = 0; i < n; i++) {
        if (!inside) {
            s_puts(b, lead);
            s_puts(b, "[INST]");
            s_puts(b, trail);
            inside = 1;
        }
        if (strcmp(m[i].role, "system") == 0) {
            s_puts(b, m[i].content);
            s_puts(b, "\n\n");
        } else if (strcmp(m[i].role, "user") == 0) {
            s_puts(b, m[i].content);
            s_puts(b, lead);
            s_puts(b, "[/INST]");
        } else {
            s_puts(b, trail);
            if (f == S_MISTRAL_V3)
                s_put_trim(b, m[i].content);
            else
                s_puts(b, m[i].content);
            s_puts(b, "</s>");
            inside = 0;
        }
    }
}

/* Mistral v7 (LLM_CHAT_TEMPLATE_MISTRAL_V7): system in [SYSTEM_PROMPT], a space after each tag. */
static void s_mistral_v7(s_buf *b, const chat_msg *m, size_t n)
{
    for (size_t i = 0; i < n; i++) {
        if (strcmp(m[i].role, "system") == 0) {
            s_puts(b, "[SYSTEM_PROMPT] ");
            s_puts(b, m[i].content);
            s_puts(b, "[/SYSTEM_PROMPT]");
        } else if (strcmp(m[i].role, "user") == 0) {
            s_puts(b, "[INST] ");
            s_puts(b, m[i].content);
            s_puts(b, "[/INST]");
        } else {
            s_puts(b, " ");
            s_puts(b, m[i].content);
            s_puts(b, "</s>");
        }
    }
}

/* Gemma (LLM_CHAT_TEMPLATE_GEMMA): no system role, so the trimmed system text opens the next
 * user turn followed by a blank line; assistant is "model"; every message trimmed. */
static void s_gemma(s_buf *b, const chat_msg *m, size_t n, int gen)
{
    size_t pending = n; /* first system message not yet written, n = none */
    for (size_t i = 0; i < n; i++) {
        if (strcmp(m[i].role, "system") == 0) {
            if (pending == n)
                pending = i;
            continue;
        }
        int model = strcmp(m[i].role, "assistant") == 0;
        s_puts(b, "<start_of_turn>");
        s_puts(b, model ? "model" : m[i].role);
        s_puts(b, "\n");
        if (pending < n && !model) {
            /* llama.cpp joins the trimmed system texts and writes them only if not empty */
            size_t before = b->len;
            for (size_t k = pending; k < i; k++)
                if (strcmp(m[k].role, "system") == 0)
                    s_put_trim(b, m[k].content);
            if (b->len > before)
                s_puts(b, "\n\n");
            pending = n;
        }
        s_put_trim(b, m[i].content);
        s_puts(b, "<end_of_turn>\n");
    }
    if (gen)
        s_puts(b, "<start_of_turn>model\n");
}

/* Gemma 3's own template (tokenizer.chat_template of gemma-3-*-it): a first system message's
 * text, as it is, and a blank line open the first user turn; every message trimmed (Jinja's
 * trim: Python's str.strip, here the ASCII whitespace); roles after it must alternate user,
 * model, user... or the template raises, and so does this. */
static int s_gemma3(s_buf *b, const chat_msg *m, size_t n, int gen, char *err, size_t errlen)
{
    size_t first = n && strcmp(m[0].role, "system") == 0 ? 1 : 0;
    for (size_t i = first; i < n; i++) {
        int user = strcmp(m[i].role, "user") == 0;
        if (user != ((i - first) % 2 == 0)) {
            s_fail(err, errlen, "gemma3: Conversation roles must alternate "
                   "user/assistant/user/assistant/... (message %zu is %s)", i, m[i].role);
            return -1;
        }
        s_puts(b, "<start_of_turn>");
        s_puts(b, user ? "user" : "model");
        s_puts(b, "\n");
        if (i == first && first) {
            s_puts(b, m[0].content);
            s_puts(b, "\n\n");
        }
        s_put_trim(b, m[i].content);
        s_puts(b, "<end_of_turn>\n");
    }
    if (gen)
        s_puts(b, "<start_of_turn>model\n");
    return 0;
}

/* Python's str.strip('\n') / lstrip / rstrip of [a, z) of s: moves a and z. */
static void s_strip_nl(const char *s, size_t *a, size_t *z, int left, int right)
{
    while (left && *a < *z && s[*a] == '\n')
        (*a)++;
    while (right && *z > *a && s[*z - 1] == '\n')
        (*z)--;
}

/* The last occurrence of needle in s[0..n), or NULL. */
static const char *s_last(const char *s, size_t n, const char *needle)
{
    size_t k = strlen(needle);
    for (size_t i = n >= k ? n - k + 1 : 0; i-- > 0;)
        if (memcmp(s + i, needle, k) == 0)
            return s + i;
    return NULL;
}

/* Qwen3's own template, the branches a conversation of system, user and assistant messages
 * takes (tools aside): ChatML turns; an assistant message with "</think>" is split there into
 * reasoning (before the first "</think>", after the last "<think>" before it, newlines
 * stripped) and answer (after the last "</think>", leading newlines stripped); before the last
 * user turn only the answer is kept, after it the reasoning is written back in <think> tags
 * (always for the last message); the generation prompt opens the assistant's turn, with an
 * empty <think></think> when thinking is off (enable_thinking false). */
static void s_qwen3(s_buf *b, const chat_msg *m, size_t n, int gen, int no_think)
{
    size_t last_query = n ? n - 1 : 0;
    for (size_t i = n; i-- > 0;)
        if (strcmp(m[i].role, "user") == 0) {
            last_query = i;
            break;
        }
    for (size_t i = 0; i < n; i++) {
        const char *c = m[i].content;
        size_t len = strlen(c);
        if (strcmp(m[i].role, "assistant") != 0) {
            s_puts(b, "<|im_start|>");
            s_puts(b, m[i].role);
            s_puts(b, "\n");
            s_puts(b, c);
            s_puts(b, "<|im_end|>\n");
            continue;
        }
        size_t ca = 0, cz = len, ra = 0, rz = 0; /* answer [ca, cz), reasoning [ra, rz) */
        const char *end1 = strstr(c, "</think>");
        if (end1) {
            ca = (size_t)(s_last(c, len, "</think>") - c) + 8;
            s_strip_nl(c, &ca, &cz, 1, 0);
            rz = (size_t)(end1 - c);
            s_strip_nl(c, &ra, &rz, 0, 1);
            const char *open = s_last(c, rz, "<think>");
            ra = open ? (size_t)(open - c) + 7 : 0;
            s_strip_nl(c, &ra, &rz, 1, 0);
        }
        s_puts(b, "<|im_start|>assistant\n");
        if (i > last_query && (i == n - 1 || rz > ra)) {
            s_strip_nl(c, &ra, &rz, 1, 1);
            s_strip_nl(c, &ca, &cz, 1, 0);
            s_puts(b, "<think>\n");
            s_put(b, c + ra, rz - ra);
            s_puts(b, "\n</think>\n\n");
        }
        s_put(b, c + ca, cz - ca);
        s_puts(b, "<|im_end|>\n");
    }
    if (gen) {
        s_puts(b, "<|im_start|>assistant\n");
        if (no_think)
            s_puts(b, "<think>\n\n</think>\n\n");
    }
}

/* The Phi families, as their own templates write them. eos is the text the template writes
 * after the last turn when no generation prompt is asked (eos_token: <|endoftext|>). */
static void s_phi(s_buf *b, s_family f, const chat_msg *m, size_t n, int gen)
{
    for (size_t i = 0; i < n; i++) {
        const char *r = m[i].role, *c = m[i].content;
        switch (f) {
        case S_PHI3: /* a system message only when it has text */
            if (strcmp(r, "system") == 0 && !c[0])
                break;
            s_puts(b, "<|");
            s_puts(b, r);
            s_puts(b, "|>\n");
            s_puts(b, c);
            s_puts(b, "<|end|>\n");
            break;
        case S_PHI3_4K: /* no system role; each user turn opens the assistant's */
            if (strcmp(r, "user") == 0) {
                s_puts(b, "<|user|>\n");
                s_puts(b, c);
                s_puts(b, "<|end|>\n<|assistant|>\n");
            } else if (strcmp(r, "assistant") == 0) {
                s_puts(b, c);
                s_puts(b, "<|end|>\n");
            }
            break;
        case S_PHI4:
            s_puts(b, "<|im_start|>");
            s_puts(b, r);
            s_puts(b, "<|im_sep|>");
            s_puts(b, c);
            s_puts(b, "<|im_end|>");
            break;
        default: /* S_PHI4_MINI */
            s_puts(b, "<|");
            s_puts(b, r);
            s_puts(b, "|>");
            s_puts(b, c);
            s_puts(b, "<|end|>");
            break;
        }
    }
    if (f == S_PHI3_4K)
        return;
    if (gen)
        s_puts(b, f == S_PHI3 ? "<|assistant|>\n" : f == S_PHI4 ? "<|im_start|>assistant<|im_sep|>"
                                                                 : "<|assistant|>");
    else if (f != S_PHI4)
        s_puts(b, "<|endoftext|>");
}

/* gpt-oss's own template (its chat_template.jinja; llama.cpp's models/templates/
 * openai-gpt-oss-120b.jinja) with no tools and the defaults of its kwargs: the system message
 * it writes (model identity, knowledge cutoff, today's date as strftime_now("%Y-%m-%d") in
 * local time, reasoning medium, the channels), then a first system message as the developer's
 * "# Instructions", user turns, assistant turns on the final channel (<|end|>; the last one
 * <|return|> when no generation prompt follows), later system messages dropped as the
 * template drops them; an assistant text carrying channel tags is refused as the template
 * raises. */
static int s_gptoss(s_buf *b, const chat_msg *m, size_t n, int gen, char *err, size_t errlen)
{
    char date[32] = "";
    time_t now = time(NULL);
    struct tm tm;
    if (!localtime_r(&now, &tm) || !strftime(date, sizeof date, "%Y-%m-%d", &tm)) {
        s_fail(err, errlen, "chat: gpt-oss: cannot format today's date");
        return -1;
    }
    s_puts(b, "<|start|>system<|message|>You are ChatGPT, a large language model trained by "
              "OpenAI.\nKnowledge cutoff: 2024-06\nCurrent date: ");
    s_puts(b, date);
    s_puts(b, "\n\nReasoning: medium\n\n# Valid channels: analysis, commentary, final. Channel "
              "must be included for every message.<|end|>");
    size_t i = 0;
    if (n > 0 && strcmp(m[0].role, "system") == 0) {
        if (m[0].content[0]) {
            s_puts(b, "<|start|>developer<|message|># Instructions\n\n");
            s_puts(b, m[0].content);
            s_puts(b, "\n\n<|end|>");
        }
        i = 1;
    }
    for (; i < n; i++) {
        if (strcmp(m[i].role, "user") == 0) {
            s_puts(b, "<|start|>user<|message|>");
            s_puts(b, m[i].content);
            s_puts(b, "<|end|>");
        } else if (strcmp(m[i].role, "assistant") == 0) {
            if (strstr(m[i].content, "<|channel|>analysis<|message|>") ||
                strstr(m[i].content, "<|channel|>final<|message|>")) {
                s_fail(err, errlen, "chat message %zu: gpt-oss: an assistant text with "
                       "<|channel|> tags (the template refuses it)", i);
                return -1;
            }
            s_puts(b, "<|start|>assistant<|channel|>final<|message|>");
            s_puts(b, m[i].content);
            s_puts(b, i + 1 == n && !gen ? "<|return|>" : "<|end|>");
        }
    }
    if (gen)
        s_puts(b, "<|start|>assistant");
    return 0;
}

/* The families whose turn is "open role, content, close" (ChatML, Llama 3, Zephyr). */
static void s_turns(s_buf *b, s_family f, const chat_msg *m, size_t n, int gen)
{
    for (size_t i = 0; i < n; i++) {
        switch (f) {
        case S_CHATML: /* LLM_CHAT_TEMPLATE_CHATML */
            s_puts(b, "<|im_start|>");
            s_puts(b, m[i].role);
            s_puts(b, "\n");
            s_puts(b, m[i].content);
            s_puts(b, "<|im_end|>\n");
            break;
        case S_LLAMA3: /* LLM_CHAT_TEMPLATE_LLAMA_3: content trimmed */
            s_puts(b, "<|start_header_id|>");
            s_puts(b, m[i].role);
            s_puts(b, "<|end_header_id|>\n\n");
            s_put_trim(b, m[i].content);
            s_puts(b, "<|eot_id|>");
            break;
        default: /* LLM_CHAT_TEMPLATE_ZEPHYR, and TinyLlama's with its eos_token </s> */
            s_puts(b, "<|");
            s_puts(b, m[i].role);
            s_puts(b, "|>\n");
            s_puts(b, m[i].content);
            s_puts(b, f == S_ZEPHYR ? "<|endoftext|>\n" : "</s>\n");
            break;
        }
    }
    if (!gen)
        return;
    s_puts(b, f == S_CHATML   ? "<|im_start|>assistant\n"
              : f == S_LLAMA3 ? "<|start_header_id|>assistant<|end_header_id|>\n\n"
                              : "<|assistant|>\n");
}

int chat_render(const char *name, const chat_msg *msgs, size_t n, int add_generation_prompt,
                int add_bos_in_text, char *out, size_t outlen, size_t *len, char *err,
                size_t errlen)
{
    char names[512];
    if (len)
        *len = 0;
    int t = s_find(name);
    if (t < 0) {
        s_fail(err, errlen, "unknown chat template '%s' (known: %s)", name ? name : "(null)",
               s_name_list(names, sizeof names));
        return -1;
    }
    if (n > 0 && !msgs) {
        s_fail(err, errlen, "chat: %zu messages but no array", n);
        return -1;
    }
    for (size_t i = 0; i < n; i++) {
        const char *r = msgs[i].role;
        if (!r || (strcmp(r, "system") && strcmp(r, "user") && strcmp(r, "assistant"))) {
            s_fail(err, errlen, "chat message %zu: role '%s' is not system, user or assistant", i,
                   r ? r : "(null)");
            return -1;
        }
        if (!msgs[i].content) {
            s_fail(err, errlen, "chat message %zu (%s): no content", i, r);
            return -1;
        }
    }
    if (!out && outlen > 0) {
        s_fail(err, errlen, "chat: output buffer NULL with %zu bytes", outlen);
        return -1;
    }
    s_buf b = {out, outlen, 0};
    s_family f = s_tmpl[t].fam;
    if (add_bos_in_text)
        s_puts(&b, s_tmpl[t].bos);
    switch (f) {
    case S_LLAMA2:
    case S_LLAMA2_SYS:
    case S_LLAMA2_SYS_BOS:
    case S_LLAMA2_SYS_STRIP:
        s_llama2(&b, f, msgs, n);
        break;
    case S_MISTRAL_V1:
    case S_MISTRAL_V3:
    case S_MISTRAL_V3_TEKKEN:
        s_mistral(&b, f, msgs, n);
        break;
    case S_MISTRAL_V7:
        s_mistral_v7(&b, msgs, n);
        break;
    case S_GEMMA:
        s_gemma(&b, msgs, n, add_generation_prompt);
        break;
    case S_GEMMA3:
        if (s_gemma3(&b, msgs, n, add_generation_prompt, err, errlen))
            return -1;
        break;
    case S_QWEN3:
    case S_QWEN3_NO_THINK:
        s_qwen3(&b, msgs, n, add_generation_prompt, f == S_QWEN3_NO_THINK);
        break;
    case S_PHI3:
    case S_PHI3_4K:
    case S_PHI4:
    case S_PHI4_MINI:
        s_phi(&b, f, msgs, n, add_generation_prompt);
        break;
    case S_GPT_OSS:
        if (s_gptoss(&b, msgs, n, add_generation_prompt, err, errlen))
            return -1;
        break;
    default:
        s_turns(&b, f, msgs, n, add_generation_prompt);
        break;
    }
    if (len)
        *len = b.len;
    if (!out && outlen == 0)
        return 0; /* measuring */
    if (b.len + 1 > outlen) {
        s_fail(err, errlen, "chat: the %s prompt needs %zu bytes with its NUL, the buffer has %zu",
               name, b.len + 1, outlen);
        if (outlen > 0)
            out[outlen - 1] = '\0';
        return -1;
    }
    out[b.len] = '\0';
    return 0;
}
