/* test_predict.c — the text lab's SSD-arm prediction: the dense formula it always was, the
 * routed experts' reads and the expert cache's uniform hit rate for a MoE model. tests/ */
#include "lab/predict.h"
#include "tests/check.h"

#include <math.h>
#include <string.h>

static int s_near(double a, double b)
{
    return fabs(a - b) <= 1e-9 * (fabs(b) > 1 ? fabs(b) : 1);
}

static void s_dense(void)
{
    /* a dense model: 3 of 4 GB-ish of a pass streamed; the formula the text lab used,
     * ref (1 - frac) + max(ref frac, ring / disk), both ways round */
    predict_llm_out o;
    predict_llm_in in = { .ref_ms = 100, .disk_gbps = 1.5, .pass_bytes = 2000000000ull,
                          .ring_bytes = 1500000000ull };
    predict_llm_ssd(&in, &o);
    double frac = 0.75, want = 100 * (1 - frac) + fmax(100 * frac, 1500000000.0 / 1.5e6);
    CHECK(s_near(o.ms, want), "disk-bound dense: %.6f ms, want %.6f", o.ms, want);
    CHECK(s_near(o.read_bytes, 1.5e9) && o.hit_rate == 0 && o.expert_ms == 0,
          "dense: the ring's bytes, no experts");
    in.disk_gbps = 100; /* the disk outruns the compute it feeds: the reference's time */
    predict_llm_ssd(&in, &o);
    CHECK(s_near(o.ms, 100) && o.ring_ms == 0, "compute-bound dense: %.6f", o.ms);
    in.disk_gbps = 0;
    predict_llm_ssd(&in, &o);
    CHECK(isinf(o.ms), "no disk figure: no prediction");
}

static void s_moe(void)
{
    /* every layer split: nothing through the ring; 25 slots of 100 experts under uniform
     * routing hit 1/4; the misses' bytes are read (1 GB/s) and hashed (10 GB/s) */
    predict_llm_out o;
    predict_llm_in in = { .ref_ms = 40, .disk_gbps = 1.0, .hash_gbps = 10.0,
                          .pass_bytes = 300000000ull, .routed_read_bytes = 100000000ull,
                          .cache_slots = 25, .cache_experts = 100 };
    predict_llm_ssd(&in, &o);
    CHECK(s_near(o.hit_rate, 0.25), "hit rate %.6f", o.hit_rate);
    CHECK(s_near(o.read_bytes, 75e6), "read %.0f bytes", o.read_bytes);
    CHECK(s_near(o.ms, 40 + 75 + 7.5), "ms %.6f", o.ms);
    CHECK(strstr(o.formula, "25/100") != NULL, "formula: %s", o.formula);
    in.has_hit = 1; /* a known hit rate (the reference's routing replayed) over uniform's */
    in.hit = 0.9;
    predict_llm_ssd(&in, &o);
    CHECK(s_near(o.hit_rate, 0.9) && s_near(o.read_bytes, 10e6) && s_near(o.ms, 40 + 10 + 1),
          "replayed hits: %.6f ms", o.ms);
    in.read_ms = 6; /* the replayed misses' own times override bytes / rate; the bytes stay */
    in.hash_ms = 0.5;
    predict_llm_ssd(&in, &o);
    CHECK(s_near(o.ms, 40 + 6 + 0.5) && s_near(o.read_ms, 6) && s_near(o.read_bytes, 10e6),
          "replayed times: %.6f ms", o.ms);
    in.read_ms = in.hash_ms = 0;
    in.ring_bytes = 30000000ull; /* a ring measured apart: 30 MB at 3 GB/s less 40 x 0.1 */
    in.ring_gbps = 3.0;
    predict_llm_ssd(&in, &o);
    CHECK(s_near(o.ring_ms, 10 - 4) && s_near(o.ms, 40 + 6 + 10 + 1), "ring apart: %.6f ms",
          o.ms);
    in.ring_bytes = 0;
    in.ring_gbps = 0;
    in.has_hit = 0;
    in.cache_slots = 400; /* the cache holds every expert: no reads, the reference's time */
    predict_llm_ssd(&in, &o);
    CHECK(o.hit_rate == 1 && o.read_bytes == 0 && s_near(o.ms, 40), "all cached: %.6f", o.ms);
    in.hash_gbps = 0; /* no hash figure: the reads alone */
    in.cache_slots = 0;
    predict_llm_ssd(&in, &o);
    CHECK(s_near(o.ms, 140), "no cache, no hash term: %.6f", o.ms);
}

/* Two layers: a norm, a 4096-byte-row matrix, three expert tensors of 4 experts. */
static void s_routed(void)
{
    arch_layer layers[2];
    arch_model am;
    memset(&am, 0, sizeof am);
    memset(layers, 0, sizeof layers);
    am.hp.n_layers = 2;
    am.hp.n_expert = 4;
    am.hp.n_expert_used = 2;
    am.layers = layers;
    uint64_t off = 0;
    for (int l = 0; l < 2; l++) {
        arch_layer *L = &layers[l];
        L->n_tensors = 5;
        L->n_vectors = 1;
        L->t[0] = (arch_tensor){ .rows = 1, .cols = 1024, .nbytes = 4096, .off = off };
        off += 4096;
        L->t[1] = (arch_tensor){ .rows = 16, .cols = 1024, .nbytes = 65536, .off = off,
                                 .is_matrix = 1 };
        off += 65536;
        for (int t = 2; t < 5; t++) {
            /* layer 0's slices start on 4096: each read is its slice; layer 1's start 32
             * bytes in: one block more */
            if (l == 1)
                off += 32;
            L->t[t] = (arch_tensor){ .rows = 4 * 8, .cols = 2048, .nbytes = 4 * 8192,
                                     .off = off, .is_matrix = 1, .n_expert = 4 };
            off += 4 * 8192;
            if (l == 1)
                off += 4096 - 32;
        }
    }
    exec_plan p;
    memset(&p, 0, sizeof p);
    p.expert_slots = 3;
    uint64_t routed, experts, pass;
    predict_llm_routed(&am, &p, &routed, &experts, &pass);
    CHECK(routed == 2 * 3 * 8192 + 2 * 3 * (8192 + 4096), "routed %llu",
          (unsigned long long)routed);
    CHECK(experts == 8, "experts %llu", (unsigned long long)experts);
    CHECK(pass == 2 * (4096 + 65536 + 3 * 2 * 8192), "pass %llu", (unsigned long long)pass);
    p.n_resident = 1; /* a whole-resident layer reads no expert */
    predict_llm_routed(&am, &p, &routed, &experts, &pass);
    CHECK(routed == 2 * 3 * (8192 + 4096) && experts == 4, "layer 1 only: %llu, %llu",
          (unsigned long long)routed, (unsigned long long)experts);
    p.expert_slots = 0; /* experts streaming with their layers: none routed apart */
    predict_llm_routed(&am, &p, &routed, &experts, &pass);
    CHECK(routed == 0 && experts == 0, "no expert cache: nothing routed apart");
}

int main(void)
{
    s_dense();
    s_moe();
    s_routed();
    double g = 0;
    char err[128];
    CHECK(predict_hash_gbps(1u << 20, 3, &g, err, sizeof err) == 0 && g > 0, "hash %.2f GB/s", g);
    return CHECK_DONE("test_predict");
}
