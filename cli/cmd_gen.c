/* cmd_gen.c — `swarm gen`: a synthetic dense model, or a random-weight file of a token family
 * (llama, qwen2, qwen3, qwen3moe, gemma2, gemma3, phi3). cli/ */
#include <getopt.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "arch/gen.h"
#include "arch/model.h"
#include "base/exitcode.h"
#include "base/log.h"
#include "base/util.h"
#include "cli/cmd.h"
#include "dist/llm_cli.h"
#include "quant/quant.h"

static void s_gen_usage(void)
{
    printf("usage: swarm gen --layers L --dim D --seed S -o FILE [--alignment A]\n"
           "  Writes a synthetic dense model in GGUF v3: per layer g (d f32) and W (d x d\n"
           "  f32), deterministic from the seed, with a checksum per layer in the\n"
           "  metadata. Alignment defaults to 4096 (O_DIRECT friendly).\n"
           "usage: swarm gen --arch llama|qwen2|qwen3|qwen3moe|gemma2|gemma3|phi3|gpt-oss\n"
           "                 [--dim D --layers L\n"
           "                 --heads H --kv-heads K --ff F --head-dim HD --rope-dim R]\n"
           "                 [--vocab-from VOCAB.gguf | --vocab N]\n"
           "                 [--type TYPE] [--tied] [--ctx N]\n"
           "                 [--rope-linear FACTOR | --rope-llama3] [--chat-template FILE]\n"
           "                 [--swa WINDOW] [--softcap C] [--attn-softcap C]\n"
           "                 [--longrope ORIG_CTX]\n"
           "                 [--experts N [--experts-used K] [--ff-exp F]]\n"
           "                 [--confident G]\n"
           "                 --seed S -o FILE\n"
           "  Writes a random-weight model of the family (weights of standard deviation 0.02,\n"
           "  norms near 1, deterministic from the seed; matrices in --type, any tensor type\n"
           "  swarm reads (f32, f16, bf16, q8_0, q4_0, q4_1, q5_0, q5_1, iq4_nl, q2_K, q3_K,\n"
           "  q4_K, q5_K, q6_K, iq4_xs, mxfp4; dim and ff multiples of its block), vectors\n"
           "  f32),\n"
           "  with the tokenizer of a vocabulary-only GGUF copied in, so llama.cpp loads it.\n"
           "  --rope-linear: rope.scaling linear; --rope-llama3: Llama 3.1's rope_freqs.weight.\n"
           "  --chat-template FILE: its text (Jinja) as tokenizer.chat_template.\n"
           "  --head-dim: attention.key_length (default dim / heads; qwen3 and gemma3 write\n"
           "  it always); --rope-dim: rope.dimension_count (default the head size).\n"
           "  gemma2/gemma3 only: --swa: attention.sliding_window (gemma3: every 6th\n"
           "  layer global, gemma2: every other); --softcap: final_logit_softcapping;\n"
           "  gemma2 only: --attn-softcap: attn_logit_softcapping (default 50).\n"
           "  phi3 only: --longrope: the 128k variants' rope_factors_long/short.weight\n"
           "  with this original context.\n"
           "  llama and qwen3moe: --experts: a Mixture-of-Experts feed-forward of N experts\n"
           "  (ffn_gate_inp and 3-D ffn_{gate,up,down}_exps; qwen3moe needs it), each\n"
           "  position routed to --experts-used (default 2); --ff-exp: qwen3moe's\n"
           "  expert_feed_forward_length (default ff; llama's experts are ff wide).\n"
           "  gpt-oss: --experts needed; q/k/v/o, router and expert biases, attention sinks,\n"
           "  YaRN (factor 32, original context 4096), every other layer local with --swa\n"
           "  (default 128), --ff-exp as qwen3moe's.\n"
           "  --confident G: off by default. A trained-like confident next-token\n"
           "  distribution (random weights give a nearly flat one: a quantized copy then\n"
           "  disagrees on most greedy tokens): token_embd x G, and output.weight's row j\n"
           "  adds the embedding of token (7919 j + 1) mod n_vocab, so the head favours a\n"
           "  successor of the current token by a margin growing with G (arch/gen.h).\n"
           "  For measurements that depend on confidence (speculative decoding); label them.\n"
           "  Defaults: dim 256, 2 layers, 8 heads, kv-heads = heads, ff 768, type f32,\n"
           "  ctx 2048, alignment 32 (as published files).\n");
}

/* The command line: -1 in layers, dim, align means not given (the defaults differ). */
typedef struct {
    long layers, dim, align;
    uint64_t seed;
    const char *out, *arch, *jinja_path;
    arch_gen_opts go;
} s_gen;

/* EXIT_OK after --help, EXIT_USAGE (printed), or -1: parsed. */
static int s_parse(s_gen *g, int argc, char **argv)
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
        { "chat-template", required_argument, 0, 'J' },
        { "head-dim", required_argument, 0, 'D' }, { "swa", required_argument, 0, 'W' },
        { "softcap", required_argument, 0, 'S' }, { "rope-dim", required_argument, 0, 'r' },
        { "longrope", required_argument, 0, 'l' },
        { "attn-softcap", required_argument, 0, 'c' },
        { "experts", required_argument, 0, 'E' }, { "experts-used", required_argument, 0, 'k' },
        { "ff-exp", required_argument, 0, 'f' }, { "confident", required_argument, 0, 'G' },
        { 0, 0, 0, 0 }
    };
    arch_gen_opts *go = &g->go;
    char err[512];
    int c;
    optind = 1;
    while ((c = getopt_long(argc, argv, "o:h", opts, NULL)) != -1) {
        switch (c) {
        case 'L': g->layers = (long)strtoul(optarg, NULL, 10); break;
        case 'd': g->dim = (long)strtoul(optarg, NULL, 10); break;
        case 's': g->seed = strtoull(optarg, NULL, 0); break;
        case 'o': g->out = optarg; break;
        case 'a': g->align = (long)strtoul(optarg, NULL, 10); break;
        case 'A': g->arch = optarg; break;
        case 'H': go->n_head = (uint32_t)strtoul(optarg, NULL, 10); break;
        case 'K': go->n_head_kv = (uint32_t)strtoul(optarg, NULL, 10); break;
        case 'F': go->n_ff = (uint32_t)strtoul(optarg, NULL, 10); break;
        case 'V': go->vocab_from = optarg; break;
        case 'N': go->n_vocab = (uint32_t)strtoul(optarg, NULL, 10); break;
        case 't': go->tied = 1; break;
        case 'C': go->n_ctx = (uint32_t)strtoul(optarg, NULL, 10); break;
        case 'R': go->rope_linear = strtof(optarg, NULL); break;
        case '3': go->rope_llama3 = 1; break;
        case 'J': g->jinja_path = optarg; break;
        case 'D': go->head_dim = (uint32_t)strtoul(optarg, NULL, 10); break;
        case 'W': go->swa = (uint32_t)strtoul(optarg, NULL, 10); break;
        case 'S': go->softcap = strtof(optarg, NULL); break;
        case 'r': go->rope_dim = (uint32_t)strtoul(optarg, NULL, 10); break;
        case 'l': go->longrope = (uint32_t)strtoul(optarg, NULL, 10); break;
        case 'c': go->attn_softcap = strtof(optarg, NULL); break;
        case 'E': go->n_expert = (uint32_t)strtoul(optarg, NULL, 10); break;
        case 'k': go->n_expert_used = (uint32_t)strtoul(optarg, NULL, 10); break;
        case 'f': go->n_ff_exp = (uint32_t)strtoul(optarg, NULL, 10); break;
        case 'G': go->confident = strtof(optarg, NULL); break;
        case 'T': {
            quant_type qt;
            if (quant_type_parse(optarg, &qt, err, sizeof err)) {
                fprintf(stderr, "swarm gen: --type: %s\n", err);
                return EXIT_USAGE;
            }
            go->type = qt;
            break;
        }
        case 'h': s_gen_usage(); return EXIT_OK;
        default: return EXIT_USAGE;
        }
    }
    return -1;
}

/* A random-weight file of a token family. An exit code. */
static int s_gen_llm(s_gen *g, uint64_t t0)
{
    arch_gen_opts *go = &g->go;
    char err[512];
    if (strcmp(g->arch, "llama") && strcmp(g->arch, "qwen2") && strcmp(g->arch, "qwen3") &&
        strcmp(g->arch, "qwen3moe") && strcmp(g->arch, "gemma2") && strcmp(g->arch, "gemma3") &&
        strcmp(g->arch, "phi3") && strcmp(g->arch, "gpt-oss")) {
        fprintf(stderr, "swarm gen: --arch '%s': one of swarm-dense, llama, qwen2, qwen3, "
                "qwen3moe, gemma2, gemma3, phi3, gpt-oss\n", g->arch);
        return EXIT_USAGE;
    }
    go->arch = g->arch;
    go->dim = g->dim < 0 ? 256 : (uint32_t)g->dim;
    go->n_layers = g->layers < 0 ? 2 : (uint32_t)g->layers;
    go->n_head_kv = go->n_head_kv ? go->n_head_kv : go->n_head;
    go->seed = g->seed;
    go->alignment = g->align < 0 ? 0 : (uint32_t)g->align;
    if (!g->out || (!go->vocab_from && !go->n_vocab)) {
        fprintf(stderr,
                "swarm gen --arch %s: need -o FILE and --vocab-from FILE or --vocab N\n", g->arch);
        return EXIT_USAGE;
    }
    char *jinja = NULL;
    size_t jlen;
    if (g->jinja_path && !(jinja = llm_cli_read_file(g->jinja_path, &jlen, err, sizeof err))) {
        fprintf(stderr, "swarm gen: --chat-template: %s\n", err);
        return EXIT_USAGE;
    }
    go->chat_template = jinja;
    int grc = arch_gen(g->out, go, err, sizeof err);
    free(jinja);
    if (grc) {
        log_error("%s", err);
        return EXIT_FAIL;
    }
    log_info("wrote %s: %s, %u layers x %u, %u heads (%u kv), ff %u, %u experts, %s%s, seed %llu "
             "(%.1f s)%s", g->out, g->arch, go->n_layers, go->dim, go->n_head, go->n_head_kv,
             go->n_ff, go->n_expert, quant_type_name(go->type), go->tied ? ", tied" : "",
             (unsigned long long)g->seed, (util_now_ns() - t0) / 1e9,
             go->confident > 0 ? ", --confident (not random: arch/gen.h)" : "");
    return EXIT_OK;
}

/* The synthetic dense model of the lab. An exit code. */
static int s_gen_dense(s_gen *g, uint64_t t0)
{
    char err[512];
    long layers = g->layers < 0 ? 24 : g->layers, dim = g->dim < 0 ? 4096 : g->dim;
    long align = g->align < 0 ? 4096 : g->align;
    if (!g->out || !layers || layers > MODEL_MAX_LAYERS || !dim || dim > MODEL_MAX_DIM) {
        fprintf(stderr, "swarm gen: need -o FILE, 1 <= layers <= %d, 1 <= dim <= %d\n",
                MODEL_MAX_LAYERS, MODEL_MAX_DIM);
        return EXIT_USAGE;
    }
    if (model_gen(g->out, (uint32_t)layers, (uint32_t)dim, g->seed, (uint32_t)align, err,
                  sizeof err)) {
        log_error("%s", err);
        return EXIT_FAIL;
    }
    log_info("wrote %s: %ld layers x %ld, seed %llu, alignment %ld (%.1f s)", g->out, layers,
             dim, (unsigned long long)g->seed, align, (util_now_ns() - t0) / 1e9);
    return EXIT_OK;
}

int cmd_gen(int argc, char **argv)
{
    s_gen g = { .layers = -1, .dim = -1, .align = -1, .seed = 1,
                .go = { .n_head = 8, .n_ff = 768, .type = QUANT_F32 } };
    log_set_role("gen");
    int rc = s_parse(&g, argc, argv);
    if (rc >= 0)
        return rc;
    uint64_t t0 = util_now_ns();
    return g.arch && strcmp(g.arch, MODEL_ARCH) ? s_gen_llm(&g, t0) : s_gen_dense(&g, t0);
}
