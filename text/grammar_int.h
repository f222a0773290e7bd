/* grammar_int.h — what the GBNF compiler (grammar_parse.c) and the matcher (grammar.c) share:
 * the compiled form of a grammar. text/ */
#ifndef SWARM_GRAMMAR_INT_H
#define SWARM_GRAMMAR_INT_H

#include <stddef.h>
#include <stdint.h>

#include "text/grammar.h"

/* Element types: a rule is a flat array of elements, alternatives separated by G_ALT and ended
 * by G_END, exactly llama.cpp's llama_gretype. A character class is G_CHAR or G_CHAR_NOT
 * followed by G_RNG_UPPER (closing a range) and G_CHAR_ALT (another char or range start). */
typedef enum { G_END, G_ALT, G_RULE, G_CHAR, G_CHAR_NOT, G_RNG_UPPER, G_CHAR_ALT, G_ANY } grammar_etype;

typedef struct {
    uint32_t type;
    uint32_t value;               /* code point, or rule id for G_RULE */
    uint32_t dist;                /* bytes of the shortest text from here to the end of this
                                     alternative (a class's elements all carry its start's) */
} grammar_elem;

#define GRAMMAR_INF 0x3fffffffu   /* an unreachable distance (no finite completion) */

struct grammar {
    size_t n_rules;
    grammar_elem **rules;         /* n_rules arrays, each ended by G_END */
    uint32_t *rule_min;           /* per rule: bytes of its shortest expansion */
    char **names;
    uint32_t root;
};

/* Bytes of the shortest code point the class at e accepts; *next past the class. */
uint32_t grammar_class_min(const grammar_elem *e, const grammar_elem **next);

#endif
