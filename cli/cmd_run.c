/* cmd_run.c — `swarm gen`, `swarm run` and `swarm bench-disk`: parse, build, run, report. cli/ */
#include <errno.h>
#include <getopt.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "dist/config.h"
#include "runtime/exec.h"
#include "base/exitcode.h"
#include "arch/kernel.h"
#include "base/log.h"
#include "arch/model.h"
#include "base/sec.h"
#include "base/util.h"
#include "dist/arm.h"
#include "arch/gen.h"
#include "lab/bench.h"
#include "cli/cmd.h"
#include "dist/llm_cli.h"
#include "runtime/result.h"
#include "quant/quant.h"

/* ---------------------------------------------------------------- gen */

static void s_gen_usage(void)
{
    printf("usage: swarm gen --layers L --dim D --seed S -o FILE [--alignment A]\n"
           "  Writes a synthetic dense model in GGUF v3: per layer g (d f32) and W (d x d\n"
           "  f32), deterministic from the seed, with a checksum per layer in the\n"
           "  metadata. Alignment defaults to 4096 (O_DIRECT friendly).\n"
           "usage: swarm gen --arch llama|qwen2 [--dim D --layers L --heads H --kv-heads K\n"
           "                 --ff F] [--vocab-from VOCAB.gguf | --vocab N]\n"
           "                 [--type f32|f16|bf16|q8_0|q4_0] [--tied] [--ctx N]\n"
           "                 [--rope-linear FACTOR | --rope-llama3] [--chat-template FILE]\n"
           "                 --seed S -o FILE\n"
           "  Writes a random-weight llama / qwen2 model (weights of standard deviation 0.02,\n"
           "  norms near 1, deterministic from the seed; matrices in --type, vectors f32),\n"
           "  with the tokenizer of a vocabulary-only GGUF copied in, so llama.cpp loads it.\n"
           "  --rope-linear: rope.scaling linear; --rope-llama3: Llama 3.1's rope_freqs.weight.\n"
           "  --chat-template FILE: its text (Jinja) as tokenizer.chat_template.\n"
           "  Defaults: dim 256, 2 layers, 8 heads, kv-heads = heads, ff 768, type f32,\n"
           "  ctx 2048, alignment 32 (as published files).\n");
}

int cmd_gen(int argc, char **argv)
{
    static const struct option opts[] = {
        { "layers", required_argument, 0, 'L' }, { "dim", required_argument, 0, 'd' },
        { "seed", required_argument, 0, 's' },   { "out", required_argument, 0, 'o' },
        { "alignment", required_argument, 0, 'a' }, { "help", no_argument, 0, 'h' },
        { "arch", required_argument, 0, 'A' },   { "heads", required_argument, 0, 'H' },
        { "kv-heads", required_argument, 0, 'K' }, { "ff", required_argument, 0, 'F' },
        { "vocab-from", required_argument, 0, 'V' }, { "vocab", required_argument, 0, 'N' },
        { "type", required_argument, 0, 'T' },   { "tied", no_argument, 0, 't' },
        { "ctx", required_argument, 0, 'C' },
        { "rope-linear", required_argument, 0, 'R' }, { "rope-llama3", no_argument, 0, '3' },
        { "chat-template", required_argument, 0, 'J' }, { 0, 0, 0, 0 }
    };
    /* -1: not given (the dense and llama defaults differ) */
    long layers = -1, dim = -1, align = -1;
    uint64_t seed = 1;
    const char *out = NULL, *arch = NULL, *jinja_path = NULL;
    arch_gen_opts go = { .n_head = 8, .n_ff = 768, .type = QUANT_F32 };
    char err[512];
    int c;
    log_set_role("gen");
    optind = 1;
    while ((c = getopt_long(argc, argv, "o:h", opts, NULL)) != -1) {
        switch (c) {
        case 'L': layers = (long)strtoul(optarg, NULL, 10); break;
        case 'd': dim = (long)strtoul(optarg, NULL, 10); break;
        case 's': seed = strtoull(optarg, NULL, 0); break;
        case 'o': out = optarg; break;
        case 'a': align = (long)strtoul(optarg, NULL, 10); break;
        case 'A': arch = optarg; break;
        case 'H': go.n_head = (uint32_t)strtoul(optarg, NULL, 10); break;
        case 'K': go.n_head_kv = (uint32_t)strtoul(optarg, NULL, 10); break;
        case 'F': go.n_ff = (uint32_t)strtoul(optarg, NULL, 10); break;
        case 'V': go.vocab_from = optarg; break;
        case 'N': go.n_vocab = (uint32_t)strtoul(optarg, NULL, 10); break;
        case 't': go.tied = 1; break;
        case 'C': go.n_ctx = (uint32_t)strtoul(optarg, NULL, 10); break;
        case 'R': go.rope_linear = strtof(optarg, NULL); break;
        case '3': go.rope_llama3 = 1; break;
        case 'J': jinja_path = optarg; break;
        case 'T': {
            quant_type qt;
            if (quant_type_parse(optarg, &qt, err, sizeof err)) {
                fprintf(stderr, "swarm gen: --type: %s\n", err);
                return EXIT_USAGE;
            }
            go.type = qt;
            break;
        }
        case 'h': s_gen_usage(); return EXIT_OK;
        default: return EXIT_USAGE;
        }
    }
    uint64_t t0 = util_now_ns();
    if (arch && strcmp(arch, MODEL_ARCH)) {
        if (!strcmp(arch, "llama"))
            go.arch = ARCH_LLAMA;
        else if (!strcmp(arch, "qwen2"))
            go.arch = ARCH_QWEN2;
        else {
            fprintf(stderr, "swarm gen: --arch '%s': one of swarm-dense, llama, qwen2\n", arch);
            return EXIT_USAGE;
        }
        go.dim = dim < 0 ? 256 : (uint32_t)dim;
        go.n_layers = layers < 0 ? 2 : (uint32_t)layers;
        go.n_head_kv = go.n_head_kv ? go.n_head_kv : go.n_head;
        go.seed = seed;
        go.alignment = align < 0 ? 0 : (uint32_t)align;
        if (!out || (!go.vocab_from && !go.n_vocab)) {
            fprintf(stderr,
                    "swarm gen --arch %s: need -o FILE and --vocab-from FILE or --vocab N\n", arch);
            return EXIT_USAGE;
        }
        char *jinja = NULL;
        size_t jlen;
        if (jinja_path && !(jinja = llm_cli_read_file(jinja_path, &jlen, err, sizeof err))) {
            fprintf(stderr, "swarm gen: --chat-template: %s\n", err);
            return EXIT_USAGE;
        }
        go.chat_template = jinja;
        int grc = arch_gen(out, &go, err, sizeof err);
        free(jinja);
        if (grc) {
            log_error("%s", err);
            return EXIT_FAIL;
        }
        log_info("wrote %s: %s, %u layers x %u, %u heads (%u kv), ff %u, %s%s, seed %llu (%.1f s)",
                 out, arch, go.n_layers, go.dim, go.n_head, go.n_head_kv, go.n_ff,
                 quant_type_name(go.type), go.tied ? ", tied" : "", (unsigned long long)seed,
                 (util_now_ns() - t0) / 1e9);
        return EXIT_OK;
    }
    layers = layers < 0 ? 24 : layers;
    dim = dim < 0 ? 4096 : dim;
    align = align < 0 ? 4096 : align;
    if (!out || !layers || layers > MODEL_MAX_LAYERS || !dim || dim > MODEL_MAX_DIM) {
        fprintf(stderr, "swarm gen: need -o FILE, 1 <= layers <= %d, 1 <= dim <= %d\n",
                MODEL_MAX_LAYERS, MODEL_MAX_DIM);
        return EXIT_USAGE;
    }
    if (model_gen(out, (uint32_t)layers, (uint32_t)dim, seed, (uint32_t)align, err, sizeof err)) {
        log_error("%s", err);
        return EXIT_FAIL;
    }
    log_info("wrote %s: %ld layers x %ld, seed %llu, alignment %ld (%.1f s)", out, layers, dim,
             (unsigned long long)seed, align, (util_now_ns() - t0) / 1e9);
    return EXIT_OK;
}

/* ---------------------------------------------------------------- keygen */

int cmd_keygen(int argc, char **argv)
{
    char err[512];
    if (argc != 2 || argv[1][0] == '-') {
        printf("usage: swarm keygen NAME\n"
               "  Writes NAME.key (CURVE public + secret key, mode 0600) and NAME.pub (the\n"
               "  public key). Give workers `--key NAME.key --allow COORD.pub`; give the\n"
               "  coordinator `[security] key = NAME.key` and each `[worker.X] public_key`.\n"
               "  A public key is a path to a .pub file, or inline as z85:KEY (40 Z85\n"
               "  characters after the prefix); a bare value is always read as a path.\n");
        return argc == 2 && (!strcmp(argv[1], "--help") || !strcmp(argv[1], "-h")) ? EXIT_OK
                                                                                   : EXIT_USAGE;
    }
    if (sec_keygen(argv[1], err, sizeof err)) {
        fprintf(stderr, "swarm keygen: %s\n", err);
        return EXIT_FAIL;
    }
    printf("wrote %s.key and %s.pub\n", argv[1], argv[1]);
    return EXIT_OK;
}

/* ---------------------------------------------------------------- run */

static void s_run_usage(void)
{
    printf(
        "usage: swarm run [CONFIG] --arm reference|ssd|resident|quantized [options]\n"
        "  Runs one arm for N steps, prints a table, appends one JSON object to --out.\n"
        "  --steps N            steps (default: [run] steps, 32)\n"
        "  --out FILE.jsonl     append the result here (default: none)\n"
        "  --model FILE         an existing model file instead of [model] path; never\n"
        "                       generated (make one with swarm gen). A missing [model] path\n"
        "                       is generated only when the config says [model] generate = 1\n"
        "  --cap SIZE           working-set cap (e.g. 600M, 20M)\n"
        "  --set SEC.KEY=VAL    override any config key (repeatable)\n"
        "  --buffered           ssd arm: buffered reads (labelled; the cache gate judges)\n"
        "  --no-parity          skip the in-process reference run (parity gate n/a;\n"
        "                       for --arm quantized the quality gate n/a)\n"
        "  --arm quantized      every layer resident under [ssd] cap with W in [quantized]\n"
        "                       type (MODEL.TYPE.gguf beside the model, made when missing\n"
        "                       if the model may be generated); quality gate, not parity\n"
        "  --profile NAME       resident arm: link profile on each data link\n"
        "  --inflight K         resident arm: steps in the pipeline at once\n"
        "  --workers N          resident arm: local workers to spawn\n"
        "  --kill-worker ID@STEP, --stop-worker ID@STEP:SECONDS, --cut-link ID@STEP:SECONDS\n"
        "                       resident arm: inject a fault from the coordinator side\n"
        "  --respawn            resident arm: respawn a lost local worker; it rejoins\n"
        "  --dump-inputs FILE   raw inputs, steps x dim little-endian f32, no header\n"
        "  --dump-outputs FILE  raw outputs, same layout\n"
        "  --quiet              no progress line\n"
        "exit: 0 ok, 1 error, 2 usage/config, 3 a gate voided the result, 4 fallback budget\n");
}

static int s_dump(const char *path, const float *v, uint64_t n)
{
    FILE *f = fopen(path, "wb");
    if (!f || fwrite(v, sizeof(float), n, f) != n) {
        log_error("%s: cannot write: %s", path, strerror(errno));
        if (f)
            fclose(f);
        return -1;
    }
    return fclose(f) ? -1 : 0;
}

static int s_parse_fault(arm_ctx *a, fault_kind k, const char *s)
{
    char err[256];
    if (a->n_faults >= FAULT_MAX ||
        fault_parse(k, s, "ID@STEP", &a->faults[a->n_faults], err, sizeof err))
        return -1;
    a->n_faults++;
    return 0;
}

/* A positive integer flag up to hi, all of it a number. 0 / -1 with a message on stderr. */
static int s_flag_u32(const char *flag, const char *v, uint32_t hi, uint32_t *out)
{
    char *end;
    errno = 0;
    unsigned long x = strtoul(v, &end, 10);
    if (errno || end == v || *end || v[0] == '-' || !x || x > hi) {
        fprintf(stderr, "swarm run: %s: '%s' must be an integer in 1..%u\n", flag, v, hi);
        return -1;
    }
    *out = (uint32_t)x;
    return 0;
}

/* Fault flags name workers: listed [worker.NAME] sections, or w0..w(N-1) when spawned. A name
 * that matches none would silently inject nothing, so it is refused with the names there are. */
static int s_check_faults(const arm_ctx *a, const config_t *cfg, const char *arm)
{
    char names[1024] = "";
    uint32_t n = cfg->n_workers ? cfg->n_workers : cfg->workers;
    if (!a->n_faults)
        return 0;
    if (strcmp(arm, "resident")) {
        fprintf(stderr, "swarm run: --kill-worker, --stop-worker and --cut-link need --arm "
                "resident (workers to fault), not --arm %s\n", arm);
        return -1;
    }
    for (uint32_t k = 0; k < a->n_faults; k++) {
        int found = 0;
        names[0] = 0;
        for (uint32_t i = 0; i < n; i++) {
            char id[80];
            if (cfg->n_workers)
                snprintf(id, sizeof id, "%s", cfg->worker[i].name);
            else
                snprintf(id, sizeof id, "w%u", i);
            found |= !strcmp(id, a->faults[k].worker);
            if (strlen(names) + strlen(id) + 3 < sizeof names)
                snprintf(names + strlen(names), sizeof names - strlen(names), "%s%s",
                         i ? ", " : "", id);
        }
        if (!found) {
            fprintf(stderr, "swarm run: unknown worker '%s' in a fault flag (workers: %s)\n",
                    a->faults[k].worker, names);
            return -1;
        }
    }
    return 0;
}

int cmd_run(int argc, char **argv)
{
    static const struct option opts[] = {
        { "arm", required_argument, 0, 'a' },      { "steps", required_argument, 0, 'n' },
        { "out", required_argument, 0, 'o' },      { "model", required_argument, 0, 'm' },
        { "cap", required_argument, 0, 'c' },      { "set", required_argument, 0, 'S' },
        { "buffered", no_argument, 0, 'b' },       { "no-parity", no_argument, 0, 'P' },
        { "profile", required_argument, 0, 'p' },  { "inflight", required_argument, 0, 'i' },
        { "workers", required_argument, 0, 'w' },  { "dump-inputs", required_argument, 0, 'I' },
        { "dump-outputs", required_argument, 0, 'O' }, { "quiet", no_argument, 0, 'q' },
        { "kill-worker", required_argument, 0, 'K' }, { "stop-worker", required_argument, 0, 'T' },
        { "cut-link", required_argument, 0, 'C' }, { "help", no_argument, 0, 'h' },
        { "respawn", no_argument, 0, 'R' },
        { 0, 0, 0, 0 }
    };
    static config_t cfg;
    arm_ctx a = { 0 };
    model_t m = { 0 }, qm = { 0 };
    run_result r = { 0 }, ref = { 0 };
    const char *arm = NULL, *out = NULL, *dump_in = NULL, *dump_out = NULL, *profile = NULL;
    const char *model_flag = NULL;
    model_source src;
    const char *sets[64];
    int nsets = 0, parity = 1, quiet = 0, c, rc = EXIT_FAIL;
    uint32_t steps = 0, inflight = 0, workers = 0;
    char err[1024];
    float *inputs = NULL, *outputs = NULL, *refout = NULL;

    log_set_role("coord");
    arm_install_signals();
    config_defaults(&cfg);
    optind = 1;
    while ((c = getopt_long(argc, argv, "h", opts, NULL)) != -1) {
        switch (c) {
        case 'a': arm = optarg; break;
        case 'n':
            if (s_flag_u32("--steps", optarg, 1000000, &steps))
                return EXIT_USAGE;
            break;
        case 'o': out = optarg; break;
        case 'm': case 'c': case 'b': case 'S': {
            if (c == 'm')
                model_flag = optarg;
            else if (c == 'S' && !strncmp(optarg, "model.path=", 11))
                model_flag = NULL; /* the later one wins, as in the config */
            static char buf[64][PATH_MAX + 32];
            if (nsets >= 64) {
                fprintf(stderr, "swarm run: too many overrides\n");
                return EXIT_USAGE;
            }
            snprintf(buf[nsets], sizeof buf[nsets], "%s%s",
                     c == 'm' ? "model.path=" : c == 'c' ? "ssd.cap=" : c == 'b' ? "ssd.io=" : "",
                     c == 'b' ? "buffered" : optarg);
            sets[nsets] = buf[nsets];
            nsets++;
            if (c == 'c' && nsets < 64) { /* one cap for every capped process */
                snprintf(buf[nsets], sizeof buf[nsets], "swarm.cap=%s", optarg);
                sets[nsets] = buf[nsets];
                nsets++;
            }
            break;
        }
        case 'P': parity = 0; break;
        case 'R': sets[nsets++] = "swarm.respawn=1"; break;
        case 'p': profile = optarg; break;
        case 'i':
            if (s_flag_u32("--inflight", optarg, 64, &inflight))
                return EXIT_USAGE;
            break;
        case 'w':
            if (s_flag_u32("--workers", optarg, CONFIG_MAX_WORKERS, &workers))
                return EXIT_USAGE;
            break;
        case 'I': dump_in = optarg; break;
        case 'O': dump_out = optarg; break;
        case 'q': quiet = 1; break;
        case 'K': case 'T': case 'C':
            if (s_parse_fault(&a, c == 'K' ? FAULT_KILL : c == 'T' ? FAULT_STOP : FAULT_CUT,
                              optarg)) {
                fprintf(stderr, "swarm run: bad fault '%s' (ID@STEP, ID@STEP:SECONDS)\n", optarg);
                return EXIT_USAGE;
            }
            break;
        case 'h': s_run_usage(); return EXIT_OK;
        default: return EXIT_USAGE;
        }
    }
    if (optind < argc && config_load(&cfg, argv[optind], err, sizeof err)) {
        fprintf(stderr, "swarm run: %s\n", err);
        return EXIT_USAGE;
    }
    for (int i = 0; i < nsets; i++) {
        if (config_set(&cfg, sets[i], err, sizeof err)) {
            fprintf(stderr, "swarm run: %s\n", err);
            return EXIT_USAGE;
        }
    }
    if (!arm) {
        fprintf(stderr, "swarm run: --arm is required (arms: reference, ssd, resident, "
                "quantized)\n");
        return EXIT_USAGE;
    }
    if (strcmp(arm, "reference") && strcmp(arm, "ssd") && strcmp(arm, "resident") &&
        strcmp(arm, "quantized")) {
        fprintf(stderr, "swarm run: unknown arm '%s' (arms: reference, ssd, resident, "
                "quantized)\n", arm);
        return EXIT_USAGE;
    }
    if (steps)
        cfg.steps = steps;
    if (inflight)
        cfg.inflight = inflight;
    if (workers)
        cfg.workers = workers;
    if (profile)
        snprintf(cfg.profile, sizeof cfg.profile, "%s", profile);
    if (config_profile(&cfg, cfg.profile, &a.profile, err, sizeof err)) {
        fprintf(stderr, "swarm run: %s\n", err);
        return EXIT_USAGE;
    }
    if (s_check_faults(&a, &cfg, arm))
        return EXIT_USAGE;
    /* A missing model is a usage error, found before anything is created. */
    config_model_source(&cfg, model_flag, &src);
    if (model_check_source(&src, err, sizeof err) < 0) {
        fprintf(stderr, "swarm run: %s\n", err);
        return EXIT_USAGE;
    }
    if (model_open_source(&m, &src, err, sizeof err)) {
        log_error("%s", err);
        return EXIT_FAIL;
    }
    uint64_t n = (uint64_t)cfg.steps * m.dim;
    inputs = malloc(n * sizeof(float));
    outputs = calloc(n, sizeof(float));
    refout = calloc(n, sizeof(float));
    if (!inputs || !outputs || !refout) {
        log_error("out of memory for %u steps x %u", cfg.steps, m.dim);
        goto out;
    }
    arm_make_inputs(&cfg, cfg.steps, m.dim, inputs);
    a.cfg = &cfg;
    a.model = &m;
    a.steps = cfg.steps;
    a.inputs = inputs;
    a.inflight = cfg.inflight;
    a.workers = cfg.workers;
    a.progress = !quiet && isatty(2);

    if (!strcmp(arm, "ssd")) {
        /* Refuse an impossible plan before spending a reference run on it. */
        exec_opts po = { .budget_bytes = cfg.cap_bytes, .queue_depth = cfg.queue_depth,
                         .chunk_bytes = cfg.chunk_bytes, .overhead_bytes = cfg.overhead_bytes };
        exec_plan pl;
        if (exec_plan_make(&m, 0, m.n_layers, &po, &pl, err, sizeof err)) {
            log_error("ssd arm: %s", err);
            goto out;
        }
    }
    if (!strcmp(arm, "quantized")) {
        /* The quantized file (made if missing and allowed) and its fit, before the reference */
        int qrc = arm_quant_open(&cfg, &m, src.generate, &qm, err, sizeof err);
        if (qrc == -2) {
            fprintf(stderr, "swarm run: %s\n", err);
            rc = EXIT_USAGE;
            goto out;
        }
        if (qrc || arm_quant_fit(&cfg, &qm, err, sizeof err)) {
            log_error("%s", err);
            goto out;
        }
    }
    if (parity && strcmp(arm, "reference")) {
        /* The parity reference runs first, in this process, uncapped. */
        a.outputs = refout;
        result_init(&ref, "reference", cfg.steps);
        if (arm_run_reference(&a, &ref, err, sizeof err)) {
            log_error("parity reference: %s", err);
            goto out;
        }
        a.ref_outputs = refout;
        log_info("parity reference computed (%.1f ms setup, %.2f steps/s)", ref.setup_ms,
                 ref.steps_per_s);
    }
    a.outputs = outputs;
    if (!strcmp(arm, "quantized"))
        a.model = &qm;
    result_init(&r, arm, cfg.steps);
    snprintf(r.model, sizeof r.model, "%s", a.model->path);
    snprintf(r.config, sizeof r.config, "%s", cfg.path[0] ? cfg.path : "(built-in defaults)");
    snprintf(r.profile, sizeof r.profile, "%s", a.profile.name[0] ? a.profile.name : "none");
    int arc = !strcmp(arm, "reference") ? arm_run_reference(&a, &r, err, sizeof err)
              : !strcmp(arm, "ssd")     ? arm_run_ssd(&a, &r, err, sizeof err)
              : !strcmp(arm, "quantized") ? arm_run_quantized(&a, &r, err, sizeof err)
                                        : arm_run_resident(&a, &r, err, sizeof err);
    if (arc && arc != -EXIT_BUDGET) {
        log_error("%s", err);
        goto out;
    }
    if (arc == -EXIT_BUDGET) /* partial: every completed step's result is still written */
        log_error("%s", err);
    result_print(&r);
    if (out) {
        json_t *j = result_to_json(&r);
        if (result_append_jsonl(out, j, err, sizeof err))
            log_error("%s", err);
        json_decref(j);
    }
    if (dump_in && s_dump(dump_in, inputs, n))
        goto out;
    if (dump_out && s_dump(dump_out, outputs, n))
        goto out;
    rc = arc == -EXIT_BUDGET ? EXIT_BUDGET : result_is_void(&r) ? EXIT_VOID : EXIT_OK;
out:
    result_free(&r);
    result_free(&ref);
    free(inputs);
    free(outputs);
    free(refout);
    model_close(&qm);
    model_close(&m);
    return rc;
}

/* ---------------------------------------------------------------- bench-disk */

int cmd_bench_disk(int argc, char **argv)
{
    static const struct option opts[] = {
        { "chunk", required_argument, 0, 'c' }, { "passes", required_argument, 0, 'p' },
        { "depths", required_argument, 0, 'd' }, { "help", no_argument, 0, 'h' },
        { "config", required_argument, 0, 'C' }, { "first", required_argument, 0, 'f' },
        { "buffers", required_argument, 0, 'b' }, { 0, 0, 0, 0 }
    };
    static config_t cfg;
    uint64_t chunk = 0;
    uint32_t passes = 3, depths[16] = { 1, 2, 4, 8 }, nd = 4;
    long first = -1;
    const char *config = NULL, *buffers = NULL;
    model_t m = { 0 };
    char err[1024];
    int c, rc = EXIT_OK;
    log_set_role("bench");
    optind = 1;
    while ((c = getopt_long(argc, argv, "h", opts, NULL)) != -1) {
        switch (c) {
        case 'c':
            if (util_parse_size(optarg, &chunk)) {
                fprintf(stderr, "swarm bench-disk: bad --chunk '%s'\n", optarg);
                return EXIT_USAGE;
            }
            break;
        case 'p': passes = (uint32_t)strtoul(optarg, NULL, 10); break;
        case 'C': config = optarg; break;
        case 'b':
            if (strcmp(optarg, "huge") && strcmp(optarg, "4k")) {
                fprintf(stderr, "swarm bench-disk: bad --buffers '%s' (huge or 4k)\n", optarg);
                return EXIT_USAGE;
            }
            buffers = optarg;
            break;
        case 'f': first = strtol(optarg, NULL, 10); break;
        case 'd': {
            char *s = optarg, *end;
            nd = 0;
            while (*s && nd < 16) {
                depths[nd] = (uint32_t)strtoul(s, &end, 10);
                if (end == s || !depths[nd] || depths[nd] > 256) {
                    fprintf(stderr, "swarm bench-disk: bad --depths '%s'\n", optarg);
                    return EXIT_USAGE;
                }
                nd++;
                s = *end == ',' ? end + 1 : end;
            }
            break;
        }
        case 'h':
            printf("usage: swarm bench-disk MODEL.gguf [--config C] [--first N] [--chunk 4M]\n"
                   "                       [--depths 1,2,4,8] [--passes 3] [--buffers huge|4k]\n"
                   "  Streams exactly what the SSD arm streams — layers [N, L), where N is the\n"
                   "  number it keeps resident under the config's cap (built-in defaults: the\n"
                   "  lab's 600 MiB), over and over — with its own reader (O_DIRECT, io_uring,\n"
                   "  its chunk), without computing, at each queue depth, and checks the cache\n"
                   "  gate (storage bytes = requested bytes within 1%%). The read buffers are\n"
                   "  the arm's kind: huge pages, or 4 KiB pages with --buffers 4k (the config's\n"
                   "  [ssd] buffers otherwise). Beside each figure, the block device's own view\n"
                   "  (/sys/block/DEV/stat, device-wide): average request size and busy time.\n");
            return EXIT_OK;
        default: return EXIT_USAGE;
        }
    }
    if (optind >= argc || !passes) {
        fprintf(stderr, "swarm bench-disk: need MODEL.gguf (see --help)\n");
        return EXIT_USAGE;
    }
    config_defaults(&cfg);
    if (config && config_load(&cfg, config, err, sizeof err)) {
        fprintf(stderr, "swarm bench-disk: %s\n", err);
        return EXIT_USAGE;
    }
    if (!chunk)
        chunk = cfg.chunk_bytes;
    model_source src;
    config_model_source(&cfg, argv[optind], &src); /* like --model: never generated */
    snprintf(src.named_by, sizeof src.named_by, "bench-disk's MODEL");
    if (model_check_source(&src, err, sizeof err) < 0) {
        fprintf(stderr, "swarm bench-disk: %s\n", err);
        return EXIT_USAGE;
    }
    if (buffers)
        cfg.buffers_4k = !strcmp(buffers, "4k");
    if (model_open(&m, argv[optind], err, sizeof err)) {
        log_error("%s", err);
        return EXIT_FAIL;
    }
    /* The SSD arm's plan under the config's cap: what it streams and through how big a ring. */
    exec_opts po = { .budget_bytes = cfg.cap_bytes, .queue_depth = cfg.queue_depth,
                     .chunk_bytes = chunk, .overhead_bytes = cfg.overhead_bytes };
    exec_plan pl;
    int planned = exec_plan_make(&m, 0, m.n_layers, &po, &pl, err, sizeof err) == 0 &&
                  pl.n_streamed;
    if (first < 0)
        first = planned ? pl.n_resident : 0;
    printf("streaming layers [%ld, %u) of %s, %u passes (the SSD arm's pattern under a %llu MiB "
           "cap)\n", first, m.n_layers, m.path, passes, (unsigned long long)(cfg.cap_bytes >> 20));
    printf("%-6s %10s %12s %12s %9s %10s %11s %7s  %s\n", "depth", "chunk", "bytes",
           "read_bytes", "seconds", "GB/s", "avg_req", "busy%", "cache gate");
    for (uint32_t i = 0; i < nd; i++) {
        bench_disk_result b;
        char b1[32], b2[32], b3[32];
        /* At the config's depth, the arm's ring; at other depths, the minimum ring. */
        bench_disk_opts bo = { .first = (uint32_t)first, .chunk_bytes = chunk,
                               .queue_depth = depths[i], .passes = passes,
                               .buffers_4k = cfg.buffers_4k,
                               .ring_slots = planned && depths[i] == cfg.queue_depth ?
                                             pl.ring_slots : 0 };
        if (bench_disk_run(&m, &bo, &b, err, sizeof err)) {
            log_error("%s", err);
            rc = EXIT_FAIL;
            break;
        }
        if (i == 0)
            printf("# io buffers: %s; device: %s\n", b.io_buffers,
                   b.has_device ? b.device : b.device_error);
        if (planned && depths[i] == cfg.queue_depth)
            printf("# depth %u is the config's: through the SSD arm's ring of %u slots\n",
                   depths[i], b.ring_slots);
        if (b.has_device)
            snprintf(b2, sizeof b2, "%.0f", 100 * b.dev.util);
        printf("%-6u %10s %12llu %12llu %9.3f %10.3f %11s %7s  %s\n", b.queue_depth,
               util_fmt_size(b.chunk_bytes, b1, sizeof b1), (unsigned long long)b.bytes,
               (unsigned long long)b.read_bytes, b.seconds, b.gbps,
               b.has_device ? util_fmt_size(b.dev.avg_request_bytes, b3, sizeof b3) : "-",
               b.has_device ? b2 : "-",
               b.cache_pass ? "pass" : "VOID (page cache served reads)");
        /* Device-wide counters: say so when another process's reads were mixed in. */
        if (b.has_device && (double)b.dev.read_bytes > 1.01 * (double)b.bytes)
            printf("#   the device read %.1f%% more than this benchmark asked for: other "
                   "readers shared it\n", 100.0 * ((double)b.dev.read_bytes / (double)b.bytes - 1));
        fflush(stdout);
        if (!b.cache_pass)
            rc = EXIT_VOID;
    }
    model_close(&m);
    return rc;
}

/* ---------------------------------------------------------------- bench-mem */

int cmd_bench_mem(int argc, char **argv)
{
    uint32_t dim = 4096;
    int reps = 50;
    double rd, sg;
    char err[256];
    for (int i = 1; i < argc; i++) {
        if (!strcmp(argv[i], "--dim") && i + 1 < argc)
            dim = (uint32_t)strtoul(argv[++i], NULL, 10);
        else if (!strcmp(argv[i], "--reps") && i + 1 < argc)
            reps = atoi(argv[++i]);
        else {
            printf("usage: swarm bench-mem [--dim 4096] [--reps 50]\n"
                   "  One thread: the median time to stream a d x d f32 layer from memory (the\n"
                   "  bound a memory-bound GEMV cannot beat) beside the layer kernel's sgemv\n"
                   "  over the same bytes, and their ratio.\n");
            return strcmp(argv[i], "--help") ? EXIT_USAGE : EXIT_OK;
        }
    }
    if (!dim || dim > MODEL_MAX_DIM || reps < 1 || reps > 10000) {
        fprintf(stderr, "swarm bench-mem: bad --dim or --reps\n");
        return EXIT_USAGE;
    }
    if (bench_mem(dim, reps, &rd, &sg, err, sizeof err)) {
        fprintf(stderr, "swarm bench-mem: %s\n", err);
        return EXIT_FAIL;
    }
    double mb = (double)dim * dim * 4;
    printf("layer %u x %u f32 (%.1f MiB), one thread, median of %d (%s):\n", dim, dim,
           mb / 1048576.0, reps, kernel_blas_info());
    printf("  read bound  %8.3f ms  (%.1f GB/s)\n", rd, mb / (rd / 1e3) / 1e9);
    printf("  sgemv       %8.3f ms  (%.1f GB/s)\n", sg, mb / (sg / 1e3) / 1e9);
    printf("  ratio       %8.3f  (sgemv / read bound)\n", sg / rd);
    return EXIT_OK;
}
