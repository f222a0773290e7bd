/* test_tokenizer.c — ids against llama.cpp's on real vocabularies, decode, streaming decode, bad metadata. tests/
 *
 * The expectations (tests/fixtures/tok/expected.tsv) and the vocabulary-only GGUF files were made
 * by tests/fixtures/make_vocab_fixtures.sh with llama.cpp itself (node-llama-cpp's prebuilt
 * binary), so this test needs neither node nor the network.
 */
#include "gguf/gguf.h"
#include "tests/check.h"
#include "text/tokenizer.h"

#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#define FIX_DIR "tests/fixtures/tok"

static char s_dir[512];

/* This thread's CPU time, not the wall clock: on a loaded machine (CI beside other runs, 2
 * cores shared by several builds) a wall-clock time includes whatever preempted the loop, and
 * one preemption in the best of 5 of the small text was enough to fail the ratio below. */
static double s_now_ms(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
    return (double)ts.tv_sec * 1e3 + (double)ts.tv_nsec / 1e6;
}

/* Unpack a committed fixture into the test's temporary folder. */
static int s_gunzip(const char *name, char *out, size_t outlen)
{
    char cmd[2048];
    snprintf(out, outlen, "%s/%s", s_dir, name);
    snprintf(cmd, sizeof cmd, "gzip -dc '%s/%s.gz' > '%s'", FIX_DIR, name, out);
    return system(cmd) == 0 ? 0 : -1;
}

static size_t s_unhex(const char *h, char *out)
{
    size_t n = 0;
    for (; h[0] && h[1]; h += 2) {
        unsigned v;
        sscanf(h, "%2x", &v);
        out[n++] = (char)v;
    }
    out[n] = '\0';
    return n;
}

static int s_valid_utf8(const char *s, size_t n)
{
    for (size_t i = 0; i < n;) {
        unsigned char c = (unsigned char)s[i];
        size_t len = c < 0x80 ? 1 : c >= 0xC2 && c < 0xE0 ? 2 : c >= 0xE0 && c < 0xF0 ? 3
                   : c >= 0xF0 && c < 0xF5 ? 4 : 0;
        if (!len || i + len > n)
            return 0;
        for (size_t k = 1; k < len; k++)
            if (((unsigned char)s[i + k] & 0xC0) != 0x80)
                return 0;
        i += len;
    }
    return 1;
}

/* The Llama 3 vocabulary under another pre-tokenizer: the fixture's key changed in memory, as
 * the generator changed it in the file it gave llama.cpp. */
static tokenizer *s_open_with_pre(const char *path, const char *pre)
{
    char err[512];
    gguf_file *g = gguf_open(path, err, sizeof err);
    if (!g)
        return NULL;
    for (uint64_t i = 0; i < g->n_kv; i++) {
        if (!strcmp(g->kv[i].key, "tokenizer.ggml.pre")) {
            free(g->kv[i].str);
            g->kv[i].str = strdup(pre);
        }
    }
    tokenizer *t = tokenizer_open(g, err, sizeof err);
    CHECK(t != NULL, "open %s with pre %s: %s", path, pre, err);
    gguf_close(&g);
    return t;
}

/* Feed ids one at a time; every chunk must be whole UTF-8 where the pieces were; returns the
 * concatenation (caller frees). */
static char *s_stream(const tokenizer *t, const int32_t *ids, size_t n, int special,
                      int *chunks_ok)
{
    tokenizer_decoder d;
    char err[256];
    size_t cap = 64, len = 0, cl;
    char *all = malloc(cap);
    tokenizer_decoder_init(&d, t, special);
    for (size_t i = 0; i <= n; i++) {
        const char *c = i < n ? tokenizer_decoder_push(&d, ids[i], &cl, err, sizeof err)
                              : tokenizer_decoder_flush(&d, &cl);
        if (!c) {
            *chunks_ok = 0;
            break;
        }
        if (!s_valid_utf8(c, cl) && i < n)
            *chunks_ok = 0;
        while (len + cl + 1 > cap)
            all = realloc(all, cap *= 2);
        memcpy(all + len, c, cl);
        len += cl;
    }
    all[len] = '\0';
    tokenizer_decoder_free(&d);
    return all;
}

/* ---------------------------------------------------------------- llama.cpp parity */

/* One table of llama.cpp's answers (tsv, at least min_lines of them): llama-spm lines through
 * spm_path, the lines of fixture `own` (qwen3-bpe, gemma3-spm, gemma2-spm, gpt4o-bpe,
 * phi4-bpe) through own_path (NULL: none), the rest through the Llama 3 vocabulary under their
 * pre-tokenizer. */
static void test_parity(const char *tsv, size_t min_lines, const char *spm_path,
                        const char *bpe_path, const char *own, const char *own_path)
{
    FILE *f = fopen(tsv, "r");
    CHECK(f != NULL, "open %s: %s", tsv, strerror(errno));
    if (!f)
        return;
    const char *pres[] = { "llama-bpe", "qwen2", "smollm", "default" };
    tokenizer *spm = tokenizer_load(spm_path, (char[256]){ 0 }, 256);
    tokenizer *ot = own_path ? tokenizer_load(own_path, (char[256]){ 0 }, 256) : NULL;
    CHECK(!own_path || ot, "%s fixture opens", own ? own : "?");
    tokenizer *bpe[4];
    for (int i = 0; i < 4; i++)
        bpe[i] = s_open_with_pre(bpe_path, pres[i]);
    CHECK(spm != NULL, "spm fixture opens");
    size_t lines = 0, id_bad = 0, dec_bad = 0, stream_bad = 0, js_checked = 0;
    size_t cap = 1 << 20;
    char *line = malloc(cap), *text = malloc(cap / 2), *want = malloc(cap / 2), err[512];
    while (spm && fgets(line, (int)cap, f)) {
        if (line[0] == '#')
            continue;
        line[strcspn(line, "\n")] = '\0';
        char *fld[7] = { 0 }, *p = line;
        int nf = 0;
        /* strsep keeps empty fields (the empty text has no ids and no text) */
        while (nf < 7 && (fld[nf] = strsep(&p, "\t")))
            nf++;
        CHECK(nf == 7, "expected.tsv line %zu has %d fields", lines + 3, nf);
        if (nf != 7)
            continue;
        lines++;
        tokenizer *t = NULL;
        if (!strcmp(fld[0], "llama-spm"))
            t = spm;
        else if (own && !strcmp(fld[0], own))
            t = ot;
        if (!t && strcmp(fld[0], "llama3-bpe"))
            continue;
        for (int i = 0; i < 4 && !t; i++)
            if (!strcmp(fld[1], pres[i]))
                t = bpe[i];
        if (!t)
            continue;
        int special = fld[2][0] == '1';
        size_t tl = s_unhex(fld[3], text), wl = s_unhex(fld[5], want);
        js_checked += fld[6][0] == '=';
        int32_t *ids = NULL;
        size_t n = 0;
        int rc = tokenizer_encode(t, text, tl, special ? TOKENIZER_PARSE_SPECIAL : 0, &ids, &n,
                                  err, sizeof err);
        char got[1 << 16] = "";
        size_t gl = 0;
        for (size_t i = 0; rc == 0 && i < n && gl + 16 < sizeof got; i++)
            gl += (size_t)snprintf(got + gl, sizeof got - gl, "%s%d", i ? "," : "", ids[i]);
        if (rc || strcmp(got, fld[4])) {
            if (id_bad++ < 12)
                fprintf(stderr, "ids differ: %s %s special=%d text '%.60s'\n  llama.cpp %.200s\n  "
                        "swarm     %.200s\n", fld[0], fld[1], special, text, fld[4], got);
        }
        char *dec = NULL;
        size_t dl = 0;
        if (rc == 0 && tokenizer_decode(t, ids, n, special, &dec, &dl, err, sizeof err) == 0) {
            if (dl != wl || memcmp(dec, want, wl)) {
                if (dec_bad++ < 8)
                    fprintf(stderr, "decode differs: %s %s special=%d '%.60s' -> '%.60s'\n",
                            fld[0], fld[1], special, want, dec);
            }
            /* The stream gives the same text where no space cleaning applies, and never
             * a split character. */
            int ok = 1;
            char *s = s_stream(t, ids, n, special, &ok);
            int cleans = !strcmp(fld[1], "llama-bpe") || !strcmp(fld[1], "default") ||
                         !strcmp(fld[1], "dbrx"); /* the pre-tokenizers that clean spaces */
            if (!ok || (!cleans && strcmp(s, dec)))
                stream_bad++;
            free(s);
        } else {
            dec_bad++;
        }
        free(dec);
        free(ids);
    }
    fclose(f);
    CHECK(lines >= min_lines, "%s has %zu expectations", tsv, lines);
    CHECK(id_bad == 0, "%zu of %zu strings tokenize differently from llama.cpp", id_bad, lines);
    CHECK(dec_bad == 0, "%zu of %zu decodes differ from llama.cpp's detokenize", dec_bad, lines);
    CHECK(stream_bad == 0, "%zu of %zu streamed decodes split a character or differ", stream_bad,
          lines);
    printf("  llama.cpp parity (%s): %zu expectations (%zu also agreed by the JS tokenizers), %zu id "
           "and %zu decode mismatches\n", tsv, lines, js_checked, id_bad, dec_bad);
    free(line);
    free(text);
    free(want);
    tokenizer_free(&spm);
    tokenizer_free(&ot);
    for (int i = 0; i < 4; i++)
        tokenizer_free(&bpe[i]);
}

/* ---------------------------------------------------------------- specials, streaming, speed */

static void test_behaviour(const char *spm_path, const char *bpe_path)
{
    char err[512];
    tokenizer *spm = tokenizer_load(spm_path, err, sizeof err);
    tokenizer *bpe = tokenizer_load(bpe_path, err, sizeof err);
    CHECK(spm && bpe, "fixtures open: %s", err);
    if (!spm || !bpe)
        goto out;
    CHECK(tokenizer_bos(spm) == 1 && tokenizer_eos(spm) == 2 && tokenizer_n_vocab(spm) == 32000,
          "spm ids");
    CHECK(tokenizer_bos(bpe) == 128000 && tokenizer_eos(bpe) == 128009 &&
              tokenizer_eot(bpe) == 128009 && tokenizer_pad(bpe) == 128004 &&
              tokenizer_is_eog(bpe, 128009) && !tokenizer_is_eog(bpe, 9906), "bpe ids");
    CHECK(tokenizer_type(spm, 1) == TOKEN_CONTROL && tokenizer_type(spm, 3) == TOKEN_BYTE &&
              tokenizer_type(spm, 0) == TOKEN_UNKNOWN && tokenizer_type(bpe, 128000) == TOKEN_CONTROL,
          "token types");
    int32_t *ids = NULL;
    size_t n = 0;
    /* add_special: BOS first, as the files ask. */
    CHECK(tokenizer_encode(spm, "Hello", 5, TOKENIZER_ADD_SPECIAL, &ids, &n, err, sizeof err) == 0 &&
              n == 2 && ids[0] == 1 && ids[1] == 15043, "spm BOS + Hello");
    free(ids);
    CHECK(tokenizer_encode(bpe, "", 0, TOKENIZER_ADD_SPECIAL, &ids, &n, err, sizeof err) == 0 &&
              n == 1 && ids[0] == 128000, "bpe empty text is just BOS");
    free(ids);

    /* Streaming: 🦙 is four byte tokens in the SentencePiece vocabulary; nothing comes out
     * until the fourth completes it. */
    CHECK(tokenizer_encode(spm, "\xF0\x9F\xA6\x99", 4, 0, &ids, &n, err, sizeof err) == 0 &&
              n == 5 && ids[0] == 29871, "llama emoji is ▁ + 4 byte tokens (n=%zu)", n);
    if (n == 5) {
        tokenizer_decoder d;
        size_t cl, got[5];
        const char *c = NULL;
        tokenizer_decoder_init(&d, spm, 0);
        for (int i = 0; i < 5; i++) {
            c = tokenizer_decoder_push(&d, ids[i], &cl, err, sizeof err);
            got[i] = c ? cl : 99;
        }
        CHECK(got[0] == 0 && got[1] == 0 && got[2] == 0 && got[3] == 0 && got[4] == 4 &&
                  c && !memcmp(c, "\xF0\x9F\xA6\x99", 4),
              "held until complete: %zu %zu %zu %zu %zu", got[0], got[1], got[2], got[3], got[4]);
        /* A truncated sequence comes out on flush, as its bytes. */
        tokenizer_decoder_push(&d, ids[1], &cl, err, sizeof err);
        tokenizer_decoder_push(&d, ids[2], &cl, err, sizeof err);
        c = tokenizer_decoder_flush(&d, &cl);
        CHECK(cl == 2 && !memcmp(c, "\xF0\x9F", 2), "flush gives the held bytes (%zu)", cl);
        CHECK(tokenizer_decoder_push(&d, 999999, &cl, err, sizeof err) == NULL &&
                  strstr(err, "999999"), "bad id in the stream: %s", err);
        tokenizer_decoder_free(&d);
    }
    free(ids);

    /* Invalid UTF-8 is tokenized byte-wise and decodes back to the same bytes. SentencePiece
     * takes a lead byte's length on trust, as llama.cpp does (0xFF claims 4 bytes), so a space
     * swallowed into such a "character" would come back as the bytes of its "▁": the text
     * for it has none there. */
    for (int k = 0; k < 2; k++) {
        tokenizer *t = k ? bpe : spm;
        const char *bad = k ? "ok \xFF\xFE broken \xE2\x82" : "ok\xFF\xFE" "broken \xE2\x82";
        size_t bl = strlen(bad);
        char *dec = NULL;
        size_t dl = 0;
        int rc = tokenizer_encode(t, bad, bl, 0, &ids, &n, err, sizeof err);
        CHECK(rc == 0 && tokenizer_decode(t, ids, n, 0, &dec, &dl, err, sizeof err) == 0 &&
                  dl == bl && !memcmp(dec, bad, dl), "%s: invalid UTF-8 round trip",
              tokenizer_model_name(t));
        free(dec);
        free(ids);
    }
    int32_t oob[] = { 5, 200000 };
    char *dec = NULL;
    size_t dl;
    CHECK(tokenizer_decode(spm, oob, 2, 0, &dec, &dl, err, sizeof err) == -1 && strstr(err, "200000"),
          "decode of an id out of range: %s", err);

    /* The merge loops are O(n log n): 10x the text takes far less than the 100x of an O(n^2)
     * loop. Times are measured here (best of 5, the thread's CPU time) and only compared with each other. The
     * SentencePiece loop merges the whole 10 kB as one word, so its heap and symbols grow
     * with the text (about 1 MB at 10 kB, this machine's L2 size) and 10x the text measured
     * 18-26x the time (dev machine, 2026-12-01; gpt2's short words: 10x). The line is drawn
     * at 50x, halfway between those and quadratic's 100x. */
    const char *para = "The quick brown fox jumps over the lazy dog; 1234567 tokens, "
                       "caf\xC3\xA9 \xE6\x97\xA5\xE6\x9C\xAC\xE8\xAA\x9E and   spaces.\n";
    size_t pl = strlen(para), big = 10 * 1024 / pl + 1;
    char *text = malloc(pl * big + 1);
    for (size_t i = 0; i < big; i++)
        memcpy(text + i * pl, para, pl);
    for (int k = 0; k < 2; k++) {
        tokenizer *t = k ? bpe : spm;
        double ms[2];
        size_t lens[2] = { pl * big / 10, pl * big };
        for (int s = 0; s < 2; s++) {
            ms[s] = 1e30;
            for (int r = 0; r < 5; r++) {
                double t0 = s_now_ms();
                tokenizer_encode(t, text, lens[s], 0, &ids, &n, err, sizeof err);
                double dt = s_now_ms() - t0;
                ms[s] = dt < ms[s] ? dt : ms[s];
                free(ids);
            }
        }
        printf("  %s: %zu bytes in %.3f ms, %zu bytes in %.3f ms (ratio %.1f for 10x the text)\n",
               tokenizer_model_name(t), lens[0], ms[0], lens[1], ms[1], ms[1] / ms[0]);
        CHECK(ms[1] < 50 * ms[0] + 0.05, "%s: 10x the text took %.1fx the time (quadratic is 100x)",
              tokenizer_model_name(t), ms[1] / ms[0]);
    }
    free(text);
out:
    tokenizer_free(&spm);
    tokenizer_free(&bpe);
}

/* ---------------------------------------------------------------- threads */

typedef struct {
    const tokenizer *t;
    const char *text;
    size_t len;
    int32_t *ids;
    size_t n;
    int rc;
} s_job;

static void *s_encode_job(void *arg)
{
    s_job *j = arg;
    char err[256];
    for (int r = 0; r < 20 && j->rc == 0; r++) {
        free(j->ids);
        j->ids = NULL;
        j->rc = tokenizer_encode(j->t, j->text, j->len, TOKENIZER_PARSE_SPECIAL, &j->ids, &j->n,
                                 err, sizeof err);
    }
    return NULL;
}

/* The tokenizer is read-only after open: four threads encoding at once get the ids one
 * thread gets. */
static void test_threads(const char *spm_path, const char *bpe_path)
{
    char err[512];
    const char *text = "<s>Hello \xF0\x9F\xA6\x99 world, 12345 caf\xC3\xA9 <|eot_id|> \n\n  x";
    for (int k = 0; k < 2; k++) {
        tokenizer *t = tokenizer_load(k ? bpe_path : spm_path, err, sizeof err);
        CHECK(t != NULL, "open: %s", err);
        if (!t)
            continue;
        int32_t *ref = NULL;
        size_t nref = 0;
        tokenizer_encode(t, text, strlen(text), TOKENIZER_PARSE_SPECIAL, &ref, &nref, err, sizeof err);
        s_job jobs[4];
        pthread_t th[4];
        for (int i = 0; i < 4; i++) {
            jobs[i] = (s_job){ .t = t, .text = text, .len = strlen(text) };
            pthread_create(&th[i], NULL, s_encode_job, &jobs[i]);
        }
        int same = 1;
        for (int i = 0; i < 4; i++) {
            pthread_join(th[i], NULL);
            same &= jobs[i].rc == 0 && jobs[i].n == nref && !memcmp(jobs[i].ids, ref, nref * 4);
            free(jobs[i].ids);
        }
        CHECK(same && nref > 0, "%s: 4 threads x 20 encodes give the single-thread ids",
              tokenizer_model_name(t));
        free(ref);
        tokenizer_free(&t);
    }
}

/* ---------------------------------------------------------------- bad metadata */

typedef struct {
    const char *label;
    const char *model;        /* NULL: key absent */
    int tokens_as_ints;
    int n_scores, n_types;    /* -1: absent; else the count written */
    int bad_type;             /* a token type of 9 */
    const char *merge;        /* replaces the second merge; NULL keeps it */
    int no_merges;
    const char *pre;
    int bos;                  /* -1: absent */
    int no_tokens;
    const char *want;         /* in the error */
} s_bad;

static void s_write_bad(const char *path, const s_bad *b)
{
    static const char *toks[] = { "<unk>", "<s>", "</s>", "a", "b", "ab", "\xE2\x96\x81" "a" };
    float scores[7] = { 0, 0, 0, -1, -2, -3, -4 };
    int32_t types[9] = { 2, 3, 3, 1, 1, 1, 1, 1, 1 }; /* 9: the "longer" case */
    const char *merges[] = { "a b", b->merge ? b->merge : "ab a" };
    char err[256];
    gguf_writer *w = gguf_writer_new(32);
    gguf_writer_kv_str(w, "general.architecture", "llama");
    if (b->model)
        gguf_writer_kv_str(w, "tokenizer.ggml.model", b->model);
    if (b->tokens_as_ints)
        gguf_writer_kv_arr_i32(w, "tokenizer.ggml.tokens", types, 7);
    else if (!b->no_tokens)
        gguf_writer_kv_arr_str(w, "tokenizer.ggml.tokens", toks, 7);
    if (b->n_scores >= 0)
        gguf_writer_kv_arr_f32(w, "tokenizer.ggml.scores", scores, (uint64_t)b->n_scores);
    if (b->bad_type)
        types[4] = 9;
    if (b->n_types >= 0)
        gguf_writer_kv_arr_i32(w, "tokenizer.ggml.token_type", types, (uint64_t)b->n_types);
    if (b->model && !strcmp(b->model, "gpt2") && !b->no_merges)
        gguf_writer_kv_arr_str(w, "tokenizer.ggml.merges", merges, 2);
    if (b->pre)
        gguf_writer_kv_str(w, "tokenizer.ggml.pre", b->pre);
    if (b->bos >= 0)
        gguf_writer_kv_u32(w, "tokenizer.ggml.bos_token_id", (uint32_t)b->bos);
    int fd = open(path, O_WRONLY | O_CREAT | O_TRUNC, 0644);
    if (fd < 0 || gguf_writer_write_header(w, fd, err, sizeof err))
        fprintf(stderr, "write %s: %s\n", path, err);
    if (fd >= 0)
        close(fd);
    gguf_writer_free(&w);
}

static void test_bad_metadata(void)
{
    char p[600], err[512];
    const s_bad cases[] = {
        { "valid llama", "llama", 0, 7, 7, 0, NULL, 0, NULL, 1, 0, NULL },
        { "valid gpt2", "gpt2", 0, -1, 7, 0, NULL, 0, "qwen2", -1, 0, NULL },
        { "no tokenizer.ggml.model", NULL, 0, 7, 7, 0, NULL, 0, NULL, 1, 0, "tokenizer.ggml.model" },
        { "unknown model", "bert", 0, 7, 7, 0, NULL, 0, NULL, 1, 0, "'bert' is not supported" },
        { "no tokens", "llama", 0, 7, 7, 0, NULL, 0, NULL, 1, 1, "tokenizer.ggml.tokens" },
        { "tokens not strings", "llama", 1, 7, 7, 0, NULL, 0, NULL, 1, 0, "want an array of strings" },
        { "scores shorter", "llama", 0, 5, 7, 0, NULL, 0, NULL, 1, 0, "tokenizer.ggml.scores has 5" },
        { "token types longer", "llama", 0, 7, 9, 0, NULL, 0, NULL, 1, 0, "token_type has 9" },
        { "token type 9", "llama", 0, 7, 7, 1, NULL, 0, NULL, 1, 0, "token_type[4] = 9" },
        { "bos out of range", "llama", 0, 7, 7, 0, NULL, 0, NULL, 70000, 0, "bos_token_id = 70000" },
        { "gpt2 without merges", "gpt2", 0, -1, 7, 0, NULL, 1, "qwen2", -1, 0, "tokenizer.ggml.merges" },
        { "merge of an unknown token", "gpt2", 0, -1, 7, 0, "ab zz", 0, "qwen2", -1, 0, "names 'zz'" },
        { "merge without a space", "gpt2", 0, -1, 7, 0, "abab", 0, "qwen2", -1, 0, "merges[1] 'abab'" },
        { "unknown pre-tokenizer", "gpt2", 0, -1, 7, 0, NULL, 0, "klingon", -1, 0, "'klingon' is not supported" },
    };
    snprintf(p, sizeof p, "%s/badtok.gguf", s_dir);
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        const s_bad *c = &cases[i];
        s_write_bad(p, c);
        err[0] = '\0';
        tokenizer *t = tokenizer_load(p, err, sizeof err);
        if (!c->want) {
            CHECK(t != NULL, "%s: should open: %s", c->label, err);
            int32_t *ids = NULL;
            size_t n = 0;
            if (t && tokenizer_encode(t, "ab a", 4, 0, &ids, &n, err, sizeof err) == 0)
                CHECK(n >= 1, "%s: encodes (%zu ids)", c->label, n);
            free(ids);
        } else {
            CHECK(t == NULL && !strncmp(err, p, strlen(p)) && strstr(err, c->want),
                  "%s: want an error naming the file and '%s', got '%s'", c->label, c->want, err);
            printf("  %-28s -> %s\n", c->label, err);
        }
        tokenizer_free(&t);
    }
}

/* Every byte of a small valid gpt2 vocabulary file flipped to a few values: each variant is
 * refused with a message or opens and round-trips text without a crash (ASan build: no
 * out-of-bounds access either). Truncation at every byte is refused. */
static void test_fuzz(void)
{
    char p[600], q[600], err[512];
    const s_bad base = { "fuzz base", "gpt2", 0, 7, 7, 0, NULL, 0, "smollm", 1, 0, NULL };
    snprintf(p, sizeof p, "%s/fuzztok.gguf", s_dir);
    snprintf(q, sizeof q, "%s/fuzztok_v.gguf", s_dir);
    s_write_bad(p, &base);
    FILE *f = fopen(p, "rb");
    unsigned char buf[4096];
    size_t n = f ? fread(buf, 1, sizeof buf, f) : 0;
    if (f)
        fclose(f);
    CHECK(n > 100 && n < sizeof buf, "fuzz base written (%zu bytes)", n);
    static const unsigned char vals[] = { 0x00, 0x01, 0x20, 0x7f, 0xff };
    size_t opened = 0, refused = 0, bad = 0;
    for (size_t i = 0; i < n; i++) {
        for (size_t v = 0; v <= sizeof vals; v++) {
            unsigned char save = buf[i];
            size_t len = n;
            if (v == sizeof vals)
                len = i; /* truncation */
            else if (vals[v] == save)
                continue;
            else
                buf[i] = vals[v];
            f = fopen(q, "wb");
            fwrite(buf, 1, len, f);
            fclose(f);
            buf[i] = save;
            err[0] = '\0';
            tokenizer *t = tokenizer_load(q, err, sizeof err);
            if (!t) {
                refused++;
                bad += strncmp(err, q, strlen(q)) != 0; /* every refusal names the file */
                continue;
            }
            opened++;
            int32_t *ids = NULL;
            size_t k = 0;
            char *dec = NULL;
            size_t dl;
            static const char text[] = "ab a <s> \xF0\x9F\0tail"; /* a NUL is just a byte */
            if (tokenizer_encode(t, text, sizeof text - 1,
                                 TOKENIZER_ADD_SPECIAL | TOKENIZER_PARSE_SPECIAL, &ids, &k, err,
                                 sizeof err) == 0)
                tokenizer_decode(t, ids, k, 1, &dec, &dl, err, sizeof err);
            free(ids);
            free(dec);
            tokenizer_free(&t);
        }
    }
    CHECK(bad == 0, "%zu refusals do not name the file", bad);
    printf("  byte-flip and truncation fuzz: %zu variants opened, %zu refused with a message\n",
           opened, refused);
}

int main(void)
{
    const char *d = getenv("SWARM_TEST_TMP");
    char spm[600], bpe[600], qwen3[600], gemma3[600], gemma2[600], gpt4o[600], gptoss[600],
        phi4[600];
    snprintf(s_dir, sizeof s_dir, "%s", d && *d ? d : "tests/tmp");
    if (mkdir(s_dir, 0755) && errno != EEXIST) {
        fprintf(stderr, "mkdir %s: %s\n", s_dir, strerror(errno));
        return 1;
    }
    int have = s_gunzip("llama-spm.gguf", spm, sizeof spm) == 0 &&
               s_gunzip("llama3-bpe.gguf", bpe, sizeof bpe) == 0 &&
               s_gunzip("qwen3-bpe.gguf", qwen3, sizeof qwen3) == 0 &&
               s_gunzip("gemma3-spm.gguf", gemma3, sizeof gemma3) == 0 &&
               s_gunzip("gemma2-spm.gguf", gemma2, sizeof gemma2) == 0 &&
               s_gunzip("gpt4o-bpe.gguf", gpt4o, sizeof gpt4o) == 0 &&
               s_gunzip("gptoss-bpe.gguf", gptoss, sizeof gptoss) == 0 &&
               s_gunzip("phi4-bpe.gguf", phi4, sizeof phi4) == 0;
    CHECK(have, "unpack the fixtures from " FIX_DIR " (run from the repository root)");
    if (have) {
        test_parity(FIX_DIR "/expected.tsv", 600, spm, bpe, NULL, NULL);
        test_parity(FIX_DIR "/expected-qwen3.tsv", 150, spm, bpe, "qwen3-bpe", qwen3);
        test_parity(FIX_DIR "/expected-gemma3.tsv", 150, spm, bpe, "gemma3-spm", gemma3);
        test_parity(FIX_DIR "/expected-gemma2.tsv", 150, spm, bpe, "gemma2-spm", gemma2);
        test_parity(FIX_DIR "/expected-gpt4o.tsv", 150, spm, bpe, "gpt4o-bpe", gpt4o);
        test_parity(FIX_DIR "/expected-gptoss.tsv", 150, spm, bpe, "gptoss-bpe", gptoss);
        test_parity(FIX_DIR "/expected-phi4.tsv", 150, spm, bpe, "phi4-bpe", phi4);
        test_behaviour(spm, bpe);
        test_threads(spm, bpe);
    }
    test_bad_metadata();
    test_fuzz();
    return CHECK_DONE("test_tokenizer");
}
