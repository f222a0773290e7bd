/* test_partition_bytes.c — partition_bytes against brute force (uneven layers and budgets,
 * infeasible cuts explained), partition_llm on TinyLlama's shape (f16 weights, KV for the
 * configured sessions x context, buffers, embedding and head with the coordinator, 3 workers
 * of 600 MiB refused with the numbers, 4 accepted within their caps). tests/ */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "check.h"
#include "runtime/exec.h"
#include "runtime/exec_int.h"
#include "dist/partition.h"

/* Best largest stage over every contiguous cut of L layers into n non-empty stages, stage i
 * within budget[i]; UINT64_MAX when none fits. */
static uint64_t s_best(const uint64_t *lb, uint32_t L, const uint64_t *budget, uint32_t n,
                       uint32_t at, uint32_t i, uint64_t big)
{
    if (i == n)
        return at == L ? big : UINT64_MAX;
    uint64_t best = UINT64_MAX, sum = 0;
    for (uint32_t k = at + 1; k + (n - i - 1) <= L; k++) {
        sum += lb[k - 1];
        if (sum > budget[i])
            break;
        uint64_t r = s_best(lb, L, budget, n, k, i + 1, sum > big ? sum : big);
        if (r < best)
            best = r;
    }
    return best;
}

/* Largest stage of a plan, or 0 when it is not a covering contiguous cut within budgets. */
static uint64_t s_valid(const uint64_t *lb, uint32_t L, const uint64_t *budget, uint32_t n,
                        const uint32_t *first, const uint32_t *last)
{
    uint32_t at = 0;
    uint64_t big = 0;
    for (uint32_t i = 0; i < n; i++) {
        uint64_t s = 0;
        if (first[i] != at || last[i] <= first[i] || last[i] > L)
            return 0;
        for (uint32_t l = first[i]; l < last[i]; l++)
            s += lb[l];
        if (s > budget[i])
            return 0;
        big = s > big ? s : big;
        at = last[i];
    }
    return at == L ? big : 0;
}

static void s_tensor(arch_tensor *t, uint64_t rows, uint64_t cols, uint64_t elem_bytes)
{
    memset(t, 0, sizeof *t);
    t->rows = rows;
    t->cols = cols;
    t->nbytes = rows * cols * elem_bytes;
    t->row_bytes = cols * elem_bytes;
    t->type = elem_bytes == 4 ? 0 : 1; /* ggml F32, F16 */
    t->is_matrix = rows > 1;
}

int main(void)
{
    uint32_t first[PARTITION_MAX_WORKERS], last[PARTITION_MAX_WORKERS];
    char err[1024];

    /* Every small case (random uneven layers and budgets) against brute force. */
    {
        uint64_t s = 12345;
        int bad = 0, ok = 0, refused = 0;
        for (int iter = 0; iter < 20000; iter++) {
            uint64_t lb[8], budget[4];
            s = s * 6364136223846793005ull + 1442695040888963407ull;
            uint32_t L = 1 + (uint32_t)(s >> 33) % 8, n = 1 + (uint32_t)(s >> 45) % 4;
            if (n > L)
                n = L;
            for (uint32_t l = 0; l < L; l++) {
                s = s * 6364136223846793005ull + 1442695040888963407ull;
                lb[l] = 1 + (s >> 40) % 9;
            }
            for (uint32_t i = 0; i < n; i++) {
                s = s * 6364136223846793005ull + 1442695040888963407ull;
                budget[i] = 1 + (s >> 40) % 30;
            }
            uint64_t best = s_best(lb, L, budget, n, 0, 0, 0);
            err[0] = 0;
            int rc = partition_bytes(L, lb, n, budget, first, last, err, sizeof err);
            if (best == UINT64_MAX) {
                refused++;
                if (rc != -1 || !err[0]) {
                    if (bad++ < 5)
                        CHECK(0, "L=%u n=%u: no cut fits, yet rc %d '%s'", L, n, rc, err);
                } else
                    ok++;
            } else if (rc != 0 || s_valid(lb, L, budget, n, first, last) != best) {
                if (bad++ < 5)
                    CHECK(0, "L=%u n=%u: rc %d (%s) largest %llu, best %llu", L, n, rc, err,
                          (unsigned long long)(rc ? 0 : s_valid(lb, L, budget, n, first, last)),
                          (unsigned long long)best);
            } else
                ok++;
        }
        CHECK(bad == 0, "%d of %d brute-force cases wrong", bad, bad + ok);
        CHECK(refused > 100 && ok - refused > 100, "cases: %d refused, %d planned", refused,
              ok - refused);
    }
    /* A big head-like last layer goes alone; budgets short in total give the numbers. */
    {
        uint64_t lb[5] = { 10, 10, 10, 10, 40 }, budget[3] = { 100, 100, 100 };
        int rc = partition_bytes(5, lb, 3, budget, first, last, err, sizeof err);
        CHECK(rc == 0 && first[2] == 4 && s_valid(lb, 5, budget, 3, first, last) == 40,
              "big last layer: rc %d, last stage [%u,%u)", rc, first[2], last[2]);
        uint64_t small[3] = { 30, 30, 18 };
        rc = partition_bytes(5, lb, 3, small, first, last, err, sizeof err);
        CHECK(rc == -1 && strstr(err, "short by 2 B") && strstr(err, "need 80 B") &&
                  strstr(err, "hold 78 B"),
              "short budgets: rc %d '%s'", rc, err);
        uint64_t tight[3] = { 100, 5, 100 };
        rc = partition_bytes(5, lb, 3, tight, first, last, err, sizeof err);
        CHECK(rc == -1 && strstr(err, "worker 1") && strstr(err, "smallest layer (10 B)"),
              "a budget under every layer: rc %d '%s'", rc, err);
        uint64_t order[3] = { 45, 45, 20 };
        rc = partition_bytes(5, lb, 3, order, first, last, err, sizeof err);
        CHECK(rc == -1 && strstr(err, "no contiguous split"),
              "enough in total but the 40 B layer fits no budget at its place: rc %d '%s'", rc,
              err);
    }
    /* TinyLlama-1.1B's shape in F16: 22 layers of 2048, ff 5632, 32 heads (4 kv), 32000
     * vocabulary; 4 sessions of 2048 positions, messages of 64 positions. */
    {
        static arch_layer layers[22];
        arch_model am;
        memset(&am, 0, sizeof am);
        CHECK(arch_model_bind(&am, "llama", err, sizeof err) == 0, "%s", err);
        am.hp.n_layers = 22;
        am.hp.dim = 2048;
        am.hp.n_ff = 5632;
        am.hp.n_head = 32;
        am.hp.n_head_kv = 4;
        am.hp.head_dim = 64;
        am.hp.n_vocab = 32000;
        am.layers = layers;
        uint64_t rows[9] = { 1, 1, 2048, 256, 256, 2048, 5632, 5632, 2048 };
        uint64_t cols[9] = { 2048, 2048, 2048, 2048, 2048, 2048, 2048, 2048, 5632 };
        for (uint32_t l = 0; l < 22; l++) {
            layers[l].n_tensors = 9;
            layers[l].n_vectors = 2;
            for (uint32_t t = 0; t < 9; t++)
                s_tensor(&layers[l].t[t], rows[t], cols[t], t < 2 ? 4 : 2);
        }
        s_tensor(&am.tok_embd, 32000, 2048, 2);
        s_tensor(&am.output, 32000, 2048, 2);
        s_tensor(&am.out_norm, 1, 2048, 4);
        partition_llm_opts o = { .sessions = 4, .n_ctx = 2048, .max_batch = 64, .threads = 1 };
        static partition_llm_plan p;
        uint64_t caps[4] = { 600ull << 20, 600ull << 20, 600ull << 20, 600ull << 20 };
        int rc = partition_llm(&am, &o, 3, caps, &p, err, sizeof err);
        /* 84 MiB of weights and 16 MiB of KV (4 x 2048 x 2 KiB) a layer: 22 need 2.2 GiB */
        CHECK(rc == -1 && strstr(err, "short by") && strstr(err, "4 sessions x 2048 positions")
                  && strstr(err, "16.0 MiB KV") && strstr(err, "overhead"),
              "3 x 600 MiB: rc %d '%s'", rc, err);
        printf("TinyLlama f16, 4 sessions x 2048, 3 x 600 MiB: %s\n", err);
        /* 4 x 583 MiB of budget hold 2.2 GiB in total, but 5 layers of 100 MiB a worker is
         * 20 of 22: no contiguous cut, and the error says so */
        rc = partition_llm(&am, &o, 4, caps, &p, err, sizeof err);
        CHECK(rc == -1 && strstr(err, "no contiguous split"),
              "4 x 600 MiB with 4 sessions of 2048: rc %d '%s'", rc, err);
        printf("TinyLlama f16, 4 sessions x 2048, 4 x 600 MiB: %s\n", err);
        o.sessions = 1;
        rc = partition_llm(&am, &o, 4, caps, &p, err, sizeof err);
        CHECK(rc == 0, "4 x 600 MiB, one session: rc %d '%s'", rc, err);
        for (uint32_t i = 0; rc == 0 && i < 4; i++)
            printf("TinyLlama f16, 1 session x 2048, 4 x 600 MiB: worker %u layers [%u, %u) "
                   "needs %.1f MiB\n", i, p.first[i], p.last[i], p.need[i] / 1048576.0);
        uint64_t at = 0;
        for (uint32_t i = 0; rc == 0 && i < 4; i++) {
            uint64_t need = p.overhead_bytes + p.buffer_bytes;
            for (uint32_t l = p.first[i]; l < p.last[i]; l++)
                need += p.layer_weight[l] + p.layer_kv[l];
            CHECK(p.first[i] == at && p.last[i] > p.first[i] && need == p.need[i] &&
                      need <= caps[i],
                  "worker %u: [%u,%u) need %llu cap %llu", i, p.first[i], p.last[i],
                  (unsigned long long)p.need[i], (unsigned long long)caps[i]);
            at = p.last[i];
        }
        CHECK(at == 22, "the plan covers %llu of 22 layers", (unsigned long long)at);
        CHECK(p.kv_per_pos == 2048 && p.layer_kv[0] == 2048ull * 2048,
              "KV: %llu B per position, %llu a layer", (unsigned long long)p.kv_per_pos,
              (unsigned long long)p.layer_kv[0]);
        uint64_t raw = 0;
        for (uint32_t t = 0; t < 9; t++)
            raw += layers[0].t[t].nbytes;
        CHECK(raw == 88096768 && p.layer_weight[0] >= raw &&
                  p.layer_weight[0] <= raw + 9 * 3 * EXEC_ALIGN &&
                  p.layer_weight[0] == partition_layer_bytes(&layers[0]),
              "a layer's weights: %llu", (unsigned long long)p.layer_weight[0]);
        CHECK(!strcmp(p.embedding_at, "coordinator") && !strcmp(p.head_at, "coordinator") &&
                  p.head_bytes > p.layer_weight[0] / 2,
              "embedding at %s, head at %s (%llu B)", p.embedding_at, p.head_at,
              (unsigned long long)p.head_bytes);
        /* The worker plans with the executor's own rule: a cap of exactly the plan's need
         * holds the range resident, a byte less does not. */
        CHECK(partition_layer_bytes(&layers[0]) == exec_arch_layer_bytes(&layers[0]),
              "layer bytes: partition %llu, executor %llu",
              (unsigned long long)partition_layer_bytes(&layers[0]),
              (unsigned long long)exec_arch_layer_bytes(&layers[0]));
        for (uint32_t i = 0; rc == 0 && i < 4; i++) {
            exec_opts eo;
            exec_plan ep;
            uint64_t kv = 0;
            for (uint32_t l = p.first[i]; l < p.last[i]; l++)
                kv += p.layer_kv[l];
            exec_opts_worker(&eo, p.need[i]);
            eo.max_pos = o.max_batch;
            eo.held_bytes = kv + partition_llm_held(&am, &o);
            int ok = exec_plan_make_arch(&am, p.first[i], p.last[i], &eo, &ep, err, sizeof err);
            CHECK(ok == 0 && ep.n_resident == p.last[i] - p.first[i] && ep.working_set <=
                      p.need[i], "worker %u under its planned need: rc %d ws %llu need %llu %s",
                  i, ok, (unsigned long long)ep.working_set, (unsigned long long)p.need[i],
                  err);
            eo.budget_bytes = p.need[i] - 1;
            ok = exec_plan_make_arch(&am, p.first[i], p.last[i], &eo, &ep, err, sizeof err);
            CHECK(ok == -1, "worker %u a byte under: rc %d", i, ok);
        }
        uint64_t small_caps[4] = { 16ull << 20, 600ull << 20, 600ull << 20, 600ull << 20 };
        rc = partition_llm(&am, &o, 4, small_caps, &p, err, sizeof err);
        CHECK(rc == -1 && strstr(err, "worker 0's cap of 16.0 MiB holds no layer"),
              "a cap under the overhead: rc %d '%s'", rc, err);
    }
    return CHECK_DONE("test_partition_bytes");
}
