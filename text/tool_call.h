/* tool_call.h — tool calls as each chat template family writes them: the tools and the
 * call/result history rendered into the prompt, a grammar for the calls, the model's text
 * parsed back into calls. text/
 *
 * Three formats, chosen by the chat template family (text/chat.h):
 *   hermes   chatml (Qwen2.5, Hermes): tools listed in the system turn inside <tools></tools>,
 *            each call `<tool_call>\n{"name": ..., "arguments": {...}}\n</tool_call>`, results in
 *            a user turn as `<tool_response>\n...\n</tool_response>` (Qwen2.5's template);
 *   llama3   Llama 3.1/3.2: tools in the first user turn, a call is the whole reply
 *            `{"name": ..., "parameters": {...}}`, results in an `ipython` turn; one call per
 *            reply (the template refuses more);
 *   mistral  Mistral v3 / v3-Tekken: `[AVAILABLE_TOOLS] [...][/AVAILABLE_TOOLS]` before the
 *            last user turn, calls `[TOOL_CALLS] [{"name": ..., "arguments": {...}}]`, results
 *            `[TOOL_RESULTS] {"content": ..., "call_id": ...}[/TOOL_RESULTS]`, 9-character ids.
 * The texts are those of the families' own Jinja templates (tests/fixtures/chat, test_chat).
 * Mistral's [TOOL_CALLS] is a control token in its vocabulary, which detokenized text does not
 * show: a reply that opens with a JSON array of {"name", "arguments"} objects is taken as calls
 * too, and the grammar spells the marker out.
 *
 * Messages and tools are OpenAI's JSON shapes (jansson), read only.
 */
#ifndef SWARM_TOOL_CALL_H
#define SWARM_TOOL_CALL_H

#include <jansson.h>
#include <stddef.h>

typedef enum { TOOL_FMT_NONE = 0, TOOL_FMT_HERMES, TOOL_FMT_LLAMA3, TOOL_FMT_MISTRAL } tool_format;

/* The format of a chat template family (chat_template_names); NONE if it has none. */
tool_format tool_format_of(const char *template_name);
const char *tool_format_name(tool_format f);

/* Check OpenAI tools ([{type:"function", function:{name, description?, parameters?}}]): 0, or
 * -1 with err naming the entry ("tools[1].function.name: ..."). */
int tool_check(const json_t *tools, char *err, size_t errlen);

/* Render messages (OpenAI's: system/developer, user, assistant with content and/or
 * tool_calls, tool with tool_call_id) and tools (may be NULL or empty) as template's prompt,
 * ending with the assistant's opening when add_generation_prompt. malloc'd text (no BOS), or
 * NULL with err naming the message. default_system (may be NULL): tool_default_system's. */
char *tool_render(const char *template_name, const char *default_system,
                  const json_t *messages, const json_t *tools, int add_generation_prompt,
                  char *err, size_t errlen);
/* The system text a template writes with tools when the conversation has none (Qwen2.5's
 * "You are Qwen, ..."), read from the file's Jinja; NULL when it writes none. Static. */
const char *tool_default_system(const char *jinja);

/* GBNF for calls to the tools (only `name` when not NULL), one or (parallel) several, the
 * arguments valid against each function's parameters schema. malloc'd, or NULL with err
 * naming the tool and keyword. */
char *tool_grammar(tool_format f, const json_t *tools, const char *name, int parallel,
                   char *err, size_t errlen);
/* The text that opens a call (for tool_choice auto's lazy grammar). Static. */
const char *tool_trigger(tool_format f);

/* The model's reply as calls: *calls an array of {"name", "arguments" (a JSON text)} (empty
 * when none), *content the text outside them (malloc'd, may be ""). 0, or -1 out of memory. */
int tool_parse(tool_format f, const char *text, size_t len, json_t **calls, char **content);

#endif
