/* grammar.c — the stack matcher with partial UTF-8, token masks over the vocabulary's trie, the
 * completion budget, lazy triggers (the compiled form: grammar_parse.c). text/ */
#include "text/grammar_int.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* ---- the matcher ---- */

/* A stack is a linked list of grammar positions, top first; NULL is the empty stack (the text
 * so far is a complete sentence). Nodes come from an arena and are shared between stacks. */
typedef struct s_node {
    const grammar_elem *pos;
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
    uint32_t dist;                /* s_set_dist with no partial UTF-8, GRAMMAR_INF + 1 = not yet */
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
    uint32_t *tok_dist;           /* per id: the distance after it, GRAMMAR_INF = refused */
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

static const s_node *s_cons(s_arena *ar, const grammar_elem *pos, const s_node *next)
{
    s_node *n = s_alloc(ar, sizeof *n);
    if (n) {
        n->pos = pos;
        n->next = next;
    }
    return n;
}

static int s_is_end(const grammar_elem *e)
{
    return e->type == G_END || e->type == G_ALT;
}

/* Expand rule references at the top until every stack's top is a character class (or the
 * stack is empty), llama.cpp's llama_grammar_advance_stack. */
static int s_advance(const grammar *g, s_arena *ar, const s_node *st, s_set *out)
{
    if (!st || !(st->pos->type == G_RULE))
        return s_set_add(ar, out, st);
    const grammar_elem *top = st->pos;
    const s_node *rest = st->next;
    if (!s_is_end(top + 1) && !(rest = s_cons(ar, top + 1, rest)))
        return -1;
    const grammar_elem *alt = g->rules[top->value];
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
static int s_match(const grammar_elem *e, uint32_t cp, const grammar_elem **next)
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
static int s_match_range(const grammar_elem *e, uint32_t lo, uint32_t hi)
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
        const grammar_elem *nx;
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
    return d > GRAMMAR_INF ? GRAMMAR_INF : (uint32_t)d;
}

/* The state's distance: its closest stack's; a pending partial sequence counts its top class
 * as the bytes still due. */
static uint32_t s_set_dist(const s_set *set, const s_utf *utf)
{
    uint32_t best = GRAMMAR_INF;
    for (uint32_t i = 0; i < set->n; i++) {
        const s_node *st = set->s[i];
        uint32_t d = s_stack_dist(st);
        if (st && utf->left) {
            const grammar_elem *nx;
            uint32_t m = grammar_class_min(st->pos, &nx);
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
    const grammar_elem *alt = s->g->rules[s->g->root];
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

/* The distance after token id from the committed state, GRAMMAR_INF if refused. */
static uint32_t s_token_dist(grammar_state *s, int32_t id)
{
    const grammar_vocab *v = s->v;
    if (v->eog[id])
        return s->utf.left == 0 && s_set_accepting(&s->set) ? 0 : GRAMMAR_INF;
    if (!v->len[id])
        return GRAMMAR_INF;
    s_mark_back(&s->scratch, (s_mark){ 0 });
    s_utf utf = s->utf;
    s_set out;
    if (s_run(s, &s->set, &utf, (const uint8_t *)v->piece[id], v->len[id], &out) <= 0)
        return GRAMMAR_INF;
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
    if (d >= GRAMMAR_INF)
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
    if (set->dist == GRAMMAR_INF + 1)
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
            out.dist = GRAMMAR_INF + 1;
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
        s->tok_dist[id] = GRAMMAR_INF;
    s_mark_back(&s->scratch, (s_mark){ 0 });
    if (s->next_id > UINT32_MAX / 2) {
        memset(s->memo, 0, sizeof s->memo);
        s->next_id = 0;
    }
    s_set root = s->set;
    root.id = ++s->next_id;
    root.dist = GRAMMAR_INF + 1;
    if (!s->oom)
        s_walk(s, &root, s->utf, 0);
    int acc = s->utf.left == 0 && s_set_accepting(&s->set);
    uint32_t best = GRAMMAR_INF;
    for (int32_t id = 0; id < v->n; id++) {
        if (v->eog[id])
            s->tok_dist[id] = acc ? 0 : GRAMMAR_INF;
        else
            best = s->tok_dist[id] < best ? s->tok_dist[id] : best;
    }
    /* The budget, unless nothing fits it (max_tokens below the shortest completion): then
     * the tokens that come closest, so the text is as near complete as it can be. The end of
     * generation fits whenever the text is complete. */
    int64_t limit;
    if (budget == GRAMMAR_NO_BUDGET)
        limit = GRAMMAR_INF - 1;
    else if (budget >= 2 && best + 2 <= budget)
        limit = budget - 2;
    else
        limit = acc ? -1 : (int64_t)best; /* -1: only the end of generation */
    uint32_t kept = 0;
    for (uint32_t id = 0; id < n_logits; id++) {
        int ok = (int32_t)id < v->n && s->tok_dist[id] < GRAMMAR_INF &&
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
