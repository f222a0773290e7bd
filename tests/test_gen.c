/* test_gen.c — the generation engine and perplexity against straightforward loops over
 * llm_eval: greedy ids, seeded sampling across runs and thread counts, stop strings that span
 * tokens, the held tail, context overflow, cancellation, a growing conversation, perplexity
 * and KL. tests/ */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "arch/gen.h"
#include "gguf/gguf.h"
#include "runtime/llm.h"
#include "base/util.h"
#include "text/engine.h"
#include "text/ppl.h"
#include "quant/quant.h"
#include "tests/check.h"
#include "tests/scratch.h"
#include "text/tokenizer.h"

static char s_dir[2048], s_vocab[2300], s_model[2300], s_model16[2300];

#define MAXTOK 64

/* What a request reported: ids, the text released with each, and the whole text. */
typedef struct {
    int32_t ids[MAXTOK];
    size_t off[MAXTOK + 1];       /* piece i is text[off[i] .. off[i+1]) */
    uint32_t n;
    char text[8192];
    size_t len;
    int tail;                     /* the id -1 callback came */
    int cancel_at;                /* return 1 at this index (-1: never) */
    float logprob[MAXTOK];
    float lp_check[MAXTOK];       /* ppl_log_softmax of the logits handed over */
    uint32_t n_vocab;
} s_sink;

static int s_cb(void *user, const engine_token *t)
{
    s_sink *k = user;
    if (t->id < 0) {
        k->tail = 1;
    } else if (k->n < MAXTOK) {
        k->ids[k->n] = t->id;
        k->off[k->n] = k->len;
        k->logprob[k->n] = t->logprob;
        k->lp_check[k->n] = (float)ppl_log_softmax(t->logits, k->n_vocab, t->id);
        k->n++;
    }
    if (k->len + t->len < sizeof k->text) {
        memcpy(k->text + k->len, t->text, t->len);
        k->len += t->len;
        k->text[k->len] = '\0';
    }
    return t->id >= 0 && (int)t->index == k->cancel_at;
}

static int s_run(engine *e, const int32_t *p, uint32_t np, uint32_t max, const sampler_opts *so,
                 const char *const *stop, uint32_t n_stop, s_sink *k, engine_stats *st,
                 char *err)
{
    engine_request q = { .prompt = p, .n_prompt = np, .max_tokens = max, .sampling = *so,
                         .stop = stop, .n_stop = n_stop, .logprobs = 1, .on_token = s_cb,
                         .user = k, .ignore_eog = 1 };
    int cancel_at = k->cancel_at;
    uint32_t nv = k->n_vocab;
    memset(k, 0, sizeof *k);
    k->cancel_at = cancel_at;
    k->n_vocab = nv;
    return engine_generate(e, &q, st, err, 512);
}

/* Greedy by hand: llm_eval and the lowest-id argmax, n tokens after the prompt. */
static void s_greedy_ref(llm_model *m, const int32_t *p, uint32_t np, uint32_t n, int32_t *out)
{
    char err[512];
    uint32_t nv = llm_model_arch(m)->hp.n_vocab;
    llm_session *s = llm_session_new(m, 256, 7, err, sizeof err);
    float *lg = malloc(nv * sizeof *lg);
    CHECK(s && lg && llm_eval(s, p, np, lg, 0, err, sizeof err) == 0, "%s", err);
    for (uint32_t g = 0; g < n; g++) {
        int32_t best = 0;
        for (uint32_t i = 1; i < nv; i++)
            best = lg[i] > lg[best] ? (int32_t)i : best;
        out[g] = best;
        if (g + 1 < n && llm_eval(s, &best, 1, lg, 0, err, sizeof err))
            break;
    }
    free(lg);
    llm_session_free(&s);
}

static void s_test_generate(llm_model *m, const tokenizer *t)
{
    char err[512];
    int32_t *p = NULL;
    size_t np = 0;
    const char *text = "The quick brown fox jumps over the lazy dog.";
    CHECK(tokenizer_encode(t, text, strlen(text), TOKENIZER_ADD_SPECIAL, &p, &np, err,
                           sizeof err) == 0, "%s", err);
    engine *e1 = engine_new(m, t, 256, 5, 1, err, sizeof err);
    engine *e2 = engine_new(m, t, 256, 64, 2, err, sizeof err);
    CHECK(e1 && e2, "%s", err);
    if (!e1 || !e2)
        return;
    static s_sink a, b;
    a.cancel_at = b.cancel_at = -1;
    a.n_vocab = b.n_vocab = llm_model_arch(m)->hp.n_vocab;
    engine_stats sa, sb;
    sampler_opts so;
    sampler_opts_default(&so);
    so.temperature = 0;

    /* greedy = llm_eval + argmax */
    int32_t ref[40];
    s_greedy_ref(m, p, (uint32_t)np, 40, ref);
    CHECK(s_run(e1, p, (uint32_t)np, 40, &so, NULL, 0, &a, &sa, err) == 0, "%s", err);
    CHECK(sa.finish == ENGINE_FINISH_LENGTH && sa.n_gen == 40 && a.n == 40,
          "finish %s, %u tokens", engine_finish_name(sa.finish), sa.n_gen);
    CHECK(!memcmp(a.ids, ref, sizeof ref), "greedy ids differ from llm_eval + argmax");
    CHECK(sa.n_prompt_eval == np && sa.ttft_ms > 0 && isfinite(sa.itl_ms_p99) &&
          sa.itl_ms_p50 <= sa.itl_ms_p99 && sa.gen_tok_s > 0 && sa.prompt_tok_s > 0,
          "stats: ttft %g p50 %g p99 %g", sa.ttft_ms, sa.itl_ms_p50, sa.itl_ms_p99);
    int lp_ok = 1;
    for (uint32_t i = 0; i < a.n; i++)
        lp_ok &= fabsf(a.logprob[i] - a.lp_check[i]) < 1e-4f && a.logprob[i] <= 0;
    CHECK(lp_ok, "logprobs are not the log-softmax of the logits handed over");

    /* the same greedy run on 2 threads and batches of 64: the same bits */
    CHECK(s_run(e2, p, (uint32_t)np, 40, &so, NULL, 0, &b, &sb, err) == 0, "%s", err);
    CHECK(sa.ids_digest == sb.ids_digest && sa.logits_digest == sb.logits_digest,
          "digests differ between 1 thread / batch 5 and 2 threads / batch 64");

    /* seeded sampling: the same tokens on every run and thread count; another seed differs */
    so.temperature = 1.0f;
    so.top_k = 0;
    so.top_p = 1;
    so.min_p = 0;
    so.seed = 42;
    CHECK(s_run(e1, p, (uint32_t)np, 32, &so, NULL, 0, &a, &sa, err) == 0, "%s", err);
    CHECK(s_run(e2, p, (uint32_t)np, 32, &so, NULL, 0, &b, &sb, err) == 0, "%s", err);
    CHECK(a.n == 32 && !memcmp(a.ids, b.ids, sizeof a.ids) && !strcmp(a.text, b.text) &&
          sa.logits_digest == sb.logits_digest, "seed 42: threads 1 and 2 differ");
    uint64_t d42 = sa.ids_digest;
    CHECK(s_run(e1, p, (uint32_t)np, 32, &so, NULL, 0, &a, &sa, err) == 0 &&
          sa.ids_digest == d42, "seed 42 twice on one engine differs");
    so.seed = 43;
    CHECK(s_run(e1, p, (uint32_t)np, 32, &so, NULL, 0, &a, &sa, err) == 0 &&
          sa.ids_digest != d42, "seeds 42 and 43 gave the same 32 tokens");

    /* stop strings spanning tokens: two ASCII bytes either side of a piece boundary */
    so.temperature = 0;
    static s_sink full;
    full.cancel_at = -1;
    full.n_vocab = a.n_vocab;
    CHECK(s_run(e1, p, (uint32_t)np, 40, &so, NULL, 0, &full, &sa, err) == 0, "%s", err);
    full.off[full.n] = full.len;
    char stop[3] = "";
    for (uint32_t i = 3; i < full.n && !stop[0]; i++) {
        size_t bnd = full.off[i];
        if (bnd < 1 || bnd + 1 > full.len || full.off[i + 1] == bnd)
            continue;
        unsigned char c0 = (unsigned char)full.text[bnd - 1], c1 = (unsigned char)full.text[bnd];
        if (c0 < 0x80 && c1 < 0x80 && full.off[i - 1] < bnd) {
            stop[0] = (char)c0;
            stop[1] = (char)c1;
        }
    }
    CHECK(stop[0], "no ASCII piece boundary in 40 greedy tokens: '%s'", full.text);
    if (stop[0]) {
        const char *stops[] = { "never-said-xyz", stop };
        size_t cut = (size_t)(strstr(full.text, stop) - full.text);
        CHECK(s_run(e1, p, (uint32_t)np, 40, &so, stops, 2, &a, &sa, err) == 0, "%s", err);
        CHECK(sa.finish == ENGINE_FINISH_STOP, "finish %s", engine_finish_name(sa.finish));
        CHECK(a.len == cut && !memcmp(a.text, full.text, cut) && !a.tail,
              "stop '%s': got '%s' (%zu bytes), wanted the first %zu bytes of '%s'", stop,
              a.text, a.len, cut, full.text);
    }
    /* a stop string that begins with the last byte but never completes: the byte is held to
     * the end, then released; the text is whole */
    char tail_stop[3] = { full.text[full.len - 1], '\x01', 0 };
    const char *ts[] = { tail_stop };
    CHECK(s_run(e1, p, (uint32_t)np, 40, &so, ts, 1, &a, &sa, err) == 0, "%s", err);
    CHECK(sa.finish == ENGINE_FINISH_LENGTH && a.tail && a.len == full.len &&
          !strcmp(a.text, full.text), "held tail: '%s' vs '%s'", a.text, full.text);

    /* context overflow: a clear error before any work, no callback */
    a.n = 0;
    CHECK(s_run(e1, p, (uint32_t)np, 257 - (uint32_t)np, &so, NULL, 0, &a, &sa, err) == -1 &&
          strstr(err, "exceed the context of 256") && a.n == 0, "overflow: %s", err);
    /* cancellation from the callback at token 3 */
    a.cancel_at = 3;
    CHECK(s_run(e1, p, (uint32_t)np, 40, &so, NULL, 0, &a, &sa, err) == 0 &&
          sa.finish == ENGINE_FINISH_CANCELLED && sa.n_gen == 4 && a.n == 4,
          "cancel: %s after %u", engine_finish_name(sa.finish), sa.n_gen);
    a.cancel_at = -1;

    /* cancellation from another thread's flag, already set: nothing is run */
    atomic_int flag = 1;
    engine_request cq = { .prompt = p, .n_prompt = (uint32_t)np, .max_tokens = 4,
                          .sampling = so, .cancel = &flag };
    CHECK(engine_generate(e1, &cq, &sa, err, sizeof err) == 0 &&
          sa.finish == ENGINE_FINISH_CANCELLED && sa.n_gen == 0, "flag: %s, %u tokens",
          engine_finish_name(sa.finish), sa.n_gen);

    /* a conversation grows: the cached prefix is kept, the continuation is the same */
    int32_t conv[256];
    memcpy(conv, p, np * sizeof *p);
    CHECK(s_run(e1, p, (uint32_t)np, 10, &so, NULL, 0, &a, &sa, err) == 0, "%s", err);
    memcpy(conv + np, a.ids, 10 * sizeof *conv);
    CHECK(s_run(e1, conv, (uint32_t)np + 10, 5, &so, NULL, 0, &b, &sb, err) == 0, "%s", err);
    CHECK(sb.n_prompt_eval == 1, "%u prompt tokens run again, wanted 1 (the last generated)",
          sb.n_prompt_eval);
    CHECK(!memcmp(b.ids, ref + 10, 5 * sizeof *ref), "the continued conversation differs");
    /* a history that differs from position np + 5 on (a re-tokenized reply): the cache is cut
     * back to the common prefix, and the result is a fresh run's */
    conv[np + 5] = conv[np + 5] == 100 ? 101 : 100;
    CHECK(s_run(e1, conv, (uint32_t)np + 10, 5, &so, NULL, 0, &b, &sb, err) == 0, "%s", err);
    CHECK(sb.n_prompt_eval == 5, "%u prompt tokens run again, wanted 5", sb.n_prompt_eval);
    engine_reset(e2);
    CHECK(s_run(e2, conv, (uint32_t)np + 10, 5, &so, NULL, 0, &a, &sa, err) == 0 &&
          sa.n_prompt_eval == np + 10, "%s", err);
    CHECK(sa.logits_digest == sb.logits_digest && !memcmp(a.ids, b.ids, 5 * sizeof *a.ids),
          "a rewound conversation differs from a fresh run");
    free(p);
    engine_free(&e1);
    engine_free(&e2);
}

/* A sliding-window model's prompt cache (gemma3, window 4: rings of 4 + 5 rows): a grown
 * conversation keeps its cache (the rings hold the window before the last token), a history
 * that differs 15 positions back does not (they no longer hold the window there): the whole
 * prompt runs again, and either way the result is a fresh run's. */
static void s_test_swa(const tokenizer *t)
{
    char err[512], path[2400];
    snprintf(path, sizeof path, "%s/swa.gguf", s_dir);
    arch_gen_opts o = { .arch = "gemma3", .dim = 64, .n_layers = 6, .n_head = 4,
                        .n_head_kv = 2, .n_ff = 96, .vocab_from = s_vocab, .type = QUANT_F32,
                        .n_ctx = 256, .seed = 5, .tied = 1, .swa = 4 };
    llm_model *m = arch_gen(path, &o, err, sizeof err) == 0 ? llm_model_open(path, err, sizeof err)
                                                           : NULL;
    CHECK(m != NULL, "%s", err);
    if (!m)
        return;
    engine *e = engine_new(m, t, 256, 5, 1, err, sizeof err);
    engine *f = engine_new(m, t, 256, 5, 1, err, sizeof err);
    static s_sink a, b;
    a.cancel_at = b.cancel_at = -1;
    a.n_vocab = b.n_vocab = llm_model_arch(m)->hp.n_vocab;
    engine_stats sa, sb;
    sampler_opts so;
    sampler_opts_default(&so);
    so.temperature = 0;
    int32_t conv[64];
    for (int i = 0; i < 12; i++)
        conv[i] = 300 + 17 * i;
    CHECK(e && f && s_run(e, conv, 12, 20, &so, NULL, 0, &a, &sa, err) == 0, "%s", err);
    memcpy(conv + 12, a.ids, 20 * sizeof *conv);
    /* grown: only the last generated token runs again */
    CHECK(s_run(e, conv, 32, 5, &so, NULL, 0, &b, &sb, err) == 0 && sb.n_prompt_eval == 1,
          "swa: a grown conversation ran %u prompt tokens again, wanted 1", sb.n_prompt_eval);
    CHECK(s_run(f, conv, 32, 5, &so, NULL, 0, &a, &sa, err) == 0 &&
          sa.logits_digest == sb.logits_digest, "swa: the grown conversation differs (%s)", err);
    /* a history differing at 17 (the cache holds 36): cut back past the rings, all runs again */
    conv[17] = conv[17] == 100 ? 101 : 100;
    CHECK(s_run(e, conv, 32, 5, &so, NULL, 0, &b, &sb, err) == 0 && sb.n_prompt_eval == 32 &&
          sb.n_cached == 0, "swa: %u prompt tokens run again (%u cached), wanted all 32",
          sb.n_prompt_eval, sb.n_cached);
    engine_reset(f);
    CHECK(s_run(f, conv, 32, 5, &so, NULL, 0, &a, &sa, err) == 0 &&
          sa.logits_digest == sb.logits_digest && !memcmp(a.ids, b.ids, 5 * sizeof *a.ids),
          "swa: the rerun conversation differs from a fresh run (%s)", err);
    engine_free(&e);
    engine_free(&f);
    llm_model_free(&m);
}

/* exp(mean NLL) over llama.cpp's scored positions, computed here from llm_eval's logits with
 * exp in double (ppl.c sums expf as llama.cpp does). */
static double s_ppl_ref(llm_model *m, const int32_t *ids, size_t n, uint32_t n_ctx, int32_t bos)
{
    char err[512];
    uint32_t nv = llm_model_arch(m)->hp.n_vocab;
    llm_session *s = llm_session_new(m, n_ctx, n_ctx, err, sizeof err);
    float *lg = malloc((size_t)n_ctx * nv * sizeof *lg);
    int32_t *buf = malloc(n_ctx * sizeof *buf);
    double nll = 0;
    uint64_t cnt = 0;
    for (size_t c = 0; s && lg && buf && c < n / n_ctx; c++) {
        memcpy(buf, ids + c * n_ctx, n_ctx * sizeof *buf);
        if (bos >= 0)
            buf[0] = bos;
        llm_session_reset(s);
        if (llm_eval(s, buf, n_ctx, lg, 1, err, sizeof err))
            break;
        for (uint32_t j = n_ctx / 2; j + 1 < n_ctx; j++) {
            const float *l = lg + (size_t)j * nv;
            double mx = l[0], sum = 0;
            for (uint32_t i = 0; i < nv; i++)
                mx = l[i] > mx ? l[i] : mx;
            for (uint32_t i = 0; i < nv; i++)
                sum += exp((double)l[i] - mx);
            nll += -((double)l[buf[j + 1]] - mx - log(sum));
            cnt++;
        }
    }
    free(lg);
    free(buf);
    llm_session_free(&s);
    return cnt ? exp(nll / (double)cnt) : NAN;
}

static void s_test_ppl(llm_model *m, llm_model *m16, const tokenizer *t)
{
    char err[512];
    char text[4096] = "";
    for (int i = 0; i < 12; i++)
        strcat(text, "Once upon a time, a small robot counted 1, 2, 3 stars over the sea. ");
    int32_t *ids = NULL;
    size_t n = 0;
    CHECK(tokenizer_encode(t, text, strlen(text), TOKENIZER_ADD_SPECIAL, &ids, &n, err,
                           sizeof err) == 0 && n > 64, "%s", err);
    ppl_result r, rs, rq;
    int32_t bos = tokenizer_bos(t);
    CHECK(ppl_compute(m, NULL, ids, n, 32, 8, 2, bos, &r, err, sizeof err) == 0, "%s", err);
    double ref = s_ppl_ref(m, ids, n, 32, bos);
    CHECK(isfinite(r.ppl) && r.ppl > 1 && fabs(r.ppl - ref) <= 1e-6 * ref,
          "perplexity %.9g, exp(mean NLL) by hand %.9g", r.ppl, ref);
    CHECK(r.n_chunk == n / 32 && r.n_scored == (uint64_t)r.n_chunk * 15, "%u chunks, %llu scored",
          r.n_chunk, (unsigned long long)r.n_scored);
    /* a file against itself: KL exactly 0, the same top token everywhere */
    CHECK(ppl_compute(m, m, ids, n, 32, 8, 1, bos, &rs, err, sizeof err) == 0, "%s", err);
    CHECK(rs.kl_max == 0 && rs.kl_mean == 0 && rs.top1_agree == 1 && rs.ppl_base == rs.ppl &&
          rs.ppl == r.ppl, "self: KL max %g top-1 %g", rs.kl_max, rs.top1_agree);
    /* q8_0 against f16 of the same seed: small, positive */
    CHECK(ppl_compute(m, m16, ids, n, 32, 8, 1, bos, &rq, err, sizeof err) == 0, "%s", err);
    CHECK(rq.kl_mean > 0 && rq.kl_mean <= rq.kl_p99 && rq.kl_p99 <= rq.kl_max &&
          rq.top1_agree > 0.5 && rq.top1_agree <= 1, "q8_0 vs f16: KL %g p99 %g max %g top-1 %g",
          rq.kl_mean, rq.kl_p99, rq.kl_max, rq.top1_agree);
    printf("  perplexity %.4f (by hand %.4f); q8_0 vs f16: KL mean %.3g p99 %.3g max %.3g, "
           "top-1 %.4f\n", r.ppl, ref, rq.kl_mean, rq.kl_p99, rq.kl_max, rq.top1_agree);
    /* too few tokens: llama.cpp's rule, a clear error */
    CHECK(ppl_compute(m, NULL, ids, 63, 32, 8, 1, bos, &r, err, sizeof err) == -1 &&
          strstr(err, "at least 64"), "short text: %s", err);
    free(ids);
}

/* A tensor's f32 values (NULL with a failed CHECK). */
static float *s_tensor_f32(const char *path, const char *name, uint64_t *n)
{
    char err[512];
    gguf_file *g = gguf_open(path, err, sizeof err);
    const gguf_tensor *t = g ? gguf_find_tensor(g, name) : NULL;
    float *v = t ? malloc(t->nbytes) : NULL;
    FILE *f = v ? fopen(path, "rb") : NULL;
    int ok = f && !fseek(f, (long)t->offset, SEEK_SET) && fread(v, 1, t->nbytes, f) == t->nbytes;
    CHECK(ok && t->type == QUANT_F32, "%s: cannot read %s: %s", path, name, err);
    *n = ok ? t->nbytes / 4 : 0;
    if (f)
        fclose(f);
    gguf_close(&g);
    if (!ok)
        free(v);
    return ok ? v : NULL;
}

/* --confident G: token_embd x G, output row j + the unscaled embedding of (7919 j + 1) mod
 * n_vocab, every other tensor the plain file's; refused with a tied head. */
static void s_test_confident(void)
{
    char err[512], pa[2400], pb[2400];
    snprintf(pa, sizeof pa, "%s/plain32.gguf", s_dir);
    snprintf(pb, sizeof pb, "%s/confident32.gguf", s_dir);
    arch_gen_opts o = { .arch = "llama", .dim = 32, .n_layers = 1, .n_head = 2, .n_head_kv = 2,
                        .n_ff = 64, .n_vocab = 300, .type = QUANT_F32, .seed = 5 };
    CHECK(arch_gen(pa, &o, err, sizeof err) == 0, "%s", err);
    o.confident = 3;
    CHECK(arch_gen(pb, &o, err, sizeof err) == 0, "%s", err);
    uint64_t n[4];
    float *ea = s_tensor_f32(pa, "token_embd.weight", &n[0]);
    float *eb = s_tensor_f32(pb, "token_embd.weight", &n[1]);
    float *oa = s_tensor_f32(pa, "output.weight", &n[2]);
    float *ob = s_tensor_f32(pb, "output.weight", &n[3]);
    float *qa = NULL, *qb = NULL;
    uint64_t nq[2];
    qa = s_tensor_f32(pa, "blk.0.ffn_down.weight", &nq[0]);
    qb = s_tensor_f32(pb, "blk.0.ffn_down.weight", &nq[1]);
    if (ea && eb && oa && ob && qa && qb) {
        int bad = 0;
        for (uint64_t i = 0; i < n[0]; i++)
            bad += eb[i] != 3 * ea[i];
        for (uint32_t j = 0; j < 300; j++)
            for (uint32_t c = 0; c < 32; c++)
                bad += ob[j * 32 + c] != oa[j * 32 + c] + ea[((7919u * j + 1) % 300) * 32 + c];
        CHECK(!bad && !memcmp(qa, qb, nq[0] * 4), "--confident: %d values differ from the "
              "rule (or another tensor changed)", bad);
    }
    free(ea), free(eb), free(oa), free(ob), free(qa), free(qb);
    o.tied = 1;
    CHECK(arch_gen(pb, &o, err, sizeof err) != 0 && strstr(err, "--confident"),
          "--confident with a tied head: %s", err);
}

int main(void)
{
    char err[512];
    scratch_open("gen", s_dir, sizeof s_dir, s_vocab, sizeof s_vocab);
    snprintf(s_model, sizeof s_model, "%s/q8.gguf", s_dir);
    snprintf(s_model16, sizeof s_model16, "%s/f16.gguf", s_dir);
    arch_gen_opts o = scratch_tiny_llama(s_vocab);
    CHECK(arch_gen(s_model, &o, err, sizeof err) == 0, "%s", err);
    o.type = QUANT_F16;
    CHECK(arch_gen(s_model16, &o, err, sizeof err) == 0, "%s", err);
    llm_model *m = llm_model_open(s_model, err, sizeof err);
    llm_model *m16 = llm_model_open(s_model16, err, sizeof err);
    tokenizer *t = m ? tokenizer_open(llm_model_gguf(m), err, sizeof err) : NULL;
    CHECK(m && m16 && t, "%s", err);
    if (m && m16 && t) {
        s_test_generate(m, t);
        s_test_ppl(m, m16, t);
        s_test_swa(t);
    }
    s_test_confident();
    tokenizer_free(&t);
    llm_model_free(&m);
    llm_model_free(&m16);
    quant_pool_shutdown();
    return CHECK_DONE("test_gen");
}
