/* tokenizer_int.h — the tokenizer's tables, shared by vocab.c, encode.c and decode.c; not API. text/ */
#ifndef SWARM_TOKENIZER_INT_H
#define SWARM_TOKENIZER_INT_H

#define PCRE2_CODE_UNIT_WIDTH 8
#include <pcre2.h>

#include "text/tokenizer.h"

typedef enum { TOK_SPM, TOK_BPE } tok_kind;
typedef enum { PRE_NONE, PRE_LLAMA3, PRE_QWEN2, PRE_SMOLLM, PRE_DEFAULT, PRE_GPT4O } tok_pre;

#define TOK_MAX_RE 4 /* regexes in one pre-tokenizer (default has 4) */

struct tokenizer {
    tok_kind kind;
    tok_pre pre;
    const char *pre_name;
    int32_t n_vocab;
    char **text;           /* (n_vocab,) token texts as in the file, into text_blob */
    uint32_t *text_len;    /* (n_vocab,) bytes */
    char *text_blob;
    float *score;          /* (n_vocab,) SentencePiece merge priority, higher first */
    uint8_t *type;         /* (n_vocab,) token_type */
    char **piece;          /* (n_vocab,) decoded bytes (special = 1 form), into piece_blob */
    uint32_t *piece_len;
    char *piece_blob;
    /* Open-addressing tables hashed with XXH3. glibc's hsearch_r was tried first: its hash
     * keeps only the first ~8 bytes of a key, and indexing Llama 3's 280k merges took 700 ms
     * (2-core dev machine, 2026-12-01), 80% of it in probing and strcmp. */
    uint32_t *text_slot;   /* (text_mask + 1,) id + 1 of the token with that text; 0 = empty */
    uint32_t text_mask;
    uint64_t *merge_key;   /* (merge_mask + 1,) (left id + 1) << 32 | (right id + 1); 0 = empty */
    uint32_t *merge_rank;  /* rank of that merge (its position in tokenizer.ggml.merges) */
    uint32_t merge_mask;
    size_t max_text;       /* longest token text, bytes */
    int32_t *special;      /* control/unknown/user-defined ids, longest text first */
    int32_t n_special;
    int32_t byte_id[256];  /* SentencePiece <0xNN> or gpt2's one-character token, -1 if none */
    char byte_enc[256][3]; /* gpt2 bytes_to_unicode: byte -> UTF-8 of its stand-in character */
    int16_t byte_dec[324]; /* and back: stand-in code point (all below U+0144) -> byte, or -1 */
    pcre2_code *re[TOK_MAX_RE];
    int n_re;
    int32_t bos, eos, eot, eom, pad, unk;
    int32_t eog[16];              /* more end-of-generation ids, by text (vocab.c s_by_text) */
    int n_eog;
    int add_bos, add_eos, add_space_prefix, ignore_merges, clean_spaces;
};

/* id of the token whose text is s[0..n), -1 if none. */
int32_t tok_find(const tokenizer *t, const char *s, size_t n);
/* Rank of the merge of tokens a and b, -1 if there is none. */
int32_t tok_merge_rank(const tokenizer *t, int32_t a, int32_t b);
/* Pre-tokenizer regexes for t->pre (compiled with Unicode properties, JIT where available). */
int tok_pre_compile(tokenizer *t, char *err, size_t errlen);
/* Decoded pieces of every token (decode.c). */
int tok_pieces_build(tokenizer *t, char *err, size_t errlen);

#endif
