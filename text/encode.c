/* encode.c — text to ids: special-token partition, SentencePiece merges, gpt2 pre-tokenizer + BPE. text/
 *
 * Both merge loops take the best pair from a binary heap and check it is still current (its two
 * symbols unchanged) when popped, as llama.cpp's llm_tokenizer_spm/bpe sessions do: O(n log n)
 * in the symbols of a word, so a 10 kB prompt with no pre-tokenizer split (SentencePiece merges
 * the whole text at once) is milliseconds, not the O(n^2) of rebuilding strings per merge.
 */
#include "text/tokenizer_int.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* ---------------------------------------------------------------- output vector */

typedef struct {
    int32_t *v;
    size_t n, cap;
    int oom;
} s_ids;

static void s_push(s_ids *o, int32_t id)
{
    if (o->oom)
        return;
    if (o->n == o->cap) {
        size_t cap = o->cap ? o->cap * 2 : 64;
        int32_t *nv = realloc(o->v, cap * sizeof *nv);
        if (!nv) {
            o->oom = 1;
            return;
        }
        o->v = nv;
        o->cap = cap;
    }
    o->v[o->n++] = id;
}

/* ---------------------------------------------------------------- symbols and the pair heap */

typedef struct {
    const char *text;      /* into the word */
    uint32_t n;            /* bytes; 0 once merged into its left neighbour */
    int32_t prev, next;    /* linked list over the word's live symbols; -1 at the ends */
    int32_t id;            /* gpt2: the token whose text this is, -1 if none (cannot merge) */
} s_sym;

typedef struct {
    int32_t left, right;   /* symbol indices */
    uint32_t size;         /* bytes of the two symbols when the pair was made */
    float key;             /* SentencePiece: score (higher first); BPE: -rank */
} s_pair;

typedef struct {
    s_pair *v;
    size_t n, cap;
} s_heap;

/* a before b: higher key, then the leftmost pair (both llama.cpp comparators). */
static int s_before(const s_pair *a, const s_pair *b)
{
    return a->key > b->key || (a->key == b->key && a->left < b->left);
}

static int s_heap_push(s_heap *h, s_pair p)
{
    if (h->n == h->cap) {
        size_t cap = h->cap ? h->cap * 2 : 64;
        s_pair *nv = realloc(h->v, cap * sizeof *nv);
        if (!nv)
            return -1;
        h->v = nv;
        h->cap = cap;
    }
    size_t i = h->n++;
    while (i > 0 && s_before(&p, &h->v[(i - 1) / 2])) {
        h->v[i] = h->v[(i - 1) / 2];
        i = (i - 1) / 2;
    }
    h->v[i] = p;
    return 0;
}

static s_pair s_heap_pop(s_heap *h)
{
    s_pair top = h->v[0], last = h->v[--h->n];
    size_t i = 0;
    for (;;) {
        size_t c = 2 * i + 1;
        if (c >= h->n)
            break;
        if (c + 1 < h->n && s_before(&h->v[c + 1], &h->v[c]))
            c++;
        if (!s_before(&h->v[c], &last))
            break;
        h->v[i] = h->v[c];
        i = c;
    }
    if (h->n)
        h->v[i] = last;
    return top;
}

/* Working memory of one encode call (never shared: the tokenizer stays read-only). */
typedef struct {
    const tokenizer *t;
    s_sym *sym;
    size_t sym_cap;
    s_heap heap;
    char *word;            /* gpt2: the byte-encoded word */
    size_t word_cap;
    int oom;
} s_work;

/* Split w[0..len) into UTF-8 characters (a truncated sequence is cut at the end). */
static int32_t s_symbols(s_work *w, const char *s, size_t len)
{
    if (len > w->sym_cap) {
        s_sym *ns = realloc(w->sym, len * sizeof *ns);
        if (!ns)
            return -1;
        w->sym = ns;
        w->sym_cap = len;
    }
    int32_t n = 0;
    for (size_t off = 0; off < len; n++) {
        static const uint8_t lens[16] = { 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 2, 2, 3, 4 };
        size_t c = lens[(uint8_t)s[off] >> 4];
        if (c > len - off)
            c = len - off;
        w->sym[n] = (s_sym){ .text = s + off, .n = (uint32_t)c, .prev = n - 1, .next = -1,
                             .id = w->t->kind == TOK_BPE ? tok_find(w->t, s + off, c) : -1 };
        if (n > 0)
            w->sym[n - 1].next = n;
        off += c;
    }
    return n;
}

/* Queue the pair (l, r) if the vocabulary can merge it. */
static void s_try_pair(s_work *w, int32_t l, int32_t r)
{
    const tokenizer *t = w->t;
    if (l < 0 || r < 0)
        return;
    const s_sym *a = &w->sym[l], *b = &w->sym[r];
    s_pair p = { .left = l, .right = r, .size = a->n + b->n };
    if (t->kind == TOK_SPM) {
        if (p.size > t->max_text)
            return; /* longer than any piece */
        int32_t id = tok_find(t, a->text, p.size); /* the two are adjacent in the text */
        if (id < 0)
            return;
        p.key = t->score[id];
    } else {
        int32_t rank = tok_merge_rank(t, a->id, b->id);
        if (rank < 0)
            return;
        p.key = -(float)rank; /* exact: ranks are below 2^24 (checked on load) */
    }
    if (s_heap_push(&w->heap, p))
        w->oom = 1;
}

/* Merge the n symbols of w->sym until no queued pair applies. */
static void s_merge(s_work *w, int32_t n)
{
    w->heap.n = 0;
    for (int32_t i = 1; i < n; i++)
        s_try_pair(w, i - 1, i);
    while (w->heap.n && !w->oom) {
        s_pair p = s_heap_pop(&w->heap);
        s_sym *l = &w->sym[p.left], *r = &w->sym[p.right];
        /* Symbols only grow, so equal sizes mean neither side has merged since. */
        if (l->n == 0 || r->n == 0 || l->n + r->n != p.size)
            continue;
        l->n += r->n;
        r->n = 0;
        if (w->t->kind == TOK_BPE)
            l->id = tok_find(w->t, l->text, l->n);
        l->next = r->next;
        if (r->next >= 0)
            w->sym[r->next].prev = p.left;
        s_try_pair(w, l->prev, p.left);
        s_try_pair(w, p.left, l->next);
    }
}

/* ---------------------------------------------------------------- SentencePiece */

static void s_spm_fragment(s_work *w, const char *s, size_t len, int space_prefix, s_ids *out)
{
    const tokenizer *t = w->t;
    /* Escaped text: an optional leading space, every ' ' as "▁" (3 bytes). */
    size_t spaces = space_prefix;
    for (size_t i = 0; i < len; i++)
        spaces += s[i] == ' ';
    size_t n = len + space_prefix + 2 * spaces;
    char *e = malloc(n ? n : 1);
    if (!e) {
        w->oom = 1;
        return;
    }
    size_t k = 0;
    if (space_prefix)
        memcpy(e + k, "\xE2\x96\x81", 3), k += 3;
    for (size_t i = 0; i < len; i++) {
        if (s[i] == ' ')
            memcpy(e + k, "\xE2\x96\x81", 3), k += 3;
        else
            e[k++] = s[i];
    }
    int32_t ns = s_symbols(w, e, n);
    if (ns < 0) {
        w->oom = 1;
        free(e);
        return;
    }
    s_merge(w, ns);
    for (int32_t i = 0; i != -1 && ns > 0; i = w->sym[i].next) {
        const s_sym *y = &w->sym[i];
        int32_t id = tok_find(t, y->text, y->n);
        if (id >= 0) {
            s_push(out, id);
            continue;
        }
        /* Byte fallback; a vocabulary without <0xNN> pieces gets <unk> (llama.cpp aborts). */
        for (uint32_t j = 0; j < y->n; j++) {
            int32_t b = t->byte_id[(uint8_t)y->text[j]];
            s_push(out, b >= 0 ? b : t->unk);
        }
    }
    free(e);
}

/* ---------------------------------------------------------------- gpt2: pre-tokenizer + BPE */

static void s_bpe_word(s_work *w, const char *s, size_t len, s_ids *out)
{
    const tokenizer *t = w->t;
    if (len * 2 + 1 > w->word_cap) {
        char *nw = realloc(w->word, len * 2 + 1);
        if (!nw) {
            w->oom = 1;
            return;
        }
        w->word = nw;
        w->word_cap = len * 2 + 1;
    }
    size_t n = 0;
    for (size_t i = 0; i < len; i++) {
        const char *c = t->byte_enc[(uint8_t)s[i]];
        while (*c)
            w->word[n++] = *c++;
    }
    w->word[n] = '\0';
    if (t->ignore_merges) {
        int32_t id = tok_find(t, w->word, n);
        if (id >= 0) {
            s_push(out, id);
            return;
        }
    }
    int32_t ns = s_symbols(w, w->word, n);
    if (ns < 0) {
        w->oom = 1;
        return;
    }
    s_merge(w, ns);
    for (int32_t i = 0; i != -1 && ns > 0; i = w->sym[i].next) {
        const s_sym *y = &w->sym[i];
        if (y->id >= 0) {
            s_push(out, y->id);
            continue;
        }
        /* As llama.cpp: each byte of the stand-in text that is itself a token, others dropped. */
        for (uint32_t j = 0; j < y->n; j++) {
            int32_t b = tok_find(t, y->text + j, 1);
            if (b >= 0)
                s_push(out, b);
        }
    }
}

/* The pieces of text[0..len) after regex k: matches and the gaps between them, each split
 * further by the later regexes (llama.cpp's unicode_regex_split). */
static void s_split(s_work *w, const char *s, size_t len, int k, pcre2_match_data *md, s_ids *out)
{
    const tokenizer *t = w->t;
    if (len == 0 || w->oom)
        return;
    if (k == t->n_re) {
        s_bpe_word(w, s, len, out);
        return;
    }
    size_t at = 0, gap = 0;
    while (at < len) {
        int rc = pcre2_match(t->re[k], (PCRE2_SPTR)s, len, at, 0, md, NULL);
        if (rc < 0)
            break; /* no more matches (or an invalid UTF-8 tail, which stays one gap) */
        /* Copied out: the later regexes reuse md for the pieces of this match. */
        const PCRE2_SIZE *ov = pcre2_get_ovector_pointer(md);
        size_t m0 = ov[0], m1 = ov[1];
        if (m1 == m0) { /* none of the patterns matches empty; guard anyway */
            at = m0 + 1;
            continue;
        }
        s_split(w, s + gap, m0 - gap, k + 1, md, out);
        s_split(w, s + m0, m1 - m0, k + 1, md, out);
        gap = at = m1;
    }
    s_split(w, s + gap, len - gap, k + 1, md, out);
}

/* llama.cpp's pre-tokenizer regexes (llama-vocab.cpp), the adapted forms it uses: case-
 * insensitive contractions spelt as classes. */
static const char *const s_re_llama3[] = {
    "(?:'[sS]|'[tT]|'[rR][eE]|'[vV][eE]|'[mM]|'[lL][lL]|'[dD])|[^\\r\\n\\p{L}\\p{N}]?\\p{L}+|"
    "\\p{N}{1,3}| ?[^\\s\\p{L}\\p{N}]+[\\r\\n]*|\\s*[\\r\\n]+|\\s+(?!\\S)|\\s+", NULL };
static const char *const s_re_qwen2[] = {
    "(?:'[sS]|'[tT]|'[rR][eE]|'[vV][eE]|'[mM]|'[lL][lL]|'[dD])|[^\\r\\n\\p{L}\\p{N}]?\\p{L}+|"
    "\\p{N}| ?[^\\s\\p{L}\\p{N}]+[\\r\\n]*|\\s*[\\r\\n]+|\\s+(?!\\S)|\\s+", NULL };
/* gpt-4o (o200k): llama.cpp's adapted form, letters split into runs by case with lookaheads
 * instead of the case categories of the tokenizer.json regex */
static const char *const s_re_gpt4o[] = {
    "[^\\r\\n\\p{L}\\p{N}]?((?=[\\p{L}])([^a-z]))*((?=[\\p{L}])([^A-Z]))+"
    "(?:'[sS]|'[tT]|'[rR][eE]|'[vV][eE]|'[mM]|'[lL][lL]|'[dD])?|"
    "[^\\r\\n\\p{L}\\p{N}]?((?=[\\p{L}])([^a-z]))+((?=[\\p{L}])([^A-Z]))*"
    "(?:'[sS]|'[tT]|'[rR][eE]|'[vV][eE]|'[mM]|'[lL][lL]|'[dD])?|"
    "\\p{N}{1,3}| ?[^\\s\\p{L}\\p{N}]+[\\r\\n/]*|\\s*[\\r\\n]+|\\s+(?!\\S)|\\s+", NULL };
static const char *const s_re_smollm[] = {
    "\\p{N}",
    "'s|'t|'re|'ve|'m|'ll|'d| ?\\p{L}+| ?\\p{N}+| ?[^\\s\\p{L}\\p{N}]+|\\s+(?!\\S)", NULL };
static const char *const s_re_default[] = {
    "[\\p{P}\\$\\+<=>\\^~\\|]+",
    "'s|'t|'re|'ve|'m|'ll|'d| ?\\p{L}+| ?\\p{N}+| ?[^\\s\\p{L}\\p{N}]+|\\s+(?!\\S)",
    "\\p{N}+", "[0-9][0-9][0-9]", NULL };

int tok_pre_compile(tokenizer *t, char *err, size_t errlen)
{
    const char *const *re = t->pre == PRE_LLAMA3 ? s_re_llama3 : t->pre == PRE_QWEN2 ? s_re_qwen2
                          : t->pre == PRE_SMOLLM ? s_re_smollm : t->pre == PRE_GPT4O ? s_re_gpt4o
                          : s_re_default;
    for (; *re; re++) {
        int code;
        PCRE2_SIZE at;
        /* MATCH_INVALID_UTF: a prompt with broken UTF-8 is still tokenized (byte-wise), not
         * refused; UCP makes \s and friends Unicode-aware like the tokenizers' own regexes. */
        pcre2_code *c = pcre2_compile((PCRE2_SPTR)*re, PCRE2_ZERO_TERMINATED,
                                      PCRE2_UTF | PCRE2_UCP | PCRE2_MATCH_INVALID_UTF, &code, &at,
                                      NULL);
        if (!c) {
            PCRE2_UCHAR msg[160];
            pcre2_get_error_message(code, msg, sizeof msg);
            snprintf(err, errlen, "tokenizer: pre-tokenizer '%s' regex %d at %zu: %s", t->pre_name,
                     t->n_re, (size_t)at, (const char *)msg);
            return -1;
        }
        (void)pcre2_jit_compile(c, PCRE2_JIT_COMPLETE); /* falls back to the interpreter */
        t->re[t->n_re++] = c;
    }
    return 0;
}

/* ---------------------------------------------------------------- special-token partition */

typedef struct {
    size_t off, len;       /* text fragment, or */
    int32_t id;            /* a token (-1 for text) */
} s_frag;

/* Split every text fragment at each occurrence of special token id (leftmost first). */
static int s_partition_one(const tokenizer *t, const char *text, s_frag **fv, size_t *nf,
                           size_t *cap, int32_t id)
{
    const char *tt = t->text[id];
    size_t tl = t->text_len[id];
    size_t i = 0;
    while (i < *nf) {
        s_frag f = (*fv)[i];
        const char *hit = f.id < 0 && f.len >= tl ? memmem(text + f.off, f.len, tt, tl) : NULL;
        if (!hit) {
            i++;
            continue;
        }
        if (*nf + 2 > *cap) {
            size_t nc = *cap * 2 + 8;
            s_frag *nv = realloc(*fv, nc * sizeof *nv);
            if (!nv)
                return -1;
            *fv = nv;
            *cap = nc;
        }
        size_t at = (size_t)(hit - text);
        s_frag rep[3];
        size_t k = 0;
        if (at > f.off)
            rep[k++] = (s_frag){ f.off, at - f.off, -1 };
        rep[k++] = (s_frag){ at, tl, id };
        int post = at + tl < f.off + f.len;
        if (post)
            rep[k++] = (s_frag){ at + tl, f.off + f.len - at - tl, -1 };
        memmove(&(*fv)[i + k], &(*fv)[i + 1], (*nf - i - 1) * sizeof **fv);
        memcpy(&(*fv)[i], rep, k * sizeof *rep);
        *nf += k - 1;
        i += post ? k - 1 : k; /* the rest of the fragment may hold more occurrences */
    }
    return 0;
}

int tokenizer_encode(const tokenizer *t, const char *text, size_t len, unsigned flags,
                     int32_t **ids, size_t *n, char *err, size_t errlen)
{
    s_ids out = { 0 };
    s_work w = { .t = t };
    s_frag *fv = NULL;
    size_t nf = 0, cap = 8;
    pcre2_match_data *md = NULL;
    int add = (flags & TOKENIZER_ADD_SPECIAL) != 0, parse = (flags & TOKENIZER_PARSE_SPECIAL) != 0;
    *ids = NULL;
    *n = 0;
    if (len > TOKENIZER_MAX_TEXT) {
        snprintf(err, errlen, "tokenizer: text of %zu bytes exceeds the %u-byte limit", len,
                 TOKENIZER_MAX_TEXT);
        return -1;
    }
    fv = malloc(cap * sizeof *fv);
    if (!fv)
        goto oom;
    if (len)
        fv[nf++] = (s_frag){ 0, len, -1 };
    for (int32_t i = 0; i < t->n_special; i++) {
        int32_t id = t->special[i];
        if (!parse && t->type[id] != TOKEN_USER_DEFINED)
            continue; /* user-defined tokens are always matched, as llama.cpp */
        if (s_partition_one(t, text, &fv, &nf, &cap, id))
            goto oom;
    }
    if (add && t->add_bos)
        s_push(&out, t->bos);
    if (t->kind == TOK_BPE) {
        md = pcre2_match_data_create(4, NULL);
        if (!md)
            goto oom;
    }
    int prev_special = 1; /* SentencePiece: a space prefix at the start and after a special */
    for (size_t i = 0; i < nf && !w.oom; i++) {
        if (fv[i].id >= 0) {
            s_push(&out, fv[i].id);
            prev_special = 1;
        } else if (t->kind == TOK_SPM) {
            s_spm_fragment(&w, text + fv[i].off, fv[i].len, t->add_space_prefix && prev_special,
                           &out);
            prev_special = 0;
        } else {
            s_split(&w, text + fv[i].off, fv[i].len, 0, md, &out);
        }
    }
    if (add && t->add_eos)
        s_push(&out, t->eos);
    if (w.oom || out.oom)
        goto oom;
    *ids = out.v;
    *n = out.n;
    out.v = NULL;
    free(fv);
    free(w.sym);
    free(w.heap.v);
    free(w.word);
    pcre2_match_data_free(md);
    return 0;
oom:
    snprintf(err, errlen, "tokenizer: out of memory encoding %zu bytes", len);
    free(out.v);
    free(fv);
    free(w.sym);
    free(w.heap.v);
    free(w.word);
    pcre2_match_data_free(md);
    return -1;
}
