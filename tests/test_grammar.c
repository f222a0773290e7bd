/* test_grammar.c — GBNF parse errors, accept/reject, UTF-8 split across bytes and tokens, masks
 * against a token-by-token check on real vocabularies, the completion budget, lazy triggers,
 * JSON Schema to grammar; prints the cost of a mask. tests/ */
#include "text/grammar.h"
#include "text/json_schema.h"
#include "text/tool_call.h"
#include "tests/check.h"

#include <errno.h>
#include <jansson.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>

#define FIX_DIR "tests/fixtures/tok"

static char s_dir[512];

/* llama.cpp's grammars/json.gbnf, as upstream writes it (multi-line rules, comments). */
static const char *const s_json_gbnf =
    "root   ::= object\n"
    "value  ::= object | array | string | number | (\"true\" | \"false\" | \"null\") ws\n"
    "\n"
    "object ::=\n"
    "  \"{\" ws (\n"
    "            string \":\" ws value\n"
    "    (\",\" ws string \":\" ws value)*\n"
    "  )? \"}\" ws\n"
    "\n"
    "array  ::=\n"
    "  \"[\" ws (\n"
    "            value\n"
    "    (\",\" ws value)*\n"
    "  )? \"]\" ws\n"
    "\n"
    "string ::=\n"
    "  \"\\\"\" (\n"
    "    [^\"\\\\\\x7F\\x00-\\x1F] |\n"
    "    \"\\\\\" ([\"\\\\bfnrt] | \"u\" [0-9a-fA-F]{4}) # escapes\n"
    "  )* \"\\\"\" ws\n"
    "\n"
    "number ::= (\"-\"? ([0-9] | [1-9] [0-9]{0,15})) (\".\" [0-9]+)? ([eE] [-+]? [0-9] [1-9]{0,15})? ws\n"
    "\n"
    "# Optional space: by convention, applied in this grammar after literal chars when allowed\n"
    "ws ::= | \" \" | \"\\n\" [ \\t]{0,20}\n";

static double s_now_ms(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec * 1e3 + (double)ts.tv_nsec / 1e6;
}

static grammar *s_parse(const char *src)
{
    char err[256] = "";
    grammar *g = grammar_parse(src, NULL, err, sizeof err);
    CHECK(g != NULL, "parse: %s\n%s", err, src);
    return g;
}

/* 1 when text is a whole sentence of g, fed in pieces of `step` bytes. */
static int s_match(const grammar *g, const char *text, size_t step)
{
    char err[256];
    grammar_state *s = grammar_state_new(g, NULL, NULL, 0, err, sizeof err);
    if (!s)
        return -1;
    size_t n = strlen(text);
    int ok = 1;
    for (size_t i = 0; i < n && ok; i += step)
        ok = grammar_accept_bytes(s, text + i, n - i < step ? n - i : step) == 0;
    ok = ok && grammar_accepting(s);
    grammar_state_free(&s);
    return ok;
}

static void s_expect(const char *src, const char *const *yes, const char *const *no)
{
    grammar *g = s_parse(src);
    if (!g)
        return;
    for (size_t i = 0; yes && yes[i]; i++)
        for (size_t step = 1; step <= 3; step++)
            CHECK(s_match(g, yes[i], step) == 1, "%s should accept '%s' (step %zu)", src,
                  yes[i], step);
    for (size_t i = 0; no && no[i]; i++)
        CHECK(s_match(g, no[i], 1) == 0, "%s should refuse '%s'", src, no[i]);
    grammar_free(&g);
}

static void test_parse_errors(void)
{
    static const struct { const char *src, *needle; } bad[] = {
        { "rot ::= \"a\"\n", "no rule named 'root'" },
        { "root ::= foo\n", "rule 'foo' is used but never defined" },
        { "root ::= root \"a\" | \"b\"\n", "left recursive" },
        { "root ::= a\na ::= b a\nb ::= \"x\"?\n", "left recursive" },
        { "root ::= \"abc\n", "unterminated string literal" },
        { "root ::= [abc\n", "unterminated character class" },
        { "root ::= \"\\q\"\n", "unknown escape" },
        { "root ::= \"a\"{3,1}\n", "maximum is below the minimum" },
        { "root ::= \"a\"{5000}\n", "repetition count above" },
        { "root ::= *\n", "expecting an item before the repetition" },
        { "root ::= \"a\"\nroot ::= \"b\"\n", "defined twice" },
        { "root = \"a\"\n", "expecting ::=" },
        { "root ::= (\"a\"\n", "expecting ')'" },
        { "root ::= []\n", "empty character class" },
        { "root ::= \"\\x4\"\n", "hex digits" },
        { "root ::= r\nr ::= \"a\" r\n", "matches no finite text" },
    };
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        char err[256] = "";
        grammar *g = grammar_parse(bad[i].src, NULL, err, sizeof err);
        CHECK(g == NULL && strstr(err, bad[i].needle), "'%s': want '%s', got '%s'", bad[i].src,
              bad[i].needle, err);
        grammar_free(&g);
    }
    char err[256] = "";
    grammar *g = grammar_parse("root ::= \"a\"\n\nroot2 ::= \"b\" @\n", NULL, err, sizeof err);
    CHECK(!g && strstr(err, "line 3, column 15"), "position of an error: %s", err);
    grammar_free(&g);
}

/* Mutated grammars and schemas: a grammar or a clear error, never a crash (ASan: make asan). */
static void test_fuzz(void)
{
    uint64_t x = 0x2545f4914f6cdd1dull;
    static const char alphabet[] = "\"[]()|*+?{},.-^\\:=# \nabr0123456789x";
    size_t n = strlen(s_json_gbnf), ok = 0, refused = 0;
    char *buf = malloc(n + 1), err[256];
    for (int it = 0; buf && it < 3000; it++) {
        memcpy(buf, s_json_gbnf, n + 1);
        int edits = 1 + it % 4;
        for (int e = 0; e < edits; e++) {
            x ^= x << 13, x ^= x >> 7, x ^= x << 17;
            size_t at = (size_t)(x % n);
            buf[at] = alphabet[(x >> 32) % (sizeof alphabet - 1)];
        }
        if (it % 7 == 0)
            buf[(x >> 16) % n] = 0; /* truncated */
        err[0] = 0;
        grammar *g = grammar_parse(buf, NULL, err, sizeof err);
        if (g) {
            ok++;
            (void)s_match(g, "{\"a\": [1, \"b\"]}", 3);
        } else {
            refused += err[0] != 0;
        }
        grammar_free(&g);
    }
    CHECK(ok + refused == 3000, "mutated grammars: %zu compiled, %zu refused with a message", ok,
          refused);
    free(buf);
    static const char *const schemas[] = {
        "{\"type\":\"object\",\"properties\":{\"a\":{\"type\":\"array\",\"items\":{\"enum\":[1,\"x\"]},"
        "\"maxItems\":3}},\"required\":[\"a\"]}",
        "{\"anyOf\":[{\"$ref\":\"#/$defs/n\"},{\"type\":\"integer\",\"minimum\":-5}],\"$defs\":{\"n\":"
        "{\"type\":\"string\",\"format\":\"date\"}}}",
    };
    size_t sok = 0, sref = 0;
    for (size_t k = 0; k < 2; k++) {
        size_t m = strlen(schemas[k]);
        char *sb = malloc(m + 1);
        for (int it = 0; sb && it < 1500; it++) {
            memcpy(sb, schemas[k], m + 1);
            x ^= x << 13, x ^= x >> 7, x ^= x << 17;
            sb[x % m] = alphabet[(x >> 32) % (sizeof alphabet - 1)];
            json_t *j = json_loads(sb, 0, NULL);
            if (!j)
                continue;
            err[0] = 0;
            char *gbnf = json_schema_to_gbnf(j, err, sizeof err);
            grammar *g = gbnf ? grammar_parse(gbnf, NULL, err, sizeof err) : NULL;
            if (g)
                sok++;
            else
                sref += err[0] != 0;
            /* a schema that refers to itself before any character is refused as such */
            CHECK(!gbnf || g || strstr(err, "left recursive"), "schema %s: %s", sb, err);
            grammar_free(&g);
            free(gbnf);
            json_decref(j);
        }
        free(sb);
    }
    CHECK(sok > 0 && sref > 0, "mutated schemas: %zu converted, %zu refused", sok, sref);
}

static void test_accept(void)
{
    s_expect("root ::= \"ab\" | \"a\" [0-9]+\n", (const char *[]){ "ab", "a1", "a123", NULL },
             (const char *[]){ "a", "abc", "b", "", "a1x", NULL });
    s_expect("root ::= \"x\"{2,3} y?\ny ::= [a-c-]\n",
             (const char *[]){ "xx", "xxx", "xxa", "xx-", NULL },
             (const char *[]){ "x", "xxxx", "xxd", NULL });
    s_expect("root ::= \"x\"{2,} \"y\"{0}\n", (const char *[]){ "xx", "xxxxx", NULL },
             (const char *[]){ "x", "xxy", NULL });
    s_expect("root ::= [^\"\\\\]* \"\\\"\"  # comment\n",
             (const char *[]){ "\"", "abc\"", "é\"", NULL },
             (const char *[]){ "a\\\"", "\"\"", "abc", NULL });
    s_expect("root ::= . . # any two code points\n", (const char *[]){ "ab", "éa", "😀é", NULL },
             (const char *[]){ "a", "abc", NULL });
    /* nested groups, and newlines inside parentheses */
    s_expect("root ::= ( \"a\" (\n  \"b\" | \"c\"\n)* )+\n",
             (const char *[]){ "a", "abcb", "aab", NULL }, (const char *[]){ "b", "ad", NULL });
    /* escapes and non-ASCII ranges */
    s_expect("root ::= \"\\u00e9\" [\\x41-\\x43] [α-ω]+ \"\\U0001F600\"\n",
             (const char *[]){ "éAαω😀", "éCλ😀", NULL },
             (const char *[]){ "éDα😀", "éAA😀", "eAα😀", NULL });
    /* the JSON grammar */
    s_expect(s_json_gbnf,
             (const char *[]){ "{}", "{\"a\": [1, -2.5e3, true, null, \"x\\u00e9\"]}",
                               "{ \"k\":{\"n\":{}}\n\t}", "{\"é😀\":\"\\n\"}", NULL },
             (const char *[]){ "{", "[]", "{\"a\" 1}", "{\"a\":01}", "{\"a\":\"\x01\"}",
                               "{\"a\":tru}", NULL });
}

/* UTF-8 fed byte by byte: a partial sequence is held; an invalid byte is refused; a partial
 * sequence that no class could complete is refused at its first byte. */
static void test_utf8(void)
{
    char err[256];
    grammar *g = s_parse("root ::= [a-z] \"é\" [一-龥]\n");
    grammar_state *s = g ? grammar_state_new(g, NULL, NULL, 0, err, sizeof err) : NULL;
    CHECK(s != NULL, "state: %s", s ? "" : err);
    if (s) {
        CHECK(grammar_accept_bytes(s, "a", 1) == 0, "a");
        CHECK(grammar_accept_bytes(s, "\xc3", 1) == 0, "the first byte of é is held");
        CHECK(!grammar_accepting(s), "a partial sequence is not accepting");
        CHECK(grammar_accept_bytes(s, "\xc3", 1) == -1, "a lead byte where a continuation is due");
        CHECK(grammar_accept_bytes(s, "\xa9", 1) == 0, "é completed");
        CHECK(grammar_accept_bytes(s, "\xc3", 1) == -1,
              "0xc3 starts U+00C0..U+00FF: outside [一-龥], refused at once");
        CHECK(grammar_accept_bytes(s, "\x80", 1) == -1, "a continuation byte with no lead");
        CHECK(grammar_accept_bytes(s, "\xe0\x80", 2) == -1, "an overlong form's start");
        CHECK(grammar_accept_bytes(s, "\xff", 1) == -1, "0xff is never UTF-8");
        CHECK(grammar_accept_bytes(s, "\xe4\xb8", 2) == 0, "two bytes of 中 (U+4E2D)");
        CHECK(grammar_distance(s) == 1, "one byte left: %u", grammar_distance(s));
        CHECK(grammar_accept_bytes(s, "\xad", 1) == 0 && grammar_accepting(s), "中 completed");
        grammar_state_free(&s);
    }
    grammar_free(&g);
}

/* Nesting as deep as the text goes: 400 arrays inside each other (stacks of ~1,200 frames). */
static void test_deep(void)
{
    grammar *g = s_parse(s_json_gbnf);
    static char text[1024];
    size_t k = 0;
    k += (size_t)snprintf(text, sizeof text, "{\"a\":");
    for (int i = 0; i < 400; i++)
        text[k++] = '[';
    text[k++] = '1';
    for (int i = 0; i < 400; i++)
        text[k++] = ']';
    text[k++] = '}';
    text[k] = 0;
    CHECK(g && s_match(g, text, 7) == 1, "400 nested arrays");
    text[k - 2] = '}';
    CHECK(g && s_match(g, text, 7) == 0, "400 nested arrays, one closed wrong");
    grammar_free(&g);
}

static void test_distance(void)
{
    char err[256];
    grammar *g = s_parse(s_json_gbnf);
    grammar_state *s = g ? grammar_state_new(g, NULL, NULL, 0, err, sizeof err) : NULL;
    if (s) {
        CHECK(grammar_distance(s) == 2, "{} is the shortest: %u", grammar_distance(s));
        grammar_accept_bytes(s, "{\"ab", 4);
        CHECK(grammar_distance(s) == 4, "{\"ab + \":0} : %u", grammar_distance(s));
        grammar_accept_bytes(s, "\":[[", 4);
        CHECK(grammar_distance(s) == 3, "]]} : %u", grammar_distance(s));
        grammar_state_free(&s);
    }
    grammar_free(&g);
}

/* ---- tokens ---- */

static int s_gunzip(const char *name, char *out, size_t outlen)
{
    char cmd[2048];
    snprintf(out, outlen, "%s/grammar-%s", s_dir, name);
    snprintf(cmd, sizeof cmd, "gzip -dc '%s/%s.gz' > '%s'", FIX_DIR, name, out);
    return system(cmd) == 0 ? 0 : -1;
}

static uint64_t s_rng = 0x9e3779b97f4a7c15ull;
static float s_rand(void)
{
    s_rng ^= s_rng << 13;
    s_rng ^= s_rng >> 7;
    s_rng ^= s_rng << 17;
    return (float)(s_rng >> 40) / (float)(1u << 24);
}

/* The mask equals a token-by-token check (fresh states fed each piece). */
static void s_mask_vs_check(const tokenizer *t, const grammar_vocab *v, const grammar *g,
                            const char *prefix, const char *what)
{
    char err[256];
    int32_t n = tokenizer_n_vocab(t);
    float *l = malloc((size_t)n * sizeof *l);
    grammar_state *s = grammar_state_new(g, v, NULL, 0, err, sizeof err);
    grammar_state *o = grammar_state_new(g, NULL, NULL, 0, err, sizeof err);
    if (!l || !s || !o)
        goto out;
    CHECK(grammar_accept_bytes(s, prefix, strlen(prefix)) == 0, "%s: prefix", what);
    for (int32_t i = 0; i < n; i++)
        l[i] = 0;
    uint32_t kept = grammar_mask(s, l, (uint32_t)n, GRAMMAR_NO_BUDGET);
    uint32_t agree = 0, want_kept = 0, allows_agree = 0;
    for (int32_t id = 0; id < n; id++) {
        size_t pl = 0;
        const char *p = tokenizer_piece(t, id, 0, &pl);
        int want;
        if (tokenizer_is_eog(t, id)) {
            want = grammar_accepting(s);
        } else if (!pl) {
            want = 0;
        } else {
            grammar_state_reset(o);
            grammar_accept_bytes(o, prefix, strlen(prefix));
            want = grammar_accept_bytes(o, p, pl) == 0;
        }
        want_kept += (uint32_t)want;
        int got = l[id] == 0;
        agree += got == want;
        if (got != want && agree + 3 > (uint32_t)id)
            fprintf(stderr, "  %s: token %d '%.*s': mask %d, check %d\n", what, id, (int)pl, p,
                    got, want);
        allows_agree += grammar_allows(s, id, GRAMMAR_NO_BUDGET) == want;
    }
    CHECK(allows_agree == (uint32_t)n, "%s: grammar_allows agrees on %u of %d tokens", what,
          allows_agree, n);
    CHECK(agree == (uint32_t)n, "%s: the mask agrees with the check on %u of %d tokens", what,
          agree, n);
    CHECK(kept == want_kept && kept > 0, "%s: kept %u, want %u", what, kept, want_kept);
out:
    grammar_state_free(&s);
    grammar_state_free(&o);
    free(l);
}

/* Random logits, the masked argmax each step, a budget of max_tokens: the text always
 * completes the grammar, and it parses as JSON. */
static int s_budget_run(const tokenizer *t, const grammar_vocab *v, const grammar *g,
                        uint32_t max_tokens, int seed, const char *what, int use_budget)
{
    char err[256];
    int32_t n = tokenizer_n_vocab(t);
    float *l = malloc((size_t)n * sizeof *l);
    grammar_state *s = grammar_state_new(g, v, NULL, 0, err, sizeof err);
    char text[8192];
    size_t tl = 0;
    int eog = 0;
    s_rng = 0x9e3779b97f4a7c15ull + (uint64_t)seed;
    for (uint32_t k = 0; l && s && k < max_tokens && !eog; k++) {
        for (int32_t i = 0; i < n; i++)
            l[i] = 4 * s_rand();
        grammar_mask(s, l, (uint32_t)n, use_budget ? max_tokens - k : GRAMMAR_NO_BUDGET);
        int32_t best = -1;
        for (int32_t i = 0; i < n; i++)
            if (l[i] > -INFINITY && (best < 0 || l[i] > l[best]))
                best = i;
        if (best < 0)
            break;
        CHECK(grammar_accept_token(s, best) == 0, "%s: accept the masked argmax %d", what, best);
        if (tokenizer_is_eog(t, best)) {
            eog = 1;
            break;
        }
        size_t pl = 0;
        const char *p = tokenizer_piece(t, best, 0, &pl);
        if (tl + pl < sizeof text) {
            memcpy(text + tl, p, pl);
            tl += pl;
        }
    }
    text[tl] = 0;
    json_error_t je;
    json_t *j = json_loads(text, JSON_DECODE_ANY, &je);
    int done = s && grammar_accepting(s) && eog && j;
    if (use_budget) {
        CHECK(s && grammar_accepting(s), "%s: complete within %u tokens: %s", what, max_tokens, text);
        CHECK(eog, "%s: the end of generation was sampled within the budget", what);
        CHECK(j != NULL, "%s: parses as JSON: %s (%s)", what, je.text, text);
    }
    json_decref(j);
    grammar_state_free(&s);
    free(l);
    return done;
}

static void s_lazy(const tokenizer *t, const grammar_vocab *v)
{
    char err[256];
    grammar *g = s_parse("root ::= \"<call>\" [0-9]+ \"</call>\"\n");
    const char *trig[] = { "<call>" };
    grammar_state *s = g ? grammar_state_new(g, v, trig, 1, err, sizeof err) : NULL;
    if (!s)
        return;
    int32_t n = tokenizer_n_vocab(t);
    float *l = calloc((size_t)n, sizeof *l);
    CHECK(!grammar_active(s), "lazy: inactive at the start");
    CHECK(grammar_mask(s, l, (uint32_t)n, 10) == (uint32_t)n, "lazy: every token while inactive");
    CHECK(grammar_accept_bytes(s, "Let me <ca", 10) == 0 && !grammar_active(s), "lazy: half a trigger");
    CHECK(grammar_accept_bytes(s, "ll>12", 5) == 0 && grammar_active(s), "lazy: triggered");
    CHECK(grammar_accept_bytes(s, "x", 1) == -1, "lazy: constrained after the trigger");
    CHECK(grammar_accept_bytes(s, "3</call>", 8) == 0 && grammar_accepting(s), "lazy: complete");
    grammar_state_reset(s);
    CHECK(!grammar_active(s), "lazy: inactive after a reset");
    /* a token that fires the trigger must leave text the grammar accepts after it: with
     * "...<call" held, a piece ">12" may follow, ">x" may not */
    CHECK(grammar_accept_bytes(s, "ok <call", 8) == 0 && !grammar_active(s), "lazy: held");
    uint32_t agree = 0, fired = 0;
    grammar_state *o = grammar_state_new(g, NULL, NULL, 0, err, sizeof err);
    for (int32_t id = 0; o && id < n; id++) {
        size_t pl = 0;
        const char *p = tokenizer_piece(t, id, 0, &pl);
        int want = 1;
        const char *at = pl ? memmem(p, pl, "<call>", 6) : NULL;
        if (tokenizer_is_eog(t, id) || !pl || (p[0] != '>' && !at)) {
            want = 1;
        } else if (p[0] != '>') { /* the whole trigger inside the piece */
            grammar_state_reset(o);
            want = grammar_accept_bytes(o, at, pl - (size_t)(at - p)) == 0;
        } else {
            fired++;
            grammar_state_reset(o);
            want = grammar_accept_bytes(o, "<call", 5) == 0 && grammar_accept_bytes(o, p, pl) == 0;
        }
        agree += grammar_allows(s, id, GRAMMAR_NO_BUDGET) == want;
    }
    CHECK(o && agree == (uint32_t)n && fired > 0, "lazy: allows agrees on %u of %d tokens (%u fire)",
          agree, n, fired);
    for (int32_t i = 0; i < n; i++)
        l[i] = 0;
    uint32_t kept = grammar_mask(s, l, (uint32_t)n, GRAMMAR_NO_BUDGET);
    uint32_t kept_want = 0;
    for (int32_t id = 0; id < n; id++)
        kept_want += grammar_allows(s, id, GRAMMAR_NO_BUDGET);
    CHECK(kept == kept_want && kept < (uint32_t)n, "lazy: the mask keeps %u, allows says %u", kept,
          kept_want);
    grammar_state_free(&o);
    grammar_state_free(&s);
    grammar_free(&g);
    free(l);
}

/* What a mask costs: the JSON grammar inside a string (most tokens pass: the worst case) and
 * after a key (few pass). */
static void s_cost(const tokenizer *t, const grammar_vocab *v, const grammar *g, const char *name)
{
    char err[256];
    int32_t n = tokenizer_n_vocab(t);
    float *l = malloc((size_t)n * sizeof *l);
    grammar_state *s = grammar_state_new(g, v, NULL, 0, err, sizeof err);
    static const char *const at[] = { "{\"key\": \"some text", "{\"key\"", "{\"a\": [1, 2" };
    for (size_t k = 0; l && s && k < sizeof at / sizeof at[0]; k++) {
        grammar_state_reset(s);
        grammar_accept_bytes(s, at[k], strlen(at[k]));
        int reps = 20;
        uint32_t kept = 0;
        double t0 = s_now_ms();
        for (int r = 0; r < reps; r++)
            kept = grammar_mask(s, l, (uint32_t)n, GRAMMAR_NO_BUDGET);
        double mask_ms = (s_now_ms() - t0) / reps;
        t0 = s_now_ms();
        int reps1 = 2000;
        for (int r = 0; r < reps1; r++)
            (void)grammar_allows(s, r % n, GRAMMAR_NO_BUDGET);
        double one_us = (s_now_ms() - t0) * 1e3 / reps1;
        printf("  mask cost, %s (%d tokens) after '%s': %.3f ms per mask (%u allowed), %.2f us "
               "per token check\n", name, n, at[k], mask_ms, kept, one_us);
    }
    grammar_state_free(&s);
    free(l);
}

static void test_tokens(const char *path, const char *name)
{
    char err[256] = "";
    tokenizer *t = tokenizer_load(path, err, sizeof err);
    CHECK(t != NULL, "%s: %s", path, err);
    if (!t)
        return;
    double t0 = s_now_ms();
    grammar_vocab *v = grammar_vocab_new(t, err, sizeof err);
    printf("  %s: grammar_vocab_new %.1f ms\n", name, s_now_ms() - t0);
    grammar *json = s_parse(s_json_gbnf);
    grammar *obj = s_parse("root ::= \"{\" [a-z ]* \"é\"? \"}\"\n");
    if (v && json && obj) {
        s_mask_vs_check(t, v, obj, "", "obj start");
        s_mask_vs_check(t, v, obj, "{ab", "obj inside");
        s_mask_vs_check(t, v, obj, "{ab\xc3", "obj, half of é");
        s_mask_vs_check(t, v, json, "{\"k\": \"", "json string");
        s_mask_vs_check(t, v, json, "{\"k\": [1", "json number");
        s_mask_vs_check(t, v, json, "{\"k\": [1]}", "json complete");
        for (int seed = 0; seed < 4; seed++)
            s_budget_run(t, v, json, 24 + 12 * (uint32_t)seed, seed, "json budget", 1);
        /* what the budget buys: random logits (a random-weight model), the masked argmax,
         * 32 tokens; without it the text is cut wherever max_tokens falls (llama.cpp's way) */
        int with = 0, without = 0, runs = 16;
        for (int seed = 100; seed < 100 + runs; seed++) {
            with += s_budget_run(t, v, json, 32, seed, "json budget 32", 1);
            without += s_budget_run(t, v, json, 32, seed, "json no budget 32", 0);
        }
        printf("  %s: JSON complete within 32 tokens of random logits: %d of %d runs with the "
               "budget, %d of %d without\n", name, with, runs, without, runs);
        s_lazy(t, v);
        s_cost(t, v, json, name);
    }
    grammar_free(&json);
    grammar_free(&obj);
    grammar_vocab_free(&v);
    tokenizer_free(&t);
}

/* ---- JSON Schema ---- */

static void s_schema_ok(const char *schema, const char *const *yes, const char *const *no)
{
    char err[256] = "";
    json_error_t je;
    json_t *j = json_loads(schema, 0, &je);
    CHECK(j != NULL, "schema parses: %s", je.text);
    char *gbnf = j ? json_schema_to_gbnf(j, err, sizeof err) : NULL;
    CHECK(gbnf != NULL, "%s: %s", schema, err);
    grammar *g = gbnf ? grammar_parse(gbnf, NULL, err, sizeof err) : NULL;
    CHECK(!gbnf || g != NULL, "%s: %s\n%s", schema, err, gbnf);
    for (size_t i = 0; g && yes && yes[i]; i++)
        CHECK(s_match(g, yes[i], 2) == 1, "%s should accept %s\n%s", schema, yes[i], gbnf);
    for (size_t i = 0; g && no && no[i]; i++)
        CHECK(s_match(g, no[i], 1) == 0, "%s should refuse %s\n%s", schema, no[i], gbnf);
    grammar_free(&g);
    free(gbnf);
    json_decref(j);
}

static void s_schema_bad(const char *schema, const char *needle)
{
    char err[256] = "";
    json_error_t je;
    json_t *j = json_loads(schema, 0, &je);
    char *gbnf = j ? json_schema_to_gbnf(j, err, sizeof err) : NULL;
    CHECK(gbnf == NULL && strstr(err, needle), "%s: want '%s', got '%s'", schema, needle, err);
    free(gbnf);
    json_decref(j);
}

static void test_schema(void)
{
    s_schema_ok("{\"type\":\"object\",\"properties\":{\"name\":{\"type\":\"string\"},"
                "\"age\":{\"type\":\"integer\"},\"tags\":{\"type\":\"array\",\"items\":"
                "{\"type\":\"string\"}}},\"required\":[\"name\",\"age\"],"
                "\"additionalProperties\":false}",
                (const char *[]){ "{\"name\":\"x\",\"age\":3}", "{ \"name\": \"\", \"age\": -10, "
                                  "\"tags\": [\"a\", \"b\"] }", NULL },
                (const char *[]){ "{\"name\":\"x\"}", "{\"age\":3,\"name\":\"x\"}",
                                  "{\"name\":\"x\",\"age\":3.5}", "{\"name\":\"x\",\"age\":3,\"z\":1}",
                                  NULL });
    /* optional properties in any subset, in order */
    s_schema_ok("{\"type\":\"object\",\"properties\":{\"a\":{\"type\":\"boolean\"},\"b\":"
                "{\"type\":\"null\"},\"c\":{\"const\":\"k\"}}}",
                (const char *[]){ "{}", "{\"b\":null}", "{\"a\":true,\"c\":\"k\"}",
                                  "{\"a\":false,\"b\":null,\"c\":\"k\"}", NULL },
                (const char *[]){ "{\"c\":\"k\",\"a\":true}", "{\"c\":\"j\"}", "{,}", NULL });
    s_schema_ok("{\"type\":\"array\",\"items\":{\"enum\":[\"red\",1,null]},\"minItems\":1,"
                "\"maxItems\":2}",
                (const char *[]){ "[\"red\"]", "[1, null]", NULL },
                (const char *[]){ "[]", "[1,1,1]", "[\"blue\"]", NULL });
    s_schema_ok("{\"anyOf\":[{\"type\":\"number\"},{\"type\":\"string\",\"format\":\"date\"}]}",
                (const char *[]){ "1.5e3", "\"2024-02-29\"", NULL },
                (const char *[]){ "\"2024-13-01\"", "\"x\"", NULL });
    s_schema_ok("{\"type\":\"string\",\"format\":\"uuid\"}",
                (const char *[]){ "\"123e4567-e89b-12d3-a456-426614174000\"", NULL },
                (const char *[]){ "\"123e4567\"", NULL });
    s_schema_ok("{\"type\":\"string\",\"format\":\"date-time\"}",
                (const char *[]){ "\"2024-01-02T03:04:05Z\"", "\"2024-01-02T03:04:05.123+01:00\"", NULL },
                (const char *[]){ "\"2024-01-02 03:04:05\"", NULL });
    s_schema_ok("{\"type\":\"string\",\"format\":\"time\"}",
                (const char *[]){ "\"23:59:59Z\"", NULL }, (const char *[]){ "\"24:00:00Z\"", NULL });
    s_schema_ok("{\"type\":\"string\",\"minLength\":2,\"maxLength\":3}",
                (const char *[]){ "\"ab\"", "\"a\\nb\"", NULL }, (const char *[]){ "\"a\"", "\"abcd\"", NULL });
    s_schema_ok("{\"type\":[\"integer\",\"null\"],\"minimum\":0,\"maximum\":99}",
                (const char *[]){ "0", "42", "99", "null", NULL },
                (const char *[]){ "-1", "100", "1.5", NULL });
    s_schema_ok("{\"type\":\"integer\",\"minimum\":-9007199254740991,\"maximum\":9007199254740991}",
                (const char *[]){ "0", "-5", "123456789", NULL }, (const char *[]){ "1.0", NULL });
    s_schema_ok("{\"type\":\"integer\",\"exclusiveMinimum\":0}",
                (const char *[]){ "1", "500", NULL }, (const char *[]){ "0", "-1", NULL });
    s_schema_ok("{\"oneOf\":[{\"type\":\"object\",\"properties\":{\"x\":{\"$ref\":\"#/$defs/n\"}},"
                "\"required\":[\"x\"]},{\"type\":\"boolean\"}],\"$defs\":{\"n\":{\"type\":\"object\","
                "\"properties\":{\"v\":{\"type\":\"integer\"},\"next\":{\"$ref\":\"#/$defs/n\"}},"
                "\"required\":[\"v\"]}}}",
                (const char *[]){ "true", "{\"x\":{\"v\":1,\"next\":{\"v\":2}}}", NULL },
                (const char *[]){ "{\"x\":{}}", NULL });
    s_schema_ok("{\"type\":\"object\",\"additionalProperties\":{\"type\":\"integer\"}}",
                (const char *[]){ "{}", "{\"a\":1,\"b\":2}", NULL }, (const char *[]){ "{\"a\":\"x\"}", NULL });
    s_schema_ok("{}", (const char *[]){ "{\"a\":[1,{}]}", "3", "\"s\"", NULL }, NULL);
    s_schema_ok("{\"type\":\"object\"}", (const char *[]){ "{\"a\":[1,{}]}", NULL },
                (const char *[]){ "3", NULL });
    s_schema_ok("{\"$schema\":\"https://json-schema.org/draft/2020-12/schema\",\"title\":\"t\","
                "\"description\":\"d\",\"type\":\"object\",\"properties\":{\"a\":{\"type\":\"string\","
                "\"description\":\"x\",\"default\":\"q\"}},\"required\":[\"a\"],"
                "\"additionalProperties\":false}",
                (const char *[]){ "{\"a\":\"\"}", NULL }, NULL);
    s_schema_bad("{\"type\":\"string\",\"pattern\":\"^a+$\"}", "'pattern'");
    s_schema_bad("{\"allOf\":[{\"type\":\"string\"}]}", "'allOf'");
    s_schema_bad("{\"type\":\"object\",\"properties\":{\"a\":{\"not\":{}}}}", "'not'");
    s_schema_bad("{\"type\":\"strin\"}", "unknown type 'strin'");
    s_schema_bad("{\"$ref\":\"#/$defs/missing\"}", "'#/$defs/missing'");
    s_schema_bad("{\"$ref\":\"http://example.com/s.json\"}", "only local");
    s_schema_bad("{\"type\":\"integer\",\"minimum\":5,\"maximum\":2}", "no integer");
    s_schema_bad("{\"enum\":[]}", "enum");
    s_schema_ok("{\"type\":\"object\",\"required\":[\"a\"],\"properties\":{}}",
                (const char *[]){ "{\"a\":[1]}", NULL }, (const char *[]){ "{}", NULL });
}

/* ---- tool calls ---- */

/* tool_render against the real templates' renders (tests/fixtures/chat/render_tools.py). */
static void test_tool_render(void)
{
    json_error_t je;
    json_t *all = json_load_file("tests/fixtures/chat/tool_renders.json", 0, &je);
    CHECK(json_is_array(all), "tool_renders.json: %s", je.text);
    size_t i;
    json_t *r;
    json_array_foreach(all, i, r) {
        char err[256] = "";
        const char *tmpl = json_string_value(json_object_get(r, "template"));
        const char *want = json_string_value(json_object_get(r, "text"));
        char path[256], *jinja = NULL;
        snprintf(path, sizeof path, "tests/fixtures/chat/tools/%s.jinja",
                 json_string_value(json_object_get(r, "fixture")));
        FILE *f = fopen(path, "rb");
        if (f) {
            jinja = calloc(1, 1 << 16);
            if (jinja && fread(jinja, 1, (1 << 16) - 1, f) == 0)
                jinja[0] = 0;
            fclose(f);
        }
        CHECK(jinja != NULL, "%s", path);
        char *got = tool_render(tmpl, tool_default_system(jinja), json_object_get(r, "messages"),
                                json_object_get(r, "tools"), 1, err, sizeof err);
        free(jinja);
        size_t k = 0;
        while (got && want[k] && got[k] == want[k])
            k++;
        CHECK(got && !strcmp(got, want), "%s/%s: %s; differs at byte %zu: got '%.60s' want '%.60s'",
              json_string_value(json_object_get(r, "fixture")),
              json_string_value(json_object_get(r, "conv")), err, k, got ? got + k : "",
              want + k);
        free(got);
    }
    json_decref(all);
    char err[256] = "";
    json_t *m = json_loads("[{\"role\":\"tool\",\"content\":\"x\"}]", 0, NULL);
    char *t = tool_render("chatml", NULL, m, NULL, 1, err, sizeof err);
    CHECK(!t && strstr(err, "tool_call_id"), "a tool message without its id: %s", err);
    free(t);
    t = tool_render("gemma", NULL, m, NULL, 1, err, sizeof err);
    CHECK(!t && strstr(err, "no tool-call format"), "gemma has none: %s", err);
    free(t);
    json_decref(m);
}

static void s_parse_case(tool_format f, const char *text, size_t want_calls, const char *name0,
                         const char *args0, const char *content)
{
    json_t *calls = NULL;
    char *c = NULL;
    int rc = tool_parse(f, text, strlen(text), &calls, &c);
    CHECK(rc == 0 && json_array_size(calls) == want_calls, "%s: '%s': %zu calls",
          tool_format_name(f), text, json_array_size(calls));
    if (want_calls && json_array_size(calls)) {
        json_t *c0 = json_array_get(calls, 0);
        CHECK(!strcmp(json_string_value(json_object_get(c0, "name")), name0) &&
              !strcmp(json_string_value(json_object_get(c0, "arguments")), args0),
              "%s: call 0 is %s(%s)", tool_format_name(f),
              json_string_value(json_object_get(c0, "name")),
              json_string_value(json_object_get(c0, "arguments")));
    }
    CHECK(c && !strcmp(c, content), "%s: content '%s', want '%s'", tool_format_name(f), c, content);
    json_decref(calls);
    free(c);
}

static void test_tool_parse(void)
{
    s_parse_case(TOOL_FMT_HERMES, "<tool_call>\n{\"name\": \"f\", \"arguments\": {\"a\": 1}}\n</tool_call>",
                 1, "f", "{\"a\":1}", "");
    s_parse_case(TOOL_FMT_HERMES, "Sure.\n<tool_call>\n{\"name\": \"f\", \"arguments\": {}}\n</tool_call>\n"
                 "<tool_call>\n{\"name\": \"g\", \"arguments\": {\"b\": [true]}}\n</tool_call>",
                 2, "f", "{}", "Sure.");
    s_parse_case(TOOL_FMT_HERMES, "no calls <tool_call> {broken", 0, "", "", "no calls\n<tool_call> {broken");
    s_parse_case(TOOL_FMT_LLAMA3, " {\"name\": \"f\", \"parameters\": {\"x\": \"y\"}}", 1, "f",
                 "{\"x\":\"y\"}", "");
    s_parse_case(TOOL_FMT_LLAMA3, "Hello {there}", 0, "", "", "Hello {there}");
    s_parse_case(TOOL_FMT_MISTRAL, "[TOOL_CALLS] [{\"name\": \"f\", \"arguments\": {\"n\": 2}}, "
                 "{\"name\": \"g\", \"arguments\": {}}]", 2, "f", "{\"n\":2}", "");
    s_parse_case(TOOL_FMT_MISTRAL, "[{\"name\": \"f\", \"arguments\": {}}]", 1, "f", "{}", "");
    s_parse_case(TOOL_FMT_MISTRAL, "[1, 2] is a list", 0, "", "", "[1, 2] is a list");
}

/* The call grammar: the family's exact shape, arguments valid against the schema. */
static void test_tool_grammar(void)
{
    json_t *tools = json_loads("[{\"type\":\"function\",\"function\":{\"name\":\"get_weather\","
                               "\"parameters\":{\"type\":\"object\",\"properties\":{\"city\":{\"type\":"
                               "\"string\"}},\"required\":[\"city\"],\"additionalProperties\":false}}},"
                               "{\"type\":\"function\",\"function\":{\"name\":\"ping\"}}]", 0, NULL);
    static const struct {
        tool_format f;
        const char *name;
        int parallel;
        const char *yes, *no;
    } cases[] = {
        { TOOL_FMT_HERMES, NULL, 1,
          "<tool_call>\n{\"name\": \"get_weather\", \"arguments\": {\"city\": \"Oslo\"}}\n</tool_call>\n"
          "<tool_call>\n{\"name\": \"ping\", \"arguments\": {}}\n</tool_call>",
          "<tool_call>\n{\"name\": \"get_weather\", \"arguments\": {\"town\": \"Oslo\"}}\n</tool_call>" },
        { TOOL_FMT_HERMES, "ping", 0, "<tool_call>\n{\"name\": \"ping\", \"arguments\": {\"z\": 1}}\n</tool_call>",
          "<tool_call>\n{\"name\": \"get_weather\", \"arguments\": {\"city\": \"Oslo\"}}\n</tool_call>" },
        { TOOL_FMT_LLAMA3, NULL, 1, "{\"name\": \"get_weather\", \"parameters\": {\"city\": \"\"}}",
          "{\"name\": \"get_weather\", \"arguments\": {\"city\": \"\"}}" },
        { TOOL_FMT_MISTRAL, NULL, 1,
          "[TOOL_CALLS] [{\"name\": \"ping\", \"arguments\": {}}, {\"name\": \"ping\", \"arguments\": {}}]",
          "[TOOL_CALLS] [{\"name\": \"pong\", \"arguments\": {}}]" },
        { TOOL_FMT_MISTRAL, NULL, 0, "[TOOL_CALLS] [{\"name\": \"ping\", \"arguments\": {}}]",
          "[TOOL_CALLS] [{\"name\": \"ping\", \"arguments\": {}}, {\"name\": \"ping\", \"arguments\": {}}]" },
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        char err[256] = "";
        char *gbnf = tool_grammar(cases[i].f, tools, cases[i].name, cases[i].parallel, err, sizeof err);
        CHECK(gbnf != NULL, "tool_grammar %zu: %s", i, err);
        grammar *g = gbnf ? grammar_parse(gbnf, NULL, err, sizeof err) : NULL;
        CHECK(!gbnf || g, "tool grammar %zu: %s\n%s", i, err, gbnf);
        if (g) {
            CHECK(s_match(g, cases[i].yes, 3) == 1, "tool grammar %zu accepts %s\n%s", i,
                  cases[i].yes, gbnf);
            CHECK(s_match(g, cases[i].no, 1) == 0, "tool grammar %zu refuses %s", i, cases[i].no);
        }
        grammar_free(&g);
        free(gbnf);
    }
    char err[256] = "";
    char *gbnf = tool_grammar(TOOL_FMT_HERMES, tools, "nope", 1, err, sizeof err);
    CHECK(!gbnf && strstr(err, "no function named 'nope'"), "a named function not in tools: %s", err);
    free(gbnf);
    json_t *bad = json_loads("[{\"type\":\"function\",\"function\":{\"name\":\"f\",\"parameters\":"
                             "{\"type\":\"object\",\"properties\":{\"a\":{\"type\":\"string\",\"pattern\":\"x\"}}}}}]",
                             0, NULL);
    gbnf = tool_grammar(TOOL_FMT_HERMES, bad, NULL, 1, err, sizeof err);
    CHECK(!gbnf && strstr(err, "tools[0].function.parameters") && strstr(err, "'pattern'"),
          "an unsupported keyword in a tool's parameters: %s", err);
    free(gbnf);
    CHECK(tool_check(bad, err, sizeof err) == 0, "tool_check: %s", err);
    json_t *dup = json_loads("[{\"type\":\"function\",\"function\":{\"name\":\"f\"}},"
                             "{\"type\":\"function\",\"function\":{\"name\":\"f\"}}]", 0, NULL);
    CHECK(tool_check(dup, err, sizeof err) == -1 && strstr(err, "defined twice"), "dup: %s", err);
    json_decref(dup);
    json_decref(bad);
    json_decref(tools);
}

int main(void)
{
    const char *d = getenv("SWARM_TEST_TMP");
    snprintf(s_dir, sizeof s_dir, "%s", d && *d ? d : "tests/tmp");
    if (mkdir(s_dir, 0755) && errno != EEXIST) {
        fprintf(stderr, "mkdir %s: %s\n", s_dir, strerror(errno));
        return 1;
    }
    test_parse_errors();
    test_fuzz();
    test_accept();
    test_utf8();
    test_deep();
    test_distance();
    test_schema();
    test_tool_render();
    test_tool_parse();
    test_tool_grammar();
    char spm[600], bpe[600];
    int have = s_gunzip("llama-spm.gguf", spm, sizeof spm) == 0 &&
               s_gunzip("llama3-bpe.gguf", bpe, sizeof bpe) == 0;
    CHECK(have, "unpack the fixtures from " FIX_DIR " (run from the repository root)");
    if (have) {
        test_tokens(spm, "llama-spm");
        test_tokens(bpe, "llama3-bpe");
        remove(spm);
        remove(bpe);
    }
    return CHECK_DONE("test_grammar");
}
