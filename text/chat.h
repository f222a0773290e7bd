/* chat.h — chat templates: recognise a model's tokenizer.chat_template by its markers, render a conversation as that family's prompt text. text/
 *
 * Not a Jinja engine. Like llama.cpp's llama_chat_apply_template (src/llama-chat.cpp upstream:
 * llm_chat_detect_template, llm_chat_apply_template), a template is recognised by markers it
 * must contain (<|im_start|>, [INST], <<SYS>>, <|start_header_id|>, <start_of_turn>, <|user|>
 * ...), never by comparing the whole text, and each family is rendered by a few lines of C that
 * write exactly the text llama.cpp writes for it, byte for byte, whitespace included. The one
 * family llama.cpp has no renderer for, TinyLlama's (Zephyr tags, eos_token after each turn),
 * is rendered as its own template renders it, and so are Gemma 3's, Qwen3's (with its thinking
 * tags), Phi-3's, Phi-4's and Phi-4-mini's. A template with none of the markers is an error
 * ("unrecognised"): there is no silent fallback to ChatML.
 *
 * The text has no BOS unless asked (add_bos_in_text): like llama.cpp, the tokenizer adds BOS as
 * tokenizer.ggml.add_bos_token says. With add_bos_in_text the text starts with the BOS piece
 * the family's own template writes ("<s>", "<|begin_of_text|>", "<bos>"; none for chatml,
 * zephyr and tinyllama, whose templates write none), for a caller that tokenizes with special
 * tokens parsed and does not add BOS itself.
 */
#ifndef SWARM_CHAT_H
#define SWARM_CHAT_H

#include <stddef.h>

/* One message. role is "system", "user" or "assistant"; anything else is refused. Both strings
 * are the caller's, read only during the call. */
typedef struct {
    const char *role;
    const char *content;
} chat_msg;

/* The names chat_render accepts (the values for --chat-template NAME), NULL-terminated, in a
 * fixed order; static storage. Names are llama.cpp's where the text is llama.cpp's. */
const char *const *chat_template_names(void);

/* A one-line description of a template name (which models use it), or NULL if unknown. */
const char *chat_template_describe(const char *name);

/* Recognise tokenizer.chat_template (the Jinja text). On success writes the family's name
 * into name (len bytes, NUL-terminated) and returns 0. A NULL or empty template, or one with
 * none of the known markers (or the markers of a family we do not render, such as ChatGLM's
 * [gMASK]), returns -1 with err saying so and listing the names --chat-template accepts. */
int chat_template_detect(const char *jinja, char *name, size_t len, char *err, size_t errlen);

/* Render msgs[0..n) as template `name`, ending with the assistant's opening when
 * add_generation_prompt is set (families whose [/INST] already is that opening ignore it, as
 * llama.cpp does). Writes the text and a NUL into out (outlen bytes) and its length, without
 * the NUL, into *len (may be NULL). out NULL with outlen 0 only measures: returns 0 with *len
 * set. Returns -1 with err filled for an unknown name, a NULL or unknown role, a NULL content,
 * or an output buffer too small (err gives the size needed; *len is still set). */
int chat_render(const char *name, const chat_msg *msgs, size_t n, int add_generation_prompt,
                int add_bos_in_text, char *out, size_t outlen, size_t *len, char *err,
                size_t errlen);

#endif
