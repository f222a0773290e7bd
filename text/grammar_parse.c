/* grammar_parse.c — GBNF text to a compiled grammar: llama.cpp's grammar-parser (repetitions
 * rewritten into helper rules), undefined and left-recursive rules refused, each position's
 * shortest completion computed. text/ */
#include "text/grammar_int.h"

#include <ctype.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define S_MAX_REPS 2048           /* {m,n} bounds, as llama.cpp's parser */

/* ---- growable arrays for the parser ---- */

typedef struct {
    grammar_elem *e;
    size_t n, cap;
} s_vec;

static int s_push(s_vec *v, uint32_t type, uint32_t value)
{
    if (v->n == v->cap) {
        size_t cap = v->cap ? v->cap * 2 : 16;
        grammar_elem *e = realloc(v->e, cap * sizeof *e);
        if (!e)
            return -1;
        v->e = e;
        v->cap = cap;
    }
    v->e[v->n++] = (grammar_elem){ type, value, 0 };
    return 0;
}

typedef struct {
    const char *src;
    char *err;
    size_t errlen;
    int failed;
    size_t n_rules, cap;
    s_vec *rules;                 /* n_rules; .e NULL = referenced, not yet defined */
    char **names;
} s_parser;

static void s_fail(s_parser *p, const char *at, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));
static void s_fail(s_parser *p, const char *at, const char *fmt, ...)
{
    if (p->failed)
        return;
    p->failed = 1;
    int line = 1, col = 1;
    for (const char *c = p->src; at && c < at && *c; c++) {
        if (*c == '\n') {
            line++;
            col = 1;
        } else {
            col++;
        }
    }
    char msg[256];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    if (at)
        snprintf(p->err, p->errlen, "grammar: line %d, column %d: %s", line, col, msg);
    else
        snprintf(p->err, p->errlen, "grammar: %s", msg);
}

static uint32_t s_symbol(s_parser *p, const char *name, size_t len)
{
    for (size_t i = 0; i < p->n_rules; i++)
        if (strlen(p->names[i]) == len && !memcmp(p->names[i], name, len))
            return (uint32_t)i;
    if (p->n_rules == p->cap) {
        size_t cap = p->cap ? p->cap * 2 : 32;
        s_vec *r = realloc(p->rules, cap * sizeof *r);
        char **nm = r ? realloc(p->names, cap * sizeof *nm) : NULL;
        if (r)
            p->rules = r;
        if (!r || !nm) {
            s_fail(p, NULL, "out of memory");
            return 0;
        }
        p->names = nm;
        p->cap = cap;
    }
    p->rules[p->n_rules] = (s_vec){ 0 };
    p->names[p->n_rules] = strndup(name, len);
    if (!p->names[p->n_rules]) {
        s_fail(p, NULL, "out of memory");
        return 0;
    }
    return (uint32_t)p->n_rules++;
}

/* A fresh helper rule "base_N" (llama.cpp's generate_symbol_id). */
static uint32_t s_fresh(s_parser *p, const char *base)
{
    char name[160];
    snprintf(name, sizeof name, "%.120s_%zu", base, p->n_rules);
    return s_symbol(p, name, strlen(name));
}

static void s_define(s_parser *p, uint32_t id, s_vec *v)
{
    if (p->failed) {
        free(v->e);
        *v = (s_vec){ 0 };
        return;
    }
    free(p->rules[id].e);
    p->rules[id] = *v;
    *v = (s_vec){ 0 };
}

static int s_word(char c)
{
    return isalnum((unsigned char)c) || c == '-' || c == '_';
}

static const char *s_space(const char *s, int newlines)
{
    for (;;) {
        if (*s == ' ' || *s == '\t' || (newlines && (*s == '\r' || *s == '\n'))) {
            s++;
        } else if (*s == '#') {
            while (*s && *s != '\n' && *s != '\r')
                s++;
        } else {
            return s;
        }
    }
}

/* One UTF-8 code point; invalid bytes are taken as themselves (Latin-1), as llama.cpp. */
static const char *s_utf8(const char *s, uint32_t *cp)
{
    const unsigned char *u = (const unsigned char *)s;
    static const int lens[] = { 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 2, 2, 3, 4 };
    int n = lens[u[0] >> 4];
    uint32_t v = n == 1 ? u[0] : n == 2 ? u[0] & 0x1f : n == 3 ? u[0] & 0x0f : u[0] & 0x07;
    for (int i = 1; i < n; i++) {
        if ((u[i] & 0xc0) != 0x80) {
            *cp = u[0];
            return s + 1;
        }
        v = v << 6 | (u[i] & 0x3f);
    }
    *cp = v;
    return s + n;
}

static const char *s_hex(s_parser *p, const char *s, int n, uint32_t *cp)
{
    uint32_t v = 0;
    for (int i = 0; i < n; i++) {
        char c = s[i];
        int d = c >= '0' && c <= '9' ? c - '0' : c >= 'a' && c <= 'f' ? c - 'a' + 10
                : c >= 'A' && c <= 'F' ? c - 'A' + 10 : -1;
        if (d < 0) {
            s_fail(p, s + i, "expecting %d hex digits", n);
            return s + i;
        }
        v = v << 4 | (uint32_t)d;
    }
    *cp = v;
    return s + n;
}

static const char *s_char(s_parser *p, const char *s, uint32_t *cp)
{
    if (*s != '\\')
        return s_utf8(s, cp);
    switch (s[1]) {
    case 'x': return s_hex(p, s + 2, 2, cp);
    case 'u': return s_hex(p, s + 2, 4, cp);
    case 'U': return s_hex(p, s + 2, 8, cp);
    case 't': *cp = '\t'; return s + 2;
    case 'r': *cp = '\r'; return s + 2;
    case 'n': *cp = '\n'; return s + 2;
    case '\\': case '"': case '[': case ']': *cp = (uint32_t)s[1]; return s + 2;
    default:
        s_fail(p, s, "unknown escape '\\%c'", s[1] ? s[1] : ' ');
        return s + 1;
    }
}

static const char *s_alternates(s_parser *p, const char *s, const char *rname, uint32_t id,
                                int nested);

/* Repeat out[start..n) min..max times (max < 0: unbounded), llama.cpp's handle_repetitions:
 * the mandatory copies inline, the optional ones as a chain of helper rules. */
static void s_repeat(s_parser *p, const char *at, s_vec *out, size_t start, const char *rname,
                     int min, int max)
{
    if (start == out->n) {
        s_fail(p, at, "expecting an item before the repetition");
        return;
    }
    if (min > S_MAX_REPS || max > S_MAX_REPS) {
        s_fail(p, at, "repetition count above %d", S_MAX_REPS);
        return;
    }
    size_t plen = out->n - start;
    grammar_elem *prev = malloc(plen * sizeof *prev);
    if (!prev) {
        s_fail(p, at, "out of memory");
        return;
    }
    memcpy(prev, out->e + start, plen * sizeof *prev);
    if (min == 0)
        out->n = start;
    for (int i = 1; i < min; i++)
        for (size_t k = 0; k < plen; k++)
            if (s_push(out, prev[k].type, prev[k].value))
                s_fail(p, at, "out of memory");
    uint32_t last = 0;
    int n_opt = max < 0 ? 1 : max - min;
    for (int i = 0; i < n_opt && !p->failed; i++) {
        s_vec rec = { 0 };
        uint32_t rid = s_fresh(p, rname);
        for (size_t k = 0; k < plen; k++)
            s_push(&rec, prev[k].type, prev[k].value);
        if (i > 0 || max < 0)
            s_push(&rec, G_RULE, max < 0 ? rid : last);
        s_push(&rec, G_ALT, 0);
        if (s_push(&rec, G_END, 0))
            s_fail(p, at, "out of memory");
        s_define(p, rid, &rec);
        free(rec.e);
        last = rid;
    }
    if (n_opt > 0 && s_push(out, G_RULE, last))
        s_fail(p, at, "out of memory");
    free(prev);
}

static const char *s_int(s_parser *p, const char *s, int *v)
{
    if (!isdigit((unsigned char)*s)) {
        s_fail(p, s, "expecting an integer");
        return s;
    }
    long n = 0;
    while (isdigit((unsigned char)*s) && n <= S_MAX_REPS)
        n = n * 10 + (*s++ - '0');
    *v = (int)n;
    return s;
}

static const char *s_sequence(s_parser *p, const char *s, const char *rname, s_vec *out,
                              int nested)
{
    size_t last = out->n;
    while (*s && !p->failed) {
        const char *at = s;
        if (*s == '"') {
            s++;
            last = out->n;
            while (*s != '"') {
                if (!*s) {
                    s_fail(p, at, "unterminated string literal");
                    return s;
                }
                uint32_t cp;
                s = s_char(p, s, &cp);
                s_push(out, G_CHAR, cp);
            }
            s = s_space(s + 1, nested);
        } else if (*s == '[') {
            s++;
            last = out->n;
            uint32_t start_type = G_CHAR;
            if (*s == '^') {
                s++;
                start_type = G_CHAR_NOT;
            }
            while (*s != ']') {
                if (!*s) {
                    s_fail(p, at, "unterminated character class");
                    return s;
                }
                uint32_t cp;
                s = s_char(p, s, &cp);
                s_push(out, last == out->n ? start_type : G_CHAR_ALT, cp);
                if (s[0] == '-' && s[1] && s[1] != ']') {
                    s = s_char(p, s + 1, &cp);
                    s_push(out, G_RNG_UPPER, cp);
                }
            }
            if (last == out->n) {
                s_fail(p, at, "empty character class");
                return s;
            }
            s = s_space(s + 1, nested);
        } else if (s_word(*s)) {
            const char *e = s;
            while (s_word(*e))
                e++;
            last = out->n;
            s_push(out, G_RULE, s_symbol(p, s, (size_t)(e - s)));
            s = s_space(e, nested);
        } else if (*s == '(') {
            uint32_t sub = s_fresh(p, rname);
            s = s_alternates(p, s_space(s + 1, 1), rname, sub, 1);
            if (p->failed)
                return s;
            if (*s != ')') {
                s_fail(p, s, "expecting ')'");
                return s;
            }
            last = out->n;
            s_push(out, G_RULE, sub);
            s = s_space(s + 1, nested);
        } else if (*s == '.') {
            last = out->n;
            s_push(out, G_ANY, 0);
            s = s_space(s + 1, nested);
        } else if (*s == '*' || *s == '+' || *s == '?') {
            s_repeat(p, at, out, last, rname, *s == '+', *s == '?' ? 1 : -1);
            s = s_space(s + 1, nested);
        } else if (*s == '{') {
            int min = 0, max = -1;
            s = s_int(p, s_space(s + 1, nested), &min);
            s = s_space(s, nested);
            if (*s == ',') {
                s = s_space(s + 1, nested);
                if (*s != '}')
                    s = s_space(s_int(p, s, &max), nested);
            } else {
                max = min;
            }
            if (*s != '}') {
                s_fail(p, s, "expecting '}'");
                return s;
            }
            if (max >= 0 && max < min) {
                s_fail(p, at, "repetition {%d,%d}: the maximum is below the minimum", min, max);
                return s;
            }
            s_repeat(p, at, out, last, rname, min, max);
            s = s_space(s + 1, nested);
        } else {
            break;
        }
    }
    return s;
}

static const char *s_alternates(s_parser *p, const char *s, const char *rname, uint32_t id,
                                int nested)
{
    s_vec v = { 0 };
    s = s_sequence(p, s, rname, &v, nested);
    while (*s == '|' && !p->failed) {
        s_push(&v, G_ALT, 0);
        s = s_sequence(p, s_space(s + 1, 1), rname, &v, nested);
    }
    if (s_push(&v, G_END, 0))
        s_fail(p, s, "out of memory");
    s_define(p, id, &v);
    free(v.e);
    return s;
}

static const char *s_rule(s_parser *p, const char *s)
{
    const char *e = s;
    while (s_word(*e))
        e++;
    if (e == s) {
        s_fail(p, s, "expecting a rule name");
        return s;
    }
    char name[128];
    snprintf(name, sizeof name, "%.*s", (int)(e - s < 127 ? e - s : 127), s);
    uint32_t id = s_symbol(p, s, (size_t)(e - s));
    if (p->rules[id].e) {
        s_fail(p, s, "rule '%s' is defined twice", name);
        return s;
    }
    s = s_space(e, 0);
    if (strncmp(s, "::=", 3)) {
        s_fail(p, s, "expecting ::=");
        return s;
    }
    s = s_alternates(p, s_space(s + 3, 1), name, id, 0);
    if (p->failed)
        return s;
    if (*s == '\r')
        s += s[1] == '\n' ? 2 : 1;
    else if (*s == '\n')
        s++;
    else if (*s)
        s_fail(p, s, "expecting a newline or the end after rule '%s'", name);
    return s;
}

/* ---- compile-time analysis: left recursion, shortest completions ---- */

static uint32_t s_utf8_len(uint32_t cp)
{
    return cp < 0x80 ? 1 : cp < 0x800 ? 2 : cp < 0x10000 ? 3 : 4;
}

/* Bytes of the shortest code point a class at e accepts; *next past the class. */
uint32_t grammar_class_min(const grammar_elem *e, const grammar_elem **next)
{
    uint32_t best = e->type == G_CHAR_NOT || e->type == G_ANY ? 1 : 4;
    if (e->type == G_ANY) {
        *next = e + 1;
        return 1;
    }
    int neg = e->type == G_CHAR_NOT;
    do {
        if (!neg && s_utf8_len(e->value) < best)
            best = s_utf8_len(e->value);
        e++;
        if (e->type == G_RNG_UPPER)
            e++;
    } while (e->type == G_CHAR_ALT);
    *next = e;
    return best;
}

static int s_is_char(uint32_t t)
{
    return t == G_CHAR || t == G_CHAR_NOT || t == G_ANY;
}

/* Fixed point: rule_min[r] = min over alternatives of the sum of its elements' minimums. */
static void s_min_lengths(grammar *g)
{
    for (size_t r = 0; r < g->n_rules; r++)
        g->rule_min[r] = GRAMMAR_INF;
    for (int changed = 1; changed;) {
        changed = 0;
        for (size_t r = 0; r < g->n_rules; r++) {
            uint32_t best = GRAMMAR_INF, sum = 0;
            for (const grammar_elem *e = g->rules[r];;) {
                if (e->type == G_END || e->type == G_ALT) {
                    best = sum < best ? sum : best;
                    sum = 0;
                    if (e->type == G_END)
                        break;
                    e++;
                } else if (e->type == G_RULE) {
                    uint32_t m = g->rule_min[e->value];
                    sum = sum + m > GRAMMAR_INF ? GRAMMAR_INF : sum + m;
                    e++;
                } else {
                    const grammar_elem *nx;
                    sum = sum + grammar_class_min(e, &nx) > GRAMMAR_INF ? GRAMMAR_INF : sum + grammar_class_min(e, &nx);
                    e = nx;
                }
            }
            if (best < g->rule_min[r]) {
                g->rule_min[r] = best;
                changed = 1;
            }
        }
    }
    /* Each element's distance to the end of its alternative (suffix sums, right to left). */
    for (size_t r = 0; r < g->n_rules; r++) {
        size_t n = 0;
        while (g->rules[r][n].type != G_END)
            n++;
        grammar_elem *el = g->rules[r];
        el[n].dist = 0;
        /* a class's elements all carry the distance from the class's start */
        size_t i = n;
        while (i > 0) {
            size_t k = i - 1;
            if (g->rules[r][k].type == G_ALT) {
                el[k].dist = 0;
                i = k;
                continue;
            }
            uint32_t after = el[i].dist;
            if (g->rules[r][i].type == G_ALT || g->rules[r][i].type == G_END)
                after = 0;
            if (g->rules[r][k].type == G_RULE) {
                uint32_t m = g->rule_min[g->rules[r][k].value];
                el[k].dist = after + m > GRAMMAR_INF ? GRAMMAR_INF : after + m;
                i = k;
                continue;
            }
            /* walk back to the class's first element */
            size_t st = k;
            while (st > 0 && !s_is_char(g->rules[r][st].type))
                st--;
            const grammar_elem *nx;
            uint32_t m = grammar_class_min(&g->rules[r][st], &nx);
            for (size_t j = st; j <= k; j++)
                el[j].dist = after + m > GRAMMAR_INF ? GRAMMAR_INF : after + m;
            i = st;
        }
    }
}

/* Can rule r derive the empty string? (rule_min is 0 exactly then.) */
static int s_nullable(const grammar *g, uint32_t r)
{
    return g->rule_min[r] == 0;
}

/* DFS over "leftmost" references: a rule reached again while on the path is left recursive. */
static int s_left_rec(const grammar *g, uint32_t r, uint8_t *state, uint32_t *culprit)
{
    if (state[r] == 2)
        return 0;
    if (state[r] == 1) {
        *culprit = r;
        return 1;
    }
    state[r] = 1;
    int at_start = 1;
    for (const grammar_elem *e = g->rules[r]; e->type != G_END; e++) {
        if (e->type == G_ALT) {
            at_start = 1;
            continue;
        }
        if (!at_start)
            continue;
        if (e->type == G_RULE) {
            if (s_left_rec(g, e->value, state, culprit))
                return 1;
            at_start = s_nullable(g, e->value);
        } else {
            at_start = 0;
        }
    }
    state[r] = 2;
    return 0;
}

void grammar_free(grammar **gp)
{
    if (!gp || !*gp)
        return;
    grammar *g = *gp;
    for (size_t i = 0; i < g->n_rules; i++) {
        free(g->rules ? g->rules[i] : NULL);
        free(g->names ? g->names[i] : NULL);
    }
    free(g->rules);
    free(g->names);
    free(g->rule_min);
    free(g);
    *gp = NULL;
}

size_t grammar_n_rules(const grammar *g)
{
    return g->n_rules;
}

grammar *grammar_parse(const char *src, const char *root, char *err, size_t errlen)
{
    s_parser p = { .src = src, .err = err, .errlen = errlen };
    grammar *g = NULL;
    uint8_t *state = NULL;
    if (!src) {
        s_fail(&p, NULL, "no grammar text");
        return NULL;
    }
    if (!root)
        root = "root";
    for (const char *s = s_space(src, 1); *s && !p.failed; s = s_space(s, 1))
        s = s_rule(&p, s);
    if (p.failed)
        goto err;
    size_t r;
    for (r = 0; r < p.n_rules; r++)
        if (!p.rules[r].e) {
            s_fail(&p, NULL, "rule '%s' is used but never defined", p.names[r]);
            goto err;
        }
    for (r = 0; r < p.n_rules && strcmp(p.names[r], root); r++)
        ;
    if (r == p.n_rules) {
        s_fail(&p, NULL, "no rule named '%s' (the start rule)", root);
        goto err;
    }
    g = calloc(1, sizeof *g);
    if (!g)
        goto oom;
    g->root = (uint32_t)r;
    g->n_rules = p.n_rules;
    g->rules = calloc(p.n_rules, sizeof *g->rules);
    g->names = calloc(p.n_rules, sizeof *g->names);
    g->rule_min = calloc(p.n_rules, sizeof *g->rule_min);
    state = calloc(p.n_rules, 1);
    if (!g->rules || !g->names || !g->rule_min || !state)
        goto oom;
    for (r = 0; r < p.n_rules; r++) {
        g->rules[r] = p.rules[r].e;
        g->names[r] = p.names[r];
        p.rules[r].e = NULL;
        p.names[r] = NULL;
    }
    s_min_lengths(g);
    for (r = 0; r < g->n_rules; r++) {
        uint32_t culprit = 0;
        if (s_left_rec(g, (uint32_t)r, state, &culprit)) {
            s_fail(&p, NULL, "rule '%s' is left recursive (it can reach itself before "
                   "matching a character)", g->names[culprit]);
            goto err;
        }
    }
    if (g->rule_min[g->root] >= GRAMMAR_INF) {
        s_fail(&p, NULL, "rule '%s' matches no finite text", root);
        goto err;
    }
    free(state);
    free(p.rules);
    free(p.names);
    return g;
oom:
    s_fail(&p, NULL, "out of memory");
err:
    for (size_t i = 0; i < p.n_rules; i++) {
        free(p.rules[i].e);
        free(p.names[i]);
    }
    free(p.rules);
    free(p.names);
    free(state);
    grammar_free(&g);
    return NULL;
}
