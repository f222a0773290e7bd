/* cmd_tokenize.c — `swarm tokenize MODEL TEXT`: a file's tokenizer applied to text, ids and pieces out. cli/ */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "base/exitcode.h"
#include "cli/cmd.h"
#include "text/tokenizer.h"

static void s_usage(FILE *f)
{
    fprintf(f,
            "usage: swarm tokenize MODEL.gguf TEXT [--no-bos] [--special]\n"
            "       swarm tokenize MODEL.gguf --file PATH [--no-bos] [--special]\n"
            "  Prints the ids as a list, then one line per token: id, the token as stored in\n"
            "  the file, and the text it decodes to (C escapes for control and partial bytes).\n"
            "  The tokenizer (model, pre-tokenizer, vocabulary size, special ids) and the time\n"
            "  taken go to stderr.\n"
            "  --no-bos      do not add BOS (or EOS) even where the file says to\n"
            "  --special     control tokens written in the text (<s>, <|eot_id|>) become tokens\n"
            "  --file PATH   tokenize the contents of PATH instead of TEXT\n");
}

/* The bytes of s[0..n) with C escapes for anything not printable ASCII or valid UTF-8. */
static void s_print_escaped(const char *s, size_t n)
{
    for (size_t i = 0; i < n; i++) {
        unsigned char c = (unsigned char)s[i];
        if (c == '\n')
            fputs("\\n", stdout);
        else if (c == '\t')
            fputs("\\t", stdout);
        else if (c == '\r')
            fputs("\\r", stdout);
        else if (c == '\\' || c == '\'')
            printf("\\%c", c);
        else if (c < 0x20 || c == 0x7f)
            printf("\\x%02x", c);
        else if (c >= 0x80) {
            size_t len = c >= 0xF0 ? 4 : c >= 0xE0 ? 3 : c >= 0xC0 ? 2 : 0;
            int ok = len && i + len <= n;
            for (size_t k = 1; ok && k < len; k++)
                ok = ((unsigned char)s[i + k] & 0xC0) == 0x80;
            if (ok) {
                fwrite(s + i, 1, len, stdout);
                i += len - 1;
            } else {
                printf("\\x%02x", c);
            }
        } else
            putchar(c);
    }
}

static char *s_read_all(const char *path, size_t *n)
{
    FILE *f = fopen(path, "rb");
    char *buf = NULL;
    size_t cap = 0;
    *n = 0;
    if (!f)
        return NULL;
    for (;;) {
        if (*n + 65536 + 1 > cap) {
            cap = (*n + 65536 + 1) * 2;
            char *nb = realloc(buf, cap);
            if (!nb) {
                free(buf);
                fclose(f);
                return NULL;
            }
            buf = nb;
        }
        size_t got = fread(buf + *n, 1, 65536, f);
        *n += got;
        if (got < 65536)
            break;
    }
    int bad = ferror(f);
    fclose(f);
    if (bad) {
        free(buf);
        return NULL;
    }
    buf[*n] = '\0';
    return buf;
}

int cmd_tokenize(int argc, char **argv)
{
    const char *model = NULL, *text = NULL, *file = NULL;
    unsigned flags = TOKENIZER_ADD_SPECIAL;
    char err[512];
    for (int i = 1; i < argc; i++) {
        if (!strcmp(argv[i], "--help") || !strcmp(argv[i], "-h")) {
            s_usage(stdout);
            return EXIT_OK;
        } else if (!strcmp(argv[i], "--no-bos")) {
            flags &= ~TOKENIZER_ADD_SPECIAL;
        } else if (!strcmp(argv[i], "--special")) {
            flags |= TOKENIZER_PARSE_SPECIAL;
        } else if (!strcmp(argv[i], "--file") && i + 1 < argc) {
            file = argv[++i];
        } else if (argv[i][0] == '-' && argv[i][1] == '-') {
            fprintf(stderr, "swarm tokenize: unknown option '%s'\n", argv[i]);
            s_usage(stderr);
            return EXIT_USAGE;
        } else if (!model) {
            model = argv[i];
        } else if (!text) {
            text = argv[i];
        } else {
            fprintf(stderr, "swarm tokenize: unexpected argument '%s' (quote the text)\n", argv[i]);
            return EXIT_USAGE;
        }
    }
    if (!model || (!text) == (!file)) {
        s_usage(stderr);
        return EXIT_USAGE;
    }
    size_t len = text ? strlen(text) : 0;
    char *owned = NULL;
    if (file && !(owned = s_read_all(file, &len))) {
        fprintf(stderr, "swarm tokenize: %s: %s\n", file, strerror(errno ? errno : EIO));
        return EXIT_FAIL;
    }
    if (file)
        text = owned;
    tokenizer *t = tokenizer_load(model, err, sizeof err);
    if (!t) {
        fprintf(stderr, "swarm tokenize: %s\n", err);
        free(owned);
        return EXIT_FAIL;
    }
    int32_t *ids = NULL;
    size_t n = 0;
    struct timespec t0, t1;
    clock_gettime(CLOCK_MONOTONIC, &t0);
    int rc = tokenizer_encode(t, text, len, flags, &ids, &n, err, sizeof err);
    clock_gettime(CLOCK_MONOTONIC, &t1);
    if (rc) {
        fprintf(stderr, "swarm tokenize: %s\n", err);
        tokenizer_free(&t);
        free(owned);
        return EXIT_FAIL;
    }
    fprintf(stderr, "tokenizer: %s, pre %s, %d tokens, bos %d eos %d eot %d pad %d\n",
            tokenizer_model_name(t), tokenizer_pre_name(t), tokenizer_n_vocab(t), tokenizer_bos(t),
            tokenizer_eos(t), tokenizer_eot(t), tokenizer_pad(t));
    fprintf(stderr, "%zu bytes -> %zu tokens in %.3f ms\n", len, n,
            (double)(t1.tv_sec - t0.tv_sec) * 1e3 + (double)(t1.tv_nsec - t0.tv_nsec) / 1e6);
    if (n >= 2 && ids[0] == tokenizer_bos(t) && ids[1] == ids[0] && (flags & TOKENIZER_ADD_SPECIAL))
        fprintf(stderr, "note: the text starts with BOS and BOS was added too (two BOS, as "
                        "llama.cpp gives; --no-bos avoids it)\n");
    putchar('[');
    for (size_t i = 0; i < n; i++)
        printf("%s%d", i ? ", " : "", ids[i]);
    puts("]");
    for (size_t i = 0; i < n; i++) {
        size_t pl;
        const char *p = tokenizer_piece(t, ids[i], 1, &pl);
        const char *raw = tokenizer_text(t, ids[i]);
        printf("%6d  ", ids[i]);
        s_print_escaped(raw, strlen(raw));
        fputs("  '", stdout);
        s_print_escaped(p, pl);
        puts("'");
    }
    free(ids);
    tokenizer_free(&t);
    free(owned);
    return EXIT_OK;
}
