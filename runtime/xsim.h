/* xsim.h — the SSD arm's expert cache policy replayed without reads: which of a layer's routed
 * experts an LRU cache of N whole-expert slots would hold. runtime/
 *
 * exec.c's cache in one pass of bookkeeping: per layer, each routed expert in index order is
 * a hit when a slot holds (layer, expert), else it takes the least recently used slot this
 * layer does not hold (empty ones first); the slots a layer uses are pinned while it runs.
 * The lab replays the reference arm's routing through it (SWARM_EXPERT_SIM, runtime/llm.c)
 * to predict the SSD arm's hit rate on the same tokens before that arm runs. */
#ifndef SWARM_XSIM_H
#define SWARM_XSIM_H

#include <stdint.h>

typedef struct xsim xsim;

/* NULL when out of memory or slots is 0. */
xsim *xsim_new(uint32_t slots);
/* One layer's routed experts (used[0..E) = 1): adds its hits and misses; the missed experts,
 * in the order the arm reads them, into missed[0 .. *n_missed) when missed is not NULL (room
 * for E). */
void xsim_layer(xsim *s, uint32_t layer, const uint8_t *used, uint32_t E, uint64_t *hits,
                uint64_t *misses, uint32_t *missed, uint32_t *n_missed);
void xsim_free(xsim **s);

#endif
