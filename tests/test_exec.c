/* test_exec.c — the layer executor: streamed == resident bit for bit, the plan, budgets, content gate, read-ahead bound. tests/ */
#include "runtime/exec.h"
#include "arch/kernel.h"
#include "arch/model.h"
#include "base/util.h"
#include "tests/check.h"

#include <errno.h>
#include <fcntl.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#define S_STEPS 4u
#define S_LAYERS 5u

static char s_dir[512];
static int s_buffered;        /* 1 when SWARM_TEST_TMP refuses O_DIRECT (tmpfs): labelled below */

static uint64_t s_round_up(uint64_t v, uint64_t a)
{
    return (v + a - 1) / a * a;
}

/* The plan's arithmetic, written out independently of exec.c (what tiny.ini's comment uses). */
static uint64_t s_layer_alloc(uint64_t d)
{
    return s_round_up(d * d * 4 + 8192, 4096) + s_round_up(d * 4 + 8192, 4096);
}

static uint32_t s_rows(uint64_t d, uint64_t chunk)
{
    uint64_t r = chunk / (d * 4) / 8 * 8; /* whole 8-row blocks (exec.c: 2 BLAS threads) */
    if (r < 8)
        r = 8;
    return r > d ? (uint32_t)s_round_up(d, 4) : (uint32_t)r;
}

static uint64_t s_ring(uint64_t d, uint64_t chunk, uint32_t qd)
{
    return (qd + 1ull) * s_round_up((uint64_t)s_rows(d, chunk) * d * 4 + 8192, 4096);
}

static uint64_t s_scratch(uint64_t d)
{
    return 2 * d * 4 + 8192;
}

/* A streamed layer's vectors (g: d f32) are staged until the layer begins, 64-byte aligned. */
static uint64_t s_stage(uint64_t d)
{
    return s_round_up(d * 4, 64);
}

/* The ring a capped plan gets: queue_depth + 1 slots, plus as many as fit in what the budget
 * leaves after `resident` layers and the stage less one slot kept unspent, at most
 * queue_depth + 1 more. */
static uint64_t s_ring_planned(uint64_t d, uint64_t chunk, uint32_t qd, uint64_t overhead,
                               uint64_t budget, uint32_t resident)
{
    uint64_t slot = s_ring(d, chunk, qd) / (qd + 1);
    uint64_t used = overhead + s_scratch(d) + s_ring(d, chunk, qd) + s_stage(d) +
                    resident * s_layer_alloc(d);
    uint64_t extra = budget > used + slot ? (budget - used - slot) / slot : 0;
    return s_ring(d, chunk, qd) + (extra > qd + 1 ? qd + 1 : extra) * slot;
}

/* Budget that leaves exactly `resident` layers resident (plus half a layer of slack). */
static uint64_t s_budget_for(uint64_t d, uint64_t chunk, uint32_t qd, uint64_t overhead,
                             uint32_t resident)
{
    return overhead + s_scratch(d) + s_ring(d, chunk, qd) + resident * s_layer_alloc(d) +
           s_layer_alloc(d) / 2;
}

static int s_copy(const char *from, const char *to)
{
    char buf[1 << 16];
    int in = open(from, O_RDONLY), out = open(to, O_WRONLY | O_CREAT | O_TRUNC, 0644);
    ssize_t n = 0;
    if (in < 0 || out < 0)
        goto done;
    while ((n = read(in, buf, sizeof buf)) > 0)
        if (write(out, buf, (size_t)n) != n) {
            n = -1;
            break;
        }
done:
    if (in >= 0)
        close(in);
    if (out >= 0 && close(out))
        n = -1;
    return in < 0 || out < 0 || n < 0 ? -1 : 0;
}

static int s_flip_byte(const char *path, uint64_t off)
{
    uint8_t b;
    int fd = open(path, O_RDWR);
    if (fd < 0)
        return -1;
    int rc = pread(fd, &b, 1, (off_t)off) == 1 ? 0 : -1;
    b ^= 0x5a;
    if (!rc)
        rc = pwrite(fd, &b, 1, (off_t)off) == 1 ? 0 : -1;
    if (!rc)
        rc = fsync(fd);
    close(fd);
    return rc;
}

/* Run `steps` steps of the model through an exec with these options; outputs (steps, d).
 * Returns 0 and fills plan/stats, or -1 with err. */
static int s_run(const model_t *m, const exec_opts *o, uint32_t steps, float *out, exec_plan *plan,
                 exec_stats *st, char *err, size_t errlen)
{
    exec_t *e = exec_new(m, 0, m->n_layers, o, err, errlen);
    if (!e)
        return -1;
    *plan = *exec_get_plan(e);
    memset(st, 0, sizeof *st);
    CHECK(exec_loaded_bytes(e) == (uint64_t)plan->n_resident * model_layer_bytes(m),
          "loaded %llu bytes for %u resident layers", (unsigned long long)exec_loaded_bytes(e),
          plan->n_resident);
    CHECK(exec_is_direct(e) == !o->buffered, "direct %d with buffered %d", exec_is_direct(e),
          o->buffered);
    for (uint32_t s = 0; s < steps; s++) {
        float *x = out + (uint64_t)s * m->dim;
        util_step_input(7, s, x, (int)m->dim);
        if (exec_step(e, x, st, err, errlen)) {
            exec_free(&e);
            return -1;
        }
    }
    exec_drain(e);
    exec_free(&e);
    CHECK(e == NULL, "exec_free did not clear the pointer");
    return 0;
}

static exec_opts s_opts(uint64_t budget, uint32_t qd, uint64_t chunk)
{
    exec_opts o = { .budget_bytes = budget, .queue_depth = qd, .chunk_bytes = chunk,
                    .overhead_bytes = 0, .buffered = s_buffered, .total_steps = S_STEPS,
                    .verify_resident = 1 };
    return o;
}

/* Streamed in several chunks at depth 1 and 4 == all resident, bit for bit; plan as computed. */
static void s_parity(const char *path, uint32_t d, uint32_t align, float *ref_out)
{
    model_t m = { 0 };
    char err[1024] = "";
    exec_plan p;
    exec_stats st;
    uint64_t n = (uint64_t)S_STEPS * d;
    float *ref = calloc(n, sizeof(float)), *got = calloc(n, sizeof(float));

    if (model_open(&m, path, err, sizeof err)) {
        CHECK(0, "%s: %s", path, err);
        goto out;
    }
    CHECK(m.alignment == align, "%s: alignment %u, wanted %u", path, m.alignment, align);
    exec_opts o = s_opts(0, 4, 64 << 10);
    CHECK(s_run(&m, &o, S_STEPS, ref, &p, &st, err, sizeof err) == 0, "%s reference: %s", path,
          err);
    CHECK(p.n_resident == S_LAYERS && p.n_streamed == 0 && p.ring_bytes == 0,
          "budget 0: %u resident %u streamed", p.n_resident, p.n_streamed);
    CHECK(st.streamed_bytes == 0 && st.layers_streamed == 0, "budget 0 streamed %llu bytes",
          (unsigned long long)st.streamed_bytes);
    CHECK(p.layer_alloc == s_layer_alloc(d), "layer_alloc %llu, computed %llu",
          (unsigned long long)p.layer_alloc, (unsigned long long)s_layer_alloc(d));
    if (ref_out)
        memcpy(ref_out, ref, n * sizeof(float));

    /* (queue depth, chunk bytes, resident layers wanted): chunk sizes that divide d and not. */
    static const struct { uint32_t qd; uint64_t chunk; uint32_t resident; } cases[] = {
        { 1, 64 << 10, 2 }, { 4, 64 << 10, 2 }, { 4, 20 << 10, 1 }, { 1, 200000, 0 },
        { 4, 40000, 3 },
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        uint64_t budget = s_budget_for(d, cases[i].chunk, cases[i].qd, 0, cases[i].resident);
        o = s_opts(budget, cases[i].qd, cases[i].chunk);
        /* Both ways of hashing for the content gate: its own thread, and inline. */
        o.hasher = i % 2 ? EXEC_HASH_INLINE : EXEC_HASH_THREAD;
        memset(got, 0, n * sizeof(float));
        int rc = s_run(&m, &o, S_STEPS, got, &p, &st, err, sizeof err);
        CHECK(rc == 0, "d=%u qd=%u chunk=%llu: %s", d, cases[i].qd,
              (unsigned long long)cases[i].chunk, err);
        if (rc)
            continue;
        uint32_t rows = s_rows(d, cases[i].chunk);
        CHECK(p.n_resident == cases[i].resident && p.n_streamed == S_LAYERS - cases[i].resident,
              "d=%u qd=%u chunk=%llu budget %llu: %u resident, wanted %u", d, cases[i].qd,
              (unsigned long long)cases[i].chunk, (unsigned long long)budget, p.n_resident,
              cases[i].resident);
        CHECK(p.rows_per_chunk == rows && rows % 4 == 0, "rows per chunk %u, computed %u",
              p.rows_per_chunk, rows);
        CHECK(p.chunks_per_layer == 1 + (d + rows - 1) / rows && p.chunks_per_layer >= 3,
              "chunks per layer %u (rows %u, d %u)", p.chunks_per_layer, rows, d);
        uint64_t ring = s_ring_planned(d, cases[i].chunk, cases[i].qd, 0, budget,
                                       cases[i].resident);
        CHECK(p.ring_bytes == ring, "ring %llu, computed %llu", (unsigned long long)p.ring_bytes,
              (unsigned long long)ring);
        CHECK(p.ring_slots >= cases[i].qd + 1 && p.ring_slots <= 2 * (cases[i].qd + 1) &&
                  p.ring_bytes == p.ring_slots * (s_ring(d, cases[i].chunk, cases[i].qd) /
                                                  (cases[i].qd + 1)),
              "ring of %u slots at depth %u", p.ring_slots, cases[i].qd);
        CHECK(p.working_set <= budget, "working set %llu over the budget %llu",
              (unsigned long long)p.working_set, (unsigned long long)budget);
        CHECK(memcmp(ref, got, n * sizeof(float)) == 0,
              "d=%u align=%u qd=%u chunk=%llu (%u rows): streamed outputs differ from resident", d,
              align, cases[i].qd, (unsigned long long)cases[i].chunk, rows);
        CHECK(st.content_fail == 0, "content gate failed on a good file");
        CHECK(st.layers_streamed == (uint64_t)S_STEPS * p.n_streamed, "layers streamed %llu",
              (unsigned long long)st.layers_streamed);
        /* total_steps bounds read-ahead: exactly the steps' bytes were requested. */
        CHECK(st.streamed_bytes == S_STEPS * p.streamed_per_step,
              "streamed %llu bytes, %u steps x %llu planned", (unsigned long long)st.streamed_bytes,
              S_STEPS, (unsigned long long)p.streamed_per_step);
        CHECK(p.streamed_per_step >= (uint64_t)p.n_streamed * model_layer_bytes(&m),
              "planned %llu bytes per step for %u layers", (unsigned long long)p.streamed_per_step,
              p.n_streamed);
    }

    /* Without total_steps the ring reads ahead past the last step (bounded by the ring). */
    o = s_opts(s_budget_for(d, 64 << 10, 4, 0, 2), 4, 64 << 10);
    o.total_steps = 0;
    CHECK(s_run(&m, &o, S_STEPS, got, &p, &st, err, sizeof err) == 0, "unbounded: %s", err);
    CHECK(st.streamed_bytes > S_STEPS * p.streamed_per_step,
          "no read-ahead past the last step without total_steps (%llu bytes)",
          (unsigned long long)st.streamed_bytes);
    CHECK(memcmp(ref, got, n * sizeof(float)) == 0, "unbounded read-ahead changed outputs");

    /* stream_all keeps nothing resident and still matches. */
    o = s_opts(1ull << 30, 2, 64 << 10);
    o.stream_all = 1;
    CHECK(s_run(&m, &o, S_STEPS, got, &p, &st, err, sizeof err) == 0, "stream_all: %s", err);
    CHECK(p.n_resident == 0 && p.n_streamed == S_LAYERS, "stream_all: %u resident", p.n_resident);
    CHECK(memcmp(ref, got, n * sizeof(float)) == 0, "stream_all outputs differ");
out:
    model_close(&m);
    free(ref);
    free(got);
}

static void s_budgets(const char *path)
{
    model_t m = { 0 };
    char err[1024] = "";
    exec_plan p;
    if (model_open(&m, path, err, sizeof err)) {
        CHECK(0, "%s: %s", path, err);
        return;
    }
    uint64_t d = m.dim;
    /* Cannot even hold the ring. */
    exec_opts o = s_opts(s_ring(d, 64 << 10, 4) / 2, 4, 64 << 10);
    err[0] = 0;
    CHECK(exec_plan_make(&m, 0, m.n_layers, &o, &p, err, sizeof err) == -1,
          "a budget of half the ring was accepted");
    CHECK(strstr(err, "short by") != NULL, "ring error lacks 'short by': %s", err);
    err[0] = 0;
    CHECK(exec_new(&m, 0, m.n_layers, &o, err, sizeof err) == NULL, "exec_new accepted it");
    CHECK(strstr(err, "short by") != NULL, "exec_new error lacks 'short by': %s", err);
    /* Overhead alone over the budget. */
    o = s_opts(8ull << 20, 4, 64 << 10);
    o.overhead_bytes = 9ull << 20;
    err[0] = 0;
    CHECK(exec_plan_make(&m, 0, m.n_layers, &o, &p, err, sizeof err) == -1 &&
              strstr(err, "short by"),
          "overhead over the budget: %s", err);

    /* resident_only: refuses when the layers do not fit, plans all resident when they do. */
    o = s_opts(s_budget_for(d, 64 << 10, 4, 0, 2), 4, 64 << 10);
    o.resident_only = 1;
    err[0] = 0;
    CHECK(exec_plan_make(&m, 0, m.n_layers, &o, &p, err, sizeof err) == -1,
          "resident_only accepted %u layers in a 2-layer budget", m.n_layers);
    CHECK(strstr(err, "short by") != NULL, "resident_only error lacks 'short by': %s", err);
    o.budget_bytes = s_scratch(d) + 2 * s_layer_alloc(d);
    CHECK(exec_plan_make(&m, 1, 3, &o, &p, err, sizeof err) == 0, "2 layers in 2: %s", err);
    CHECK(p.n_resident == 2 && p.n_streamed == 0 && p.ring_bytes == 0,
          "resident_only [1,3): %u resident", p.n_resident);
    o.budget_bytes -= 1;
    CHECK(exec_plan_make(&m, 1, 3, &o, &p, err, sizeof err) == -1 && strstr(err, "short by 1 B"),
          "one byte short: %s", err);

    /* exec_resident_fit is the rule the partitioner plans with: it must agree with the plan
     * at the byte where a layer stops fitting, with and without overhead. */
    for (uint64_t over = 0; over <= (1u << 20); over += 1u << 20) {
        o.overhead_bytes = over;
        o.budget_bytes = over + s_scratch(d) + 2 * s_layer_alloc(d);
        CHECK(exec_resident_fit(m.dim, &o) == 2, "fit %u in a 2-layer budget (overhead %llu)",
              exec_resident_fit(m.dim, &o), (unsigned long long)over);
        CHECK(exec_plan_make(&m, 1, 3, &o, &p, err, sizeof err) == 0, "fit says 2: %s", err);
        o.budget_bytes -= 1;
        CHECK(exec_resident_fit(m.dim, &o) == 1, "fit %u one byte short of 2 layers",
              exec_resident_fit(m.dim, &o));
        CHECK(exec_plan_make(&m, 1, 3, &o, &p, err, sizeof err) == -1, "fit says 1, plan took 2");
        o.budget_bytes = over + s_scratch(d);
        CHECK(exec_resident_fit(m.dim, &o) == 0, "fit %u with room for no layer",
              exec_resident_fit(m.dim, &o));
    }
    o.overhead_bytes = 0;
    o.budget_bytes = 0;
    CHECK(exec_resident_fit(m.dim, &o) == UINT32_MAX, "no cap must fit everything");
    CHECK(exec_layer_bytes(m.dim) == s_layer_alloc(d), "layer bytes %llu, computed %llu",
          (unsigned long long)exec_layer_bytes(m.dim), (unsigned long long)s_layer_alloc(d));
    /* A worker's options: resident only, verified, its fixed overhead inside the cap. */
    exec_opts_worker(&o, 5ull << 20);
    CHECK(o.budget_bytes == 5ull << 20 && o.resident_only && o.verify_resident &&
              o.overhead_bytes == EXEC_WORKER_OVERHEAD && !o.stream_all && !o.buffered,
          "worker options");

    /* Everything fits without the ring: all resident, no ring charged. */
    o = s_opts(s_scratch(d) + m.n_layers * s_layer_alloc(d), 4, 64 << 10);
    CHECK(exec_plan_make(&m, 0, m.n_layers, &o, &p, err, sizeof err) == 0 &&
              p.n_resident == m.n_layers && p.ring_bytes == 0,
          "a budget holding every layer: %u resident, ring %llu", p.n_resident,
          (unsigned long long)p.ring_bytes);
    /* Bad ranges. */
    o = s_opts(0, 4, 64 << 10);
    CHECK(exec_plan_make(&m, 3, 3, &o, &p, err, sizeof err) == -1, "empty range accepted");
    CHECK(exec_plan_make(&m, 0, m.n_layers + 1, &o, &p, err, sizeof err) == -1,
          "range past the model accepted");
    model_close(&m);
}

/* Content gate: a corrupted streamed layer is counted; a corrupted resident one fails to load. */
static void s_content(const char *path, const char *name)
{
    model_t m = { 0 };
    char bad[600], err[1024] = "";
    exec_plan p;
    exec_stats st;
    snprintf(bad, sizeof bad, "%s/%s", s_dir, name);
    if (s_copy(path, bad) || model_open(&m, bad, err, sizeof err)) {
        CHECK(0, "copy %s -> %s: %s", path, bad, err);
        return;
    }
    uint64_t d = m.dim;
    /* Last layer (streamed with 2 resident), a byte in the middle of W. */
    const model_layer *L = &m.layers[m.n_layers - 1];
    CHECK(s_flip_byte(bad, L->w_off + d * d * 2 + 1) == 0, "flip a byte in %s", bad);
    float *out = calloc((size_t)S_STEPS * d, sizeof(float));
    exec_opts o = s_opts(s_budget_for(d, 64 << 10, 4, 0, 2), 4, 64 << 10);
    static const int hashers[] = { EXEC_HASH_THREAD, EXEC_HASH_INLINE };
    for (int h = 0; h < 2; h++) {
        o.hasher = hashers[h];
        int rc = s_run(&m, &o, S_STEPS, out, &p, &st, err, sizeof err);
        CHECK(rc == 0, "a content failure must not stop the run (hasher %d): %s", o.hasher, err);
        CHECK(p.n_streamed >= 1, "nothing streamed");
        CHECK(st.content_fail == S_STEPS, "hasher %d: content_fail %llu, wanted %u (once per step)",
              o.hasher, (unsigned long long)st.content_fail, S_STEPS);
        CHECK(st.layers_due == (uint64_t)S_STEPS * p.n_streamed &&
                  st.layers_streamed == st.layers_due,
              "hasher %d: layers hashed %llu of %llu used", o.hasher,
              (unsigned long long)st.layers_streamed, (unsigned long long)st.layers_due);
    }

    /* The same byte in a resident layer: the load refuses. */
    o = s_opts(0, 4, 64 << 10);
    err[0] = 0;
    exec_t *e = exec_new(&m, 0, m.n_layers, &o, err, sizeof err);
    CHECK(e == NULL, "loaded a corrupted resident layer");
    CHECK(strstr(err, "checksum mismatch") && strstr(err, bad),
          "resident corruption error: %s", err);
    exec_free(&e);
    /* Without the corrupted layer in range, the load succeeds. */
    e = exec_new(&m, 0, m.n_layers - 1, &o, err, sizeof err);
    CHECK(e != NULL, "layers before the corrupted one refused: %s", err);
    exec_free(&e);
    free(out);
    model_close(&m);
    unlink(bad);
}

static void s_gen(char *path, size_t len, const char *name, uint32_t d, uint32_t align)
{
    char err[1024] = "";
    snprintf(path, len, "%s/%s", s_dir, name);
    CHECK(model_gen(path, S_LAYERS, d, 42, align, err, sizeof err) == 0, "gen %s: %s", path, err);
}

int main(void)
{
    const char *t = getenv("SWARM_TEST_TMP");
    char p1000[600], p1000a[600], p256[600], p256a[600];
    snprintf(s_dir, sizeof s_dir, "%s/test_exec", t && *t ? t : "tests/tmp");
    mkdir(t && *t ? t : "tests/tmp", 0755);
    mkdir(s_dir, 0755);
    /* One BLAS thread, as every arm sets ([run] threads = 1): with 2 threads OpenBLAS splits a
     * chunk's rows in halves, and a half that does not start on a 4-row block changes bits
     * (36-row chunks at d = 256 differ; see test_kernel.c). */
    kernel_set_threads(1);

    s_gen(p1000, sizeof p1000, "d1000_a4096.gguf", 1000, 4096);
    s_gen(p1000a, sizeof p1000a, "d1000_a32.gguf", 1000, 32);
    s_gen(p256, sizeof p256, "d256_a4096.gguf", 256, 4096);
    s_gen(p256a, sizeof p256a, "d256_a32.gguf", 256, 32);

    int fd = open(p256, O_RDONLY | O_DIRECT);
    if (fd < 0 && errno == EINVAL) {
        s_buffered = 1;
        fprintf(stderr, "note: %s refuses O_DIRECT (tmpfs?): testing buffered reads\n", s_dir);
    }
    if (fd >= 0)
        close(fd);

    float *a = calloc((size_t)S_STEPS * 1000, sizeof(float));
    float *b = calloc((size_t)S_STEPS * 1000, sizeof(float));
    s_parity(p1000, 1000, 4096, a);
    s_parity(p1000a, 1000, 32, b);
    CHECK(memcmp(a, b, (size_t)S_STEPS * 1000 * sizeof(float)) == 0,
          "the same weights at alignment 32 and 4096 give different outputs");
    s_parity(p256, 256, 4096, NULL);
    s_parity(p256a, 256, 32, NULL);
    s_budgets(p256);
    s_budgets(p1000a);
    s_content(p1000, "corrupt_d1000.gguf");
    s_content(p256a, "corrupt_d256_a32.gguf");
    free(a);
    free(b);
    unlink(p1000);
    unlink(p1000a);
    unlink(p256);
    unlink(p256a);
    rmdir(s_dir);
    return CHECK_DONE("test_exec");
}
