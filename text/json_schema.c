/* json_schema.c — JSON Schema to GBNF, llama.cpp's SchemaConverter (common/json-schema-to-grammar.cpp
 * upstream) for the common subset: primitives, objects, arrays, enums, unions, refs, formats. text/ */
#include "text/json_schema.h"

#include <ctype.h>
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* llama.cpp's primitive rules, with the rules each one uses. */
static const struct {
    const char *name, *body, *deps[6];
} s_prims[] = {
    { "space", "| \" \" | \"\\n\"{1,2} [ \\t]{0,20}", { NULL } },
    { "boolean", "(\"true\" | \"false\") space", { "space", NULL } },
    { "decimal-part", "[0-9]{1,16}", { NULL } },
    { "integral-part", "[0] | [1-9] [0-9]{0,15}", { NULL } },
    { "number", "(\"-\"? integral-part) (\".\" decimal-part)? ([eE] [-+]? integral-part)? space",
      { "integral-part", "decimal-part", "space", NULL } },
    { "integer", "(\"-\"? integral-part) space", { "integral-part", "space", NULL } },
    { "value", "object | array | string | number | boolean | null",
      { "object", "array", "string", "number", "boolean", "null" } },
    { "object", "\"{\" space ( string \":\" space value (\",\" space string \":\" space value)* )? \"}\" space",
      { "string", "value", "space", NULL } },
    { "array", "\"[\" space ( value (\",\" space value)* )? \"]\" space", { "value", "space", NULL } },
    { "uuid", "\"\\\"\" [0-9a-fA-F]{8} \"-\" [0-9a-fA-F]{4} \"-\" [0-9a-fA-F]{4} \"-\" [0-9a-fA-F]{4} \"-\" [0-9a-fA-F]{12} \"\\\"\" space",
      { "space", NULL } },
    { "char", "[^\"\\\\\\x7F\\x00-\\x1F] | [\\\\] ([\"\\\\bfnrt] | \"u\" [0-9a-fA-F]{4})", { NULL } },
    { "string", "\"\\\"\" char* \"\\\"\" space", { "char", "space", NULL } },
    { "null", "\"null\" space", { "space", NULL } },
    { "date", "[0-9]{4} \"-\" ( \"0\" [1-9] | \"1\" [0-2] ) \"-\" ( \"0\" [1-9] | [1-2] [0-9] | \"3\" [0-1] )", { NULL } },
    { "time", "([01] [0-9] | \"2\" [0-3]) \":\" [0-5] [0-9] \":\" [0-5] [0-9] ( \".\" [0-9]{3} )? ( \"Z\" | ( \"+\" | \"-\" ) ( [01] [0-9] | \"2\" [0-3] ) \":\" [0-5] [0-9] )", { NULL } },
    { "date-time", "date \"T\" time", { "date", "time", NULL } },
    { "date-string", "\"\\\"\" date \"\\\"\" space", { "date", "space", NULL } },
    { "time-string", "\"\\\"\" time \"\\\"\" space", { "time", "space", NULL } },
    { "date-time-string", "\"\\\"\" date-time \"\\\"\" space", { "date-time", "space", NULL } },
};
#define S_NPRIMS (sizeof s_prims / sizeof s_prims[0])

/* Keywords that only annotate: allowed anywhere, ignored. */
static const char *const s_notes[] = {
    "$schema", "$id", "$comment", "title", "description", "default", "examples", "deprecated",
    "readOnly", "writeOnly", "$defs", "definitions", NULL,
};
/* Keywords the converter honours. */
static const char *const s_known[] = {
    "type", "properties", "required", "additionalProperties", "items", "prefixItems",
    "minItems", "maxItems", "enum", "const", "anyOf", "oneOf", "$ref", "format", "minLength",
    "maxLength", "minimum", "maximum", "exclusiveMinimum", "exclusiveMaximum", NULL,
};

typedef struct {
    char *name, *body;
} s_rule;

struct json_gbnf {
    s_rule *r;
    size_t n, cap;
    /* the schema being added */
    const json_t *root;
    json_t *refs;                 /* "$ref" text -> rule name */
    char *err;
    size_t errlen;
    int failed;
};

/* ---- strings ---- */

typedef struct {
    char *s;
    size_t n, cap;
    int oom;
} s_str;

static void s_cat(s_str *b, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static void s_cat(s_str *b, const char *fmt, ...)
{
    if (b->oom)
        return;
    va_list ap;
    va_start(ap, fmt);
    int n = vsnprintf(NULL, 0, fmt, ap);
    va_end(ap);
    if (n < 0 || b->n + (size_t)n + 1 > b->cap) {
        size_t cap = b->cap ? b->cap : 64;
        while (n >= 0 && cap < b->n + (size_t)n + 1)
            cap *= 2;
        char *s = n < 0 ? NULL : realloc(b->s, cap);
        if (!s) {
            b->oom = 1;
            return;
        }
        b->s = s;
        b->cap = cap;
    }
    va_start(ap, fmt);
    vsnprintf(b->s + b->n, b->cap - b->n, fmt, ap);
    va_end(ap);
    b->n += (size_t)n;
}

static char *s_done(s_str *b)
{
    if (b->oom) {
        free(b->s);
        return NULL;
    }
    if (!b->s)
        return strdup("");
    return b->s;
}

char *json_schema_literal(const char *text, size_t len)
{
    s_str b = { 0 };
    s_cat(&b, "\"");
    for (size_t i = 0; i < len; i++) {
        unsigned char c = (unsigned char)text[i];
        if (c == '"' || c == '\\')
            s_cat(&b, "\\%c", c);
        else if (c == '\n')
            s_cat(&b, "\\n");
        else if (c == '\r')
            s_cat(&b, "\\r");
        else if (c == '\t')
            s_cat(&b, "\\t");
        else if (c < 0x20 || c == 0x7f)
            s_cat(&b, "\\x%02X", c);
        else
            s_cat(&b, "%c", c);
    }
    s_cat(&b, "\"");
    return s_done(&b);
}

/* ---- the rule set ---- */

static void s_fail(json_gbnf *b, const char *path, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));
static void s_fail(json_gbnf *b, const char *path, const char *fmt, ...)
{
    if (b->failed)
        return;
    b->failed = 1;
    char msg[256];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    if (b->err)
        snprintf(b->err, b->errlen, "json schema: %s%s%s", path && *path ? path : "",
                 path && *path ? ": " : "", msg);
}

json_gbnf *json_gbnf_new(void)
{
    return calloc(1, sizeof(json_gbnf));
}

void json_gbnf_free(json_gbnf **bp)
{
    if (!bp || !*bp)
        return;
    json_gbnf *b = *bp;
    for (size_t i = 0; i < b->n; i++) {
        free(b->r[i].name);
        free(b->r[i].body);
    }
    free(b->r);
    json_decref(b->refs);
    free(b);
    *bp = NULL;
}

static s_rule *s_find(const json_gbnf *b, const char *name)
{
    for (size_t i = 0; i < b->n; i++)
        if (!strcmp(b->r[i].name, name))
            return &b->r[i];
    return NULL;
}

/* Add name ::= body; the same name with another body becomes name-N. Returns the name. */
static const char *s_add(json_gbnf *b, const char *name, const char *body)
{
    char clean[128], cand[160];
    size_t k = 0;
    for (const char *p = name; *p && k < sizeof clean - 1; p++)
        clean[k++] = isalnum((unsigned char)*p) || *p == '-' ? *p : '-';
    clean[k] = 0;
    if (!k)
        snprintf(clean, sizeof clean, "r");
    snprintf(cand, sizeof cand, "%s", clean);
    for (int i = 1;; i++) {
        s_rule *r = s_find(b, cand);
        if (!r)
            break;
        if (!strcmp(r->body, body))
            return r->name;
        snprintf(cand, sizeof cand, "%s%d", clean, i);
    }
    if (b->n == b->cap) {
        size_t cap = b->cap ? b->cap * 2 : 32;
        s_rule *r = realloc(b->r, cap * sizeof *r);
        if (!r)
            return NULL;
        b->r = r;
        b->cap = cap;
    }
    char *n = strdup(cand), *bd = strdup(body);
    if (!n || !bd) {
        free(n);
        free(bd);
        return NULL;
    }
    b->r[b->n++] = (s_rule){ n, bd };
    return n;
}

const char *json_gbnf_rule(json_gbnf *b, const char *name, const char *body)
{
    return s_add(b, name, body);
}

/* A primitive and the primitives it uses; returns its name. */
static const char *s_prim(json_gbnf *b, const char *name)
{
    for (size_t i = 0; i < S_NPRIMS; i++) {
        if (strcmp(s_prims[i].name, name))
            continue;
        if (s_find(b, name))
            return name;
        if (!s_add(b, name, s_prims[i].body)) {
            s_fail(b, NULL, "out of memory");
            return name;
        }
        for (int d = 0; d < 6 && s_prims[i].deps[d]; d++)
            s_prim(b, s_prims[i].deps[d]);
        return name;
    }
    return name;
}

char *json_gbnf_text(const json_gbnf *b)
{
    s_str o = { 0 };
    /* root first, for the reader */
    const s_rule *root = s_find(b, "root");
    if (root)
        s_cat(&o, "root ::= %s\n", root->body);
    for (size_t i = 0; i < b->n; i++)
        if (&b->r[i] != root)
            s_cat(&o, "%s ::= %s\n", b->r[i].name, b->r[i].body);
    return s_done(&o);
}

/* ---- the converter ---- */

static char *s_visit(json_gbnf *b, const json_t *sch, const char *name, const char *path);

static char *s_dup(json_gbnf *b, const char *s)
{
    char *d = strdup(s);
    if (!d)
        s_fail(b, NULL, "out of memory");
    return d;
}

static int s_in(const char *const *list, const char *k)
{
    for (int i = 0; list[i]; i++)
        if (!strcmp(list[i], k))
            return 1;
    return 0;
}

/* A JSON value as a GBNF literal (its compact JSON text). */
static char *s_json_literal(json_gbnf *b, const json_t *v)
{
    char *t = json_dumps(v, JSON_COMPACT | JSON_ENCODE_ANY);
    char *lit = t ? json_schema_literal(t, strlen(t)) : NULL;
    free(t);
    if (!lit)
        s_fail(b, NULL, "out of memory");
    return lit;
}

/* "x{min,max}" with a separator between items, llama.cpp's build_repetition. max < 0:
 * unbounded. */
static void s_repetition(s_str *o, const char *item, long long min, long long max, const char *sep)
{
    if (max == 0)
        return;
    if (min == 0 && max == 1) {
        s_cat(o, "%s?", item);
        return;
    }
    if (!sep) {
        if (max < 0)
            s_cat(o, "%s{%lld,}", item, min);
        else if (min == max)
            s_cat(o, "%s{%lld}", item, min);
        else
            s_cat(o, "%s{%lld,%lld}", item, min, max);
        return;
    }
    if (min == 0)
        s_cat(o, "(");
    s_cat(o, "%s ", item);
    char inner[512];
    snprintf(inner, sizeof inner, "(%s %s)", sep, item);
    s_repetition(o, inner, min == 0 ? 0 : min - 1, max < 0 ? -1 : max - 1, NULL);
    if (min == 0)
        s_cat(o, ")?");
}

/* Integers in [lo, hi] that a digit count can say: 0, the positive numbers of k digits for
 * each k whose whole decade is inside, the same for negatives; a narrow range otherwise
 * written out. Every text allowed is in range; some in-range ones may be left out. */
static char *s_int_range(json_gbnf *b, double lo, double hi, const char *path)
{
    s_str o = { 0 };
    int alts = 0;
    if (lo <= 0 && hi >= 0) {
        s_cat(&o, "\"0\"");
        alts++;
    }
    for (int sign = 1; sign >= -1; sign -= 2) {
        /* magnitudes m in [a, z] */
        double a = sign > 0 ? (lo > 1 ? lo : 1) : (hi < -1 ? -hi : 1);
        double z = sign > 0 ? hi : -lo;
        if (z < a)
            continue;
        int k1 = 0, k2 = 0;
        for (int k = 1; k <= 16; k++) {
            double first = pow(10, k - 1), last = pow(10, k) - 1;
            if (first >= a && last <= z) {
                if (!k1)
                    k1 = k;
                k2 = k;
            }
        }
        if (k1) {
            int open = isinf(z) || z >= 1e16;
            s_cat(&o, "%s%s[1-9] [0-9]{%d,%d}", alts ? " | " : "", sign < 0 ? "\"-\" " : "",
                  k1 - 1, open ? 15 : k2 - 1);
            alts++;
        } else if (z - a <= 256) {
            for (double m = a; m <= z; m++) {
                s_cat(&o, "%s\"%s%.0f\"", alts ? " | " : "", sign < 0 ? "-" : "", m);
                alts++;
            }
        } else {
            /* the largest full decade below z */
            int kz = 0;
            for (int k = 1; k <= 16 && pow(10, k) - 1 <= z; k++)
                kz = k;
            if (kz && pow(10, kz - 1) >= a) {
                s_cat(&o, "%s%s[1-9] [0-9]{%d}", alts ? " | " : "", sign < 0 ? "\"-\" " : "",
                      kz - 1);
                alts++;
            }
        }
    }
    if (!alts) {
        free(o.s);
        s_fail(b, path, "minimum/maximum: no integer in [%g, %g] this converter can write", lo, hi);
        return NULL;
    }
    char *r = s_done(&o);
    if (!r)
        s_fail(b, NULL, "out of memory");
    return r;
}

static int s_num_kw(json_gbnf *b, const json_t *sch, const char *k, double *v, const char *path)
{
    json_t *x = json_object_get(sch, k);
    if (!x)
        return 0;
    if (!json_is_number(x)) {
        s_fail(b, path, "'%s' must be a number", k);
        return -1;
    }
    *v = json_number_value(x);
    return 1;
}

/* Integer or number with bounds. */
static char *s_numeric(json_gbnf *b, const json_t *sch, int integer, const char *path)
{
    double lo = -INFINITY, hi = INFINITY, v;
    int any = 0, rc;
    if ((rc = s_num_kw(b, sch, "minimum", &v, path)) < 0)
        return NULL;
    if (rc) {
        lo = v;
        any = 1;
    }
    if ((rc = s_num_kw(b, sch, "maximum", &v, path)) < 0)
        return NULL;
    if (rc) {
        hi = v;
        any = 1;
    }
    if ((rc = s_num_kw(b, sch, "exclusiveMinimum", &v, path)) < 0)
        return NULL;
    if (rc) {
        lo = integer ? floor(v) + 1 : nextafter(v, INFINITY);
        any = 1;
    }
    if ((rc = s_num_kw(b, sch, "exclusiveMaximum", &v, path)) < 0)
        return NULL;
    if (rc) {
        hi = integer ? ceil(v) - 1 : nextafter(v, -INFINITY);
        any = 1;
    }
    if (!any)
        return s_dup(b, s_prim(b, integer ? "integer" : "number"));
    double ilo = ceil(lo), ihi = floor(hi);
    if (ilo > ihi && integer) {
        s_fail(b, path, "minimum/maximum: no integer in [%g, %g]", lo, hi);
        return NULL;
    }
    s_str o = { 0 };
    char *ints = ilo <= ihi ? s_int_range(b, ilo, ihi, path) : NULL;
    if (b->failed)
        return NULL;
    if (integer) {
        s_cat(&o, "(%s) %s", ints, s_prim(b, "space"));
    } else {
        /* a fraction after a non-negative integer part i with i + 1 <= hi */
        double flo = ilo > 0 ? ilo : 0, fhi = floor(hi - 1e-9);
        if (hi - 1 >= flo && fhi >= flo) {
            b->failed = 0;
            char *fr = s_int_range(b, flo, fhi, NULL);
            if (fr)
                s_cat(&o, "(%s%s(%s) \".\" %s)", ints ? ints : "", ints ? " | " : "", fr,
                      s_prim(b, "decimal-part"));
            free(fr);
            b->failed = 0;
        } else if (ints) {
            s_cat(&o, "(%s)", ints);
        }
        if (!o.n) {
            free(ints);
            s_fail(b, path, "minimum/maximum: no number in [%g, %g] this converter can write",
                   lo, hi);
            return NULL;
        }
        s_cat(&o, " %s", s_prim(b, "space"));
    }
    free(ints);
    return s_done(&o);
}

static char *s_string(json_gbnf *b, const json_t *sch, const char *path)
{
    const char *fmt = json_string_value(json_object_get(sch, "format"));
    if (fmt && (!strcmp(fmt, "date") || !strcmp(fmt, "time") || !strcmp(fmt, "date-time"))) {
        char name[32];
        snprintf(name, sizeof name, "%s-string", fmt);
        return s_dup(b, s_prim(b, name));
    }
    if (fmt && !strcmp(fmt, "uuid"))
        return s_dup(b, s_prim(b, "uuid"));
    json_t *mn = json_object_get(sch, "minLength"), *mx = json_object_get(sch, "maxLength");
    if ((mn && !json_is_integer(mn)) || (mx && !json_is_integer(mx))) {
        s_fail(b, path, "minLength/maxLength must be integers");
        return NULL;
    }
    if (!mn && !mx)
        return s_dup(b, s_prim(b, "string"));
    long long lo = mn ? json_integer_value(mn) : 0, hi = mx ? json_integer_value(mx) : -1;
    if (lo < 0 || (mx && hi < lo) || lo > 2048 || hi > 2048) {
        s_fail(b, path, "minLength/maxLength: %lld..%lld is not a range this converter writes "
               "(0..2048)", lo, hi);
        return NULL;
    }
    s_str o = { 0 };
    s_cat(&o, "\"\\\"\" ");
    s_repetition(&o, s_prim(b, "char"), lo, hi, NULL);
    s_cat(&o, " \"\\\"\" %s", s_prim(b, "space"));
    return s_done(&o);
}

static char *s_array(json_gbnf *b, const json_t *sch, const char *name, const char *path)
{
    char sub[256], p2[512];
    s_str o = { 0 };
    json_t *items = json_object_get(sch, "items"), *prefix = json_object_get(sch, "prefixItems");
    if (prefix) {
        if (!json_is_array(prefix) || items) {
            s_fail(b, path, "prefixItems must be an array (and without items)");
            return NULL;
        }
        s_cat(&o, "\"[\" %s", s_prim(b, "space"));
        for (size_t i = 0; i < json_array_size(prefix); i++) {
            snprintf(sub, sizeof sub, "%s-tuple-%zu", name, i);
            snprintf(p2, sizeof p2, "%s.prefixItems.%zu", path, i);
            char *r = s_visit(b, json_array_get(prefix, i), sub, p2);
            if (!r)
                goto err;
            s_cat(&o, "%s%s", i ? " \",\" space " : " ", r);
            free(r);
        }
        s_cat(&o, " \"]\" %s", s_prim(b, "space"));
        return s_done(&o);
    }
    json_t *mn = json_object_get(sch, "minItems"), *mx = json_object_get(sch, "maxItems");
    if ((mn && !json_is_integer(mn)) || (mx && !json_is_integer(mx))) {
        s_fail(b, path, "minItems/maxItems must be integers");
        return NULL;
    }
    long long lo = mn ? json_integer_value(mn) : 0, hi = mx ? json_integer_value(mx) : -1;
    if (lo < 0 || (mx && hi < lo) || lo > 1024 || hi > 1024) {
        s_fail(b, path, "minItems/maxItems: %lld..%lld is not a range this converter writes "
               "(0..1024)", lo, hi);
        return NULL;
    }
    char *item;
    if (items && !json_is_object(items) && !json_is_true(items)) {
        s_fail(b, path, "items must be a schema");
        return NULL;
    }
    snprintf(sub, sizeof sub, "%s-item", name);
    snprintf(p2, sizeof p2, "%s.items", path);
    item = items && json_is_object(items) ? s_visit(b, items, sub, p2) : s_dup(b, s_prim(b, "value"));
    if (!item)
        return NULL;
    const char *iname = s_add(b, sub, item);
    free(item);
    s_cat(&o, "\"[\" %s ", s_prim(b, "space"));
    s_repetition(&o, iname, lo, hi, "\",\" space");
    s_cat(&o, " \"]\" %s", s_prim(b, "space"));
    return s_done(&o);
err:
    free(o.s);
    return NULL;
}

/* llama.cpp's _build_object_rule: required properties in order, then any subset of the
 * optional ones in order ("*" = additional properties, any number, last). */
typedef struct {
    const char *key;
    const char *kv;               /* the key-value rule's name */
} s_prop;

static void s_optional(json_gbnf *b, s_str *o, const s_prop *ks, size_t n, int first_optional,
                       const char *name)
{
    if (!n)
        return;
    int star = !strcmp(ks[0].key, "*");
    if (first_optional)
        s_cat(o, "( \",\" space %s )%s", ks[0].kv, star ? "*" : "?");
    else
        s_cat(o, "%s%s%s%s", ks[0].kv, star ? " ( \",\" space " : "", star ? ks[0].kv : "",
              star ? " )*" : "");
    if (n > 1) {
        s_str rest = { 0 };
        s_optional(b, &rest, ks + 1, n - 1, 1, name);
        char rn[256];
        snprintf(rn, sizeof rn, "%s-%s-rest", name, ks[0].key);
        const char *r = rest.s ? s_add(b, rn, rest.s) : NULL;
        if (r)
            s_cat(o, " %s", r);
        free(rest.s);
    }
}

static char *s_object(json_gbnf *b, const json_t *sch, const char *name, const char *path)
{
    json_t *props = json_object_get(sch, "properties"), *req = json_object_get(sch, "required");
    json_t *add = json_object_get(sch, "additionalProperties");
    if ((props && !json_is_object(props)) || (req && !json_is_array(req)) ||
        (add && !json_is_object(add) && !json_is_boolean(add))) {
        s_fail(b, path, "properties must be an object, required an array, additionalProperties "
               "a boolean or a schema");
        return NULL;
    }
    size_t np = json_object_size(props) + json_array_size(req) + 1;
    s_prop *reqd = calloc(np, sizeof *reqd), *opt = calloc(np, sizeof *opt);
    size_t nr = 0, no = 0;
    char *ret = NULL;
    s_str o = { 0 };
    if (!reqd || !opt) {
        s_fail(b, NULL, "out of memory");
        goto out;
    }
    for (size_t i = 0; i < json_array_size(req); i++)
        if (!json_is_string(json_array_get(req, i))) {
            s_fail(b, path, "required must be an array of strings");
            goto out;
        }
    /* properties in the schema's order (jansson keeps insertion order), then required names
     * with no schema (any value) */
    const char *k;
    json_t *v;
    char sub[256], p2[512];
    json_t *keys = json_array();
    json_object_foreach(props, k, v) json_array_append_new(keys, json_string(k));
    for (size_t i = 0; i < json_array_size(req); i++) {
        const char *r = json_string_value(json_array_get(req, i));
        if (!json_object_get(props, r))
            json_array_append_new(keys, json_string(r));
    }
    for (size_t i = 0; i < json_array_size(keys); i++) {
        k = json_string_value(json_array_get(keys, i));
        v = json_object_get(props, k);
        snprintf(sub, sizeof sub, "%s-%s", name, k);
        snprintf(p2, sizeof p2, "%s.properties.%s", path, k);
        char *val = v ? s_visit(b, v, sub, p2) : s_dup(b, s_prim(b, "value"));
        const char *vr = val ? s_add(b, sub, val) : NULL;
        free(val);
        /* the key with its quotes as one literal: "\"name\"" */
        s_str kv = { 0 };
        char *quoted = vr ? malloc(strlen(k) + 3) : NULL;
        char *ql = NULL;
        if (quoted) {
            sprintf(quoted, "\"%s\"", k);
            ql = json_schema_literal(quoted, strlen(quoted));
        }
        if (ql)
            s_cat(&kv, "%s space \":\" space %s", ql, vr);
        free(ql);
        free(quoted);
        char kvn[300];
        snprintf(kvn, sizeof kvn, "%s-kv", sub);
        const char *kvr = kv.s ? s_add(b, kvn, kv.s) : NULL;
        free(kv.s);
        if (!kvr || b->failed) {
            s_fail(b, NULL, "out of memory");
            json_decref(keys);
            goto out;
        }
        int is_req = 0;
        for (size_t r = 0; r < json_array_size(req); r++)
            is_req |= !strcmp(json_string_value(json_array_get(req, r)), k);
        if (is_req)
            reqd[nr++] = (s_prop){ s_find(b, kvr)->name, kvr };
        else
            opt[no++] = (s_prop){ s_find(b, kvr)->name, kvr };
    }
    json_decref(keys);
    if (add && !json_is_false(add)) {
        snprintf(sub, sizeof sub, "%s-additional", name);
        snprintf(p2, sizeof p2, "%s.additionalProperties", path);
        char *val = json_is_object(add) ? s_visit(b, add, sub, p2) : s_dup(b, s_prim(b, "value"));
        const char *vr = val ? s_add(b, sub, val) : NULL;
        free(val);
        if (!vr)
            goto out;
        s_str kv = { 0 };
        s_cat(&kv, "%s \":\" space %s", s_prim(b, "string"), vr);
        char kvn[300];
        snprintf(kvn, sizeof kvn, "%s-kv", sub);
        const char *kvr = kv.s ? s_add(b, kvn, kv.s) : NULL;
        free(kv.s);
        if (!kvr)
            goto out;
        opt[no++] = (s_prop){ "*", kvr };
    }
    s_cat(&o, "\"{\" %s", s_prim(b, "space"));
    for (size_t i = 0; i < nr; i++)
        s_cat(&o, "%s%s", i ? " \",\" space " : " ", reqd[i].kv);
    if (no) {
        s_cat(&o, " (");
        if (nr)
            s_cat(&o, " \",\" space ( ");
        for (size_t i = 0; i < no; i++) {
            if (i)
                s_cat(&o, " | ");
            s_optional(b, &o, opt + i, no - i, 0, name);
        }
        if (nr)
            s_cat(&o, " )");
        s_cat(&o, " )?");
    }
    s_cat(&o, " \"}\" %s", s_prim(b, "space"));
    ret = s_done(&o);
    o.s = NULL;
out:
    free(o.s);
    free(reqd);
    free(opt);
    return ret;
}

/* "#", "#/$defs/X", "#/definitions/X" (and deeper JSON pointers inside the root). */
static char *s_ref(json_gbnf *b, const char *ref, const char *path)
{
    json_t *done = json_object_get(b->refs, ref);
    if (done)
        return s_dup(b, json_string_value(done));
    if (ref[0] != '#' || (ref[1] && ref[1] != '/')) {
        s_fail(b, path, "$ref '%s': only local references (#, #/...) are supported", ref);
        return NULL;
    }
    const json_t *t = b->root;
    char name[128] = "ref";
    for (const char *p = ref + 1; *p == '/' && t;) {
        const char *e = strchr(p + 1, '/');
        size_t n = e ? (size_t)(e - p - 1) : strlen(p + 1);
        char key[128];
        snprintf(key, sizeof key, "%.*s", (int)(n < 127 ? n : 127), p + 1);
        t = json_object_get(t, key);
        snprintf(name, sizeof name, "%s", key);
        p += n + 1;
    }
    if (!t || !json_is_object(t)) {
        s_fail(b, path, "$ref '%s' does not point to a schema in this document", ref);
        return NULL;
    }
    /* the name first, so a recursive reference finds it */
    char rn[160];
    snprintf(rn, sizeof rn, "ref-%s", name);
    const char *taken = s_add(b, rn, "\"\"");
    if (!taken) {
        s_fail(b, NULL, "out of memory");
        return NULL;
    }
    char *tname = strdup(taken);
    json_object_set_new(b->refs, ref, json_string(tname));
    char *body = s_visit(b, t, tname, ref);
    if (body) {
        s_rule *r = s_find(b, tname);
        free(r->body);
        r->body = body;
    }
    if (!body) {
        free(tname);
        return NULL;
    }
    return tname;
}

static char *s_union(json_gbnf *b, const json_t *alts, const char *name, const char *path,
                     const char *kw)
{
    if (!json_is_array(alts) || !json_array_size(alts)) {
        s_fail(b, path, "'%s' must be a non-empty array of schemas", kw);
        return NULL;
    }
    s_str o = { 0 };
    for (size_t i = 0; i < json_array_size(alts); i++) {
        char sub[256], p2[512];
        snprintf(sub, sizeof sub, "%s-%zu", name, i);
        snprintf(p2, sizeof p2, "%s.%s.%zu", path, kw, i);
        char *r = s_visit(b, json_array_get(alts, i), sub, p2);
        const char *rn = r ? s_add(b, sub, r) : NULL;
        free(r);
        if (!rn) {
            free(o.s);
            return NULL;
        }
        s_cat(&o, "%s%s", i ? " | " : "", rn);
    }
    return s_done(&o);
}

static char *s_visit(json_gbnf *b, const json_t *sch, const char *name, const char *path)
{
    if (b->failed)
        return NULL;
    if (json_is_true(sch))
        return s_dup(b, s_prim(b, "value"));
    if (!json_is_object(sch)) {
        s_fail(b, path, "a schema must be an object or true");
        return NULL;
    }
    const char *k;
    json_t *v;
    json_object_foreach((json_t *)sch, k, v) if (!s_in(s_notes, k) && !s_in(s_known, k)) {
        s_fail(b, path, "unsupported keyword '%s'", k);
        return NULL;
    }
    json_t *ref = json_object_get(sch, "$ref");
    if (ref) {
        if (!json_is_string(ref)) {
            s_fail(b, path, "$ref must be a string");
            return NULL;
        }
        return s_ref(b, json_string_value(ref), path);
    }
    json_t *alts = json_object_get(sch, "anyOf");
    if (alts)
        return s_union(b, alts, name, path, "anyOf");
    if ((alts = json_object_get(sch, "oneOf")))
        return s_union(b, alts, name, path, "oneOf");
    json_t *type = json_object_get(sch, "type");
    if (json_is_array(type)) {
        /* each type with the schema's other keywords */
        json_t *each = json_array();
        size_t i;
        json_t *t;
        json_array_foreach(type, i, t) {
            json_t *c = json_copy((json_t *)sch);
            json_object_set(c, "type", t);
            json_array_append_new(each, c);
        }
        char *r = s_union(b, each, name, path, "type");
        json_decref(each);
        return r;
    }
    json_t *cv = json_object_get(sch, "const");
    if (cv) {
        char *lit = s_json_literal(b, cv);
        s_str o = { 0 };
        if (lit)
            s_cat(&o, "%s %s", lit, s_prim(b, "space"));
        free(lit);
        return s_done(&o);
    }
    json_t *en = json_object_get(sch, "enum");
    if (en) {
        if (!json_is_array(en) || !json_array_size(en)) {
            s_fail(b, path, "'enum' must be a non-empty array");
            return NULL;
        }
        s_str o = { 0 };
        s_cat(&o, "(");
        for (size_t i = 0; i < json_array_size(en); i++) {
            char *lit = s_json_literal(b, json_array_get(en, i));
            if (lit)
                s_cat(&o, "%s%s", i ? " | " : "", lit);
            free(lit);
        }
        s_cat(&o, ") %s", s_prim(b, "space"));
        return s_done(&o);
    }
    const char *ts = json_string_value(type);
    if (type && !ts) {
        s_fail(b, path, "'type' must be a string or an array of strings");
        return NULL;
    }
    int has_obj = json_object_get(sch, "properties") || json_object_get(sch, "required") ||
                  json_is_object(json_object_get(sch, "additionalProperties")) ||
                  json_is_false(json_object_get(sch, "additionalProperties"));
    if ((!ts && has_obj) || (ts && !strcmp(ts, "object") && has_obj))
        return s_object(b, sch, name, path);
    if (!ts) {
        if (json_object_get(sch, "items") || json_object_get(sch, "prefixItems"))
            return s_array(b, sch, name, path);
        return s_dup(b, s_prim(b, "value"));
    }
    if (!strcmp(ts, "object"))
        return s_dup(b, s_prim(b, "object"));
    if (!strcmp(ts, "array"))
        return s_array(b, sch, name, path);
    if (!strcmp(ts, "string"))
        return s_string(b, sch, path);
    if (!strcmp(ts, "integer") || !strcmp(ts, "number"))
        return s_numeric(b, sch, !strcmp(ts, "integer"), path);
    if (!strcmp(ts, "boolean") || !strcmp(ts, "null"))
        return s_dup(b, s_prim(b, ts));
    s_fail(b, path, "unknown type '%s' (object, array, string, number, integer, boolean, null)",
           ts);
    return NULL;
}

const char *json_gbnf_add(json_gbnf *b, const json_t *schema, const char *name, char *err,
                          size_t errlen)
{
    b->err = err;
    b->errlen = errlen;
    b->failed = 0;
    b->root = schema;
    json_decref(b->refs);
    b->refs = json_object();
    char *body = b->refs ? s_visit(b, schema, name, "") : NULL;
    const char *r = body && !b->failed ? s_add(b, name, body) : NULL;
    free(body);
    if (!r && !b->failed)
        s_fail(b, NULL, "out of memory");
    b->root = NULL;
    return b->failed ? NULL : r;
}

char *json_schema_to_gbnf(const json_t *schema, char *err, size_t errlen)
{
    json_gbnf *b = json_gbnf_new();
    char *text = NULL;
    if (!b) {
        snprintf(err, errlen, "json schema: out of memory");
        return NULL;
    }
    if (json_gbnf_add(b, schema, "root", err, errlen))
        text = json_gbnf_text(b);
    json_gbnf_free(&b);
    return text;
}

const char *json_schema_object_gbnf(void)
{
    return "root ::= object\n"
           "object ::= \"{\" space ( string \":\" space value (\",\" space string \":\" space value)* )? \"}\" space\n"
           "value ::= object | array | string | number | boolean | null\n"
           "array ::= \"[\" space ( value (\",\" space value)* )? \"]\" space\n"
           "string ::= \"\\\"\" char* \"\\\"\" space\n"
           "char ::= [^\"\\\\\\x7F\\x00-\\x1F] | [\\\\] ([\"\\\\bfnrt] | \"u\" [0-9a-fA-F]{4})\n"
           "number ::= (\"-\"? integral-part) (\".\" decimal-part)? ([eE] [-+]? integral-part)? space\n"
           "integral-part ::= [0] | [1-9] [0-9]{0,15}\n"
           "decimal-part ::= [0-9]{1,16}\n"
           "boolean ::= (\"true\" | \"false\") space\n"
           "null ::= \"null\" space\n"
           "space ::= | \" \" | \"\\n\"{1,2} [ \\t]{0,20}\n";
}
