/* pirate.c — the one heartbeat and liveness (pirate.h). dist/ */
#include "dist/pirate.h"

void pirate_reset(pirate_t *p, uint64_t now_ns)
{
    p->heard_ns = now_ns;
    p->unanswered = 0;
}

int pirate_due(const pirate_t *p, uint64_t now_ns, uint32_t period_ms)
{
    /* (a time taken before the last send is never due: no unsigned wrap) */
    return now_ns >= p->sent_ns && now_ns - p->sent_ns >= (uint64_t)period_ms * 1000000ull;
}

uint64_t pirate_sent(pirate_t *p, uint64_t now_ns)
{
    p->sent_ns = now_ns;
    p->unanswered++;
    return ++p->seq;
}

void pirate_heard(pirate_t *p, uint64_t now_ns)
{
    p->heard_ns = now_ns;
    p->unanswered = 0;
}

uint64_t pirate_window_ns(uint32_t period_ms, uint32_t liveness, uint64_t allow_ns)
{
    return (uint64_t)liveness * period_ms * 1000000ull + allow_ns;
}

int pirate_lost(const pirate_t *p, uint64_t now_ns, uint32_t period_ms, uint32_t liveness,
                uint64_t allow_ns)
{
    return p->unanswered >= liveness && now_ns > p->heard_ns &&
           now_ns - p->heard_ns > pirate_window_ns(period_ms, liveness, allow_ns);
}
