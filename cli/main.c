/* main.c — bin/swarm: dispatch to a subcommand. cli/ */
#include <stdio.h>
#include <string.h>

#include "base/cap.h"
#include "base/exitcode.h"
#include "cli/cmd.h"
#include "netem/netem.h"
#include "serve/serve.h"
#include "dist/worker.h"

static void s_usage(FILE *f)
{
    fprintf(f,
            "usage: swarm COMMAND [options]   (swarm COMMAND --help for each)\n"
            "  gen         write a synthetic model: the dense lab's, or a random llama, qwen2,\n"
            "              qwen3, gemma2, gemma3 or phi3 one\n"
            "  run         run one arm (reference | ssd | resident | quantized) on a config\n"
            "  lab         the lab comparison: every condition, repeats, table, plots\n"
            "  worker      serve a slice of layers to a coordinator\n"
            "  bench-disk  O_DIRECT read bandwidth in the SSD arm's pattern, depth 1/2/4/8\n"
            "  bench-mem   a layer's memory-bandwidth bound beside the kernel's sgemv\n"
            "  bench-quant matrix-vector GB/s per tensor type vs read bound\n"
            "  bench-llm   a model file's prompt and generation tokens/s vs its read bound\n"
            "  netem       link forwarder, profile self-test, kernel (BPF) link control\n"
            "  keygen      write a CURVE key pair (NAME.key, NAME.pub)\n"
            "  tokenize    a GGUF file's tokenizer on a text: ids and pieces\n"
            "  quantize    rewrite a GGUF file's weights as Q8_0, Q4_0, Q4_K_M, Q6_K, ...\n"
            "  generate    text from a model file: streamed, timed, digested\n"
            "  chat        an interactive chat with the file's chat template\n"
            "  perplexity  llama.cpp's perplexity of a text; KL against a base file\n"
            "  serve       an OpenAI-compatible HTTP server and chat page over a model\n"
            "  plan        a real model's layers over workers by bytes (weights, KV, buffers)\n");
}

static int s_dispatch(int argc, char **argv)
{
    if (argc < 2) {
        s_usage(stderr);
        return EXIT_USAGE;
    }
    const char *c = argv[1];
    if (!strcmp(c, "gen"))
        return cmd_gen(argc - 1, argv + 1);
    if (!strcmp(c, "run"))
        return cmd_run(argc - 1, argv + 1);
    if (!strcmp(c, "lab"))
        return cmd_lab(argc - 1, argv + 1);
    if (!strcmp(c, "worker"))
        return worker_main(argc - 1, argv + 1);
    if (!strcmp(c, "bench-disk"))
        return cmd_bench_disk(argc - 1, argv + 1);
    if (!strcmp(c, "bench-mem"))
        return cmd_bench_mem(argc - 1, argv + 1);
    if (!strcmp(c, "bench-quant"))
        return cmd_bench_quant(argc - 1, argv + 1);
    if (!strcmp(c, "bench-llm"))
        return cmd_bench_llm(argc - 1, argv + 1);
    if (!strcmp(c, "keygen"))
        return cmd_keygen(argc - 1, argv + 1);
    if (!strcmp(c, "quantize"))
        return cmd_quantize(argc - 1, argv + 1);
    if (!strcmp(c, "tokenize"))
        return cmd_tokenize(argc - 1, argv + 1);
    if (!strcmp(c, "generate"))
        return cmd_generate(argc - 1, argv + 1);
    if (!strcmp(c, "chat"))
        return cmd_chat(argc - 1, argv + 1);
    if (!strcmp(c, "perplexity"))
        return cmd_perplexity(argc - 1, argv + 1);
    if (!strcmp(c, "serve"))
        return serve_main(argc - 1, argv + 1);
    if (!strcmp(c, "plan"))
        return cmd_plan(argc - 1, argv + 1);
    if (!strcmp(c, "netem"))
        return netem_main(argc - 1, argv + 1);
    if (!strcmp(c, "-h") || !strcmp(c, "--help") || !strcmp(c, "help")) {
        s_usage(stdout);
        return EXIT_OK;
    }
    fprintf(stderr, "swarm: unknown command '%s'\n", c);
    s_usage(stderr);
    return EXIT_USAGE;
}

int main(int argc, char **argv)
{
    char err[512];
    /* This command's run of memory cgroups: the workers it starts join it (through the
     * environment), and it removes the run's parent when it is done (base/cap.h). */
    cap_run_begin();
    int rc = s_dispatch(argc, argv);
    if (cap_run_end(err, sizeof err))
        fprintf(stderr, "swarm: %s\n", err);
    return rc;
}
