/* vocab.c — reading and validating tokenizer.ggml.* into the tokenizer's tables. text/ */
#include "text/tokenizer_int.h"
#include "base/util.h"

#include <errno.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <xxhash.h>

static void s_err(char *err, size_t errlen, const char *path, const char *fmt, ...)
    __attribute__((format(printf, 4, 5)));
static void s_err(char *err, size_t errlen, const char *path, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    util_verrf(err, errlen, path ? path : "tokenizer", fmt, ap);
    va_end(ap);
}

int32_t tok_find(const tokenizer *t, const char *s, size_t n)
{
    for (uint32_t i = (uint32_t)XXH3_64bits(s, n) & t->text_mask;; i = (i + 1) & t->text_mask) {
        uint32_t v = t->text_slot[i];
        if (!v)
            return -1;
        if (t->text_len[v - 1] == n && !memcmp(t->text[v - 1], s, n))
            return (int32_t)v - 1;
    }
}

static uint64_t s_pair_key(int32_t a, int32_t b)
{
    return (uint64_t)(uint32_t)(a + 1) << 32 | (uint32_t)(b + 1);
}

int32_t tok_merge_rank(const tokenizer *t, int32_t a, int32_t b)
{
    if (!t->merge_key || a < 0 || b < 0)
        return -1;
    uint64_t k = s_pair_key(a, b);
    for (uint32_t i = (uint32_t)XXH3_64bits(&k, 8) & t->merge_mask;; i = (i + 1) & t->merge_mask) {
        if (!t->merge_key[i])
            return -1;
        if (t->merge_key[i] == k)
            return (int32_t)t->merge_rank[i];
    }
}

/* Slots for n keys: a power of two at least twice n, so linear probes stay short. */
static uint32_t s_slots(uint64_t n)
{
    uint32_t c = 64;
    while (c < 2 * n)
        c *= 2;
    return c;
}

/* Optional special id: absent keeps *id; a negative value means "none" (some files store -1). */
static int s_special_id(const gguf_file *g, const tokenizer *t, const char *key, int32_t *id,
                        char *err, size_t errlen)
{
    int64_t v;
    if (!gguf_find_kv(g, key))
        return 0;
    if (gguf_get_i64(g, key, &v, err, errlen))
        return -1;
    if (v < 0) {
        *id = -1;
        return 0;
    }
    if (v >= t->n_vocab) {
        s_err(err, errlen, g->path, "%s = %lld but the vocabulary has %d tokens", key,
              (long long)v, t->n_vocab);
        return -1;
    }
    *id = (int32_t)v;
    return 0;
}

static int s_opt_bool(const gguf_file *g, const char *key, int *v, char *err, size_t errlen)
{
    return gguf_find_kv(g, key) ? gguf_get_bool(g, key, v, err, errlen) : 0;
}

static int s_cmp_special(const void *a, const void *b, void *arg)
{
    const tokenizer *t = arg;
    int32_t x = *(const int32_t *)a, y = *(const int32_t *)b;
    if (t->text_len[x] != t->text_len[y])
        return t->text_len[x] > t->text_len[y] ? -1 : 1; /* longest first, as llama.cpp */
    return x < y ? -1 : x > y;
}

/* Tokens llama.cpp's load_vocab recognises by their text (src/llama-vocab.cpp, "auto-detect
 * special tokens by text" and "maintain a list of tokens that cause end-of-generation") and
 * makes control tokens whatever type the file gives them ("control-looking token ... its type
 * will be overridden"): so Qwen's "</s>", a normal token of its vocabulary, is parsed as a
 * special token and ends a generation there too. 2: end of generation as well; 1: FIM tokens
 * (control only; llama.cpp adds the pad, repo and separator ones to the EOG set: 2). */
static int s_by_text(const char *txt, size_t len)
{
    static const struct {
        const char *text;
        int eog;
    } tab[] = {
        { "<|eot_id|>", 2 }, { "<|im_end|>", 2 }, { "<|end|>", 2 }, { "<|return|>", 2 },
        { "<|call|>", 2 }, { "<|flush|>", 2 }, { "<|calls|>", 2 }, { "<end_of_turn>", 2 },
        { "<|endoftext|>", 2 }, { "</s>", 2 }, { "<|eom_id|>", 2 }, { "<EOT>", 2 },
        { "_<EOT>", 2 }, { "[EOT]", 2 }, { "[EOS]", 2 }, { "<|end_of_text|>", 2 },
        { "<end_of_utterance>", 2 }, { "<eos>", 2 }, { "<turn|>", 2 }, { "<|tool_response>", 2 },
        { "<｜end▁of▁sentence｜>", 2 },
        { "[e~[", 2 },
        { "<|fim_prefix|>", 1 }, { "<fim-prefix>", 1 }, { "<fim_prefix>", 1 },
        { "<｜fim▁begin｜>", 1 }, { "<PRE>", 1 },
        { "▁<PRE>", 1 }, { "<|code_prefix|>", 1 }, { "<|prefix|>", 1 },
        { "<|fim_suffix|>", 1 }, { "<fim-suffix>", 1 }, { "<fim_suffix>", 1 },
        { "<｜fim▁hole｜>", 1 }, { "<SUF>", 1 },
        { "▁<SUF>", 1 }, { "<|code_suffix|>", 1 }, { "<|suffix|>", 1 },
        { "<|fim_middle|>", 1 }, { "<fim-middle>", 1 }, { "<fim_middle>", 1 },
        { "<｜fim▁end｜>", 1 }, { "<MID>", 1 },
        { "▁<MID>", 1 }, { "<|code_middle|>", 1 }, { "<|middle|>", 1 },
        { "<|fim_pad|>", 2 }, { "<fim-pad>", 2 }, { "<fim_pad>", 2 }, { "<PAD>", 2 },
        { "[PAD]", 2 },
        { "<|fim_repo|>", 2 }, { "<|repo_name|>", 2 }, { "<fim-repo>", 2 }, { "<REPO>", 2 },
        { "<reponame>", 2 },
        { "<|file_sep|>", 2 },
    };
    for (size_t i = 0; i < sizeof tab / sizeof tab[0]; i++)
        if (strlen(tab[i].text) == len && !memcmp(tab[i].text, txt, len))
            return tab[i].eog;
    return 0;
}

static int s_is_text(const char *txt, size_t len, const char *want)
{
    return strlen(want) == len && !memcmp(txt, want, len);
}

/* llama.cpp's o200k_harmony workaround: when the end-of-generation set holds "<|return|>" and
 * "<|call|>" (or "<|calls|>" and "<|flush|>"), "<|end|>" ends a message, not the generation:
 * it leaves the set and becomes user-defined. */
static void s_harmony_end(tokenizer *t)
{
    int ret = 0, call = 0, flush = 0, end = -1;
    for (int i = 0; i < t->n_eog; i++) {
        const char *x = t->text[t->eog[i]];
        size_t n = t->text_len[t->eog[i]];
        ret |= s_is_text(x, n, "<|return|>");
        call |= s_is_text(x, n, "<|call|>") || s_is_text(x, n, "<|calls|>");
        flush |= s_is_text(x, n, "<|flush|>");
        if (s_is_text(x, n, "<|end|>"))
            end = i;
    }
    if (end < 0 || !((ret && call) || (call && flush)))
        return;
    t->type[t->eog[end]] = TOKEN_USER_DEFINED;
    memmove(t->eog + end, t->eog + end + 1, (size_t)(t->n_eog - end - 1) * sizeof *t->eog);
    t->n_eog--;
}

/* Copy the token texts, scores and types; index texts. */
static int s_vocab(tokenizer *t, const gguf_file *g, char *err, size_t errlen)
{
    const gguf_kv *tok, *sc = NULL, *ty = NULL;
    uint64_t n, m;
    if (gguf_get_arr(g, "tokenizer.ggml.tokens", GGUF_T_STRING, &tok, &n, err, errlen))
        return -1;
    if (n == 0 || n > INT32_MAX) {
        s_err(err, errlen, g->path, "tokenizer.ggml.tokens has %llu entries (want 1..%d)",
              (unsigned long long)n, INT32_MAX);
        return -1;
    }
    t->n_vocab = (int32_t)n;
    if (gguf_find_kv(g, "tokenizer.ggml.scores")) {
        if (gguf_get_arr(g, "tokenizer.ggml.scores", GGUF_T_FLOAT32, &sc, &m, err, errlen))
            return -1;
        if (m != n) {
            s_err(err, errlen, g->path, "tokenizer.ggml.scores has %llu entries but "
                  "tokenizer.ggml.tokens has %llu", (unsigned long long)m, (unsigned long long)n);
            return -1;
        }
    }
    if (gguf_find_kv(g, "tokenizer.ggml.token_type")) {
        if (gguf_get_arr(g, "tokenizer.ggml.token_type", GGUF_T_INT32, &ty, &m, err, errlen))
            return -1;
        if (m != n) {
            s_err(err, errlen, g->path, "tokenizer.ggml.token_type has %llu entries but "
                  "tokenizer.ggml.tokens has %llu", (unsigned long long)m, (unsigned long long)n);
            return -1;
        }
    }
    size_t total = 0;
    for (uint64_t i = 0; i < n; i++)
        total += strlen(gguf_arr_str(tok, i)) + 1;
    t->text = malloc((size_t)n * sizeof *t->text);
    t->text_len = malloc((size_t)n * sizeof *t->text_len);
    t->text_blob = malloc(total);
    t->score = calloc((size_t)n, sizeof *t->score);
    t->type = malloc((size_t)n);
    t->special = malloc((size_t)n * sizeof *t->special);
    uint32_t slots = s_slots(n);
    t->text_mask = slots - 1;
    t->text_slot = calloc(slots, sizeof *t->text_slot);
    if (!t->text || !t->text_len || !t->text_blob || !t->score || !t->type || !t->special ||
        !t->text_slot) {
        s_err(err, errlen, g->path, "out of memory for %llu tokens", (unsigned long long)n);
        return -1;
    }
    char *p = t->text_blob;
    for (uint64_t i = 0; i < n; i++) {
        const char *s = gguf_arr_str(tok, i);
        size_t len = strlen(s);
        memcpy(p, s, len + 1);
        t->text[i] = p;
        t->text_len[i] = (uint32_t)len;
        p += len + 1;
        if (len > t->max_text)
            t->max_text = len;
        if (sc)
            t->score[i] = gguf_arr_f32(sc, i);
        int64_t ty_i = ty ? gguf_arr_i64(ty, i) : TOKEN_NORMAL;
        if (ty_i < TOKEN_UNDEFINED || ty_i > TOKEN_BYTE) {
            s_err(err, errlen, g->path, "tokenizer.ggml.token_type[%llu] = %lld (token '%.40s') "
                  "is not a token type 0..6", (unsigned long long)i, (long long)ty_i, s);
            return -1;
        }
        t->type[i] = (uint8_t)ty_i;
        int by_text = s_by_text(t->text[i], len);
        if (by_text && t->type[i] != TOKEN_UNUSED)
            t->type[i] = TOKEN_CONTROL;
        if (by_text == 2 && t->n_eog < (int)(sizeof t->eog / sizeof t->eog[0]))
            t->eog[t->n_eog++] = (int32_t)i;
        /* llama.cpp's "quick hack for gpt-oss": harmony's markup tokens are user-defined,
         * parsed in any text and always rendered */
        if (s_is_text(t->text[i], len, "<|channel|>") || s_is_text(t->text[i], len, "<|message|>") ||
            s_is_text(t->text[i], len, "<|start|>") || s_is_text(t->text[i], len, "<|constrain|>"))
            t->type[i] = TOKEN_USER_DEFINED;
        /* A text given twice maps to its last id, as llama.cpp's token_to_id. */
        uint32_t h = (uint32_t)XXH3_64bits(t->text[i], len) & t->text_mask;
        while (t->text_slot[h] && (t->text_len[t->text_slot[h] - 1] != len ||
                                   memcmp(t->text[t->text_slot[h] - 1], t->text[i], len)))
            h = (h + 1) & t->text_mask;
        t->text_slot[h] = (uint32_t)i + 1;
        if (len && (t->type[i] == TOKEN_CONTROL || t->type[i] == TOKEN_UNKNOWN ||
                    t->type[i] == TOKEN_USER_DEFINED))
            t->special[t->n_special++] = (int32_t)i;
    }
    qsort_r(t->special, (size_t)t->n_special, sizeof *t->special, s_cmp_special, t);
    s_harmony_end(t);
    return 0;
}

/* gpt2 merges: "left right", both halves tokens of the vocabulary; rank = position. */
static int s_merges(tokenizer *t, const gguf_file *g, char *err, size_t errlen)
{
    const gguf_kv *mk;
    uint64_t n;
    if (gguf_get_arr(g, "tokenizer.ggml.merges", GGUF_T_STRING, &mk, &n, err, errlen))
        return -1;
    if (n > (1u << 24)) { /* ranks are heap keys as floats, exact below 2^24 */
        s_err(err, errlen, g->path, "tokenizer.ggml.merges has %llu entries (limit %u)",
              (unsigned long long)n, 1u << 24);
        return -1;
    }
    uint32_t slots = s_slots(n);
    t->merge_mask = slots - 1;
    t->merge_key = calloc(slots, sizeof *t->merge_key);
    t->merge_rank = malloc(slots * sizeof *t->merge_rank);
    if (!t->merge_key || !t->merge_rank) {
        s_err(err, errlen, g->path, "out of memory for %llu merges", (unsigned long long)n);
        return -1;
    }
    for (uint64_t i = 0; i < n; i++) {
        const char *s = gguf_arr_str(mk, i);
        size_t len = strlen(s);
        /* Split at the first space after the first byte, as llama.cpp does. */
        const char *sp = len > 1 ? strchr(s + 1, ' ') : NULL;
        if (!sp) {
            s_err(err, errlen, g->path, "tokenizer.ggml.merges[%llu] '%.60s' is not \"LEFT RIGHT\" "
                  "with two tokens of the vocabulary", (unsigned long long)i, s);
            return -1;
        }
        int32_t a = tok_find(t, s, (size_t)(sp - s)), b = tok_find(t, sp + 1, strlen(sp + 1));
        if (a < 0 || b < 0) {
            s_err(err, errlen, g->path, "tokenizer.ggml.merges[%llu] '%.60s' names '%.*s', which "
                  "is not in tokenizer.ggml.tokens", (unsigned long long)i, s,
                  a < 0 ? (int)(sp - s) : 40, a < 0 ? s : sp + 1);
            return -1;
        }
        uint64_t k = s_pair_key(a, b);
        uint32_t h = (uint32_t)XXH3_64bits(&k, 8) & t->merge_mask;
        while (t->merge_key[h] && t->merge_key[h] != k)
            h = (h + 1) & t->merge_mask;
        if (!t->merge_key[h]) { /* the first of two equal merges keeps its (lower) rank */
            t->merge_key[h] = k;
            t->merge_rank[h] = (uint32_t)i;
        }
    }
    return 0;
}

/* gpt2's bytes_to_unicode: printable bytes stand for themselves, the other 68 for U+0100.. in
 * order, so every byte has a visible one-character stand-in in the vocabulary. */
static void s_byte_table(tokenizer *t)
{
    int next = 256;
    for (int i = 0; i < 324; i++)
        t->byte_dec[i] = -1;
    for (int b = 0; b < 256; b++) {
        int keep = (b >= 33 && b <= 126) || (b >= 161 && b <= 172) || (b >= 174 && b <= 255);
        int cp = keep ? b : next++;
        char *o = t->byte_enc[b];
        t->byte_dec[cp] = (int16_t)b;
        if (cp < 0x80) {
            o[0] = (char)cp;
            o[1] = '\0';
        } else {
            o[0] = (char)(0xC0 | (cp >> 6));
            o[1] = (char)(0x80 | (cp & 0x3F));
            o[2] = '\0';
        }
    }
}

static int32_t s_find_text(const tokenizer *t, const char *const *names)
{
    for (; *names; names++) {
        int32_t id = tok_find(t, *names, strlen(*names));
        if (id >= 0)
            return id;
    }
    return -1;
}

tokenizer *tokenizer_open(const gguf_file *g, char *err, size_t errlen)
{
    const char *model = NULL, *pre = NULL;
    const char *path = g ? g->path : NULL;
    if (err && errlen)
        err[0] = '\0';
    tokenizer *t = calloc(1, sizeof *t);
    if (!t) {
        s_err(err, errlen, path, "out of memory");
        return NULL;
    }
    if (!g || gguf_get_str(g, "tokenizer.ggml.model", &model, err, errlen))
        goto err;
    if (!strcmp(model, "llama")) {
        t->kind = TOK_SPM;
        t->pre = PRE_NONE;
        t->pre_name = "-";
    } else if (!strcmp(model, "gpt2")) {
        t->kind = TOK_BPE;
    } else {
        s_err(err, errlen, path, "tokenizer.ggml.model '%.40s' is not supported (supported: llama, "
              "gpt2)", model);
        goto err;
    }
    if (s_vocab(t, g, err, errlen))
        goto err;
    if (t->kind == TOK_BPE) {
        /* llama.cpp treats a missing pre-tokenizer as "default" (older conversions). */
        if (gguf_find_kv(g, "tokenizer.ggml.pre") && gguf_get_str(g, "tokenizer.ggml.pre", &pre, err, errlen))
            goto err;
        if (!pre || !strcmp(pre, "default")) {
            t->pre = PRE_DEFAULT;
            t->pre_name = "default";
            t->clean_spaces = 1;
        } else if (!strcmp(pre, "llama-bpe") || !strcmp(pre, "llama3") || !strcmp(pre, "llama-v3")) {
            t->pre = PRE_LLAMA3;
            t->pre_name = "llama-bpe";
            t->clean_spaces = 1;
            t->ignore_merges = 1; /* a word that is a token is that token, merges or not */
            t->add_bos = 1;
        } else if (!strcmp(pre, "dbrx")) {
            /* cl100k (DBRX's, Phi-4's): llama.cpp runs LLaMA 3's regex, merges always applied
             * and BOS not added (a BPE vocabulary's defaults), clean-up of spaces on */
            t->pre = PRE_LLAMA3;
            t->pre_name = "dbrx";
            t->clean_spaces = 1;
        } else if (!strcmp(pre, "qwen2")) {
            t->pre = PRE_QWEN2;
            t->pre_name = "qwen2";
        } else if (!strcmp(pre, "smollm")) {
            t->pre = PRE_SMOLLM;
            t->pre_name = "smollm";
        } else if (!strcmp(pre, "gpt-4o")) { /* o200k: GPT-4o's, Phi-4-mini's */
            t->pre = PRE_GPT4O;
            t->pre_name = "gpt-4o";
        } else {
            s_err(err, errlen, path, "tokenizer.ggml.pre '%.40s' is not supported (supported: "
                  "llama-bpe, dbrx, qwen2, smollm, gpt-4o, default)", pre);
            goto err;
        }
        if (s_merges(t, g, err, errlen) || tok_pre_compile(t, err, errlen))
            goto err;
        s_byte_table(t);
        for (int b = 0; b < 256; b++)
            t->byte_id[b] = tok_find(t, t->byte_enc[b], strlen(t->byte_enc[b]));
        t->bos = 11; /* llama.cpp's gpt2 defaults, kept only if in range */
        t->eos = 11;
        t->unk = -1;
        t->pad = -1;
    } else {
        t->add_bos = 1;
        t->add_space_prefix = 1;
        t->bos = 1; /* SentencePiece's fixed ids, unless the file says otherwise */
        t->eos = 2;
        t->unk = 0;
        t->pad = -1;
        for (int b = 0; b < 256; b++) {
            char hex[8];
            snprintf(hex, sizeof hex, "<0x%02X>", b);
            t->byte_id[b] = tok_find(t, hex, 6);
        }
    }
    if (t->bos >= t->n_vocab)
        t->bos = -1;
    if (t->eos >= t->n_vocab)
        t->eos = -1;
    if (t->unk >= t->n_vocab)
        t->unk = -1;
    t->eot = t->eom = -1;
    if (s_special_id(g, t, "tokenizer.ggml.bos_token_id", &t->bos, err, errlen) ||
        s_special_id(g, t, "tokenizer.ggml.eos_token_id", &t->eos, err, errlen) ||
        s_special_id(g, t, "tokenizer.ggml.eot_token_id", &t->eot, err, errlen) ||
        s_special_id(g, t, "tokenizer.ggml.eom_token_id", &t->eom, err, errlen) ||
        s_special_id(g, t, "tokenizer.ggml.unknown_token_id", &t->unk, err, errlen) ||
        s_special_id(g, t, "tokenizer.ggml.padding_token_id", &t->pad, err, errlen) ||
        s_opt_bool(g, "tokenizer.ggml.add_bos_token", &t->add_bos, err, errlen) ||
        s_opt_bool(g, "tokenizer.ggml.add_eos_token", &t->add_eos, err, errlen) ||
        s_opt_bool(g, "tokenizer.ggml.add_space_prefix", &t->add_space_prefix, err, errlen))
        goto err;
    /* Files often leave EOT/EOM implicit; llama.cpp recognises them by text. */
    if (t->eot < 0) {
        static const char *const eot[] = { "<|eot_id|>", "<|im_end|>", "<|end|>", "<end_of_turn>",
                                           "<|endoftext|>", "<EOT>", NULL };
        t->eot = s_find_text(t, eot);
    }
    if (t->eom < 0) {
        static const char *const eom[] = { "<|eom_id|>", NULL };
        t->eom = s_find_text(t, eom);
    }
    if ((t->add_bos && t->bos < 0) || (t->add_eos && t->eos < 0)) {
        s_err(err, errlen, path, "the file asks to add %s but names no such token",
              t->add_bos && t->bos < 0 ? "BOS" : "EOS");
        goto err;
    }
    if (tok_pieces_build(t, err, errlen))
        goto err;
    return t;
err:
    if (err && errlen && !err[0])
        s_err(err, errlen, path, "invalid tokenizer metadata");
    tokenizer_free(&t);
    return NULL;
}

tokenizer *tokenizer_load(const char *path, char *err, size_t errlen)
{
    gguf_file *g = gguf_open(path, err, errlen);
    if (!g)
        return NULL;
    tokenizer *t = tokenizer_open(g, err, errlen);
    gguf_close(&g);
    return t;
}

void tokenizer_free(tokenizer **tp)
{
    if (!tp || !*tp)
        return;
    tokenizer *t = *tp;
    for (int i = 0; i < t->n_re; i++)
        pcre2_code_free(t->re[i]);
    free(t->text);
    free(t->text_len);
    free(t->text_blob);
    free(t->score);
    free(t->type);
    free(t->piece);
    free(t->piece_len);
    free(t->piece_blob);
    free(t->special);
    free(t->text_slot);
    free(t->merge_key);
    free(t->merge_rank);
    free(t);
    *tp = NULL;
}

int32_t tokenizer_n_vocab(const tokenizer *t) { return t->n_vocab; }
int32_t tokenizer_bos(const tokenizer *t) { return t->bos; }
int32_t tokenizer_eos(const tokenizer *t) { return t->eos; }
int32_t tokenizer_eot(const tokenizer *t) { return t->eot; }
int32_t tokenizer_pad(const tokenizer *t) { return t->pad; }

int tokenizer_is_eog(const tokenizer *t, int32_t id)
{
    if (id < 0)
        return 0;
    if (id == t->eos || id == t->eot || id == t->eom)
        return 1;
    for (int i = 0; i < t->n_eog; i++)
        if (t->eog[i] == id)
            return 1;
    return 0;
}

const char *tokenizer_text(const tokenizer *t, int32_t id)
{
    return id >= 0 && id < t->n_vocab ? t->text[id] : NULL;
}

token_type tokenizer_type(const tokenizer *t, int32_t id)
{
    return id >= 0 && id < t->n_vocab ? (token_type)t->type[id] : TOKEN_UNDEFINED;
}

const char *tokenizer_model_name(const tokenizer *t)
{
    return t->kind == TOK_SPM ? "llama" : "gpt2";
}

const char *tokenizer_pre_name(const tokenizer *t)
{
    return t->pre_name;
}
