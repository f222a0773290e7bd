/* tokenizer.h — text to token ids and back, from a GGUF file's tokenizer.ggml.* metadata. text/
 *
 * Two models, as llama.cpp implements them (users compare against llama.cpp on the same file:
 * the same text must give the same ids, and the same ids the same text):
 *   "llama"  SentencePiece: pieces merged by score, "▁" for a space and a space prefix,
 *            byte fallback to <0xNN> tokens;
 *   "gpt2"   byte-level BPE: a pre-tokenizer regex (tokenizer.ggml.pre: llama-bpe, qwen2,
 *            smollm, default) splits the text, each word is merged by merge rank.
 * Control, unknown and user-defined tokens are matched in the text when the caller allows
 * (user-defined ones always), as llama.cpp's parse_special. A tokenizer is read-only after
 * tokenizer_open: any number of threads may encode and decode with it at once.
 */
#ifndef SWARM_TOKENIZER_H
#define SWARM_TOKENIZER_H

#include <stddef.h>
#include <stdint.h>

#include "gguf/gguf.h"

typedef struct tokenizer tokenizer;

/* Token types (tokenizer.ggml.token_type; pinned by llama.cpp's llama_token_type). */
typedef enum {
    TOKEN_UNDEFINED = 0, TOKEN_NORMAL = 1, TOKEN_UNKNOWN = 2, TOKEN_CONTROL = 3,
    TOKEN_USER_DEFINED = 4, TOKEN_UNUSED = 5, TOKEN_BYTE = 6,
} token_type;

/* tokenizer_encode flags. */
#define TOKENIZER_ADD_SPECIAL 1u   /* BOS (and EOS) where the file says to add them */
#define TOKENIZER_PARSE_SPECIAL 2u /* control/unknown token texts in the input become those tokens */

/* Build from an open file (g is only read; the tokenizer keeps its own copies). NULL with err
 * naming the file and key on missing keys, arrays of different lengths, merges naming unknown
 * tokens, an unknown model or pre-tokenizer, special ids outside the vocabulary. */
tokenizer *tokenizer_open(const gguf_file *g, char *err, size_t errlen);
/* Open path, build, close it. */
tokenizer *tokenizer_load(const char *path, char *err, size_t errlen);
void tokenizer_free(tokenizer **t);

/* Encode len bytes of text (any bytes; invalid UTF-8 is tokenized byte-wise, never rejected).
 * *ids is allocated (caller frees), *n its count. 0, or -1 with err (out of memory, or text
 * over TOKENIZER_MAX_TEXT: symbol indices are int32 and SentencePiece triples spaces). */
#define TOKENIZER_MAX_TEXT (256u << 20)
int tokenizer_encode(const tokenizer *t, const char *text, size_t len, unsigned flags,
                     int32_t **ids, size_t *n, char *err, size_t errlen);

/* Text of n ids, as llama_detokenize(remove_special=false, unparse_special=special): control and
 * unknown tokens appear only when special; the space prefix of the first piece is dropped
 * (SentencePiece); the gpt2 pre-tokenizers that ask for it clean " ." and " 's" spaces.
 * *out is allocated and NUL-terminated (caller frees). -1 with err on an id out of range. */
int tokenizer_decode(const tokenizer *t, const int32_t *ids, size_t n, int special, char **out,
                     size_t *len, char *err, size_t errlen);

/* The bytes one token stands for (pieces may be partial UTF-8 sequences: byte tokens, split
 * emoji). *len bytes at the returned pointer, owned by t; NULL if id is out of range. Control
 * and unknown tokens give "" unless special. */
const char *tokenizer_piece(const tokenizer *t, int32_t id, int special, size_t *len);

/* The token's text as stored in the file ("▁the", "Ġthe", "<0x0A>"); NULL if out of range. */
const char *tokenizer_text(const tokenizer *t, int32_t id);
int32_t tokenizer_n_vocab(const tokenizer *t);
token_type tokenizer_type(const tokenizer *t, int32_t id);
/* Special ids from the file (or the model's defaults); -1 where the vocabulary has none. */
int32_t tokenizer_bos(const tokenizer *t);
int32_t tokenizer_eos(const tokenizer *t);
int32_t tokenizer_eot(const tokenizer *t);
int32_t tokenizer_pad(const tokenizer *t);
/* End of generation: EOS, EOT or EOM. */
int tokenizer_is_eog(const tokenizer *t, int32_t id);
/* "llama" or "gpt2"; the pre-tokenizer name ("-" for llama). */
const char *tokenizer_model_name(const tokenizer *t);
const char *tokenizer_pre_name(const tokenizer *t);

/* ---- streaming decode: text out as tokens arrive, never a split UTF-8 sequence ----
 * Bytes of an incomplete UTF-8 sequence at the end of a piece are held until the next piece
 * completes it (a 4-byte emoji can arrive as four <0xNN> tokens). Cleaning of spaces
 * (tokenizer_decode) is not applied: it needs the characters that follow. */
typedef struct {
    const tokenizer *t;
    int special;
    int first;             /* no piece emitted yet: drop the SentencePiece space prefix */
    uint8_t held[4];       /* an incomplete UTF-8 sequence, at most 3 bytes */
    size_t n_held;
    char *buf;             /* output of the last push (owned) */
    size_t cap;
} tokenizer_decoder;

void tokenizer_decoder_init(tokenizer_decoder *d, const tokenizer *t, int special);
/* Complete text after adding token id: *len bytes at the returned pointer (valid until the next
 * call), possibly 0. NULL with err on a bad id or out of memory. */
const char *tokenizer_decoder_push(tokenizer_decoder *d, int32_t id, size_t *len, char *err,
                                   size_t errlen);
/* Whatever is held (an invalid or truncated sequence, given as its raw bytes); resets. */
const char *tokenizer_decoder_flush(tokenizer_decoder *d, size_t *len);
void tokenizer_decoder_free(tokenizer_decoder *d);

#endif
