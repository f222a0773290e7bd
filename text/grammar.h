/* grammar.h — GBNF grammars: parse and compile llama.cpp's grammar format, match text against
 * it, and constrain sampling by masking the tokens whose text the grammar cannot accept. text/
 *
 * The format and the matcher are llama.cpp's (grammars/README.md and src/llama-grammar.cpp
 * upstream): rules `name ::= alternatives`, "literals", [character classes] with ranges and
 * ^negation, `.`, ( groups ), and the repetitions * + ? {m} {m,} {m,n}, rewritten into helper
 * rules at compile time. A grammar whose rule can reach itself without consuming a character
 * (left recursion) is refused when compiled: the matcher would never stop expanding it.
 *
 * Matching is on Unicode code points, as llama.cpp's: a state is a set of stacks (one per way
 * the text so far can still be parsed), each stack the grammar positions still to match.
 * Tokens are byte strings and may end inside a UTF-8 sequence (byte-fallback tokens, BPE
 * pieces of an emoji): the state carries the partial sequence, and a token that starts or
 * continues one is allowed only when some stack can still accept a code point with that
 * prefix.
 *
 * Masking a whole vocabulary walks the tokens in the byte order of their pieces (a trie
 * without the nodes: tokens sharing a prefix are neighbours in that order), so a shared
 * prefix is matched once, and a prefix the grammar refuses drops every token below it.
 * Samplers try the plain draw first and mask only when the drawn token is refused (llama.cpp's
 * common sampler does the same): most constrained tokens then cost one token check.
 *
 * A budget: given the tokens left, a token is allowed only if the grammar can still be
 * completed in them, counting one token per byte of the shortest completion (every byte is a
 * token in a byte-level BPE and in SentencePiece with byte fallback) and one for the end of
 * generation. A random-weight model inside an unbounded JSON string would otherwise never
 * close it; with the budget it closes every bracket before max_tokens runs out, so the text
 * parses. The shortest completion is computed per grammar position once, at compile time.
 *
 * Lazy grammars (tool calls with tool_choice auto): the state stays inactive until the
 * generated text contains one of the trigger strings; from then on the text from the trigger's
 * first byte must match the grammar. While inactive every token is allowed except one that
 * would fire a trigger into text the grammar refuses (the trigger and more in one piece).
 *
 * Ownership: a grammar is immutable after grammar_parse and may be shared by threads; a
 * grammar_vocab likewise; a grammar_state belongs to one generation at a time.
 */
#ifndef SWARM_GRAMMAR_H
#define SWARM_GRAMMAR_H

#include <stddef.h>
#include <stdint.h>

#include "text/tokenizer.h"

#define GRAMMAR_MAX_TRIGGERS 8
#define GRAMMAR_NO_BUDGET UINT32_MAX

typedef struct grammar grammar;
typedef struct grammar_vocab grammar_vocab;
typedef struct grammar_state grammar_state;

/* Parse and compile GBNF text. root names the start rule (NULL: "root"). NULL with err naming
 * the line and column and what was expected, an undefined or missing rule, or the rule that is
 * left recursive. The caller owns the grammar. */
grammar *grammar_parse(const char *src, const char *root, char *err, size_t errlen);
void grammar_free(grammar **g);
/* Rules after compilation (the repetitions' helper rules included). */
size_t grammar_n_rules(const grammar *g);

/* Every token's piece (tokenizer_piece, special 0) in byte order, and which are end of
 * generation: built once per tokenizer, read-only after. t must outlive it. */
grammar_vocab *grammar_vocab_new(const tokenizer *t, char *err, size_t errlen);
void grammar_vocab_free(grammar_vocab **v);

/* A matcher at the start of g (both borrowed). triggers: n_triggers strings (0 = not lazy),
 * copied. NULL with err. */
grammar_state *grammar_state_new(const grammar *g, const grammar_vocab *v,
                                 const char *const *triggers, size_t n_triggers, char *err,
                                 size_t errlen);
void grammar_state_free(grammar_state **s);
/* Back to the start (and inactive again when lazy). */
void grammar_state_reset(grammar_state *s);

/* Text-level: feed n bytes. 0 when every byte was accepted (the state advanced), -1 when the
 * grammar refuses them (the state is unchanged). While a lazy state is inactive, the bytes
 * are only searched for a trigger. */
int grammar_accept_bytes(grammar_state *s, const char *p, size_t n);
/* The text so far is a complete sentence of the grammar (no partial UTF-8 pending). */
int grammar_accepting(const grammar_state *s);
/* Constraining now (always, for a grammar that is not lazy). */
int grammar_active(const grammar_state *s);
/* Bytes of the shortest text that completes the grammar from here (0 when accepting). */
uint32_t grammar_distance(const grammar_state *s);

/* Token-level. budget: tokens that may still be generated, this one included
 * (GRAMMAR_NO_BUDGET: none). grammar_allows: would token id be accepted within the budget?
 * grammar_mask: set logits[id] = -INFINITY for every id in 0..n_logits the grammar refuses
 * (ids past the vocabulary included); returns how many are left. When the budget is too small
 * for any token, those that bring the completion closest stay allowed rather than none. */
int grammar_allows(grammar_state *s, int32_t id, uint32_t budget);
uint32_t grammar_mask(grammar_state *s, float *logits, uint32_t n_logits, uint32_t budget);
/* Advance over token id's text (end-of-generation tokens are accepted when the grammar is
 * accepting, and change nothing). -1 when refused (the state is unchanged). */
int grammar_accept_token(grammar_state *s, int32_t id);

#endif
