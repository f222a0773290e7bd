/* test_gate.c — the cache and content gates: the 1% boundary both ways, n/a, and what voids content. tests/ */
#include "runtime/gate.h"
#include "tests/check.h"

#include <string.h>

static void s_cache(void)
{
    run_result r;
    /* 1% of 100 MB either way passes; one byte further does not. */
    const uint64_t want = 100000000ull;
    CHECK(gate_cache_ok(want, want), "exact");
    CHECK(gate_cache_ok(want - want / 100, want), "1%% short");
    CHECK(gate_cache_ok(want + want / 100, want), "1%% over");
    CHECK(!gate_cache_ok(want - want / 100 - 1, want), "a byte past 1%% short");
    CHECK(!gate_cache_ok(want + want / 100 + 1, want), "a byte past 1%% over");
    CHECK(!gate_cache_ok(0, want), "nothing from storage");

    result_init(&r, "ssd", 1);
    gate_cache_judge(&r, 12345, 0, 0);
    CHECK(r.gate_cache == GATE_NA && !result_is_void(&r), "nothing streamed: n/a");
    gate_cache_judge(&r, want, want, 0);
    CHECK(r.gate_cache == GATE_PASS, "storage served every streamed byte");
    result_free(&r);

    /* What a fallback loaded during the steps counts with what it streamed. */
    result_init(&r, "resident", 1);
    gate_cache_judge(&r, want + 50000000ull, want, 50000000ull);
    CHECK(r.gate_cache == GATE_PASS, "streamed + loaded");
    gate_cache_judge(&r, want, want, 50000000ull);
    CHECK(r.gate_cache == GATE_VOID && result_is_void(&r), "load missing from storage");
    CHECK(strstr(r.void_reason, "cache:") && strstr(r.void_reason, "page cache"),
          "reason: %s", r.void_reason);
    result_free(&r);

    result_init(&r, "ssd", 1);
    gate_cache_judge(&r, 2 * want, want, 0);
    CHECK(r.gate_cache == GATE_VOID && strstr(r.void_reason, "something else read"),
          "storage over: %s", r.void_reason);
    result_free(&r);
}

static void s_content(void)
{
    /* (failed, hashed, used) -> verdict and the words its reason must contain. */
    static const struct {
        uint64_t fail, hashed, due;
        gate_state want;
        const char *reason;
    } cases[] = {
        { 0, 0, 0, GATE_PASS, "" },   /* nothing streamed: resident layers were verified at load */
        { 0, 64, 64, GATE_PASS, "" }, /* every streamed layer hashed */
        { 1, 64, 64, GATE_VOID, "1 streamed layers failed their checksum" },
        { 0, 63, 64, GATE_VOID, "63 streamed layers verified of 64 used" }, /* one skipped */
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        run_result r;
        exec_stats st = { .content_fail = cases[i].fail, .layers_streamed = cases[i].hashed,
                          .layers_due = cases[i].due };
        result_init(&r, "ssd", 1);
        gate_content_judge(&r, &st);
        CHECK(r.gate_content == cases[i].want && strstr(r.void_reason, cases[i].reason),
              "case %zu: gate %s, reason '%s'", i, result_gate_name(r.gate_content),
              r.void_reason);
        result_free(&r);
    }
}

int main(void)
{
    s_cache();
    s_content();
    return CHECK_DONE("test_gate");
}
