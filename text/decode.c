/* decode.c — ids to text: each token's bytes, whole-sequence decode, the streaming decoder. text/ */
#include "text/tokenizer_int.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* One UTF-8 character at s (n bytes left): its code point and length; an invalid lead byte is
 * one "character" of length 1 with cp = 0xFFFFFFFF. */
static uint32_t s_utf8(const uint8_t *s, size_t n, size_t *len)
{
    static const uint8_t lens[16] = { 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 2, 2, 3, 4 };
    size_t c = lens[s[0] >> 4];
    if (c > n || (s[0] & 0xC0) == 0x80) {
        *len = 1;
        return 0xFFFFFFFFu;
    }
    *len = c;
    uint32_t cp = c == 1 ? s[0] : c == 2 ? s[0] & 0x1Fu : c == 3 ? s[0] & 0x0Fu : s[0] & 0x07u;
    for (size_t i = 1; i < c; i++)
        cp = (cp << 6) | (s[i] & 0x3Fu);
    return cp;
}

/* Write token id's decoded bytes (special form) at o; returns the count. */
static size_t s_piece(const tokenizer *t, int32_t id, char *o)
{
    const char *s = t->text[id];
    size_t n = t->text_len[id], k = 0;
    switch (t->type[id]) {
    case TOKEN_CONTROL: case TOKEN_UNKNOWN: case TOKEN_USER_DEFINED:
        memcpy(o, s, n);
        return n;
    case TOKEN_NORMAL:
        break;
    case TOKEN_BYTE: {
        unsigned v;
        char tail;
        /* "<0xNN>"; a byte token in another spelling gives nothing rather than garbage. */
        if (t->kind == TOK_SPM && n == 6 && sscanf(s, "<0x%2x%c", &v, &tail) == 2 && tail == '>') {
            o[0] = (char)v;
            return 1;
        }
        return 0;
    }
    default: /* undefined and unused tokens decode to nothing, as in llama.cpp */
        return 0;
    }
    if (t->kind == TOK_SPM) {
        for (size_t i = 0; i < n;) {
            if (i + 3 <= n && !memcmp(s + i, "\xE2\x96\x81", 3)) {
                o[k++] = ' ';
                i += 3;
            } else {
                o[k++] = s[i++];
            }
        }
        return k;
    }
    for (size_t i = 0; i < n;) {
        size_t cl;
        uint32_t cp = s_utf8((const uint8_t *)s + i, n - i, &cl);
        int b = cp < 324 ? t->byte_dec[cp] : -1;
        if (b >= 0) {
            o[k++] = (char)b;
        } else { /* not a stand-in: kept as written (llama.cpp adds "[UNK_BYTE_0x..]") */
            memcpy(o + k, s + i, cl);
            k += cl;
        }
        i += cl;
    }
    return k;
}

int tok_pieces_build(tokenizer *t, char *err, size_t errlen)
{
    size_t total = 0;
    for (int32_t i = 0; i < t->n_vocab; i++)
        total += t->text_len[i]; /* a piece is never longer than its text */
    t->piece = malloc((size_t)t->n_vocab * sizeof *t->piece);
    t->piece_len = malloc((size_t)t->n_vocab * sizeof *t->piece_len);
    t->piece_blob = malloc(total ? total : 1);
    if (!t->piece || !t->piece_len || !t->piece_blob) {
        snprintf(err, errlen, "tokenizer: out of memory for %d pieces", t->n_vocab);
        return -1;
    }
    char *p = t->piece_blob;
    for (int32_t i = 0; i < t->n_vocab; i++) {
        t->piece[i] = p;
        t->piece_len[i] = (uint32_t)s_piece(t, i, p);
        p += t->piece_len[i];
    }
    return 0;
}

const char *tokenizer_piece(const tokenizer *t, int32_t id, int special, size_t *len)
{
    if (id < 0 || id >= t->n_vocab)
        return NULL;
    if (!special && (t->type[id] == TOKEN_CONTROL || t->type[id] == TOKEN_UNKNOWN)) {
        *len = 0;
        return "";
    }
    *len = t->piece_len[id];
    return t->piece[id];
}

/* llama.cpp's clean_up_tokenization_spaces, in place: " ?" " !" " ." " ," lose the space,
 * " ' " becomes "'", and " 's" " 'm" " 're" " 've" lose the space (" 't" " 'd" " 'll" keep it). */
static size_t s_clean_spaces(char *s, size_t n)
{
    size_t k = n ? 1 : 0;
    for (size_t i = 1; i < n; i++) {
        char x = s[i];
        if (s[i - 1] == ' ' && (x == '?' || x == '!' || x == '.' || x == ','))
            k--;
        s[k++] = x;
    }
    n = k;
    k = n ? 1 : 0;
    for (size_t i = 1; i < n; i++) {
        char x = s[i];
        if (x == '\'' && i + 1 < n && s[i - 1] == ' ' && s[i + 1] == ' ') {
            k--;
            s[++i] = '\0'; /* the space after is dropped (skipped by the ++i) */
        }
        s[k++] = x;
    }
    n = k;
    k = n ? 1 : 0;
    for (size_t i = 1; i < n; i++) {
        char x = s[i];
        if (s[i - 1] == ' ' && x == '\'' && i + 1 < n) {
            char x1 = s[i + 1], x2 = i + 2 < n ? s[i + 2] : '\0';
            if (x1 == 's' || x1 == 'm' || (x1 == 'r' && x2 == 'e') || (x1 == 'v' && x2 == 'e'))
                k--;
        }
        s[k++] = x;
    }
    return k;
}

int tokenizer_decode(const tokenizer *t, const int32_t *ids, size_t n, int special, char **out,
                     size_t *len, char *err, size_t errlen)
{
    size_t total = 0, pl;
    *out = NULL;
    for (size_t i = 0; i < n; i++) {
        if (!tokenizer_piece(t, ids[i], special, &pl)) {
            snprintf(err, errlen, "tokenizer: token %zu is id %d, outside the vocabulary of %d", i,
                     ids[i], t->n_vocab);
            return -1;
        }
        total += pl;
    }
    char *s = malloc(total + 1);
    if (!s) {
        snprintf(err, errlen, "tokenizer: out of memory decoding %zu tokens", n);
        return -1;
    }
    size_t k = 0;
    for (size_t i = 0; i < n; i++) {
        const char *p = tokenizer_piece(t, ids[i], special, &pl);
        /* The first piece loses one leading space: the prefix SentencePiece added. */
        if (i == 0 && t->add_space_prefix && pl && p[0] == ' ')
            p++, pl--;
        memcpy(s + k, p, pl);
        k += pl;
    }
    if (t->clean_spaces)
        k = s_clean_spaces(s, k);
    s[k] = '\0';
    *out = s;
    *len = k;
    return 0;
}

/* ---------------------------------------------------------------- streaming decoder */

void tokenizer_decoder_init(tokenizer_decoder *d, const tokenizer *t, int special)
{
    memset(d, 0, sizeof *d);
    d->t = t;
    d->special = special;
    d->first = 1;
}

/* Bytes at the end of s[0..n) that start a UTF-8 sequence not yet complete (0..3). */
static size_t s_incomplete_tail(const uint8_t *s, size_t n)
{
    for (size_t back = 1; back <= 3 && back <= n; back++) {
        uint8_t c = s[n - back];
        if ((c & 0xC0) == 0x80)
            continue; /* continuation byte: keep looking for the lead */
        size_t need = c >= 0xF0 && c <= 0xF4 ? 4 : c >= 0xE0 ? 3 : c >= 0xC2 && c < 0xE0 ? 2 : 1;
        return need > back && (c & 0xC0) == 0xC0 ? back : 0;
    }
    return 0;
}

const char *tokenizer_decoder_push(tokenizer_decoder *d, int32_t id, size_t *len, char *err,
                                   size_t errlen)
{
    size_t pl;
    const char *p = tokenizer_piece(d->t, id, d->special, &pl);
    if (!p) {
        snprintf(err, errlen, "tokenizer: id %d is outside the vocabulary of %d", id,
                 d->t->n_vocab);
        return NULL;
    }
    if (d->first && d->t->add_space_prefix && pl && p[0] == ' ')
        p++, pl--;
    d->first = 0;
    size_t n = d->n_held + pl;
    if (n + 1 > d->cap) {
        size_t cap = n + 64;
        char *nb = realloc(d->buf, cap);
        if (!nb) {
            snprintf(err, errlen, "tokenizer: out of memory in the decoder");
            return NULL;
        }
        d->buf = nb;
        d->cap = cap;
    }
    memcpy(d->buf, d->held, d->n_held);
    memcpy(d->buf + d->n_held, p, pl);
    size_t hold = s_incomplete_tail((const uint8_t *)d->buf, n);
    memcpy(d->held, d->buf + n - hold, hold);
    d->n_held = hold;
    *len = n - hold;
    d->buf[*len] = '\0';
    return d->buf;
}

const char *tokenizer_decoder_flush(tokenizer_decoder *d, size_t *len)
{
    static char none[1];
    *len = d->n_held;
    if (!d->n_held)
        return none;
    if (d->cap < 4) {
        char *nb = realloc(d->buf, 4);
        if (!nb) {
            *len = 0;
            return none;
        }
        d->buf = nb;
        d->cap = 4;
    }
    memcpy(d->buf, d->held, d->n_held);
    d->n_held = 0;
    return d->buf;
}

void tokenizer_decoder_free(tokenizer_decoder *d)
{
    free(d->buf);
    d->buf = NULL;
    d->cap = 0;
}
