/* gate.c — the cache and content gates (see gate.h). runtime/ */
#include "runtime/gate.h"

int gate_cache_ok(uint64_t storage_bytes, uint64_t want_bytes)
{
    double got = (double)storage_bytes, want = (double)want_bytes;
    return got >= (1.0 - GATE_CACHE_TOLERANCE) * want &&
           got <= (1.0 + GATE_CACHE_TOLERANCE) * want;
}

void gate_cache_judge(run_result *r, uint64_t storage_bytes, uint64_t streamed_bytes,
                      uint64_t loaded_bytes)
{
    uint64_t want = streamed_bytes + loaded_bytes;
    if (streamed_bytes == 0) {
        r->gate_cache = GATE_NA;
        return;
    }
    if (gate_cache_ok(storage_bytes, want)) {
        r->gate_cache = GATE_PASS;
        return;
    }
    result_void(r, &r->gate_cache, "cache: storage served %llu bytes for %llu streamed + %llu "
                "loaded (%.1f%%, outside %.0f%%): %s", (unsigned long long)storage_bytes,
                (unsigned long long)streamed_bytes, (unsigned long long)loaded_bytes,
                100.0 * (double)storage_bytes / (double)want, 100.0 * GATE_CACHE_TOLERANCE,
                storage_bytes < want ? "the page cache served the rest"
                                     : "something else read from storage during the steps");
}

void gate_content_judge(run_result *r, const exec_stats *st)
{
    if (st->content_fail)
        result_void(r, &r->gate_content, "content: %llu streamed layers failed their checksum",
                    (unsigned long long)st->content_fail);
    else if (st->layers_streamed != st->layers_due)
        result_void(r, &r->gate_content, "content: %llu streamed layers verified of %llu used",
                    (unsigned long long)st->layers_streamed,
                    (unsigned long long)st->layers_due);
    else
        r->gate_content = GATE_PASS;
}
