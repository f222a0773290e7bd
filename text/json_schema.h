/* json_schema.h — a JSON Schema as a GBNF grammar whose sentences are the JSON texts that
 * validate against it (the common subset), as llama.cpp's json-schema-to-grammar. text/
 *
 * Covered: type (one or an array of them), properties / required / additionalProperties
 * (false, true or a schema; absent = none, as llama.cpp and OpenAI's strict mode), items /
 * prefixItems / minItems / maxItems, enum, const, anyOf, oneOf (as anyOf: a JSON text matching
 * several branches is not refused), $ref to "#", "#/$defs/..." or "#/definitions/..." (recursion
 * allowed), strings with minLength / maxLength and the formats date, time, date-time and uuid
 * (other formats are annotations, as the spec makes them by default: any string), integers
 * and numbers with minimum / maximum / exclusiveMinimum / exclusiveMaximum (the grammar writes
 * a subset of the range that a digit count can express: every text it allows is in range),
 * and the annotations (title, description, default, examples, $schema, $id, $comment,
 * deprecated, readOnly, writeOnly). Any other keyword is an error naming it (pattern, allOf,
 * not, if, uniqueItems, multipleOf, ...): the grammar could not promise the text validates.
 *
 * Object properties come in the schema's order, required ones first as llama.cpp writes them;
 * whitespace between tokens is llama.cpp's ("space": none, a space, or up to two newlines and
 * 20 tabs or spaces).
 */
#ifndef SWARM_JSON_SCHEMA_H
#define SWARM_JSON_SCHEMA_H

#include <jansson.h>
#include <stddef.h>

/* The grammar's GBNF text (start rule "root"; malloc'd, the caller frees), or NULL with err
 * naming the keyword and where it is ("properties.a.items: unsupported keyword 'pattern'"). */
char *json_schema_to_gbnf(const json_t *schema, char *err, size_t errlen);

/* A grammar of several parts (tool calls: each function's arguments schema under its own name,
 * and rules around them). Rule names are [a-zA-Z0-9-]; a name taken with another body gets a
 * number appended. */
typedef struct json_gbnf json_gbnf;
json_gbnf *json_gbnf_new(void);
void json_gbnf_free(json_gbnf **b);
/* Add schema's rules under rule `name` (the schema's own $refs resolve inside it). Returns the
 * rule name given to it (owned by b), or NULL with err. */
const char *json_gbnf_add(json_gbnf *b, const json_t *schema, const char *name, char *err,
                          size_t errlen);
/* A rule of the caller's: body is GBNF (it may use the names json_gbnf_add returned and the
 * primitives "space", "string", "value"). Returns the name given, NULL on out of memory. */
const char *json_gbnf_rule(json_gbnf *b, const char *name, const char *body);
/* Every rule as GBNF text (malloc'd), NULL on out of memory. */
char *json_gbnf_text(const json_gbnf *b);

/* GBNF for any JSON object (response_format json_object). Static storage. */
const char *json_schema_object_gbnf(void);

/* A GBNF string literal for len bytes of text ("..." with escapes), appended to a malloc'd
 * buffer by the caller's rules: returns a malloc'd string, NULL on out of memory. */
char *json_schema_literal(const char *text, size_t len);

#endif
