/* test_chat.c — chat templates: detection from real templates, llama.cpp's exact renderings, the Jinja cross-check, bad input. tests/ */
#include "text/chat.h"
#include "tests/check.h"

#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#define S_FIX "tests/fixtures/chat"

/* llama.cpp's tests/test-chat-template.cpp conversation: three user turns, and an assistant
 * message with spaces around it that some families trim and others keep. */
static const chat_msg s_conv[] = {
    {"system", "You are a helpful assistant"},
    {"user", "Hello"},
    {"assistant", "Hi there"},
    {"user", "Who are you"},
    {"assistant", "   I am an assistant   "},
    {"user", "Another question"},
};
#define S_NCONV (sizeof s_conv / sizeof s_conv[0])

static char *s_slurp(const char *path)
{
    FILE *f = fopen(path, "rb");
    if (!f)
        return NULL;
    char *buf = NULL;
    if (fseek(f, 0, SEEK_END) == 0) {
        long n = ftell(f);
        if (n >= 0 && fseek(f, 0, SEEK_SET) == 0 && (buf = malloc((size_t)n + 1))) {
            if (fread(buf, 1, (size_t)n, f) != (size_t)n) {
                free(buf);
                buf = NULL;
            } else {
                buf[n] = '\0';
            }
        }
    }
    fclose(f);
    return buf;
}

/* Renders into a fresh buffer (caller frees), NULL with err on failure. */
static char *s_render(const char *name, const chat_msg *m, size_t n, int gen, int bos, char *err,
                      size_t errlen)
{
    size_t len = 0;
    if (chat_render(name, m, n, gen, bos, NULL, 0, &len, err, errlen))
        return NULL;
    char *out = malloc(len + 1);
    if (!out)
        return NULL;
    size_t len2 = 0;
    if (chat_render(name, m, n, gen, bos, out, len + 1, &len2, err, errlen) || len2 != len) {
        free(out);
        return NULL;
    }
    return out;
}

/* ---- detection */

static void s_detect_one(const char *what, const char *jinja, const char *want, const char *needle)
{
    char name[32] = "", err[1024] = "";
    int rc = chat_template_detect(jinja, name, sizeof name, err, sizeof err);
    if (want) {
        CHECK(rc == 0 && strcmp(name, want) == 0, "%s: detected '%s' (rc %d, %s), want %s", what,
              name, rc, err, want);
    } else {
        CHECK(rc == -1, "%s: detected '%s', want an error", what, name);
        CHECK(strstr(err, needle) != NULL, "%s: error '%s' lacks '%s'", what, err, needle);
        CHECK(strstr(err, "--chat-template") != NULL && strstr(err, "tinyllama") != NULL,
              "%s: error '%s' does not list the names", what, err);
    }
}

static void s_test_detect_fixtures(void)
{
    /* The templates as their models ship them (tokenizer.chat_template); the long ones with
     * their tool-calling branches cut, which removes none of the markers. */
    static const struct {
        const char *file, *want, *needle;
    } fx[] = {
        {"tinyllama-1.1b-chat", "tinyllama", NULL},
        {"llama-2-chat", "llama2-sys-strip", NULL},
        {"llama-3-instruct", "llama3", NULL},
        {"llama-3.2-instruct", "llama3", NULL},
        {"qwen2.5-instruct", "chatml", NULL},
        {"smollm2-instruct", "chatml", NULL},
        {"mistral-7b-instruct-v0.2", "llama2", NULL},
        {"mistral-7b-instruct-v0.3", "mistral-v3", NULL},
        {"gemma-2-it", "gemma", NULL},
        {"gemma-3-it", "gemma3", NULL},
        {"qwen3", "qwen3", NULL},
        {"zephyr-endoftext", "zephyr", NULL},
        {"phi-3-mini", "phi3-4k", NULL},
        {"phi-3.5-mini", "phi3", NULL},
        {"phi-4", "phi4", NULL},
        {"phi-4-mini", "phi4-mini", NULL},
        {"gpt-oss", "gpt-oss", NULL},
        {"vicuna-1.1", NULL, "unrecognised chat template"},
    };
    for (size_t i = 0; i < sizeof fx / sizeof fx[0]; i++) {
        char path[256];
        snprintf(path, sizeof path, S_FIX "/%s.jinja", fx[i].file);
        char *j = s_slurp(path);
        CHECK(j != NULL, "cannot read %s (run from the repository root)", path);
        if (!j)
            continue;
        s_detect_one(fx[i].file, j, fx[i].want, fx[i].needle);
        /* Markers, not layout: the same template with its newlines and indentation gone (as
         * some converters store it) is the same family. */
        char *flat = malloc(strlen(j) + 1), *o = flat;
        for (const char *p = j; flat && *p; p++)
            if (*p != '\n' && !(*p == ' ' && p[1] == ' '))
                *o++ = *p;
        if (flat) {
            *o = '\0';
            s_detect_one(fx[i].file, flat, fx[i].want, fx[i].needle);
        }
        free(flat);
        free(j);
    }
}

static void s_test_detect_inline(void)
{
    /* Variants from llama.cpp's tests/test-chat-template.cpp, and the edges. */
    s_detect_one("OpenHermes ChatML",
                 "{% for message in messages %}{{'<|im_start|>' + message['role'] + '\\n' + "
                 "message['content'] + '<|im_end|>' + '\\n'}}{% endfor %}{% if add_generation_prompt "
                 "%}{{ '<|im_start|>assistant\\n' }}{% endif %}",
                 "chatml", NULL);
    s_detect_one("FusionNet (bos inside history)",
                 "{%- for idx in range(0, messages|length) -%}{%- if messages[idx]['role'] == 'user' "
                 "-%}{%- if idx > 1 -%}{{- bos_token + '[INST] ' + messages[idx]['content'] + ' "
                 "[/INST]' -}}{%- else -%}{{- messages[idx]['content'] + ' [/INST]' -}}{%- endif -%}"
                 "{% elif messages[idx]['role'] == 'system' %}{{- '[INST] <<SYS>>\\n' + "
                 "messages[idx]['content'] + '\\n<</SYS>>\\n\\n' -}}{%- elif messages[idx]['role'] == "
                 "'assistant' -%}{{- ' '  + messages[idx]['content'] + ' ' + eos_token -}}{% endif %}"
                 "{% endfor %}",
                 "llama2-sys-bos", NULL);
    s_detect_one("Llama 2 with <<SYS>>, no strip",
                 "{% if message['role'] == 'system' %}{{ '<<SYS>>\\n' + message['content'] + "
                 "'\\n<</SYS>>\\n\\n' }}{% elif message['role'] == 'user' %}{{ '[INST] ' + "
                 "message['content'] + ' [/INST]' }}{% endif %}",
                 "llama2-sys", NULL);
    s_detect_one("Mistral v1",
                 "{{- bos_token }}{%- for message in loop_messages %}{%- if loop.first and "
                 "system_message is defined %}{{- ' [INST] ' + system_message + '\\n\\n' + "
                 "message['content'] + ' [/INST]' }}{%- else %}{{- ' [INST] ' + message['content'] + "
                 "' [/INST]' }}{%- endif %}{%- endfor %}",
                 "mistral-v1", NULL);
    s_detect_one("Mistral v3 Tekken",
                 "{%- if tools is not none %}{{- \"[AVAILABLE_TOOLS][\" }}{%- endif %}{%- if loop.last "
                 "and system_message is defined %}{{- \"[INST]\" + system_message + \"\\n\\n\" + "
                 "message[\"content\"] + \"[/INST]\" }}{%- endif %}",
                 "mistral-v3-tekken", NULL);
    s_detect_one("Mistral v7",
                 "{{ bos_token }}{% for message in messages %}{% if message['role'] == 'user' %}{{ "
                 "'[INST] ' + message['content'] + '[/INST]' }}{% elif message['role'] == 'system' %}"
                 "{{ '[SYSTEM_PROMPT] ' + message['content'] + '[/SYSTEM_PROMPT]' }}{% endif %}"
                 "{% endfor %}",
                 "mistral-v7", NULL);
    s_detect_one("Phi-4", "{{'<|im_start|>system<|im_sep|>' + message['content'] + '<|im_end|>'}}",
                 "phi4", NULL);
    s_detect_one("ChatGLM4", "[gMASK]<sop>{% for item in messages %}<|{{ item['role'] }}|><|user|>"
                 "<|assistant|>{% endfor %}", NULL, "ChatGLM");
    s_detect_one("GLM-Edge style", "{% for item in messages %}{% if item['role'] == 'user' %}<|user|>"
                 "\n{{ item['content'] }}{% endif %}{% endfor %}<|assistant|>", NULL, "Falcon 3");
    s_detect_one("Zephyr, role spliced into the tag (StableLM 2 Zephyr style)",
                 "{% for message in messages %}{{'<|' + message['role'] + '|>' + '\n' + "
                 "message['content'] + '<|endoftext|>' + '\n'}}{% endfor %}{% if "
                 "add_generation_prompt %}{{ '<|assistant|>' + '\n' }}{% endif %}",
                 "zephyr", NULL);
    /* Falcon 3 (llama architecture) has eos_token too, after assistant turns only: its user
     * turn ends with a newline, so it is not TinyLlama's template. */
    s_detect_one("Falcon 3",
                 "{%- for message in messages %}{%- if message['role'] == 'system' %}{{- "
                 "'<|system|>\n' + message['content'] + '\n' }}{%- elif message['role'] == 'user' %}"
                 "{{- '<|user|>\n' + message['content'] + '\n' }}{%- elif message['role'] == "
                 "'assistant' %}{%- if not loop.last %}{{- '<|assistant|>\n' + message['content'] + "
                 "eos_token + '\n' }}{%- else %}{{- '<|assistant|>\n' + message['content'] + "
                 "eos_token }}{%- endif %}{%- endif %}{%- if loop.last and add_generation_prompt %}"
                 "{{- '<|assistant|>\n' }}{%- endif %}{%- endfor %}",
                 NULL, "Falcon 3");
    s_detect_one("empty", "", NULL, "no tokenizer.chat_template");
    s_detect_one("NULL", NULL, NULL, "no tokenizer.chat_template");
    s_detect_one("prose", "You are a helpful assistant. Answer briefly.", NULL,
                 "unrecognised chat template \"You are a helpful");
    /* The name buffer: "tinyllama" needs 10 bytes. */
    char small[9], err[512] = "";
    CHECK(chat_template_detect("{{ '<|user|>\n' + message['content'] + eos_token }}", small,
                               sizeof small, err, sizeof err) == -1
              && strstr(err, "does not fit"), "9-byte name buffer: '%s'", err);
}

/* ---- rendering: exactly llama.cpp's text */

static void s_test_render_exact(void)
{
    /* S: with the system message and the generation prompt; N: neither. The S strings marked
     * [t] are llama.cpp's own expected outputs in tests/test-chat-template.cpp; the rest are
     * written out from src/llama-chat.cpp's code for that family. gen is the generation
     * prompt (NULL: the family ignores it, its [/INST] already opens the answer). */
    static const struct {
        const char *name, *s, *n, *gen;
    } ex[] = {
        {"chatml", /* [t] */
         "<|im_start|>system\nYou are a helpful assistant<|im_end|>\n<|im_start|>user\nHello<|im_end|>\n"
         "<|im_start|>assistant\nHi there<|im_end|>\n<|im_start|>user\nWho are you<|im_end|>\n"
         "<|im_start|>assistant\n   I am an assistant   <|im_end|>\n<|im_start|>user\nAnother "
         "question<|im_end|>\n<|im_start|>assistant\n",
         "<|im_start|>user\nHello<|im_end|>\n<|im_start|>assistant\nHi there<|im_end|>\n"
         "<|im_start|>user\nWho are you<|im_end|>\n<|im_start|>assistant\n   I am an assistant   "
         "<|im_end|>\n<|im_start|>user\nAnother question<|im_end|>\n",
         "<|im_start|>assistant\n"},
        {"llama2", /* [t] Mistral-7B-Instruct-v0.2 */
         "[INST] You are a helpful assistant\nHello [/INST]Hi there</s>[INST] Who are you [/INST]   I "
         "am an assistant   </s>[INST] Another question [/INST]",
         "[INST] Hello [/INST]Hi there</s>[INST] Who are you [/INST]   I am an assistant   </s>[INST] "
         "Another question [/INST]",
         NULL},
        {"llama2-sys",
         "[INST] <<SYS>>\nYou are a helpful assistant\n<</SYS>>\n\nHello [/INST]Hi there</s>[INST] Who "
         "are you [/INST]   I am an assistant   </s>[INST] Another question [/INST]",
         "[INST] Hello [/INST]Hi there</s>[INST] Who are you [/INST]   I am an assistant   </s>[INST] "
         "Another question [/INST]",
         NULL},
        {"llama2-sys-bos", /* [t] FusionNet */
         "[INST] <<SYS>>\nYou are a helpful assistant\n<</SYS>>\n\nHello [/INST]Hi there</s><s>[INST] "
         "Who are you [/INST]   I am an assistant   </s><s>[INST] Another question [/INST]",
         "[INST] Hello [/INST]Hi there</s><s>[INST] Who are you [/INST]   I am an assistant   "
         "</s><s>[INST] Another question [/INST]",
         NULL},
        {"llama2-sys-strip", /* [t] vigogne-2-70b-chat */
         "[INST] <<SYS>>\nYou are a helpful assistant\n<</SYS>>\n\nHello [/INST]Hi there</s>[INST] Who "
         "are you [/INST]I am an assistant</s>[INST] Another question [/INST]",
         "[INST] Hello [/INST]Hi there</s>[INST] Who are you [/INST]I am an assistant</s>[INST] Another "
         "question [/INST]",
         NULL},
        {"mistral-v1", /* [t] */
         " [INST] You are a helpful assistant\n\nHello [/INST] Hi there</s> [INST] Who are you [/INST]  "
         "  I am an assistant   </s> [INST] Another question [/INST]",
         " [INST] Hello [/INST] Hi there</s> [INST] Who are you [/INST]    I am an assistant   </s> "
         "[INST] Another question [/INST]",
         NULL},
        {"mistral-v3", /* [t] Mistral-Large-Instruct-2407 */
         "[INST] You are a helpful assistant\n\nHello[/INST] Hi there</s>[INST] Who are you[/INST] I am "
         "an assistant</s>[INST] Another question[/INST]",
         "[INST] Hello[/INST] Hi there</s>[INST] Who are you[/INST] I am an assistant</s>[INST] Another "
         "question[/INST]",
         NULL},
        {"mistral-v3-tekken", /* [t] Mistral-Nemo-Instruct-2407 */
         "[INST]You are a helpful assistant\n\nHello[/INST]Hi there</s>[INST]Who are you[/INST]   I am "
         "an assistant   </s>[INST]Another question[/INST]",
         "[INST]Hello[/INST]Hi there</s>[INST]Who are you[/INST]   I am an assistant   </s>[INST]Another "
         "question[/INST]",
         NULL},
        {"mistral-v7", /* [t] Mistral-Large-Instruct-2411 */
         "[SYSTEM_PROMPT] You are a helpful assistant[/SYSTEM_PROMPT][INST] Hello[/INST] Hi there</s>"
         "[INST] Who are you[/INST]    I am an assistant   </s>[INST] Another question[/INST]",
         "[INST] Hello[/INST] Hi there</s>[INST] Who are you[/INST]    I am an assistant   </s>[INST] "
         "Another question[/INST]",
         NULL},
        {"llama3", /* [t] */
         "<|start_header_id|>system<|end_header_id|>\n\nYou are a helpful assistant<|eot_id|>"
         "<|start_header_id|>user<|end_header_id|>\n\nHello<|eot_id|><|start_header_id|>assistant"
         "<|end_header_id|>\n\nHi there<|eot_id|><|start_header_id|>user<|end_header_id|>\n\nWho are "
         "you<|eot_id|><|start_header_id|>assistant<|end_header_id|>\n\nI am an assistant<|eot_id|>"
         "<|start_header_id|>user<|end_header_id|>\n\nAnother question<|eot_id|><|start_header_id|>"
         "assistant<|end_header_id|>\n\n",
         "<|start_header_id|>user<|end_header_id|>\n\nHello<|eot_id|><|start_header_id|>assistant"
         "<|end_header_id|>\n\nHi there<|eot_id|><|start_header_id|>user<|end_header_id|>\n\nWho are "
         "you<|eot_id|><|start_header_id|>assistant<|end_header_id|>\n\nI am an assistant<|eot_id|>"
         "<|start_header_id|>user<|end_header_id|>\n\nAnother question<|eot_id|>",
         "<|start_header_id|>assistant<|end_header_id|>\n\n"},
        {"zephyr",
         "<|system|>\nYou are a helpful assistant<|endoftext|>\n<|user|>\nHello<|endoftext|>\n"
         "<|assistant|>\nHi there<|endoftext|>\n<|user|>\nWho are you<|endoftext|>\n<|assistant|>\n   "
         "I am an assistant   <|endoftext|>\n<|user|>\nAnother question<|endoftext|>\n<|assistant|>\n",
         "<|user|>\nHello<|endoftext|>\n<|assistant|>\nHi there<|endoftext|>\n<|user|>\nWho are "
         "you<|endoftext|>\n<|assistant|>\n   I am an assistant   <|endoftext|>\n<|user|>\nAnother "
         "question<|endoftext|>\n",
         "<|assistant|>\n"},
        {"tinyllama", /* not llama.cpp's: TinyLlama's own template, see the Jinja cross-check */
         "<|system|>\nYou are a helpful assistant</s>\n<|user|>\nHello</s>\n<|assistant|>\nHi "
         "there</s>\n<|user|>\nWho are you</s>\n<|assistant|>\n   I am an assistant   </s>\n<|user|>\n"
         "Another question</s>\n<|assistant|>\n",
         "<|user|>\nHello</s>\n<|assistant|>\nHi there</s>\n<|user|>\nWho are you</s>\n<|assistant|>\n"
         "   I am an assistant   </s>\n<|user|>\nAnother question</s>\n",
         "<|assistant|>\n"},
        {"gemma", /* [t] gemma-7b-it */
         "<start_of_turn>user\nYou are a helpful assistant\n\nHello<end_of_turn>\n<start_of_turn>model\n"
         "Hi there<end_of_turn>\n<start_of_turn>user\nWho are you<end_of_turn>\n<start_of_turn>model\n"
         "I am an assistant<end_of_turn>\n<start_of_turn>user\nAnother question<end_of_turn>\n"
         "<start_of_turn>model\n",
         "<start_of_turn>user\nHello<end_of_turn>\n<start_of_turn>model\nHi there<end_of_turn>\n"
         "<start_of_turn>user\nWho are you<end_of_turn>\n<start_of_turn>model\nI am an "
         "assistant<end_of_turn>\n<start_of_turn>user\nAnother question<end_of_turn>\n",
         "<start_of_turn>model\n"},
    };
    /* the families rendered as their own Jinja templates are checked against those renders
     * (s_test_jinja_cross_check), every case */
    static const char *const own[] = {"gemma3", "qwen3", "qwen3-no-think", "phi3", "phi3-4k",
                                      "phi4", "phi4-mini", "gpt-oss"};
    size_t n_names = 0;
    for (const char *const *p = chat_template_names(); *p; p++) {
        int tested = 0;
        for (size_t k = 0; k < sizeof own / sizeof own[0]; k++)
            tested |= strcmp(*p, own[k]) == 0;
        if (tested)
            continue;
        n_names++;
        for (size_t k = 0; k < sizeof ex / sizeof ex[0]; k++)
            tested |= strcmp(*p, ex[k].name) == 0;
        CHECK(tested && chat_template_describe(*p) != NULL, "listed name '%s' untested or unknown",
              *p);
    }
    CHECK(n_names == sizeof ex / sizeof ex[0], "%zu names, %zu tested", n_names,
          sizeof ex / sizeof ex[0]);
    for (size_t k = 0; k < sizeof ex / sizeof ex[0]; k++) {
        const char *name = ex[k].name;
        CHECK(chat_template_describe(name) != NULL, "%s has no description", name);
        char err[512] = "";
        /* 4 cases: with/without system x with/without generation prompt */
        for (int sys = 1; sys >= 0; sys--) {
            for (int gen = 1; gen >= 0; gen--) {
                const chat_msg *m = sys ? s_conv : s_conv + 1;
                size_t n = sys ? S_NCONV : S_NCONV - 1;
                char want[2048];
                const char *base = sys ? ex[k].s : ex[k].n;
                size_t bl = strlen(base), gl = ex[k].gen ? strlen(ex[k].gen) : 0;
                /* S carries the generation prompt, N does not: add or remove it. */
                if (sys && !gen && ex[k].gen)
                    snprintf(want, sizeof want, "%.*s", (int)(bl - gl), base);
                else if (!sys && gen && ex[k].gen)
                    snprintf(want, sizeof want, "%s%s", base, ex[k].gen);
                else
                    snprintf(want, sizeof want, "%s", base);
                if (sys && ex[k].gen)
                    CHECK(bl >= gl && strcmp(base + bl - gl, ex[k].gen) == 0,
                          "%s: S does not end with the generation prompt", name);
                char *got = s_render(name, m, n, gen, 0, err, sizeof err);
                CHECK(got && strcmp(got, want) == 0,
                      "%s system=%d gen=%d:\n  got  '%s'\n  want '%s'\n  (%s)", name, sys, gen,
                      got ? got : "(null)", want, err);
                free(got);
            }
        }
    }
}

/* add_bos_in_text: the BOS piece the family's own template writes, once, at the start. */
static void s_test_bos(void)
{
    static const struct {
        const char *name, *bos;
    } b[] = {{"llama3", "<|begin_of_text|>"}, {"llama2-sys", "<s>"}, {"mistral-v3", "<s>"},
             {"gemma", "<bos>"}, {"chatml", ""}, {"tinyllama", ""}, {"zephyr", ""}};
    for (size_t i = 0; i < sizeof b / sizeof b[0]; i++) {
        char err[256] = "";
        char *plain = s_render(b[i].name, s_conv, S_NCONV, 1, 0, err, sizeof err);
        char *with = s_render(b[i].name, s_conv, S_NCONV, 1, 1, err, sizeof err);
        size_t bl = strlen(b[i].bos);
        CHECK(plain && with && strncmp(with, b[i].bos, bl) == 0 && strcmp(with + bl, plain) == 0,
              "%s: with BOS '%s' vs '%s'", b[i].name, with ? with : "(null)",
              plain ? plain : "(null)");
        free(plain);
        free(with);
    }
}

/* The first bytes of s on one line, newlines as \n, for messages. */
static const char *s_escape(const char *s, char *buf, size_t len)
{
    size_t o = 0;
    for (; *s && o + 3 < len && o < 40; s++) {
        if (*s == '\n') {
            buf[o++] = '\\';
            buf[o++] = 'n';
        } else {
            buf[o++] = *s;
        }
    }
    buf[o] = '\0';
    return buf;
}

/* ---- the model's own template (a real Jinja engine) where llama.cpp's text agrees with it */

static void s_test_jinja_cross_check(void)
{
    json_error_t jerr;
    json_t *all = json_load_file(S_FIX "/jinja_renders.json", 0, &jerr);
    CHECK(all && json_is_array(all), "%s/jinja_renders.json: %s line %d", S_FIX, jerr.text,
          jerr.line);
    if (!all)
        return;
    /* (fixture, with system?) pairs where llama.cpp's text is the template's own, and the
     * family writes BOS in its template (add_bos_in_text on). */
    static const struct {
        const char *fixture;
        int sys; /* -1 = both */
        int bos;
    } agree[] = {
        {"tinyllama-1.1b-chat", -1, 0},
        {"zephyr-endoftext", -1, 0},
        {"llama-3-instruct", -1, 1},
        {"qwen2.5-instruct", 1, 0},          /* without a system message Qwen adds its own */
        {"smollm2-instruct", 1, 0},          /* same for SmolLM2 */
        {"mistral-7b-instruct-v0.2", 0, 1},  /* the template refuses a system message */
        {"mistral-7b-instruct-v0.3", 0, 1},  /* with one, it goes into the last turn */
        {"gemma-2-it", 0, 1},                /* same */
        /* the families rendered as their own templates: every case */
        {"gemma-3-it", -1, 1},
        {"qwen3", -1, 0},
        {"phi-3-mini", -1, 1},
        {"phi-3.5-mini", -1, 0},
        {"phi-4", -1, 0},
        {"phi-4-mini", -1, 0},
    };
    /* Qwen3's reasoning conversations (render_jinja.py THINK, THINK_LAST) */
    static const chat_msg think[] = {
        {"user", "What is 2+2?"},
        {"assistant", "<think>\nAdd them.\n\n</think>\n\n4"},
        {"user", "And 3+3?"},
        {"assistant", "<think>Again.</think>6"},
    };
    size_t i, n_agree = 0, n_differ = 0;
    json_t *r;
    json_array_foreach(all, i, r) {
        const char *fx = json_string_value(json_object_get(r, "fixture"));
        const char *text = json_string_value(json_object_get(r, "text"));
        const char *conv = json_string_value(json_object_get(r, "conv"));
        int sys = json_is_true(json_object_get(r, "system"));
        int gen = json_is_true(json_object_get(r, "gen"));
        char name[32], err[1024] = "";
        if (fx && strcmp(fx, "gpt-oss") == 0) { /* its date: today's in place of the fixed one */
            int last = conv && strcmp(conv, "assistant-last") == 0;
            chat_msg m[S_NCONV + 1];
            size_t n = 0;
            for (size_t k = sys ? 0 : 1; k < S_NCONV; k++)
                m[n++] = s_conv[k];
            if (last)
                m[n++] = (chat_msg){"assistant", "Fine."};
            char *got = s_render("gpt-oss", m, n, gen, 0, err, sizeof err);
            char today[32];
            time_t now = time(NULL);
            struct tm tm;
            strftime(today, sizeof today, "%Y-%m-%d", localtime_r(&now, &tm));
            char *at = got ? strstr(got, today) : NULL;
            if (at)
                memcpy(at, "2026-01-01", 10);
            CHECK(got && at && text && strcmp(got, text) == 0, "gpt-oss %s system=%d gen=%d "
                  "differs from its Jinja:\n  swarm '%s'\n  jinja '%s'", conv ? conv : "", sys,
                  gen, got ? got : err, text ? text : "(none)");
            n_agree++;
            free(got);
            continue;
        }
        if (conv) {
            int last = strcmp(conv, "think-last") == 0, nothink = strcmp(conv, "no-think") == 0;
            char *got = nothink ? s_render("qwen3-no-think", s_conv + 1, S_NCONV - 1, gen, 0, err,
                                           sizeof err)
                                : s_render("qwen3", think, last ? 4 : 3, gen, 0, err, sizeof err);
            CHECK(got && text && strcmp(got, text) == 0, "qwen3 conv %s gen=%d differs from its "
                  "Jinja:\n  swarm '%s'\n  jinja '%s'", conv, gen, got ? got : err,
                  text ? text : "(none)");
            n_agree++;
            free(got);
            continue;
        }
        char path[256];
        snprintf(path, sizeof path, S_FIX "/%s.jinja", fx ? fx : "?");
        char *j = s_slurp(path);
        int known = j && chat_template_detect(j, name, sizeof name, err, sizeof err) == 0;
        free(j);
        if (!fx || !text || !known)
            continue; /* the template raised, or swarm does not render this family */
        int must = -1;
        for (size_t k = 0; k < sizeof agree / sizeof agree[0]; k++)
            if (strcmp(fx, agree[k].fixture) == 0 && (agree[k].sys < 0 || agree[k].sys == sys))
                must = agree[k].bos;
        int bos = must >= 0 ? must : strcmp(name, "chatml") && strcmp(name, "tinyllama") &&
                                         strcmp(name, "zephyr");
        char *got = s_render(name, sys ? s_conv : s_conv + 1, sys ? S_NCONV : S_NCONV - 1, gen, bos,
                             err, sizeof err);
        if (!got) {
            CHECK(0, "%s: %s", fx, err);
            continue;
        }
        if (must >= 0) {
            CHECK(strcmp(got, text) == 0, "%s (%s) system=%d gen=%d differs from its Jinja:\n  "
                  "swarm '%s'\n  jinja '%s'", fx, name, sys, gen, got, text);
            n_agree++;
        } else {
            size_t at = 0;
            while (got[at] && got[at] == text[at])
                at++;
            CHECK(strcmp(got, text) != 0, "%s system=%d gen=%d now agrees with its Jinja: add it "
                  "to the agreeing list", fx, sys, gen);
            char a[64], b[64];
            printf("llama.cpp's %s text differs from %s's own template (system=%d gen=%d) from "
                   "byte %zu: \"%s\" vs \"%s\"\n", name, fx, sys, gen, at,
                   s_escape(got + at, a, sizeof a), s_escape(text + at, b, sizeof b));
            n_differ++;
        }
        free(got);
    }
    printf("jinja cross-check: %zu renders agree, %zu differ as llama.cpp's do\n", n_agree, n_differ);
    CHECK(n_agree == 58, "%zu agreeing renders, want 58", n_agree);
    json_decref(all);
}

/* ---- bad input */

static void s_test_bad_input(void)
{
    char out[4096], err[512] = "";
    size_t len = 99;
    chat_msg tool[] = {{"user", "hi"}, {"tool", "{\"temp\": 20}"}};
    CHECK(chat_render("chatml", tool, 2, 1, 0, out, sizeof out, &len, err, sizeof err) == -1 &&
              strstr(err, "message 1") && strstr(err, "'tool'"), "role tool: '%s'", err);
    chat_msg norole[] = {{NULL, "hi"}};
    CHECK(chat_render("llama3", norole, 1, 1, 0, out, sizeof out, &len, err, sizeof err) == -1 &&
              strstr(err, "role"), "NULL role: '%s'", err);
    chat_msg nocontent[] = {{"user", NULL}};
    CHECK(chat_render("llama3", nocontent, 1, 1, 0, out, sizeof out, &len, err, sizeof err) == -1 &&
              strstr(err, "no content"), "NULL content: '%s'", err);
    CHECK(chat_render("alpaca", s_conv, S_NCONV, 1, 0, out, sizeof out, &len, err, sizeof err) == -1 &&
              strstr(err, "unknown chat template 'alpaca'") && strstr(err, "chatml"),
          "unknown name: '%s'", err);
    CHECK(chat_render(NULL, s_conv, S_NCONV, 1, 0, out, sizeof out, &len, err, sizeof err) == -1,
          "NULL name accepted");

    /* Too small: -1, the size needed, and a NUL-terminated prefix; exactly enough: 0. */
    size_t need = 0;
    CHECK(chat_render("llama3", s_conv, S_NCONV, 1, 0, NULL, 0, &need, err, sizeof err) == 0 &&
              need > 0, "measuring: %s", err);
    char small[32];
    memset(small, 'x', sizeof small);
    len = 0;
    CHECK(chat_render("llama3", s_conv, S_NCONV, 1, 0, small, sizeof small, &len, err, sizeof err) ==
              -1, "32-byte buffer accepted for %zu bytes", need);
    char needs[64];
    snprintf(needs, sizeof needs, "needs %zu bytes", need + 1);
    CHECK(strstr(err, needs) != NULL, "too small: '%s' lacks '%s'", err, needs);
    CHECK(len == need, "too small: len %zu, want %zu", len, need);
    CHECK(small[sizeof small - 1] == '\0' && strncmp(small, "<|start_header_id|>system", 25) == 0,
          "too small: prefix not kept NUL-terminated");
    char *exact = malloc(need + 1);
    if (exact) {
        CHECK(chat_render("llama3", s_conv, S_NCONV, 1, 0, exact, need, &len, err, sizeof err) == -1,
              "no room for the NUL accepted");
        CHECK(chat_render("llama3", s_conv, S_NCONV, 1, 0, exact, need + 1, &len, err, sizeof err) ==
                  0 && len == need && strlen(exact) == need, "exact size refused: %s", err);
    }
    free(exact);
    /* Gemma 3's template raises when roles do not alternate; so does its renderer */
    static const chat_msg twice[] = {{"user", "a"}, {"user", "b"}};
    CHECK(chat_render("gemma3", twice, 2, 1, 0, out, sizeof out, &len, err, sizeof err) == -1 &&
              strstr(err, "must alternate"), "gemma3, two user turns: '%s'", err);
    /* No messages: just the generation prompt. */
    CHECK(chat_render("chatml", NULL, 0, 1, 0, out, sizeof out, &len, err, sizeof err) == 0 &&
              strcmp(out, "<|im_start|>assistant\n") == 0, "empty conversation: '%s'", out);
}

int main(void)
{
    s_test_detect_fixtures();
    s_test_detect_inline();
    s_test_render_exact();
    s_test_bos();
    s_test_jinja_cross_check();
    s_test_bad_input();
    return CHECK_DONE("test_chat");
}
