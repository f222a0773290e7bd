/* iobuf.c — huge-page-backed buffers for O_DIRECT reads, with a reported fallback. base/ */
#include "base/iobuf.h"

#include <errno.h>
#include <stdio.h>
#include <string.h>
#include <sys/mman.h>

#ifndef MAP_HUGE_2MB
#define MAP_HUGE_2MB (21 << 26) /* log2(2 MiB) << MAP_HUGE_SHIFT */
#endif
#ifndef MADV_COLLAPSE
#define MADV_COLLAPSE 25 /* Linux 6.1; glibc 2.36's headers predate it */
#endif

#define S_THP_ENABLED "/sys/kernel/mm/transparent_hugepage/enabled"

static uint64_t s_round_up(uint64_t v, uint64_t a)
{
    return (v + a - 1) / a * a;
}

/* Free 2 MiB pages in the hugetlb pool (/proc/meminfo), 0 when none or another default size. */
static uint64_t s_hugetlb_free(void)
{
    FILE *f = fopen("/proc/meminfo", "r");
    char line[128];
    unsigned long long free_pages = 0, size_kb = 0, v;
    if (!f)
        return 0;
    while (fgets(line, sizeof line, f)) {
        if (sscanf(line, "HugePages_Free: %llu", &v) == 1)
            free_pages = v;
        else if (sscanf(line, "Hugepagesize: %llu kB", &v) == 1)
            size_kb = v;
    }
    fclose(f);
    return size_kb * 1024 == IOBUF_HUGE ? free_pages : 0;
}

/* The bracketed word of the THP policy file ("always [madvise] never" -> "madvise"). */
static void s_thp_mode(char *mode, size_t len)
{
    FILE *f = fopen(S_THP_ENABLED, "r");
    char line[128] = "", *a, *z;
    snprintf(mode, len, "unknown");
    if (!f)
        return;
    if (fgets(line, sizeof line, f) && (a = strchr(line, '[')) && (z = strchr(a, ']'))) {
        *z = 0;
        snprintf(mode, len, "%s", a + 1);
    }
    fclose(f);
}

uint64_t iobuf_thp_bytes(const void *p, uint64_t len)
{
    FILE *f = fopen("/proc/self/smaps", "r");
    char line[512];
    unsigned long long lo, hi, kb;
    uintptr_t a = (uintptr_t)p;
    int inside = 0;
    uint64_t got = 0;
    (void)len;
    if (!f)
        return 0;
    while (fgets(line, sizeof line, f)) {
        /* A mapping's header is "lo-hi perms ..."; its fields follow until the next header. */
        if (sscanf(line, "%llx-%llx ", &lo, &hi) == 2 && strchr(line, '-') < strchr(line, ' ')) {
            if (inside)
                break;
            inside = a >= lo && a < hi;
        } else if (inside && sscanf(line, "AnonHugePages: %llu kB", &kb) == 1) {
            got = kb * 1024;
        }
    }
    fclose(f);
    return got;
}

/* Anonymous mapping of len bytes starting on a 2 MiB boundary (mmap only promises 4 KiB). */
static uint8_t *s_map_aligned(uint64_t len)
{
    uint8_t *raw = mmap(NULL, len + IOBUF_HUGE, PROT_READ | PROT_WRITE,
                        MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (raw == MAP_FAILED)
        return NULL;
    uint8_t *p = (uint8_t *)s_round_up((uintptr_t)raw, IOBUF_HUGE);
    if (p > raw)
        munmap(raw, (size_t)(p - raw));
    munmap(p + len, (size_t)(raw + len + IOBUF_HUGE - (p + len)));
    return p;
}

static int s_try_hugetlb(iobuf *b)
{
    uint64_t map_len = s_round_up(b->len, IOBUF_HUGE);
    if (s_hugetlb_free() * IOBUF_HUGE < map_len)
        return -1;
    /* Reserved at mmap time (no MAP_NORESERVE), so touching it later cannot SIGBUS. */
    void *p = mmap(NULL, map_len, PROT_READ | PROT_WRITE,
                   MAP_PRIVATE | MAP_ANONYMOUS | MAP_HUGETLB | MAP_HUGE_2MB, -1, 0);
    if (p == MAP_FAILED)
        return -1;
    b->p = p;
    b->map_len = map_len;
    b->huge_bytes = map_len;
    b->kind = IOBUF_HUGETLB;
    snprintf(b->desc, sizeof b->desc, "hugetlb");
    return 0;
}

/* THP: returns 0 with kind THP, or -1 with why filled and the mapping kept as 4 KiB pages. */
static int s_try_thp(iobuf *b, char *why, size_t wlen)
{
    char mode[32];
    uint64_t want = b->len / IOBUF_HUGE * IOBUF_HUGE; /* the tail under 2 MiB stays 4 KiB */
    s_thp_mode(mode, sizeof mode);
    if (!strcmp(mode, "never")) {
        snprintf(why, wlen, "transparent huge pages are off (%s: never)", S_THP_ENABLED);
        return -1;
    }
    if (madvise(b->p, b->len, MADV_HUGEPAGE)) {
        snprintf(why, wlen, "madvise(MADV_HUGEPAGE): %s", strerror(errno));
        return -1;
    }
    memset(b->p, 0, b->len); /* fault in now: with the advice, each 2 MiB range as one page */
    b->huge_bytes = iobuf_thp_bytes(b->p, b->len);
    if (b->huge_bytes < want) {
        /* Fragmented memory: the fault fell back to 4 KiB pages. Ask the kernel to compact
         * and collapse them in place now (Linux >= 6.1), before any read depends on it. */
        if (madvise(b->p, want, MADV_COLLAPSE) == 0)
            b->huge_bytes = iobuf_thp_bytes(b->p, b->len);
    }
    if (b->huge_bytes < want) {
        snprintf(why, wlen, "THP gave %llu of %llu MiB (policy %s, memory fragmented?)",
                 (unsigned long long)(b->huge_bytes >> 20), (unsigned long long)(want >> 20),
                 mode);
        return -1;
    }
    b->kind = IOBUF_THP;
    snprintf(b->desc, sizeof b->desc, "thp");
    return 0;
}

int iobuf_alloc(iobuf *b, uint64_t len, int force_4k, char *err, size_t errlen)
{
    char why[160];
    memset(b, 0, sizeof *b);
    b->len = len;
    if (!len) {
        snprintf(err, errlen, "I/O buffer of 0 bytes");
        return -1;
    }
    if (force_4k)
        snprintf(why, sizeof why, "asked for: buffers = 4k");
    else if (len < IOBUF_HUGE)
        snprintf(why, sizeof why, "%llu KiB is less than one 2 MiB huge page",
                 (unsigned long long)(len >> 10));
    else if (s_try_hugetlb(b) == 0)
        return 0;
    b->p = s_map_aligned(len);
    if (!b->p) {
        snprintf(err, errlen, "cannot map %llu bytes for I/O buffers: %s",
                 (unsigned long long)len, strerror(errno));
        return -1;
    }
    b->map_len = len;
    if (!force_4k && len >= IOBUF_HUGE && s_try_thp(b, why, sizeof why) == 0)
        return 0;
    /* Deliberately small pages: under THP "always" the kernel could still hand out huge ones
     * behind our back, and the label would lie. */
    madvise(b->p, b->len, MADV_NOHUGEPAGE);
    memset(b->p, 0, b->len);
    b->huge_bytes = iobuf_thp_bytes(b->p, b->len); /* a failed THP try may have left some */
    b->kind = IOBUF_4K;
    snprintf(b->desc, sizeof b->desc, "4k-pages (fallback: %s)", why);
    return 0;
}

void iobuf_free(iobuf *b)
{
    if (b && b->p)
        munmap(b->p, b->map_len);
    if (b)
        memset(b, 0, sizeof *b);
}
