/* test_iobuf.c — O_DIRECT buffer kinds: huge pages when the machine gives them, a reported 4 KiB fallback otherwise. tests/ */
#include "base/iobuf.h"
#include "tests/check.h"

#include <stdint.h>
#include <stdio.h>
#include <string.h>

#define S_PREFIX "4k-pages (fallback: "

static int s_all_zero(const uint8_t *p, uint64_t n)
{
    for (uint64_t i = 0; i < n; i += 4096)
        if (p[i])
            return 0;
    return 1;
}

/* The fallback asked for (the knob behind `[ssd] buffers = 4k`): reported as such, and the
 * kernel's own accounting agrees that no huge page backs it. */
static void s_forced_4k(void)
{
    iobuf b;
    char err[256] = "";
    uint64_t len = (8u << 20) + (72u << 10);
    CHECK(iobuf_alloc(&b, len, 1, err, sizeof err) == 0, "forced 4k: %s", err);
    CHECK(b.kind == IOBUF_4K, "forced 4k gave kind %d", b.kind);
    CHECK(strcmp(b.desc, S_PREFIX "asked for: buffers = 4k)") == 0, "desc '%s'", b.desc);
    CHECK(((uintptr_t)b.p & 4095) == 0, "4k buffer not 4096-aligned: %p", (void *)b.p);
    CHECK(b.len == len && b.map_len == len, "len %llu map_len %llu", (unsigned long long)b.len,
          (unsigned long long)b.map_len);
    CHECK(iobuf_thp_bytes(b.p, b.len) == 0, "forced 4k buffer has %llu bytes of THP",
          (unsigned long long)iobuf_thp_bytes(b.p, b.len));
    CHECK(s_all_zero(b.p, b.len), "forced 4k buffer not touched/zeroed");
    iobuf_free(&b);
    CHECK(b.p == NULL, "iobuf_free did not clear the pointer");
}

/* Less than one huge page: no huge page can back it; says so. */
static void s_small(void)
{
    iobuf b;
    char err[256] = "";
    CHECK(iobuf_alloc(&b, 360u << 10, 0, err, sizeof err) == 0, "small: %s", err);
    CHECK(b.kind == IOBUF_4K, "360 KiB gave kind %d", b.kind);
    CHECK(strstr(b.desc, "less than one 2 MiB huge page") != NULL, "desc '%s'", b.desc);
    iobuf_free(&b);
    CHECK(iobuf_alloc(&b, 0, 0, err, sizeof err) == -1, "0 bytes accepted");
}

/* The default: whichever kind this machine gives, the label must match what the kernel
 * reports, and a fallback must carry its reason. */
static void s_default(void)
{
    iobuf b;
    char err[256] = "", mode[128] = "";
    uint64_t len = (8u << 20) + (72u << 10), whole = len / IOBUF_HUGE * IOBUF_HUGE;
    FILE *f = fopen("/sys/kernel/mm/transparent_hugepage/enabled", "r");
    if (f) {
        if (!fgets(mode, sizeof mode, f))
            mode[0] = 0;
        fclose(f);
    }
    CHECK(iobuf_alloc(&b, len, 0, err, sizeof err) == 0, "default: %s", err);
    printf("note: this machine's I/O buffers: %s (THP policy: %.*s)\n", b.desc,
           (int)strcspn(mode, "\n"), mode);
    switch (b.kind) {
    case IOBUF_HUGETLB:
        CHECK(strcmp(b.desc, "hugetlb") == 0, "desc '%s'", b.desc);
        CHECK(b.map_len % IOBUF_HUGE == 0 && b.map_len >= len, "hugetlb map_len %llu",
              (unsigned long long)b.map_len);
        break;
    case IOBUF_THP:
        CHECK(strcmp(b.desc, "thp") == 0, "desc '%s'", b.desc);
        CHECK(((uintptr_t)b.p % IOBUF_HUGE) == 0, "THP buffer not 2 MiB-aligned: %p", (void *)b.p);
        CHECK(iobuf_thp_bytes(b.p, b.len) >= whole, "labelled thp, smaps shows %llu of %llu",
              (unsigned long long)iobuf_thp_bytes(b.p, b.len), (unsigned long long)whole);
        CHECK(strstr(mode, "[never]") == NULL, "THP while the policy is never: %s", mode);
        CHECK(b.map_len == len, "THP mapped %llu for %llu: the cap would be charged more",
              (unsigned long long)b.map_len, (unsigned long long)len);
        break;
    case IOBUF_4K:
        CHECK(strncmp(b.desc, S_PREFIX, strlen(S_PREFIX)) == 0 &&
                  strlen(b.desc) > strlen(S_PREFIX) + 2,
              "fallback without a reason: '%s'", b.desc);
        break;
    default:
        CHECK(0, "unknown kind %d", b.kind);
    }
    CHECK(s_all_zero(b.p, b.len), "default buffer not touched/zeroed");
    b.p[len - 1] = 1; /* the whole length is usable */
    iobuf_free(&b);
}

int main(void)
{
    s_forced_4k();
    s_small();
    s_default();
    return CHECK_DONE("test_iobuf");
}
