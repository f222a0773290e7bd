/* test_partition.c — partition_layers: even and uneven caps, short caps, more workers than layers. tests/ */
#include <stdint.h>
#include <string.h>

#include "check.h"
#include "dist/partition.h"

/* The invariants every successful plan must keep: contiguous, covering, >= 1 layer each, within
 * each worker's cap. Returns the largest stage (0 when an invariant fails). */
static uint32_t s_valid(uint32_t n_layers, uint32_t n, const uint32_t *maxl, const uint32_t *first,
                        const uint32_t *last)
{
    uint32_t at = 0, big = 0;
    for (uint32_t i = 0; i < n; i++) {
        if (first[i] != at || last[i] <= first[i] || last[i] - first[i] > maxl[i])
            return 0;
        if (last[i] - first[i] > big)
            big = last[i] - first[i];
        at = last[i];
    }
    return at == n_layers ? big : 0;
}

/* The best possible largest stage, by brute force over t: the smallest t such that
 * sum(min(maxl_i, t)) >= n_layers (every worker holding >= 1). */
static uint32_t s_best(uint32_t n_layers, uint32_t n, const uint32_t *maxl)
{
    for (uint32_t t = 1; t <= n_layers; t++) {
        uint64_t sum = 0;
        for (uint32_t i = 0; i < n; i++)
            sum += maxl[i] < t ? maxl[i] : t;
        if (sum >= n_layers)
            return t;
    }
    return 0;
}

static int s_plan(uint32_t n_layers, uint32_t n, const uint32_t *maxl, uint32_t *first,
                  uint32_t *last, char *err, size_t errlen)
{
    memset(first, 0xff, sizeof(uint32_t) * n);
    memset(last, 0xff, sizeof(uint32_t) * n);
    err[0] = 0;
    return partition_layers(n_layers, n, maxl, first, last, err, errlen);
}

int main(void)
{
    uint32_t first[64], last[64];
    char err[512];

    /* Even: 6 layers, 3 equal generous caps -> 2 each, in order. */
    {
        uint32_t maxl[3] = { 100, 100, 100 };
        int rc = s_plan(6, 3, maxl, first, last, err, sizeof err);
        CHECK(rc == 0, "even: rc %d (%s)", rc, err);
        CHECK(first[0] == 0 && last[0] == 2 && first[1] == 2 && last[1] == 4 && first[2] == 4 &&
              last[2] == 6, "even: [%u,%u) [%u,%u) [%u,%u)", first[0], last[0], first[1],
              last[1], first[2], last[2]);
    }
    /* Even, not divisible: 7 over 3 -> largest stage 3, all valid. */
    {
        uint32_t maxl[3] = { 7, 7, 7 };
        int rc = s_plan(7, 3, maxl, first, last, err, sizeof err);
        CHECK(rc == 0 && s_valid(7, 3, maxl, first, last) == 3, "7 over 3: rc %d largest %u",
              rc, s_valid(7, 3, maxl, first, last));
    }
    /* Exactly fitting caps: 9 layers, caps 3,3,3. */
    {
        uint32_t maxl[3] = { 3, 3, 3 };
        int rc = s_plan(9, 3, maxl, first, last, err, sizeof err);
        CHECK(rc == 0 && s_valid(9, 3, maxl, first, last) == 3, "9 over 3x3: rc %d (%s)", rc,
              err);
    }
    /* Uneven caps: a small worker in the middle gets what it can hold, the rest balanced. */
    {
        uint32_t maxl[3] = { 10, 1, 10 };
        int rc = s_plan(9, 3, maxl, first, last, err, sizeof err);
        CHECK(rc == 0, "uneven 10,1,10: rc %d (%s)", rc, err);
        CHECK(s_valid(9, 3, maxl, first, last) == 4, "uneven 10,1,10: largest %u, wanted 4",
              s_valid(9, 3, maxl, first, last));
        CHECK(last[1] - first[1] == 1, "uneven: middle worker holds %u, cap 1",
              last[1] - first[1]);
    }
    {
        uint32_t maxl[4] = { 2, 8, 3, 1 };
        int rc = s_plan(12, 4, maxl, first, last, err, sizeof err);
        CHECK(rc == 0, "uneven 2,8,3,1: rc %d (%s)", rc, err);
        CHECK(s_valid(12, 4, maxl, first, last) == 6, "uneven 2,8,3,1: largest %u, wanted 6",
              s_valid(12, 4, maxl, first, last));
    }
    /* Every small case against brute force: valid and with the best largest stage. */
    {
        int bad = 0, ok = 0;
        uint32_t maxl[4];
        for (uint32_t n_layers = 1; n_layers <= 12; n_layers++)
            for (uint32_t n = 1; n <= 4 && n <= n_layers; n++)
                for (uint32_t code = 0; code < 7u * 7 * 7 * 7; code++) {
                    uint32_t c = code, fits = 1;
                    uint64_t sum = 0;
                    for (uint32_t i = 0; i < 4; i++) {
                        maxl[i] = 1 + c % 7; /* 1..7 */
                        c /= 7;
                    }
                    if (code >= (n == 1 ? 7u : n == 2 ? 49u : n == 3 ? 343u : 2401u))
                        break;
                    for (uint32_t i = 0; i < n; i++)
                        sum += maxl[i];
                    fits = sum >= n_layers;
                    int rc = s_plan(n_layers, n, maxl, first, last, err, sizeof err);
                    if (fits) {
                        uint32_t big = rc == 0 ? s_valid(n_layers, n, maxl, first, last) : 0;
                        if (!big || big != s_best(n_layers, n, maxl)) {
                            if (bad++ < 5)
                                CHECK(0, "L=%u n=%u caps %u,%u,%u,%u: rc %d largest %u best %u",
                                      n_layers, n, maxl[0], maxl[1], maxl[2], maxl[3], rc, big,
                                      s_best(n_layers, n, maxl));
                        } else
                            ok++;
                    } else if (rc != -1 || !strstr(err, "short by")) {
                        if (bad++ < 5)
                            CHECK(0, "L=%u n=%u: short caps accepted or unexplained: rc %d '%s'",
                                  n_layers, n, rc, err);
                    } else
                        ok++;
                }
        CHECK(bad == 0, "%d of %d brute-force cases wrong", bad, bad + ok);
    }
    /* Caps too small in total: the error names the shortfall. */
    {
        uint32_t maxl[2] = { 2, 2 };
        int rc = s_plan(6, 2, maxl, first, last, err, sizeof err);
        CHECK(rc == -1, "short caps: rc %d", rc);
        CHECK(strstr(err, "short by 2") != NULL, "short caps: error '%s' lacks 'short by 2'",
              err);
        CHECK(strstr(err, "4 of 6") != NULL, "short caps: error '%s' lacks '4 of 6'", err);
    }
    /* A cap that holds nothing: named. */
    {
        uint32_t maxl[3] = { 5, 0, 5 };
        int rc = s_plan(6, 3, maxl, first, last, err, sizeof err);
        CHECK(rc == -1, "zero cap: rc %d", rc);
        CHECK(strstr(err, "worker 1") != NULL && strstr(err, "cap") != NULL,
              "zero cap: error '%s' does not name worker 1's cap", err);
    }
    /* More workers than layers: clear error, never a zero-layer stage. */
    {
        uint32_t maxl[8] = { 9, 9, 9, 9, 9, 9, 9, 9 };
        int rc = s_plan(6, 8, maxl, first, last, err, sizeof err);
        CHECK(rc == -1, "8 workers for 6 layers: rc %d", rc);
        CHECK(strstr(err, "8 workers") != NULL && strstr(err, "6 layers") != NULL,
              "8 workers for 6 layers: error '%s'", err);
    }
    /* No workers. */
    {
        uint32_t maxl[1] = { 9 };
        int rc = s_plan(6, 0, maxl, first, last, err, sizeof err);
        CHECK(rc == -1 && err[0], "no workers: rc %d '%s'", rc, err);
    }
    /* One worker takes everything; as many workers as layers take one each. */
    {
        uint32_t maxl[6] = { 6, 6, 6, 6, 6, 6 };
        int rc = s_plan(6, 1, maxl, first, last, err, sizeof err);
        CHECK(rc == 0 && first[0] == 0 && last[0] == 6, "one worker: rc %d [%u,%u)", rc,
              first[0], last[0]);
        rc = s_plan(6, 6, maxl, first, last, err, sizeof err);
        CHECK(rc == 0 && s_valid(6, 6, maxl, first, last) == 1, "six workers: rc %d", rc);
    }
    /* A large model: 96 layers over 5 uneven caps. */
    {
        uint32_t maxl[5] = { 40, 10, 30, 30, 12 };
        int rc = s_plan(96, 5, maxl, first, last, err, sizeof err);
        CHECK(rc == 0 && s_valid(96, 5, maxl, first, last) == s_best(96, 5, maxl),
              "96 layers: rc %d largest %u best %u", rc, s_valid(96, 5, maxl, first, last),
              s_best(96, 5, maxl));
    }
    return CHECK_DONE("test_partition");
}
