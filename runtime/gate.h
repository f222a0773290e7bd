/* gate.h — the cache and content gates: one rule each, for every arm and bench-disk. runtime/
 *
 * What each gate proves is written in docs/design.md ("Measurement rules and gates"). The
 * reference and SSD arms, the resident arm's fallback and bench-disk all judge through these
 * functions, so the arms cannot drift apart on what "from the disk" or "the right bytes"
 * means.
 */
#ifndef SWARM_GATE_H
#define SWARM_GATE_H

#include <stdint.h>

#include "runtime/exec.h"
#include "runtime/result.h"

/* Storage may differ from what was asked for by this fraction, and no more: on the lab
 * config (16 of 24 layers streamed, 64 MiB each) a page cache that served even one streamed
 * layer of a step would leave storage ≈6% short. */
#define GATE_CACHE_TOLERANCE 0.01

/* 1 if storage_bytes (what /proc/<pid>/io says the disk served) is within the tolerance of
 * want_bytes (what the reader asked for), 0 if not. */
int gate_cache_ok(uint64_t storage_bytes, uint64_t want_bytes);

/* Judge r->gate_cache: storage must have served what was streamed plus what was loaded
 * during the steps (loaded_bytes: a fallback that took over mid-run). n/a when nothing was
 * streamed; void, with the figures in r->void_reason, when outside the tolerance. */
void gate_cache_judge(run_result *r, uint64_t storage_bytes, uint64_t streamed_bytes,
                      uint64_t loaded_bytes);

/* Judge r->gate_content from an exec's counters: pass when no streamed layer failed its
 * checksum and every streamed layer a step consumed was hashed (layers_streamed ==
 * layers_due). Resident layers are checked at load, where a mismatch refuses the load. */
void gate_content_judge(run_result *r, const exec_stats *st);

#endif
