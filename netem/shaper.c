/* shaper.c — release-time arithmetic for one link direction, and the FIFO of held zmq messages. netem/ */
#include "netem/netem.h"

#include "base/util.h"

#include <math.h>
#include <stdlib.h>
#include <zmq.h>

/* Pareto shape. alpha = 3 has a finite variance, so `jitter` can be its standard deviation:
 * X ~ Pareto(alpha=3, xm) has mean 1.5 xm and sd xm * sqrt(3/4). The tail is clamped at
 * 100 xm (P = 1e-6), which lowers the mean by xm / 20000 — negligible beside the samples' own
 * noise. The draw is shifted so its mean is `delay`: d = delay + X - 1.5 xm >= delay - 0.58 jitter. */
#define S_PARETO_ALPHA 3.0
#define S_PARETO_CLAMP 100.0

struct netem_shaper {
    netem_profile p;
    uint64_t rng[4];          /* xoshiro256** state */
    double spare;             /* second Box-Muller normal, valid if have_spare */
    int have_spare;
    uint64_t last_release_ns; /* release time of the previous message (FIFO floor) */
    uint64_t busy_until_ns;   /* rate limit: the link is sending until then */
    uint64_t added_ns, count; /* totals for "measured" figures */
};

static uint64_t s_rotl(uint64_t x, int k)
{
    return (x << k) | (x >> (64 - k));
}

static uint64_t s_next(netem_shaper *s)
{
    uint64_t *st = s->rng;
    uint64_t r = s_rotl(st[1] * 5, 7) * 9, t = st[1] << 17;

    st[2] ^= st[0];
    st[3] ^= st[1];
    st[1] ^= st[2];
    st[0] ^= st[3];
    st[2] ^= t;
    st[3] = s_rotl(st[3], 45);
    return r;
}

/* Uniform in [0, 1) with 53 random bits. */
static double s_uniform(netem_shaper *s)
{
    return (double)(s_next(s) >> 11) * 0x1.0p-53;
}

static double s_normal(netem_shaper *s)
{
    double u1, u2, r;

    if (s->have_spare) {
        s->have_spare = 0;
        return s->spare;
    }
    u1 = 1.0 - s_uniform(s); /* (0, 1]: log stays finite */
    u2 = s_uniform(s);
    r = sqrt(-2.0 * log(u1));
    s->spare = r * sin(2 * M_PI * u2);
    s->have_spare = 1;
    return r * cos(2 * M_PI * u2);
}

netem_shaper *netem_shaper_new(const netem_profile *p, uint64_t seed)
{
    netem_shaper *s = calloc(1, sizeof *s);

    if (!s)
        return NULL;
    s->p = *p;
    for (int i = 0; i < 4; i++)
        s->rng[i] = util_splitmix64(&seed);
    return s;
}

void netem_shaper_free(netem_shaper **s)
{
    if (s && *s) {
        free(*s);
        *s = NULL;
    }
}

/* One-way delay for one message, ns: the distribution around `delay`, plus an RTO if "lost". */
static uint64_t s_sample(netem_shaper *s)
{
    const netem_profile *p = &s->p;
    double d = (double)p->delay_ns, j = (double)p->jitter_ns;

    if (j > 0) {
        switch (p->dist) {
        case NETEM_DIST_UNIFORM:
            d += j * (2 * s_uniform(s) - 1);
            break;
        case NETEM_DIST_NORMAL:
            d += j * s_normal(s);
            break;
        case NETEM_DIST_PARETO: {
            double xm = j / sqrt(S_PARETO_ALPHA / ((S_PARETO_ALPHA - 1) * (S_PARETO_ALPHA - 1) *
                                                  (S_PARETO_ALPHA - 2)));
            double x = xm / pow(1.0 - s_uniform(s), 1.0 / S_PARETO_ALPHA);
            if (x > S_PARETO_CLAMP * xm)
                x = S_PARETO_CLAMP * xm;
            d += x - xm * S_PARETO_ALPHA / (S_PARETO_ALPHA - 1);
            break;
        }
        default:
            break;
        }
    }
    if (d < 0)
        d = 0; /* a message cannot arrive before it was sent; shifts the mean only if jitter ~ delay */
    /* TCP never loses a message: a lost segment costs one retransmission timeout. One draw per
     * message (not per segment), so the mean added is loss * rto. */
    if (p->loss > 0 && s_uniform(s) < p->loss)
        d += (double)p->rto_ns;
    return (uint64_t)llround(d);
}

uint64_t netem_release_at(netem_shaper *s, uint64_t arrival_ns, size_t bytes)
{
    uint64_t d = s_sample(s);
    uint64_t release = arrival_ns + d;

    /* FIFO under jitter: a message never overtakes the one before it. */
    if (release < s->last_release_ns)
        release = s->last_release_ns;
    if (s->p.rate_bps) {
        /* The link serialises bytes after the delay: it starts when both the message is due and
         * the previous one has finished, and is busy for bytes / rate. */
        if (release < s->busy_until_ns)
            release = s->busy_until_ns;
        release += (uint64_t)((unsigned __int128)bytes * 1000000000u / s->p.rate_bps);
        s->busy_until_ns = release;
    }
    s->last_release_ns = release;
    s->added_ns += release - arrival_ns;
    s->count++;
    return release;
}

void netem_shaper_totals(const netem_shaper *s, uint64_t *added_ns, uint64_t *count)
{
    if (added_ns)
        *added_ns = s->added_ns;
    if (count)
        *count = s->count;
}

/* ---- the queue: a fixed ring of zmq_msg_t, moved in and out (no allocation per message) ---- */
typedef struct {
    zmq_msg_t msg;            /* always an inited message (empty when the slot is free) */
    uint64_t release_ns, arrival_ns;
} s_slot;

struct netem_queue {
    s_slot *slots;            /* (capacity,) */
    size_t capacity, head, len;
};

netem_queue *netem_queue_new(size_t capacity)
{
    netem_queue *q = calloc(1, sizeof *q);

    if (!q || capacity == 0)
        goto err;
    q->slots = calloc(capacity, sizeof *q->slots);
    if (!q->slots)
        goto err;
    q->capacity = capacity;
    for (size_t i = 0; i < capacity; i++)
        zmq_msg_init(&q->slots[i].msg);
    return q;
err:
    free(q);
    return NULL;
}

void netem_queue_free(netem_queue **q)
{
    if (!q || !*q)
        return;
    for (size_t i = 0; i < (*q)->capacity; i++)
        zmq_msg_close(&(*q)->slots[i].msg);
    free((*q)->slots);
    free(*q);
    *q = NULL;
}

int netem_queue_push(netem_queue *q, void *zmq_msg, uint64_t release_ns, uint64_t arrival_ns)
{
    s_slot *sl;

    if (q->len == q->capacity)
        return -1;
    sl = &q->slots[(q->head + q->len) % q->capacity];
    zmq_msg_move(&sl->msg, zmq_msg); /* leaves *zmq_msg an empty, inited message */
    sl->release_ns = release_ns;
    sl->arrival_ns = arrival_ns;
    q->len++;
    return 0;
}

uint64_t netem_queue_next(const netem_queue *q)
{
    return q->len ? q->slots[q->head].release_ns : UINT64_MAX;
}

int netem_queue_pop_due(netem_queue *q, uint64_t now_ns, void *zmq_msg, uint64_t *arrival_ns)
{
    s_slot *sl;

    if (!q->len || q->slots[q->head].release_ns > now_ns)
        return 0;
    sl = &q->slots[q->head];
    zmq_msg_move(zmq_msg, &sl->msg);
    if (arrival_ns)
        *arrival_ns = sl->arrival_ns;
    q->head = (q->head + 1) % q->capacity;
    q->len--;
    return 1;
}

size_t netem_queue_len(const netem_queue *q)
{
    return q->len;
}
