/* grammar.c — GBNF: the parser and compiler (llama.cpp's grammar-parser), the stack matcher
 * with partial UTF-8, token masks over a byte-sorted vocabulary, the completion budget. text/ */
#include "text/grammar.h"

#include <ctype.h>
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* Element types: a rule is a flat array of elements, alternatives separated by G_ALT and ended
 * by G_END, exactly llama.cpp's llama_gretype. A character class is G_CHAR or G_CHAR_NOT
 * followed by G_RNG_UPPER (closing a range) and G_CHAR_ALT (another char or range start). */
typedef enum { G_END, G_ALT, G_RULE, G_CHAR, G_CHAR_NOT, G_RNG_UPPER, G_CHAR_ALT, G_ANY } s_type;

typedef struct {
    uint32_t type;
    uint32_t value;               /* code point, or rule id for G_RULE */
    uint32_t dist;                /* bytes of the shortest text from here to the end of this
                                     alternative (a class's elements all carry its start's) */
} s_elem;

#define S_INF 0x3fffffffu         /* an unreachable distance (no finite completion) */
#define S_MAX_REPS 2048           /* {m,n} bounds, as llama.cpp's parser */

struct grammar {
    size_t n_rules;
    s_elem **rules;               /* n_rules arrays, each ended by G_END */
    uint32_t *rule_min;           /* per rule: bytes of its shortest expansion */
    char **names;
    uint32_t root;
};

/* ---- growable arrays for the parser ---- */

typedef struct {
    s_elem *e;
    size_t n, cap;
} s_vec;

static int s_push(s_vec *v, uint32_t type, uint32_t value)
{
    if (v->n == v->cap) {
        size_t cap = v->cap ? v->cap * 2 : 16;
        s_elem *e = realloc(v->e, cap * sizeof *e);
        if (!e)
            return -1;
        v->e = e;
        v->cap = cap;
    }
    v->e[v->n++] = (s_elem){ type, value, 0 };
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
    s_elem *prev = malloc(plen * sizeof *prev);
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
static uint32_t s_class_min(const s_elem *e, const s_elem **next)
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
        g->rule_min[r] = S_INF;
    for (int changed = 1; changed;) {
        changed = 0;
        for (size_t r = 0; r < g->n_rules; r++) {
            uint32_t best = S_INF, sum = 0;
            for (const s_elem *e = g->rules[r];;) {
                if (e->type == G_END || e->type == G_ALT) {
                    best = sum < best ? sum : best;
                    sum = 0;
                    if (e->type == G_END)
                        break;
                    e++;
                } else if (e->type == G_RULE) {
                    uint32_t m = g->rule_min[e->value];
                    sum = sum + m > S_INF ? S_INF : sum + m;
                    e++;
                } else {
                    const s_elem *nx;
                    sum = sum + s_class_min(e, &nx) > S_INF ? S_INF : sum + s_class_min(e, &nx);
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
        s_elem *el = g->rules[r];
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
                el[k].dist = after + m > S_INF ? S_INF : after + m;
                i = k;
                continue;
            }
            /* walk back to the class's first element */
            size_t st = k;
            while (st > 0 && !s_is_char(g->rules[r][st].type))
                st--;
            const s_elem *nx;
            uint32_t m = s_class_min(&g->rules[r][st], &nx);
            for (size_t j = st; j <= k; j++)
                el[j].dist = after + m > S_INF ? S_INF : after + m;
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
    for (const s_elem *e = g->rules[r]; e->type != G_END; e++) {
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
    if (g->rule_min[g->root] >= S_INF) {
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

/* ---- the matcher ---- */

/* A stack is a linked list of grammar positions, top first; NULL is the empty stack (the text
 * so far is a complete sentence). Nodes come from an arena and are shared between stacks. */
typedef struct s_node {
    const s_elem *pos;
    const struct s_node *next;
} s_node;

typedef struct s_chunk {
    struct s_chunk *next;
    size_t used, cap;
    char mem[];
} s_chunk;

/* A bump allocator with marks: the mask's walk frees a subtree's stacks by going back to the
 * mark taken before it, so memory stays at one path's worth. */
typedef struct {
    s_chunk *head, *cur;
} s_arena;

typedef struct {
    s_chunk *cur;
    size_t used;
} s_mark;

static void *s_alloc(s_arena *a, size_t n)
{
    n = (n + 15) & ~(size_t)15;
    for (;;) {
        if (a->cur && a->cur->used + n <= a->cur->cap) {
            void *r = a->cur->mem + a->cur->used;
            a->cur->used += n;
            return r;
        }
        if (a->cur && a->cur->next) {
            a->cur = a->cur->next;
            a->cur->used = 0;
            continue;
        }
        size_t cap = n > (1u << 16) ? n : (1u << 16);
        s_chunk *c = malloc(sizeof *c + cap);
        if (!c)
            return NULL;
        c->next = NULL;
        c->used = 0;
        c->cap = cap;
        if (a->cur)
            a->cur->next = c;
        else
            a->head = c;
        a->cur = c;
    }
}

static s_mark s_mark_get(const s_arena *a)
{
    return (s_mark){ a->cur, a->cur ? a->cur->used : 0 };
}

static void s_mark_back(s_arena *a, s_mark m)
{
    a->cur = m.cur ? m.cur : a->head;
    if (a->cur)
        a->cur->used = m.cur ? m.used : 0;
}

static void s_arena_free(s_arena *a)
{
    for (s_chunk *c = a->head, *n; c; c = n) {
        n = c->next;
        free(c);
    }
    a->head = a->cur = NULL;
}

/* A set of stacks. id and dist serve the mask's walk: a set handed on unchanged to a child
 * keeps its id, so what is learnt about it (memo, dist) holds below. */
typedef struct {
    const s_node **s;
    uint32_t n, cap;
    uint32_t id;                  /* unique within a mask's walk (0: none) */
    uint32_t dist;                /* s_set_dist with no partial UTF-8, S_INF + 1 = not yet */
} s_set;

/* Partial UTF-8: the bits of the code point so far and the continuation bytes still due. */
typedef struct {
    uint32_t value;
    uint32_t left;
    uint32_t min;                 /* the smallest code point of this length (no overlong forms) */
} s_utf;

/* A node of the vocabulary's trie: its children are n_child consecutive nodes from first; the
 * tokens whose piece ends here are order[lo..hi). */
typedef struct {
    uint32_t first, n_child;
    int32_t lo, hi;
    uint8_t byte;
} s_tnode;

struct grammar_vocab {
    const tokenizer *t;
    int32_t n;
    int32_t *order;               /* ids by piece bytes */
    s_tnode *trie;                /* node 0 is the root (the empty prefix) */
    uint32_t n_nodes;
    const char **piece;           /* by id */
    uint32_t *len;                /* by id */
    uint8_t *eog;                 /* by id */
};

#define S_MEMO 4096              /* entries of the walk's byte-transition memo */

struct grammar_state {
    const grammar *g;
    const grammar_vocab *v;
    s_arena arena[2];             /* the committed stacks live in arena[cur] */
    int cur;
    s_arena scratch;              /* the mask's walk and a token's trial */
    s_set set;                    /* committed */
    s_utf utf;
    int oom;
    /* lazy */
    char *trig[GRAMMAR_MAX_TRIGGERS];
    size_t n_trig, max_trig;
    int active;
    char *tail;                   /* inactive: the last bytes, where a trigger may be starting */
    size_t tail_len;
    char *probe;                  /* inactive: tail + a token's piece, to look for a trigger */
    size_t probe_cap;
    s_arena start_arena;          /* the start state, kept for those probes */
    s_set start;
    /* masks */
    uint32_t *tok_dist;           /* per id: the distance after it, S_INF = refused */
    uint32_t next_id;             /* set ids of the walk */
    struct {
        uint32_t id, value, min;  /* a set and the partial UTF-8 before the byte */
        uint8_t left, byte, res;  /* res: 1 refused, 2 the set unchanged (a self-loop) */
    } memo[S_MEMO];
};

static int s_stack_eq(const s_node *a, const s_node *b)
{
    for (; a && b; a = a->next, b = b->next) {
        if (a == b)
            return 1;
        if (a->pos != b->pos)
            return 0;
    }
    return a == b;
}

static int s_set_add(s_arena *ar, s_set *set, const s_node *st)
{
    for (uint32_t i = 0; i < set->n; i++)
        if (s_stack_eq(set->s[i], st))
            return 0;
    if (set->n == set->cap) {
        uint32_t cap = set->cap ? set->cap * 2 : 8;
        const s_node **s = s_alloc(ar, cap * sizeof *s);
        if (!s)
            return -1;
        if (set->n)
            memcpy(s, set->s, set->n * sizeof *s);
        set->s = s;
        set->cap = cap;
    }
    set->s[set->n++] = st;
    return 0;
}

static const s_node *s_cons(s_arena *ar, const s_elem *pos, const s_node *next)
{
    s_node *n = s_alloc(ar, sizeof *n);
    if (n) {
        n->pos = pos;
        n->next = next;
    }
    return n;
}

static int s_is_end(const s_elem *e)
{
    return e->type == G_END || e->type == G_ALT;
}

/* Expand rule references at the top until every stack's top is a character class (or the
 * stack is empty), llama.cpp's llama_grammar_advance_stack. */
static int s_advance(const grammar *g, s_arena *ar, const s_node *st, s_set *out)
{
    if (!st || !(st->pos->type == G_RULE))
        return s_set_add(ar, out, st);
    const s_elem *top = st->pos;
    const s_node *rest = st->next;
    if (!s_is_end(top + 1) && !(rest = s_cons(ar, top + 1, rest)))
        return -1;
    const s_elem *alt = g->rules[top->value];
    for (;;) {
        if (s_is_end(alt)) {
            if (s_advance(g, ar, rest, out))
                return -1;
        } else {
            const s_node *n = s_cons(ar, alt, rest);
            if (!n || s_advance(g, ar, n, out))
                return -1;
        }
        while (!s_is_end(alt))
            alt++;
        if (alt->type == G_END)
            break;
        alt++;
    }
    return 0;
}

/* Does the class at e accept cp? *next past the class. */
static int s_match(const s_elem *e, uint32_t cp, const s_elem **next)
{
    if (e->type == G_ANY) {
        *next = e + 1;
        return 1;
    }
    int pos = e->type == G_CHAR, found = 0;
    do {
        if (e[1].type == G_RNG_UPPER) {
            found = found || (e->value <= cp && cp <= e[1].value);
            e += 2;
        } else {
            found = found || e->value == cp;
            e++;
        }
    } while (e->type == G_CHAR_ALT);
    *next = e;
    return found == pos;
}

/* Could the class at e accept some code point in [lo, hi]? (a partial UTF-8 sequence) */
static int s_match_range(const s_elem *e, uint32_t lo, uint32_t hi)
{
    if (e->type == G_ANY || e->type == G_CHAR_NOT)
        return 1; /* a negated class refuses a few points at most: assume one is left */
    do {
        uint32_t a = e->value, b = e->value;
        if (e[1].type == G_RNG_UPPER) {
            b = e[1].value;
            e += 2;
        } else {
            e++;
        }
        if (a <= hi && b >= lo)
            return 1;
    } while (e->type == G_CHAR_ALT);
    return 0;
}

static int s_accept_cp(const grammar *g, s_arena *ar, const s_set *in, uint32_t cp, s_set *out)
{
    *out = (s_set){ 0 };
    for (uint32_t i = 0; i < in->n; i++) {
        const s_node *st = in->s[i];
        if (!st)
            continue;
        const s_elem *nx;
        if (!s_match(st->pos, cp, &nx))
            continue;
        const s_node *rest = st->next;
        if (!s_is_end(nx) && !(rest = s_cons(ar, nx, rest)))
            return -1;
        if (s_advance(g, ar, rest, out))
            return -1;
    }
    return 0;
}

/* One byte: 1 accepted (out/utf updated; out may be in itself when a sequence continues), 0
 * refused, -1 out of memory. */
static int s_byte(const grammar *g, s_arena *ar, const s_set *in, s_utf *utf, uint8_t b,
                  s_set *out)
{
    uint32_t cp;
    if (utf->left == 0) {
        if (b < 0x80) {
            cp = b;
        } else {
            uint32_t left = (b & 0xe0) == 0xc0 ? 1 : (b & 0xf0) == 0xe0 ? 2 : (b & 0xf8) == 0xf0 ? 3 : 0;
            if (!left)
                return 0; /* a continuation byte with no lead, or 0xf8..0xff */
            utf->value = b & (0x3f >> left);
            utf->left = left;
            utf->min = left == 1 ? 0x80 : left == 2 ? 0x800 : 0x10000;
            goto partial;
        }
    } else {
        if ((b & 0xc0) != 0x80)
            return 0;
        utf->value = utf->value << 6 | (b & 0x3f);
        if (--utf->left)
            goto partial;
        cp = utf->value;
        if (cp < utf->min || cp > 0x10ffff || (cp >= 0xd800 && cp <= 0xdfff))
            return 0; /* overlong, beyond Unicode, or a surrogate: not UTF-8 */
    }
    if (s_accept_cp(g, ar, in, cp, out))
        return -1;
    return out->n > 0;
partial: {
        uint32_t lo = utf->value << (6 * utf->left);
        uint32_t hi = lo | ((1u << (6 * utf->left)) - 1);
        lo = lo < utf->min ? utf->min : lo;
        hi = hi > 0x10ffff ? 0x10ffff : hi;
        if (lo > hi)
            return 0;
        *out = *in;
        for (uint32_t i = 0; i < in->n; i++)
            if (in->s[i] && s_match_range(in->s[i]->pos, lo, hi))
                return 1;
        return 0;
    }
}

/* Bytes still needed by a stack: each frame's distance to the end of its alternative. */
static uint32_t s_stack_dist(const s_node *st)
{
    uint64_t d = 0;
    for (; st; st = st->next)
        d += st->pos->dist;
    return d > S_INF ? S_INF : (uint32_t)d;
}

/* The state's distance: its closest stack's; a pending partial sequence counts its top class
 * as the bytes still due. */
static uint32_t s_set_dist(const s_set *set, const s_utf *utf)
{
    uint32_t best = S_INF;
    for (uint32_t i = 0; i < set->n; i++) {
        const s_node *st = set->s[i];
        uint32_t d = s_stack_dist(st);
        if (st && utf->left) {
            const s_elem *nx;
            uint32_t m = s_class_min(st->pos, &nx);
            d = d - (m < d ? m : d) + utf->left;
        }
        best = d < best ? d : best;
    }
    return best;
}

static int s_set_accepting(const s_set *set)
{
    for (uint32_t i = 0; i < set->n; i++)
        if (!set->s[i])
            return 1;
    return 0;
}

/* ---- the vocabulary in byte order ---- */

static int s_cmp_piece(const void *a, const void *b, void *ctx)
{
    const grammar_vocab *v = ctx;
    int32_t x = *(const int32_t *)a, y = *(const int32_t *)b;
    uint32_t lx = v->len[x], ly = v->len[y];
    int c = memcmp(v->piece[x], v->piece[y], lx < ly ? lx : ly);
    if (c)
        return c;
    if (lx != ly)
        return lx < ly ? -1 : 1;
    return x < y ? -1 : x > y;
}

void grammar_vocab_free(grammar_vocab **vp)
{
    if (!vp || !*vp)
        return;
    grammar_vocab *v = *vp;
    free(v->order);
    free(v->trie);
    free(v->piece);
    free(v->len);
    free(v->eog);
    free(v);
    *vp = NULL;
}

static void s_trie(grammar_vocab *v, uint32_t k, int32_t lo, int32_t hi, uint32_t depth);

grammar_vocab *grammar_vocab_new(const tokenizer *t, char *err, size_t errlen)
{
    grammar_vocab *v = calloc(1, sizeof *v);
    int32_t n = tokenizer_n_vocab(t);
    if (!v || n < 1)
        goto oom;
    v->t = t;
    v->n = n;
    v->order = malloc((size_t)n * sizeof *v->order);
    v->piece = malloc((size_t)n * sizeof *v->piece);
    v->len = malloc((size_t)n * sizeof *v->len);
    v->eog = malloc((size_t)n);
    if (!v->order || !v->piece || !v->len || !v->eog)
        goto oom;
    for (int32_t id = 0; id < n; id++) {
        size_t l = 0;
        v->piece[id] = tokenizer_piece(t, id, 0, &l);
        v->len[id] = v->piece[id] ? (uint32_t)l : 0;
        if (!v->piece[id])
            v->piece[id] = "";
        v->eog[id] = (uint8_t)tokenizer_is_eog(t, id);
        v->order[id] = id;
    }
    qsort_r(v->order, (size_t)n, sizeof *v->order, s_cmp_piece, v); /* glibc's, with a context */
    uint64_t bytes = 1;
    for (int32_t id = 0; id < n; id++)
        bytes += v->len[id];
    if (bytes > UINT32_MAX || !(v->trie = malloc((size_t)bytes * sizeof *v->trie)))
        goto oom;
    v->n_nodes = 1;
    v->trie[0] = (s_tnode){ 0 };
    s_trie(v, 0, 0, n, 0);
    return v;
oom:
    snprintf(err, errlen, "grammar: out of memory for a vocabulary of %d tokens", n);
    grammar_vocab_free(&v);
    return NULL;
}

/* Node k covers order[lo..hi), which share their first depth bytes: the ones that end here,
 * then a child per next byte, children in one block. At most one node per piece byte. */
static void s_trie(grammar_vocab *v, uint32_t k, int32_t lo, int32_t hi, uint32_t depth)
{
    int32_t i = lo;
    while (i < hi && v->len[v->order[i]] == depth)
        i++;
    v->trie[k].lo = lo;
    v->trie[k].hi = i;
    uint32_t nc = 0;
    for (int32_t j = i; j < hi; nc++) {
        uint8_t b = (uint8_t)v->piece[v->order[j]][depth];
        while (j < hi && (uint8_t)v->piece[v->order[j]][depth] == b)
            j++;
    }
    uint32_t first = v->n_nodes;
    v->trie[k].first = first;
    v->trie[k].n_child = nc;
    v->n_nodes += nc;
    for (uint32_t c = 0; i < hi; c++) {
        uint8_t b = (uint8_t)v->piece[v->order[i]][depth];
        int32_t j = i;
        while (j < hi && (uint8_t)v->piece[v->order[j]][depth] == b)
            j++;
        v->trie[first + c] = (s_tnode){ .byte = b };
        s_trie(v, first + c, i, j, depth + 1);
        i = j;
    }
}

/* ---- states ---- */

static int s_start(grammar_state *s)
{
    s_arena *ar = &s->arena[s->cur];
    s_mark_back(ar, (s_mark){ 0 });
    s->set = (s_set){ 0 };
    s->utf = (s_utf){ 0 };
    const s_elem *alt = s->g->rules[s->g->root];
    for (;;) {
        const s_node *n = s_is_end(alt) ? NULL : s_cons(ar, alt, NULL);
        if ((!s_is_end(alt) && !n) || s_advance(s->g, ar, n, &s->set))
            return -1;
        while (!s_is_end(alt))
            alt++;
        if (alt->type == G_END)
            break;
        alt++;
    }
    return 0;
}

void grammar_state_reset(grammar_state *s)
{
    s->active = s->n_trig == 0;
    s->tail_len = 0;
    s->oom = s_start(s) != 0;
}

void grammar_state_free(grammar_state **sp)
{
    if (!sp || !*sp)
        return;
    grammar_state *s = *sp;
    s_arena_free(&s->arena[0]);
    s_arena_free(&s->arena[1]);
    s_arena_free(&s->scratch);
    for (size_t i = 0; i < s->n_trig; i++)
        free(s->trig[i]);
    free(s->tail);
    free(s->probe);
    s_arena_free(&s->start_arena);
    free(s->tok_dist);
    free(s);
    *sp = NULL;
}

grammar_state *grammar_state_new(const grammar *g, const grammar_vocab *v,
                                 const char *const *triggers, size_t n_triggers, char *err,
                                 size_t errlen)
{
    grammar_state *s = calloc(1, sizeof *s);
    if (!s)
        goto oom;
    s->g = g;
    s->v = v;
    if (n_triggers > GRAMMAR_MAX_TRIGGERS) {
        snprintf(err, errlen, "grammar: %zu triggers, at most %d", n_triggers,
                 GRAMMAR_MAX_TRIGGERS);
        grammar_state_free(&s);
        return NULL;
    }
    for (size_t i = 0; i < n_triggers; i++) {
        size_t l = triggers[i] ? strlen(triggers[i]) : 0;
        if (!l) {
            snprintf(err, errlen, "grammar: trigger %zu is empty", i);
            grammar_state_free(&s);
            return NULL;
        }
        if (!(s->trig[i] = strdup(triggers[i])))
            goto oom;
        s->n_trig++;
        s->max_trig = l > s->max_trig ? l : s->max_trig;
    }
    if (v && !(s->tok_dist = malloc((size_t)v->n * sizeof *s->tok_dist)))
        goto oom;
    grammar_state_reset(s);
    if (s->oom)
        goto oom;
    if (s->n_trig) {
        /* the start state once more, in an arena of its own: a probe of a token that would
         * fire a trigger runs from it */
        s_set keep = s->set;
        int cur = s->cur;
        s_arena a = s->arena[cur];
        s->arena[cur] = s->start_arena;
        if (s_start(s))
            goto oom;
        s->start_arena = s->arena[cur];
        s->start = s->set;
        s->arena[cur] = a;
        s->set = keep;
    }
    return s;
oom:
    snprintf(err, errlen, "grammar: out of memory");
    grammar_state_free(&s);
    return NULL;
}

/* Run n bytes from (set, utf) in the scratch arena: 1 accepted (*out, *utf updated), 0
 * refused, -1 out of memory. */
static int s_run(grammar_state *s, const s_set *set, s_utf *utf, const uint8_t *p, size_t n,
                 s_set *out)
{
    s_set cur = *set, nx;
    for (size_t i = 0; i < n; i++) {
        int rc = s_byte(s->g, &s->scratch, &cur, utf, p[i], &nx);
        if (rc <= 0)
            return rc;
        cur = nx;
    }
    *out = cur;
    return 1;
}

/* Copy the accepted stacks out of the scratch arena into the other committed arena. */
static int s_commit(grammar_state *s, const s_set *set, const s_utf *utf)
{
    int nxt = !s->cur;
    s_arena *ar = &s->arena[nxt];
    s_mark_back(ar, (s_mark){ 0 });
    s_set copy = { 0 };
    for (uint32_t i = 0; i < set->n; i++) {
        /* frames top first; rebuilt bottom first (nesting is as deep as the text makes it:
         * a JSON array inside an array ... adds frames per level) */
        const s_node *local[256], **frames = local, *st, *built = NULL;
        uint32_t depth = 0;
        for (st = set->s[i]; st; st = st->next)
            depth++;
        if (depth > 256 && !(frames = malloc(depth * sizeof *frames)))
            return -1;
        depth = 0;
        for (st = set->s[i]; st; st = st->next)
            frames[depth++] = st;
        while (depth && (built = s_cons(ar, frames[depth - 1]->pos, built)))
            depth--;
        if (frames != local)
            free(frames);
        if (depth || s_set_add(ar, &copy, built))
            return -1;
    }
    s->set = copy;
    s->utf = *utf;
    s->cur = nxt;
    return 0;
}

static int s_feed(grammar_state *s, const uint8_t *p, size_t n)
{
    s_mark_back(&s->scratch, (s_mark){ 0 });
    s_utf utf = s->utf;
    s_set out;
    int rc = s_run(s, &s->set, &utf, p, n, &out);
    if (rc <= 0)
        return -1;
    return s_commit(s, &out, &utf);
}

/* Inactive and lazy: look for a trigger in the tail plus these bytes; from its first byte on,
 * the text goes to the grammar. */
static int s_lazy(grammar_state *s, const char *p, size_t n)
{
    size_t need = s->tail_len + n;
    char *buf = realloc(s->tail, need + 1);
    if (!buf)
        return -1;
    s->tail = buf;
    memcpy(buf + s->tail_len, p, n);
    buf[need] = 0;
    const char *best = NULL;
    for (size_t i = 0; i < s->n_trig; i++) {
        const char *hit = memmem(buf, need, s->trig[i], strlen(s->trig[i]));
        if (hit && (!best || hit < best))
            best = hit;
    }
    if (best) {
        s->active = 1;
        s->tail_len = 0;
        return s_feed(s, (const uint8_t *)best, need - (size_t)(best - buf));
    }
    /* keep only what could still begin a trigger */
    size_t keep = s->max_trig - 1 < need ? s->max_trig - 1 : need;
    memmove(buf, buf + need - keep, keep);
    s->tail_len = keep;
    return 0;
}

int grammar_accept_bytes(grammar_state *s, const char *p, size_t n)
{
    if (s->oom)
        return -1;
    if (!s->active)
        return s_lazy(s, p, n);
    return s_feed(s, (const uint8_t *)p, n);
}

int grammar_accepting(const grammar_state *s)
{
    return s->active && s->utf.left == 0 && s_set_accepting(&s->set);
}

int grammar_active(const grammar_state *s)
{
    return s->active;
}

uint32_t grammar_distance(const grammar_state *s)
{
    return s_set_dist(&s->set, &s->utf);
}

/* Is a token with distance d after it within the budget? One token per byte of the rest,
 * and one for the end of generation. */
static int s_fits(uint32_t d, uint32_t budget)
{
    return budget == GRAMMAR_NO_BUDGET || (uint64_t)d + 2 <= budget;
}

/* The distance after token id from the committed state, S_INF if refused. */
static uint32_t s_token_dist(grammar_state *s, int32_t id)
{
    const grammar_vocab *v = s->v;
    if (v->eog[id])
        return s->utf.left == 0 && s_set_accepting(&s->set) ? 0 : S_INF;
    if (!v->len[id])
        return S_INF;
    s_mark_back(&s->scratch, (s_mark){ 0 });
    s_utf utf = s->utf;
    s_set out;
    if (s_run(s, &s->set, &utf, (const uint8_t *)v->piece[id], v->len[id], &out) <= 0)
        return S_INF;
    return s_set_dist(&out, &utf);
}

/* Inactive: would these bytes fire a trigger, and is the text from the trigger on then a
 * start the grammar accepts? 0 no trigger, 1 fired and accepted (*dist set), -1 refused. */
static int s_probe(grammar_state *s, const char *p, size_t n, uint32_t *dist)
{
    size_t need = s->tail_len + n;
    if (need == 0)
        return 0;
    if (need > s->probe_cap) {
        char *b = realloc(s->probe, need + 64);
        if (!b)
            return -1;
        s->probe = b;
        s->probe_cap = need + 64;
    }
    if (s->tail_len)
        memcpy(s->probe, s->tail, s->tail_len);
    if (n)
        memcpy(s->probe + s->tail_len, p, n);
    const char *best = NULL;
    for (size_t i = 0; i < s->n_trig; i++) {
        const char *hit = memmem(s->probe, need, s->trig[i], strlen(s->trig[i]));
        if (hit && (!best || hit < best))
            best = hit;
    }
    if (!best)
        return 0;
    s_mark_back(&s->scratch, (s_mark){ 0 });
    s_utf utf = { 0 };
    s_set out;
    if (s_run(s, &s->start, &utf, (const uint8_t *)best, need - (size_t)(best - s->probe),
              &out) <= 0)
        return -1;
    *dist = s_set_dist(&out, &utf);
    return 1;
}

/* The mask of an inactive lazy state: every token but those that would fire a trigger into
 * text the grammar refuses (a token "<call>x" when the grammar wants a digit after "<call>"). */
static uint32_t s_mask_inactive(grammar_state *s, float *logits, uint32_t n_logits,
                                uint32_t budget)
{
    const grammar_vocab *v = s->v;
    uint32_t kept = 0;
    for (uint32_t id = 0; id < n_logits; id++) {
        uint32_t d = 0;
        int r = (int32_t)id < v->n && !v->eog[id] ? s_probe(s, v->piece[id], v->len[id], &d) : 0;
        if ((int32_t)id >= v->n || r < 0 || (r > 0 && !s_fits(d, budget)))
            logits[id] = -INFINITY;
        else
            kept++;
    }
    return kept;
}

int grammar_allows(grammar_state *s, int32_t id, uint32_t budget)
{
    if (!s->active) {
        if (!s->v || id < 0 || id >= s->v->n)
            return 0;
        uint32_t d = 0;
        int r = s->v->eog[id] ? 0 : s_probe(s, s->v->piece[id], s->v->len[id], &d);
        return r == 0 || (r > 0 && s_fits(d, budget));
    }
    if (!s->v || id < 0 || id >= s->v->n || s->oom)
        return 0;
    uint32_t d = s_token_dist(s, id);
    if (d >= S_INF)
        return 0;
    return s->v->eog[id] || s_fits(d, budget);
}

/* Is set b the same stacks as set a? (A self-loop: an ordinary character inside a string.) */
static int s_set_same(const s_set *a, const s_set *b)
{
    if (a->n != b->n)
        return 0;
    for (uint32_t i = 0; i < b->n; i++) {
        uint32_t k = 0;
        while (k < a->n && !s_stack_eq(a->s[k], b->s[i]))
            k++;
        if (k == a->n)
            return 0;
    }
    return 1;
}

static uint32_t s_walk_dist(s_set *set, const s_utf *utf)
{
    if (utf->left)
        return s_set_dist(set, utf);
    if (set->dist == S_INF + 1)
        set->dist = s_set_dist(set, utf);
    return set->dist;
}

/* Trie node k, its prefix consumed into (set, utf): the tokens that end here are accepted,
 * each child's byte is tried. A byte the memo knows refused is skipped; one that leaves the
 * set as it was hands the same set (same id) to the child, so inside a JSON string a byte
 * costs a memo look-up rather than a matcher step. */
static void s_walk(grammar_state *s, s_set *set, s_utf utf, uint32_t k)
{
    const grammar_vocab *v = s->v;
    const s_tnode *nd = &v->trie[k];
    if (k && nd->lo < nd->hi) {
        uint32_t d = s_walk_dist(set, &utf);
        for (int32_t i = nd->lo; i < nd->hi; i++)
            s->tok_dist[v->order[i]] = d;
    }
    for (uint32_t c = 0; c < nd->n_child; c++) {
        uint32_t ck = nd->first + c;
        uint8_t b = v->trie[ck].byte;
        uint32_t h = (set->id * 2654435761u ^ utf.value * 40503u ^ utf.left << 8 ^ b) % S_MEMO;
        int hit = s->memo[h].id == set->id && s->memo[h].value == utf.value &&
                  s->memo[h].min == utf.min && s->memo[h].left == utf.left &&
                  s->memo[h].byte == b;
        s_utf u = utf;
        if (hit && s->memo[h].res == 1)
            continue;
        if (hit && s->memo[h].res == 2 && utf.left == 0 && b < 0x80) {
            s_walk(s, set, u, ck);
            continue;
        }
        s_mark m = s_mark_get(&s->scratch);
        s_set out;
        int rc = s_byte(s->g, &s->scratch, set, &u, b, &out);
        uint8_t res = 0;
        if (rc < 0) {
            s->oom = 1;
        } else if (rc == 0) {
            res = 1;
        } else if (out.s == set->s || s_set_same(set, &out)) {
            res = 2;
            s_mark_back(&s->scratch, m);
            s_walk(s, set, u, ck);
        } else {
            out.id = ++s->next_id;
            out.dist = S_INF + 1;
            s_walk(s, &out, u, ck);
        }
        s_mark_back(&s->scratch, m);
        if (res)
            s->memo[h].id = set->id, s->memo[h].value = utf.value, s->memo[h].min = utf.min,
            s->memo[h].left = (uint8_t)utf.left, s->memo[h].byte = b, s->memo[h].res = res;
    }
}

uint32_t grammar_mask(grammar_state *s, float *logits, uint32_t n_logits, uint32_t budget)
{
    if (!s->active)
        return s_mask_inactive(s, logits, n_logits, budget);
    const grammar_vocab *v = s->v;
    for (int32_t id = 0; id < v->n; id++)
        s->tok_dist[id] = S_INF;
    s_mark_back(&s->scratch, (s_mark){ 0 });
    if (s->next_id > UINT32_MAX / 2) {
        memset(s->memo, 0, sizeof s->memo);
        s->next_id = 0;
    }
    s_set root = s->set;
    root.id = ++s->next_id;
    root.dist = S_INF + 1;
    if (!s->oom)
        s_walk(s, &root, s->utf, 0);
    int acc = s->utf.left == 0 && s_set_accepting(&s->set);
    uint32_t best = S_INF;
    for (int32_t id = 0; id < v->n; id++) {
        if (v->eog[id])
            s->tok_dist[id] = acc ? 0 : S_INF;
        else
            best = s->tok_dist[id] < best ? s->tok_dist[id] : best;
    }
    /* The budget, unless nothing fits it (max_tokens below the shortest completion): then
     * the tokens that come closest, so the text is as near complete as it can be. The end of
     * generation fits whenever the text is complete. */
    int64_t limit;
    if (budget == GRAMMAR_NO_BUDGET)
        limit = S_INF - 1;
    else if (budget >= 2 && best + 2 <= budget)
        limit = budget - 2;
    else
        limit = acc ? -1 : (int64_t)best; /* -1: only the end of generation */
    uint32_t kept = 0;
    for (uint32_t id = 0; id < n_logits; id++) {
        int ok = (int32_t)id < v->n && s->tok_dist[id] < S_INF &&
                 (v->eog[id] || (int64_t)s->tok_dist[id] <= limit);
        if (ok)
            kept++;
        else
            logits[id] = -INFINITY;
    }
    return kept;
}

int grammar_accept_token(grammar_state *s, int32_t id)
{
    if (!s->v || id < 0 || id >= s->v->n)
        return -1;
    if (s->v->eog[id])
        return !s->active || grammar_accepting(s) ? 0 : -1;
    return grammar_accept_bytes(s, s->v->piece[id], s->v->len[id]);
}
