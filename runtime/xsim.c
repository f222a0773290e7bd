/* xsim.c — the expert cache's LRU policy without reads (xsim.h). runtime/ */
#include "runtime/xsim.h"

#include <stdlib.h>

typedef struct {
    uint32_t layer, expert;
    int valid;
    uint64_t used, pin;
} s_slot;

struct xsim {
    uint32_t n;
    uint64_t tick, epoch;
    s_slot *xs;
};

xsim *xsim_new(uint32_t slots)
{
    xsim *s = slots ? calloc(1, sizeof *s) : NULL;
    if (s && !(s->xs = calloc(slots, sizeof *s->xs))) {
        free(s);
        return NULL;
    }
    if (s)
        s->n = slots;
    return s;
}

/* The same choices as exec.c's s_experts_run, slot for slot. */
void xsim_layer(xsim *s, uint32_t layer, const uint8_t *used, uint32_t E, uint64_t *hits,
                uint64_t *misses, uint32_t *missed, uint32_t *n_missed)
{
    if (n_missed)
        *n_missed = 0;
    s->epoch++;
    for (uint32_t x = 0; x < E; x++) {
        if (!used[x])
            continue;
        int32_t hit = -1, victim = -1;
        for (uint32_t i = 0; i < s->n; i++) {
            s_slot *t = &s->xs[i];
            if (t->valid && t->layer == layer && t->expert == x) {
                hit = (int32_t)i;
                break;
            }
            if (t->pin != s->epoch &&
                (victim < 0 || (!t->valid && s->xs[victim].valid) ||
                 (t->valid == s->xs[victim].valid && t->used < s->xs[victim].used)))
                victim = (int32_t)i;
        }
        if (hit >= 0) {
            (*hits)++;
        } else if (victim >= 0) {
            (*misses)++;
            if (missed)
                missed[(*n_missed)++] = x;
            hit = victim;
            s->xs[hit] = (s_slot){ .layer = layer, .expert = x, .valid = 1 };
        } else {
            (*misses)++; /* more routed experts than slots: the arm refuses such a plan */
            continue;
        }
        s->xs[hit].pin = s->epoch;
        s->xs[hit].used = ++s->tick;
    }
}

void xsim_free(xsim **s)
{
    if (!*s)
        return;
    free((*s)->xs);
    free(*s);
    *s = NULL;
}
