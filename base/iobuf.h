/* iobuf.h — memory for O_DIRECT reads, backed by huge pages so a large read reaches the device whole. base/
 *
 * Why the page size matters: the block layer turns an O_DIRECT read into one request per run
 * of physically contiguous memory it can fit in the device's segment limit (max_segments 254
 * on the development machines' virtio disk). A 4 MiB read into ordinary 4 KiB pages that
 * happen to be scattered reaches the device cut into ≈0.5 MB requests and runs at about half
 * the speed of the same read into huge pages, which reaches it whole (fio, 2026-12-01, see
 * docs/design.md "Measured facts"). Whether 4 KiB pages are contiguous is luck of allocation, so the
 * streaming ring asks for huge pages on purpose and says which kind it got:
 *   "hugetlb"  MAP_HUGETLB from the reserved pool (only when the pool has enough free pages)
 *   "thp"      transparent huge pages: a 2 MiB-aligned anonymous mapping + MADV_HUGEPAGE,
 *              checked afterwards in /proc/self/smaps (AnonHugePages)
 *   "4k-pages (fallback: why)"  everything else, with the reason
 */
#ifndef SWARM_IOBUF_H
#define SWARM_IOBUF_H

#include <stddef.h>
#include <stdint.h>

#define IOBUF_HUGE (2u << 20)  /* the huge page size asked for (x86-64 PMD) */

typedef enum { IOBUF_HUGETLB = 0, IOBUF_THP = 1, IOBUF_4K = 2 } iobuf_kind;

typedef struct {
    uint8_t *p;                /* len usable bytes; IOBUF_HUGE-aligned unless kind is 4K */
    uint64_t len;              /* bytes asked for: what the memory cgroup is charged (thp, 4k) */
    uint64_t map_len;          /* bytes mapped (hugetlb rounds len up to whole huge pages) */
    uint64_t huge_bytes;       /* bytes seen backed by huge pages when allocated */
    iobuf_kind kind;
    char desc[200];            /* "hugetlb", "thp" or "4k-pages (fallback: why)" */
} iobuf;

/* Map len bytes (> 0), touched, for O_DIRECT reads. force_4k: skip huge pages (the fallback
 * path on purpose; the description says it was asked for). Falls back to 4 KiB pages with the
 * reason in desc rather than failing; -1 only when no memory can be mapped at all. */
int iobuf_alloc(iobuf *b, uint64_t len, int force_4k, char *err, size_t errlen);
void iobuf_free(iobuf *b);
/* Bytes of [p, p+len) backed by transparent huge pages now, from /proc/self/smaps (the
 * AnonHugePages of the mapping that contains p). 0 when unknown. */
uint64_t iobuf_thp_bytes(const void *p, uint64_t len);

#endif
