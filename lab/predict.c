/* predict.c — the lab's cost model and the machine figures that feed it (disk, compute, hash, hop). lab/
 *
 * The model, per step (ms), for a model of L layers:
 *   reference  step = L * layer_ms(threads)
 *   ssd        step = n_res * layer_ms + max(disk, n_str * layer_ms, n_str * verify_ms)
 *              disk = streamed_bytes_per_step / disk_bw(queue depth, chunk)
 *              (io_uring reads run while the kernel computes and a second thread hashes, so
 *              the streamed part costs the slowest of the three; on one CPU the compute and
 *              the hash share it: max(disk, n_str * (layer_ms + verify_ms)))
 *   resident   cycle = L * layer_ms(worker threads) + hops * (hop_ms + profile_ms), hops = W + 1
 *              step  = max(cycle / inflight, ceil(L / W) * layer_ms_w, L * layer_ms_w / min(cpus, W))
 *              (inflight 1: step = cycle; the other two bound a fuller pipeline)
 *   quantized step = L x layer_bytes / quant_bw: every layer resident, the row products
 *              bound by reading the quantized weights (quant_bw: one quantized layer timed
 *              through the arm's own executor, bytes / median time)
 *   ttfr = one step for every arm: the model has no warm-up term.
 * The binding term is the largest of compute / disk / network inside the step.
 *
 * Limitations (known before any figure was measured; docs/lab.md copies them):
 *  - The first step is predicted equal to a steady step. The SSD arm starts with an empty read
 *    ring and a cold disk queue; the resident arm's first message pays TCP/ZeroMQ warm-up and
 *    page faults in the workers. Both make the measured TTFR larger than predicted.
 *  - SSD overlap is all-or-nothing per step: reads that run ahead into the ring during the
 *    resident layers' compute (at most ring_slots chunks) are not credited, and the disk
 *    figure comes from a read-only benchmark (no CPU competing with the completion path).
 *  - Compute is one resident layer's sgemv timed in a hot loop. Streamed layers are computed in
 *    row chunks (one sgemv per chunk) straight from the read buffer, and three workers on a
 *    2-core machine share memory bandwidth: both can make a layer slower than the benchmark.
 *  - Transport is a bare ZeroMQ round trip between two threads; the arm adds msgpack encode and
 *    decode, copies, a netem queue and a cross-process wake-up per hop (serialisation is not
 *    modelled). Profile delay is the self-test's measured mean added delay per hop; jitter
 *    matters only through its mean at inflight 1, and the tail of a heavy-tailed profile is not
 *    modelled. Rate limits enter only through that measured mean (16 KiB messages).
 *  - The coordinator's own work per step (inputs, parity copy, progress line) is not modelled;
 *    on tiny models, where a step is tens of microseconds, it dominates and predictions miss.
 *  - A cgroup cap that reclaims page cache or a machine under other load is not modelled.
 */
#include "lab/predict.h"

#include <errno.h>
#include <math.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include <xxhash.h>
#include <zmq.h>

#include "runtime/exec.h"
#include "base/util.h"
#include "lab/bench.h"
#include "quant/quant.h"

/* Tiny models read the whole file several times so the disk figure is not one syscall's worth:
 * at least this many bytes in all, at most S_DISK_MAX_PASSES passes. */
#define S_DISK_MIN_BYTES (256ull << 20)
#define S_DISK_MAX_PASSES 64u
/* Layer compute: about this much timed work, between 20 and 500 repetitions. */
#define S_LAYER_BUDGET_MS 150.0
#define S_HOP_TIMEOUT_MS 2000 /* a round trip on loopback never takes this long */

/* ---------------------------------------------------------------- machine figures */

static int s_layer_reps(const model_t *m)
{
    /* Guess ~10 GB/s of memory bandwidth for the sgemv (DESIGN §4: ~25 GB/s on 1 thread). */
    double guess_ms = (double)model_layer_bytes(m) / 10e9 * 1e3;
    double reps = guess_ms > 0 ? S_LAYER_BUDGET_MS / guess_ms : 500;
    return reps < 20 ? 20 : reps > 500 ? 500 : (int)reps;
}

/* Median time of model_layer_checksum over one layer's bytes (the content gate's hash). */
static int s_verify_ms(const model_t *m, int reps, double *ms, char *err, size_t errlen)
{
    uint32_t d = m->dim;
    float *g = malloc(sizeof(float) * d);
    float *W = malloc(sizeof(float) * (size_t)d * d);
    double *v = malloc(sizeof(double) * (size_t)reps);
    volatile uint64_t sink = 0;
    int rc = -1;
    if (!g || !W || !v) {
        snprintf(err, errlen, "verify figure: out of memory for one layer");
        goto out;
    }
    memset(g, 0x3c, sizeof(float) * d);
    memset(W, 0x3c, sizeof(float) * (size_t)d * d); /* hash speed does not depend on content */
    sink ^= model_layer_checksum(g, W, d); /* warm: fault the pages in */
    for (int i = 0; i < reps; i++) {
        uint64_t t = util_now_ns();
        sink ^= model_layer_checksum(g, W, d);
        v[i] = (util_now_ns() - t) / 1e6;
    }
    util_sort_doubles(v, (size_t)reps);
    *ms = util_percentile(v, (size_t)reps, 50);
    (void)sink;
    rc = 0;
out:
    free(g);
    free(W);
    free(v);
    return rc;
}

typedef struct {
    void *pull, *push;         /* echo side: receive, send back */
    int trips;
    int rc;
} s_echo;

static void *s_echo_main(void *arg)
{
    s_echo *e = arg;
    zmq_msg_t msg;
    zmq_msg_init(&msg);
    e->rc = 0;
    for (int i = 0; i < e->trips; i++) {
        if (zmq_msg_recv(&msg, e->pull, 0) < 0 || zmq_msg_send(&msg, e->push, 0) < 0) {
            e->rc = -1;
            break;
        }
    }
    zmq_msg_close(&msg);
    return NULL;
}

static void *s_sock(void *ctx, int type, char *ep, size_t eplen, int bind, char *err,
                    size_t errlen)
{
    void *s = zmq_socket(ctx, type);
    int zero = 0, tmo = S_HOP_TIMEOUT_MS;
    if (!s) {
        snprintf(err, errlen, "hop figure: zmq_socket: %s", zmq_strerror(errno));
        return NULL;
    }
    zmq_setsockopt(s, ZMQ_LINGER, &zero, sizeof zero);
    zmq_setsockopt(s, ZMQ_RCVTIMEO, &tmo, sizeof tmo);
    zmq_setsockopt(s, ZMQ_SNDTIMEO, &tmo, sizeof tmo);
    if (bind ? zmq_bind(s, "tcp://127.0.0.1:*") : zmq_connect(s, ep)) {
        snprintf(err, errlen, "hop figure: %s %s: %s", bind ? "bind" : "connect",
                 bind ? "tcp://127.0.0.1:*" : ep, zmq_strerror(errno));
        zmq_close(s);
        return NULL;
    }
    if (bind)
        zmq_getsockopt(s, ZMQ_LAST_ENDPOINT, ep, &eplen);
    return s;
}

int predict_hop_rtt(size_t bytes, int reps, double *median_ms, double *p99_ms, char *err,
                    size_t errlen)
{
    void *ctx = zmq_ctx_new(), *a_push = NULL, *b_pull = NULL, *b_push = NULL, *a_pull = NULL;
    char ep1[256] = "", ep2[256] = "";
    char *buf = calloc(bytes ? bytes : 1, 1);
    double *v = malloc(sizeof(double) * (size_t)(reps > 0 ? reps : 1));
    s_echo echo = { 0 };
    pthread_t th;
    int started = 0, rc = -1;

    if (!ctx || !buf || !v || reps <= 0) {
        snprintf(err, errlen, "hop figure: out of memory");
        goto err;
    }
    if (!(a_push = s_sock(ctx, ZMQ_PUSH, ep1, sizeof ep1, 1, err, errlen)) ||
        !(b_pull = s_sock(ctx, ZMQ_PULL, ep1, sizeof ep1, 0, err, errlen)) ||
        !(a_pull = s_sock(ctx, ZMQ_PULL, ep2, sizeof ep2, 1, err, errlen)) ||
        !(b_push = s_sock(ctx, ZMQ_PUSH, ep2, sizeof ep2, 0, err, errlen)))
        goto err;
    echo = (s_echo){ .pull = b_pull, .push = b_push, .trips = reps + PREDICT_HOP_WARMUP };
    if (pthread_create(&th, NULL, s_echo_main, &echo)) {
        snprintf(err, errlen, "hop figure: pthread_create failed");
        goto err;
    }
    started = 1;
    for (int i = 0; i < reps + PREDICT_HOP_WARMUP; i++) {
        uint64_t t = util_now_ns();
        if (zmq_send(a_push, buf, bytes, 0) < 0 || zmq_recv(a_pull, buf, bytes, 0) < 0) {
            snprintf(err, errlen, "hop figure: round trip %d: %s", i, zmq_strerror(errno));
            goto err;
        }
        if (i >= PREDICT_HOP_WARMUP)
            v[i - PREDICT_HOP_WARMUP] = (util_now_ns() - t) / 1e6;
    }
    util_sort_doubles(v, (size_t)reps);
    *median_ms = util_percentile(v, (size_t)reps, 50);
    *p99_ms = util_percentile(v, (size_t)reps, 99);
    rc = 0;
err:
    /* Closing the echo's sockets first would race it; the receive timeout ends it instead. */
    if (started) {
        pthread_join(th, NULL);
        if (!rc && echo.rc) {
            snprintf(err, errlen, "hop figure: echo thread failed");
            rc = -1;
        }
    }
    if (a_push)
        zmq_close(a_push);
    if (b_pull)
        zmq_close(b_pull);
    if (a_pull)
        zmq_close(a_pull);
    if (b_push)
        zmq_close(b_push);
    if (ctx)
        zmq_ctx_term(ctx);
    free(buf);
    free(v);
    return rc;
}

int predict_measure_machine(const config_t *cfg, const model_t *m, predict_machine *pm,
                            char *err, size_t errlen)
{
    bench_disk_result b;
    uint64_t file_layers = (uint64_t)m->n_layers * model_layer_bytes(m);
    char why[512];

    memset(pm, 0, sizeof *pm);
    pm->cpus = sysconf(_SC_NPROCESSORS_ONLN);
    if (pm->cpus < 1)
        pm->cpus = 1;

    /* Disk, in the SSD arm's own pattern: same reader, depth and chunk. */
    pm->disk_passes = 1;
    if (file_layers && file_layers < S_DISK_MIN_BYTES) {
        uint64_t p = (S_DISK_MIN_BYTES + file_layers - 1) / file_layers;
        pm->disk_passes = p > S_DISK_MAX_PASSES ? S_DISK_MAX_PASSES : (uint32_t)p;
    }
    /* Exactly the bytes the SSD arm streams (its plan's non-resident layers), at least three
     * times over: the pattern, not just the reader, decides what this disk delivers. */
    exec_opts po = { .budget_bytes = cfg->cap_bytes, .queue_depth = cfg->queue_depth,
                     .chunk_bytes = cfg->chunk_bytes, .overhead_bytes = cfg->overhead_bytes };
    exec_plan pl;
    bench_disk_opts bo = { .chunk_bytes = cfg->chunk_bytes, .queue_depth = cfg->queue_depth,
                           .passes = pm->disk_passes < 3 ? 3 : pm->disk_passes,
                           .buffers_4k = cfg->buffers_4k };
    if (exec_plan_make(m, 0, m->n_layers, &po, &pl, why, sizeof why) == 0 && pl.n_streamed) {
        bo.first = pl.n_resident;
        bo.ring_slots = pl.ring_slots;
    }
    pm->disk_passes = bo.passes;
    if (bench_disk_run(m, &bo, &b, why, sizeof why)) {
        snprintf(err, errlen, "disk figure: %s", why);
        return -1;
    }
    pm->disk_gbps = b.gbps;
    pm->disk_qd = b.queue_depth;
    pm->disk_chunk_bytes = b.chunk_bytes;
    pm->disk_bytes = b.bytes;
    pm->disk_cache_pass = b.cache_pass;
    snprintf(pm->disk_io_buffers, sizeof pm->disk_io_buffers, "%s", b.io_buffers);
    pm->disk_has_device = b.has_device;
    snprintf(pm->disk_device, sizeof pm->disk_device, "%s",
             b.has_device ? b.device : b.device_error);
    pm->disk_avg_request_bytes = b.dev.avg_request_bytes;
    pm->disk_busy_util = b.dev.util;

    /* Compute on one resident layer: the single-process arms' threads, then the workers'. */
    int reps = s_layer_reps(m);
    pm->threads = cfg->threads;
    pm->worker_threads = cfg->worker_threads;
    if (bench_layer_ms(m, (int)cfg->threads, reps, &pm->layer_ms, why, sizeof why)) {
        snprintf(err, errlen, "compute figure: %s", why);
        return -1;
    }
    if (cfg->worker_threads == cfg->threads)
        pm->layer_ms_worker = pm->layer_ms;
    else if (bench_layer_ms(m, (int)cfg->worker_threads, reps, &pm->layer_ms_worker, why,
                            sizeof why)) {
        snprintf(err, errlen, "compute figure (worker threads): %s", why);
        return -1;
    }
    if (s_verify_ms(m, reps < 50 ? reps : 50, &pm->verify_ms, err, errlen))
        return -1;

    /* One activation message (dim f32) over a bare ZeroMQ link. */
    pm->hop_bytes = (uint64_t)m->dim * sizeof(float);
    if (predict_hop_rtt(pm->hop_bytes, PREDICT_HOP_REPS, &pm->hop_rtt_ms, &pm->hop_rtt_p99_ms,
                        err, errlen))
        return -1;
    pm->hop_ms = pm->hop_rtt_ms / 2;
    return 0;
}

/* The quantized figure reads at least this many bytes of weights per timed step: a q8_0 layer
 * of the lab model (17 MiB) fits this machine's 32 MiB L3, and timed alone it ran at 14.9
 * GB/s where the arm, reading 408 MiB per step from DRAM, got 11.8 (-21%: a missed
 * prediction). 256 MiB is 8 such caches. */
#define S_QUANT_MIN_BYTES (256ull << 20)

int predict_measure_quant(const config_t *cfg, const model_t *qm, predict_machine *pm,
                          char *err, size_t errlen)
{
    char why[512];
    uint64_t lb = model_layer_bytes(qm);
    uint32_t n = (uint32_t)((S_QUANT_MIN_BYTES + lb - 1) / lb);
    if (n > qm->n_layers)
        n = qm->n_layers;
    /* About a second of timed work (a guessed 10 GB/s), 20..200 steps: on this shared
     * 2-core machine 5 steps of 16 lab02 layers gave 1.75 GB/s where the arm ran at 7.9;
     * 30 steps gave 6.5-8.2 GB/s beside an arm at 8.3. */
    double guess_ms = (double)n * (double)lb / 10e9 * 1e3;
    double r = guess_ms > 0 ? 1000.0 / guess_ms : 200;
    int reps = r < 20 ? 20 : r > 200 ? 200 : (int)r;
    if (bench_layers_ms(qm, n, (int)cfg->threads, reps, &pm->quant_layer_ms, why,
                        sizeof why)) {
        snprintf(err, errlen, "quantized compute figure: %s", why);
        return -1;
    }
    pm->quant_layers = n;
    pm->quant_layer_bytes = lb;
    pm->quant_gbps = pm->quant_layer_ms > 0 ? (double)lb / (pm->quant_layer_ms * 1e6) : 0;
    snprintf(pm->quant_type, sizeof pm->quant_type, "%s", quant_type_name(qm->w_type));
    return 0;
}

void predict_print_machine(FILE *f, const predict_machine *pm)
{
    char b1[32], b2[32];
    fprintf(f, "machine figures (measured now, before any arm runs):\n");
    fprintf(f, "  disk     %.3f GB/s  (%s, queue depth %u, chunk %s, %u pass%s, %s read)%s\n",
            pm->disk_gbps, "SSD arm's reader", pm->disk_qd,
            util_fmt_size(pm->disk_chunk_bytes, b1, sizeof b1), pm->disk_passes,
            pm->disk_passes == 1 ? "" : "es", util_fmt_size(pm->disk_bytes, b2, sizeof b2),
            pm->disk_cache_pass ? "" : "  WARNING: page cache served part of the reads");
    if (pm->disk_has_device)
        fprintf(f, "           at the device (%s): %s per request, busy %.0f%% of the time; "
                   "buffers %s\n", pm->disk_device,
                util_fmt_size(pm->disk_avg_request_bytes, b1, sizeof b1),
                100 * pm->disk_busy_util, pm->disk_io_buffers);
    else
        fprintf(f, "           at the device: %s; buffers %s\n", pm->disk_device,
                pm->disk_io_buffers);
    fprintf(f, "  compute  %.4f ms per resident layer with %u thread%s; %.4f ms with %u (workers)\n",
            pm->layer_ms, pm->threads, pm->threads == 1 ? "" : "s", pm->layer_ms_worker,
            pm->worker_threads);
    fprintf(f, "  verify   %.4f ms per layer (XXH3-64 content hash of a streamed layer)\n",
            pm->verify_ms);
    fprintf(f, "  hop      %.4f ms one way (ZeroMQ PUSH/PULL round trip %.4f ms median, p99 %.4f, "
               "%llu B, loopback, %d trips)\n",
            pm->hop_ms, pm->hop_rtt_ms, pm->hop_rtt_p99_ms, (unsigned long long)pm->hop_bytes,
            PREDICT_HOP_REPS);
    if (pm->quant_layer_ms > 0)
        fprintf(f, "  quant    %.4f ms per resident %s layer with %u thread%s (%.3f GB/s of "
                   "weights; %u layers per timed step)\n", pm->quant_layer_ms, pm->quant_type,
                pm->threads, pm->threads == 1 ? "" : "s", pm->quant_gbps, pm->quant_layers);
    fprintf(f, "  cpus     %ld online\n", pm->cpus);
}

/* ---------------------------------------------------------------- the model */

static const char *s_kind_name(predict_kind k)
{
    return k == PREDICT_REFERENCE ? "reference"
           : k == PREDICT_SSD     ? "ssd"
           : k == PREDICT_QUANTIZED ? "quantized"
                                  : "resident";
}

int predict_condition(predict_kind kind, const config_t *cfg, const model_t *m,
                      const predict_machine *pm, double profile_ms, prediction *out, char *err,
                      size_t errlen)
{
    prediction *p = out;
    memset(p, 0, sizeof *p);
    p->kind = kind;
    p->layers = m->n_layers;
    if (kind == PREDICT_REFERENCE) {
        p->n_resident = m->n_layers;
        p->compute_ms = m->n_layers * pm->layer_ms;
        p->step_ms = p->compute_ms;
        p->binding = "compute";
        snprintf(p->formula, sizeof p->formula, "%u x %.4f", m->n_layers, pm->layer_ms);
    } else if (kind == PREDICT_QUANTIZED) {
        double bytes = (double)m->n_layers * model_layer_bytes(m);
        if (!(pm->quant_gbps > 0)) {
            snprintf(err, errlen, "predict: no quantized bandwidth measured");
            return -1;
        }
        p->n_resident = m->n_layers;
        p->compute_ms = bytes / (pm->quant_gbps * 1e9) * 1e3;
        p->step_ms = p->compute_ms;
        p->binding = "compute";
        snprintf(p->formula, sizeof p->formula, "%.1f MiB of %s / %.3f GB/s", bytes / 1048576.0,
                 quant_type_name(m->w_type), pm->quant_gbps);
    } else if (kind == PREDICT_SSD) {
        /* The SSD arm's own plan: same options as arm_run_ssd. */
        exec_opts o = { .budget_bytes = cfg->cap_bytes, .queue_depth = cfg->queue_depth,
                        .chunk_bytes = cfg->chunk_bytes, .overhead_bytes = cfg->overhead_bytes,
                        .buffered = cfg->buffered, .total_steps = cfg->steps,
                        .verify_resident = 1 };
        exec_plan plan;
        if (exec_plan_make(m, 0, m->n_layers, &o, &plan, err, errlen))
            return -1;
        p->n_resident = plan.n_resident;
        p->n_streamed = plan.n_streamed;
        p->streamed_bytes = plan.streamed_per_step;
        p->compute_ms = m->n_layers * pm->layer_ms;
        p->verify_ms = plan.n_streamed * pm->verify_ms;
        p->disk_ms = pm->disk_gbps > 0 ? (double)plan.streamed_per_step / (pm->disk_gbps * 1e9) * 1e3
                                       : INFINITY;
        /* The hash runs on its own thread (exec.c): beside the compute when there is a
         * second CPU, added to it when there is not. */
        double cpu_str = plan.n_streamed * pm->layer_ms;
        double cpu = pm->cpus >= 2 ? (cpu_str > p->verify_ms ? cpu_str : p->verify_ms)
                                   : cpu_str + p->verify_ms;
        double str = p->disk_ms > cpu ? p->disk_ms : cpu;
        p->read_wait_ms = p->disk_ms > cpu ? p->disk_ms - cpu_str : 0;
        p->verify_wait_ms = pm->cpus >= 2 && p->verify_ms > cpu_str && p->verify_ms >= p->disk_ms
                                ? p->verify_ms - cpu_str
                                : 0;
        p->step_ms = plan.n_resident * pm->layer_ms + str;
        p->binding = p->disk_ms > cpu ? "disk" : "compute";
        snprintf(p->formula, sizeof p->formula,
                 "%u x %.4f + max(%.1f MiB / %.3f GB/s = %.3f, %u x %.4f = %.3f, %u x %.4f = "
                 "%.3f%s)",
                 plan.n_resident, pm->layer_ms, plan.streamed_per_step / 1048576.0,
                 pm->disk_gbps, p->disk_ms, plan.n_streamed, pm->layer_ms, cpu_str,
                 plan.n_streamed, pm->verify_ms, p->verify_ms,
                 pm->cpus >= 2 ? "" : ", one CPU: compute + hash");
    } else {
        uint32_t w = cfg->n_workers ? cfg->n_workers : cfg->workers;
        uint32_t k = cfg->inflight ? cfg->inflight : 1;
        if (!w) {
            snprintf(err, errlen, "predict: resident arm with 0 workers");
            return -1;
        }
        p->n_resident = m->n_layers;
        p->workers = w;
        p->inflight = k;
        p->hops = w + 1;
        p->profile_ms = profile_ms;
        p->compute_ms = m->n_layers * pm->layer_ms_worker;
        p->network_ms = p->hops * (pm->hop_ms + profile_ms);
        double cycle = p->compute_ms + p->network_ms;
        double stage = ((m->n_layers + w - 1) / w) * pm->layer_ms_worker;
        double cpu = p->compute_ms / (double)(pm->cpus < (long)w ? pm->cpus : (long)w);
        p->step_ms = cycle / k;
        p->binding = p->network_ms > p->compute_ms ? "network" : "compute";
        if (stage > p->step_ms || cpu > p->step_ms) {
            p->step_ms = stage > cpu ? stage : cpu;
            p->binding = "compute";
        }
        p->ttfr_ms = cycle;
        snprintf(p->formula, sizeof p->formula, "(%u x %.4f + %u x (%.4f + %.4f))%s",
                 m->n_layers, pm->layer_ms_worker, p->hops, pm->hop_ms, profile_ms,
                 k > 1 ? " / inflight, bounded by stage and cpus" : "");
    }
    if (kind != PREDICT_RESIDENT)
        p->ttfr_ms = p->step_ms;
    p->steps_per_s = p->step_ms > 0 ? 1000.0 / p->step_ms : 0;
    return 0;
}

json_t *predict_to_json(const prediction *p)
{
    json_t *o = json_object();
    json_object_set_new(o, "kind", json_string(s_kind_name(p->kind)));
    json_object_set_new(o, "binding", json_string(p->binding));
    json_object_set_new(o, "tolerance", json_real(PREDICT_TOLERANCE));
    json_object_set_new(o, "step_ms", json_real(p->step_ms));
    json_object_set_new(o, "ttfr_ms", json_real(p->ttfr_ms));
    json_object_set_new(o, "steps_per_s", json_real(p->steps_per_s));
    json_object_set_new(o, "compute_ms", json_real(p->compute_ms));
    json_object_set_new(o, "verify_ms", json_real(p->verify_ms));
    json_object_set_new(o, "verify_wait_ms", json_real(p->verify_wait_ms));
    json_object_set_new(o, "disk_ms", isfinite(p->disk_ms) ? json_real(p->disk_ms) : json_null());
    json_object_set_new(o, "read_wait_ms",
                        isfinite(p->read_wait_ms) ? json_real(p->read_wait_ms) : json_null());
    json_object_set_new(o, "network_ms", json_real(p->network_ms));
    json_object_set_new(o, "profile_ms", json_real(p->profile_ms));
    json_object_set_new(o, "resident_layers", json_integer(p->n_resident));
    json_object_set_new(o, "streamed_layers", json_integer(p->n_streamed));
    json_object_set_new(o, "streamed_bytes_per_step", json_integer((json_int_t)p->streamed_bytes));
    json_object_set_new(o, "hops", json_integer(p->hops));
    json_object_set_new(o, "formula", json_string(p->formula));
    return o;
}

/* ---------------------------------------------------------------- after the fact */

static double s_get(const json_t *o, const char *key)
{
    const json_t *v = o ? json_object_get(o, key) : NULL;
    return json_is_number(v) ? json_number_value(v) : 0;
}

typedef struct {
    const char *name;
    double pred, meas;         /* ms per step */
} s_term;

void predict_blame(const json_t *pred, const json_t *stage_ms, double measured_step_ms,
                   char *buf, size_t len)
{
    const char *kind = json_string_value(json_object_get(pred, "kind"));
    const char *binding = json_string_value(json_object_get(pred, "binding"));
    s_term t[5];
    int n = 0;

    if (!kind || !json_is_object(stage_ms) || !json_object_size(stage_ms)) {
        snprintf(buf, len, "%s (no stage timings to compare; the binding term)",
                 binding ? binding : "?");
        return;
    }
    double pstep = s_get(pred, "step_ms"), msum = 0, psum = 0;
    t[n++] = (s_term){ "compute", s_get(pred, "compute_ms"), s_get(stage_ms, "compute") };
    if (!strcmp(kind, "resident")) {
        /* The resident arm's stages are sums along the route per step: "wait" is the time a
         * message is held by link emulation (and queued), "network" is e2e minus all worker
         * work (transport), "send" the sending call: together the predicted network term. */
        t[n++] = (s_term){ "network", s_get(pred, "network_ms"),
                           s_get(stage_ms, "network") + s_get(stage_ms, "wait") +
                               s_get(stage_ms, "send") };
        t[n++] = (s_term){ "serialisation (not modelled)", 0,
                           s_get(stage_ms, "ser") + s_get(stage_ms, "deser") };
    } else {
        t[n++] = (s_term){ "disk", s_get(pred, "read_wait_ms"),
                           s_get(stage_ms, "read_wait") };
        /* The hash runs beside the step: only the wait for it is on the step's path. */
        t[n++] = (s_term){ "verify", s_get(pred, "verify_wait_ms"),
                           s_get(stage_ms, "verify_wait") };
    }
    for (int i = 0; i < n; i++) {
        msum += t[i].meas;
        psum += t[i].pred;
    }
    /* What no stage accounts for: coordinator work, queueing, overlap the model got wrong. */
    t[n++] = (s_term){ "unmodelled overhead", pstep - psum > 0 ? pstep - psum : 0,
                       measured_step_ms - msum };
    int worst = 0;
    for (int i = 1; i < n; i++)
        if (fabs(t[i].meas - t[i].pred) > fabs(t[worst].meas - t[worst].pred))
            worst = i;
    snprintf(buf, len, "%s (predicted %.3f ms/step, measured %.3f)", t[worst].name,
             t[worst].pred, t[worst].meas);
}

/* ---------------------------------------------------------------- the text lab's SSD arm */

void predict_llm_ssd(const predict_llm_in *in, predict_llm_out *out)
{
    double bw = in->disk_gbps > 0 ? in->disk_gbps * 1e6 : 0; /* bytes per ms */
    double hw = in->hash_gbps > 0 ? in->hash_gbps * 1e6 : 0;
    memset(out, 0, sizeof *out);
    out->hit_rate = in->cache_experts ? (double)in->cache_slots / (double)in->cache_experts : 0;
    if (out->hit_rate > 1)
        out->hit_rate = 1;
    if (in->has_hit)
        out->hit_rate = in->hit;
    double miss = (1 - out->hit_rate) * (double)in->routed_read_bytes;
    double share = in->pass_bytes ? (double)in->ring_bytes / (double)in->pass_bytes : 0;
    out->read_bytes = (double)in->ring_bytes + miss;
    if (bw <= 0 && out->read_bytes > 0) {
        out->ms = INFINITY;
        snprintf(out->formula, sizeof out->formula, "no disk figure");
        return;
    }
    double rbw = in->ring_gbps > 0 ? in->ring_gbps * 1e6 : bw;
    double ring = in->ring_bytes ? in->ring_bytes / rbw - in->ref_ms * share : 0;
    out->ring_ms = ring > 0 ? ring : 0;
    out->read_ms = miss > 0 ? miss / bw : 0;
    out->hash_ms = miss > 0 && hw > 0 ? miss / hw : 0;
    if (in->read_ms > 0) { /* the misses' own reads and hashes, timed */
        out->read_ms = in->read_ms;
        out->hash_ms = in->hash_ms > 0 ? in->hash_ms : 0;
    }
    out->expert_ms = out->read_ms + out->hash_ms;
    out->ms = in->ref_ms + out->ring_ms + out->expert_ms;
    if (in->read_ms > 0) {
        snprintf(out->formula, sizeof out->formula,
                 "%.2f + max(0, %.1f MiB / %.2f GB/s - %.2f x %.3f) + %.2f + %.2f (the replayed "
                 "misses' reads and hashes a generated token; hit rate %.3f, %.1f MiB) = %.2f ms",
                 in->ref_ms, in->ring_bytes / 1048576.0, rbw / 1e6, in->ref_ms, share,
                 out->read_ms, out->hash_ms, out->hit_rate, miss / 1048576.0, out->ms);
        return;
    }
    snprintf(out->formula, sizeof out->formula,
             "%.2f + max(0, %.1f MiB / %.2f GB/s - %.2f x %.3f) + (1 - %s%llu/%llu = %.3f) x "
             "%.1f MiB x (1/%.2f + 1/%.2f GB/s) = %.2f ms",
             in->ref_ms, in->ring_bytes / 1048576.0, rbw / 1e6, in->ref_ms, share,
             in->has_hit ? "replayed hits, not " : "", (unsigned long long)in->cache_slots,
             (unsigned long long)in->cache_experts, 1 - out->hit_rate, in->routed_read_bytes / 1048576.0, in->disk_gbps, in->hash_gbps,
             out->ms);
}

void predict_llm_routed(const arch_model *am, const exec_plan *p, uint64_t *routed_read_bytes,
                        uint64_t *cache_experts, uint64_t *pass_bytes)
{
    uint64_t routed = 0, experts = 0, pass = 0;
    uint32_t k = am->hp.n_expert_used;
    for (uint32_t l = 0; l < am->hp.n_layers; l++) {
        const arch_layer *L = &am->layers[l];
        for (uint32_t t = 0; t < L->n_tensors; t++) {
            const arch_tensor *T = &L->t[t];
            pass += T->n_expert ? T->nbytes / T->n_expert * k : T->nbytes;
        }
        if (!p->expert_slots || l < p->n_resident)
            continue; /* whole-resident layers, or experts that stream with their layers */
        uint32_t E = 0;
        uint64_t sum = 0; /* every expert's aligned reads of this layer */
        for (uint32_t t = 0; t < L->n_tensors; t++) {
            const arch_tensor *T = &L->t[t];
            if (!T->n_expert)
                continue;
            E = T->n_expert;
            uint64_t slice = T->nbytes / E;
            for (uint32_t x = 0; x < E; x++) {
                uint64_t off = T->off + x * slice, a0 = off / EXEC_ALIGN * EXEC_ALIGN;
                sum += (off + slice + EXEC_ALIGN - 1) / EXEC_ALIGN * EXEC_ALIGN - a0;
            }
        }
        if (E) {
            routed += (uint64_t)((double)sum / E * (k < E ? k : E) + 0.5);
            experts += E;
        }
    }
    *routed_read_bytes = routed;
    *cache_experts = experts;
    *pass_bytes = pass;
}

int predict_hash_gbps(uint64_t bytes, int reps, double *gbps, char *err, size_t errlen)
{
    uint8_t *b = malloc(bytes ? bytes : 1);
    double *v = malloc(sizeof(double) * (size_t)(reps > 0 ? reps : 1));
    volatile uint64_t sink = 0;
    if (!b || !v || reps <= 0 || !bytes) {
        free(b);
        free(v);
        snprintf(err, errlen, "hash figure: out of memory");
        return -1;
    }
    memset(b, 0x3c, bytes); /* the hash's speed does not depend on the bytes */
    sink ^= XXH3_64bits(b, bytes); /* fault the pages in */
    for (int i = 0; i < reps; i++) {
        uint64_t t = util_now_ns();
        sink ^= XXH3_64bits(b, bytes);
        v[i] = (double)(util_now_ns() - t);
    }
    util_sort_doubles(v, (size_t)reps);
    double ns = util_percentile(v, (size_t)reps, 50);
    *gbps = ns > 0 ? bytes / ns : 0;
    (void)sink;
    free(b);
    free(v);
    return 0;
}
