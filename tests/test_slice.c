/* test_slice.c — a worker's range of a real model (arch/slice.c) against one process: a
 * q8_0 llama model cut in two slices gives the bits of every layer run in one process, for
 * two sessions interleaved, batches of several positions and single positions, a replay from
 * 0 (what a failover does) and a session that ends and whose slot is taken again; refusals
 * name the session (gap, past the context, every slot live, batch too big) and a cap too
 * small names the budget. The dense lab model as a worker serves it (stateless: n_ctx 1, one
 * slot, batch 1) gives the bits of the dense executor over the same layers for steps under
 * any session and position, in any order. tests/ */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "arch/arch.h"
#include "arch/gen.h"
#include "arch/model.h"
#include "runtime/llm.h"
#include "base/util.h"
#include "quant/quant.h"
#include "tests/check.h"
#include "runtime/slice.h"

#define S_LAYERS 4
#define S_DIM 64
#define S_CTX 32

/* The reference: every layer of the one-process runner's mapped tensors, one KV cache per
 * layer for each of two sessions. */
typedef struct {
    llm_model *m;
    arch_run *run;
    arch_kv kv[2][S_LAYERS];
} s_ref;

static void s_ref_step(s_ref *r, int sess, uint32_t pos0, uint32_t n, float *x)
{
    char err[512] = "";
    for (uint32_t l = 0; l < S_LAYERS; l++) {
        int rc = arch_layer_forward(r->run, l, llm_layer_data(r->m, l), &r->kv[sess][l], x, n,
                                    pos0, err, sizeof err);
        if (rc)
            fprintf(stderr, "reference layer %u: %s\n", l, err);
    }
}

/* Both slices in turn, as the pipeline runs them. */
static int s_swarm_step(slice_t *a, slice_t *b, uint64_t sid, uint32_t pos0, uint32_t n,
                        float *x, char *err, size_t errlen)
{
    return slice_step(a, sid, pos0, n, x, err, errlen) ||
           slice_step(b, sid, pos0, n, x, err, errlen) ? -1 : 0;
}

static void s_input(float *x, uint32_t n, uint64_t seed)
{
    for (uint32_t i = 0; i < n; i++)
        util_step_input(seed, i, x + (size_t)i * S_DIM, S_DIM);
}

/* The dense lab model cut in two stateless slices against one exec_t over every layer (the
 * worker's former path): the same bits for steps numbered any way, in any order. */
static void s_dense(const char *dir)
{
    char path[600], err[1024] = "";
    snprintf(path, sizeof path, "%s/dense.gguf", dir);
    CHECK(model_gen(path, S_LAYERS, S_DIM, 7, 32, err, sizeof err) == 0, "dense gen: %s", err);
    model_t m;
    memset(&m, 0, sizeof m);
    CHECK(model_open(&m, path, err, sizeof err) == 0, "dense open: %s", err);
    exec_opts eo;
    exec_opts_worker(&eo, 0);
    exec_t *e = exec_new(&m, 0, S_LAYERS, &eo, err, sizeof err);
    CHECK(e != NULL, "dense exec: %s", err);
    uint64_t sums[S_LAYERS];
    for (uint32_t l = 0; l < S_LAYERS; l++)
        sums[l] = m.layers[l].checksum;
    slice_opts so = { .path = path, .first = 0, .last = 1, .n_ctx = 1, .sessions = 1,
                      .max_batch = 1, .cap_bytes = 64ull << 20, .threads = 1,
                      .expect_sums = sums };
    slice_t *a = slice_new(&so, err, sizeof err);
    CHECK(a != NULL && slice_stateless(a), "dense slice [0,1): %s", err);
    so.first = 1;
    so.last = S_LAYERS;
    so.expect_sums = sums + 1;
    slice_t *b = slice_new(&so, err, sizeof err);
    CHECK(b != NULL && slice_stateless(b), "dense slice [1,4): %s", err);
    if (!e || !a || !b)
        goto out;
    /* steps 5, 0, 1000 (past n_ctx), 5 again: session 0 and step ids as sessions */
    const uint32_t step[4] = { 5, 0, 1000, 5 };
    const uint64_t sid[4] = { 0, 0, 1000, 3 };
    int bad = 0;
    for (int k = 0; k < 4; k++) {
        float x[S_DIM], y[S_DIM];
        exec_stats st;
        memset(&st, 0, sizeof st);
        s_input(x, 1, step[k]);
        memcpy(y, x, sizeof x);
        if (exec_step(e, x, &st, err, sizeof err) ||
            slice_step(a, sid[k], step[k], 1, y, err, sizeof err) ||
            slice_step_stats(b, sid[k], step[k], 1, y, &st, err, sizeof err) ||
            memcmp(x, y, sizeof x))
            bad++;
    }
    CHECK(bad == 0, "dense: %d of 4 steps differ from the executor's bits (%s)", bad, err);
    CHECK(slice_live(a) == 0 && slice_kv_alloc_bytes(b) == 0, "dense: no slot, no cache");
    float z[2 * S_DIM];
    CHECK(slice_step(a, 1, 0, 2, z, err, sizeof err) == -1 && strstr(err, "(1..1)"),
          "dense: a batch of 2 refused: %s", err);
out:
    slice_free(&a);
    slice_free(&b);
    exec_free(&e);
    model_close(&m);
}

int main(void)
{
    const char *base = getenv("SWARM_TEST_TMP") ? getenv("SWARM_TEST_TMP") : "tests/tmp";
    char dir[512], path[600], err[1024] = "";
    snprintf(dir, sizeof dir, "%s/test_slice", base);
    util_mkdir_p(dir);
    snprintf(path, sizeof path, "%s/q8.gguf", dir);
    arch_gen_opts go = { .arch = "llama", .dim = S_DIM, .n_layers = S_LAYERS, .n_head = 4,
                         .n_head_kv = 2, .n_ff = 96, .n_vocab = 300, .type = QUANT_Q8_0,
                         .n_ctx = 256, .seed = 5 };
    CHECK(arch_gen(path, &go, err, sizeof err) == 0, "gen: %s", err);

    s_ref r;
    memset(&r, 0, sizeof r);
    r.m = llm_model_open(path, err, sizeof err);
    CHECK(r.m != NULL, "reference open: %s", err);
    if (!r.m)
        return CHECK_DONE("test_slice");
    const arch_model *am = llm_model_arch(r.m);
    uint32_t kvd = am->hp.n_head_kv * am->hp.head_dim;
    r.run = arch_run_new(am, 8, err, sizeof err);
    for (int s = 0; s < 2; s++)
        for (uint32_t l = 0; l < S_LAYERS; l++)
            r.kv[s][l] = (arch_kv){ .n_ctx = S_CTX, .kv_dim = kvd,
                                    .k = calloc((size_t)S_CTX * kvd, 4),
                                    .v = calloc((size_t)S_CTX * kvd, 4) };

    slice_opts so = { .path = path, .first = 0, .last = 1, .n_ctx = S_CTX, .sessions = 2,
                      .max_batch = 8, .cap_bytes = 64ull << 20, .threads = 1 };
    slice_t *a = slice_new(&so, err, sizeof err);
    CHECK(a != NULL, "slice [0,1): %s", err);
    so.first = 1;
    so.last = S_LAYERS;
    so.threads = 2; /* same bits for any thread count */
    slice_t *b = slice_new(&so, err, sizeof err);
    CHECK(b != NULL, "slice [1,4): %s", err);
    if (!a || !b)
        return CHECK_DONE("test_slice");
    CHECK(slice_dim(a) == S_DIM && slice_plan(b)->n_resident == S_LAYERS - 1,
          "dim %u, resident %u", slice_dim(a), slice_plan(b)->n_resident);

    float x[8 * S_DIM], y[8 * S_DIM];
    int bad = 0;
    /* session 7 (reference 0) and 9 (reference 1), interleaved: a prompt of 5 as 3 + 2,
     * then 6 single positions each */
    uint32_t at[2] = { 0, 0 };
    uint64_t sid[2] = { 7, 9 };
    for (int round = 0; round < 8; round++)
        for (int s = 0; s < 2; s++) {
            uint32_t n = round == 0 ? 3 : round == 1 ? 2 : 1;
            s_input(x, n, 100 + 10 * s + round);
            memcpy(y, x, sizeof(float) * n * S_DIM);
            s_ref_step(&r, s, at[s], n, x);
            if (s_swarm_step(a, b, sid[s], at[s], n, y, err, sizeof err) ||
                memcmp(x, y, sizeof(float) * n * S_DIM))
                bad++;
            at[s] += n;
        }
    CHECK(bad == 0, "%d of 16 steps differ from one process (%s)", bad, err);
    CHECK(slice_live(a) == 2 && slice_cached(b, 7) == 11 && slice_cached(b, 9) == 11,
          "live %u, cached %u, %u", slice_live(a), slice_cached(b, 7), slice_cached(b, 9));
    uint64_t one = 2ull * S_CTX * kvd * 4; /* one layer's K and V */
    CHECK(slice_kv_alloc_bytes(a) == 2 * one && slice_kv_alloc_bytes(b) == 2 * 3 * one,
          "caches: %llu and %llu bytes", (unsigned long long)slice_kv_alloc_bytes(a),
          (unsigned long long)slice_kv_alloc_bytes(b));

    /* Replay session 7's 11 positions from 0 in batches of 4 (a rebuilt cache), then one
     * more position: the same bits as the reference's 12th. */
    {
        float hist[11 * S_DIM];
        for (uint32_t p = 0, round = 0; round < 8; round++) {
            uint32_t n = round == 0 ? 3 : round == 1 ? 2 : 1;
            s_input(hist + (size_t)p * S_DIM, n, 100 + round);
            p += n;
        }
        int rb = 0;
        for (uint32_t p = 0; p < 11; p += 4) {
            uint32_t n = p + 4 <= 11 ? 4 : 11 - p;
            memcpy(y, hist + (size_t)p * S_DIM, sizeof(float) * n * S_DIM);
            rb |= s_swarm_step(a, b, 7, p, n, y, err, sizeof err);
        }
        s_input(x, 1, 999);
        memcpy(y, x, sizeof(float) * S_DIM);
        s_ref_step(&r, 0, 11, 1, x);
        rb |= s_swarm_step(a, b, 7, 11, 1, y, err, sizeof err);
        CHECK(rb == 0 && memcmp(x, y, sizeof(float) * S_DIM) == 0,
              "replayed session: rc %d, same bits %d (%s)", rb,
              memcmp(x, y, sizeof(float) * S_DIM) == 0, err);
    }

    /* Refusals, each naming the session */
    CHECK(slice_step(a, 9, 13, 1, y, err, sizeof err) == -1 &&
              strstr(err, "session 9") && strstr(err, "only 0..10 are cached"),
          "a gap: %s", err);
    CHECK(slice_step(a, 9, S_CTX - 1, 2, y, err, sizeof err) == -1 &&
              strstr(err, "pass the context of 32"), "past the context: %s", err);
    CHECK(slice_step(a, 9, 0, 9, y, err, sizeof err) == -1 && strstr(err, "(1..8)"),
          "batch of 9: %s", err);
    CHECK(slice_step(a, 11, 0, 1, y, err, sizeof err) == -1 &&
              strstr(err, "session 11") && strstr(err, "all 2 session slots"),
          "a third session: %s", err);

    /* A session ends: its slot (and its caches) are free, a new session takes it from 0 */
    CHECK(slice_end(a, 9) == 1 && slice_end(b, 9) == 1 && slice_end(a, 9) == 0 &&
              slice_end(b, 12345) == 0, "session end");
    CHECK(slice_live(a) == 1 && slice_kv_alloc_bytes(a) == one &&
              slice_kv_alloc_bytes(b) == 3 * one, "after the end: live %u, caches %llu",
          slice_live(a), (unsigned long long)slice_kv_alloc_bytes(a));
    for (uint32_t l = 0; l < S_LAYERS; l++) { /* the reference's session 1 starts over */
        memset(r.kv[1][l].k, 0, (size_t)S_CTX * kvd * 4);
        memset(r.kv[1][l].v, 0, (size_t)S_CTX * kvd * 4);
    }
    s_input(x, 4, 4242);
    memcpy(y, x, sizeof(float) * 4 * S_DIM);
    s_ref_step(&r, 1, 0, 4, x);
    CHECK(s_swarm_step(a, b, 11, 0, 4, y, err, sizeof err) == 0 &&
              memcmp(x, y, sizeof(float) * 4 * S_DIM) == 0 && slice_live(b) == 2,
          "a new session in the freed slot: %s", err);

    /* Two sessions' rows in one step (continuous batching: slice_step_segs, each weight read
     * once): session 11's positions 4..5 and session 7's 12, the bits of each run alone */
    {
        slice_seg sg[2] = { { .session = 11, .pos0 = 4, .n = 2 }, { .session = 7, .pos0 = 12,
                                                                     .n = 1 } };
        exec_stats st;
        memset(&st, 0, sizeof st);
        s_input(x, 3, 777);
        memcpy(y, x, sizeof(float) * 3 * S_DIM);
        s_ref_step(&r, 1, 4, 2, x);
        s_ref_step(&r, 0, 12, 1, x + 2 * S_DIM);
        int rc = slice_step_segs(a, sg, 2, y, &st, err, sizeof err) ||
                 slice_step_segs(b, sg, 2, y, &st, err, sizeof err);
        CHECK(rc == 0 && memcmp(x, y, sizeof(float) * 3 * S_DIM) == 0 &&
                  slice_cached(b, 11) == 6 && slice_cached(b, 7) == 13,
              "two sessions in one step: rc %d, same bits %d, cached %u %u (%s)", rc,
              memcmp(x, y, sizeof(float) * 3 * S_DIM) == 0, slice_cached(b, 11),
              slice_cached(b, 7), err);
        /* refused whole, naming the session: a gap in the second, a session twice, a batch
         * over the plan's; nothing ran (the caches' counts are unchanged) */
        sg[0] = (slice_seg){ .session = 11, .pos0 = 6, .n = 1 };
        sg[1] = (slice_seg){ .session = 7, .pos0 = 20, .n = 1 };
        CHECK(slice_step_segs(a, sg, 2, y, &st, err, sizeof err) == -1 &&
                  strstr(err, "session 7") && strstr(err, "only 0..12") &&
                  slice_cached(a, 11) == 6, "segments with a gap: %s", err);
        sg[1] = (slice_seg){ .session = 11, .pos0 = 7, .n = 1 };
        CHECK(slice_step_segs(a, sg, 2, y, &st, err, sizeof err) == -1 &&
                  strstr(err, "session 11: twice"), "a session twice: %s", err);
        sg[1] = (slice_seg){ .session = 7, .pos0 = 13, .n = 8 };
        CHECK(slice_step_segs(a, sg, 2, y, &st, err, sizeof err) == -1 && strstr(err, "(1..8)"),
              "9 positions in two segments: %s", err);
    }

    /* A cap that cannot hold the range beside its caches: refused with the executor's numbers */
    so.first = 0;
    so.last = S_LAYERS;
    so.sessions = 64;
    so.n_ctx = 256;
    so.cap_bytes = 20ull << 20;
    slice_t *c = slice_new(&so, err, sizeof err);
    CHECK(c == NULL && strstr(err, "short by") && strstr(err, "MiB"), "small cap: %s", err);
    printf("small cap: %s\n", err);
    so.cap_bytes = 0;
    so.n_ctx = 4096; /* the model's context is 256 */
    c = slice_new(&so, err, sizeof err);
    CHECK(c == NULL && strstr(err, "context 4096 (model: 256)"), "context: %s", err);
    so.n_ctx = S_CTX;
    so.last = S_LAYERS + 1;
    c = slice_new(&so, err, sizeof err);
    CHECK(c == NULL && strstr(err, "do not fit its 4"), "range: %s", err);

    slice_free(&a);
    slice_free(&b);
    CHECK(a == NULL && b == NULL, "slice_free clears");
    for (int s = 0; s < 2; s++)
        for (uint32_t l = 0; l < S_LAYERS; l++) {
            free(r.kv[s][l].k);
            free(r.kv[s][l].v);
        }
    arch_run_free(&r.run);
    llm_model_free(&r.m);
    s_dense(dir);
    return CHECK_DONE("test_slice");
}
