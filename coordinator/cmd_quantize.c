/* cmd_quantize.c — `swarm quantize IN.gguf OUT.gguf TYPE`. coordinator/ */
#include <stdio.h>
#include <string.h>

#include "common/exitcode.h"
#include "coordinator/cmd.h"
#include "quant/requant.h"

static void s_usage(FILE *f)
{
    fprintf(f, "usage: swarm quantize [-v] IN.gguf OUT.gguf TYPE\n"
               "  TYPE: " REQUANT_NAMES " (case ignored; Q4_K = Q4_K_M, Q5_K = Q5_K_M)\n"
               "  Every metadata key is kept (general.file_type set to llama.cpp's value);\n"
               "  2-D weights are quantized, norms and other 1-D tensors copied. -v: one line\n"
               "  per tensor.\n");
}

int cmd_quantize(int argc, char **argv)
{
    int verbose = 0, i = 1;
    if (argc > 1 && (!strcmp(argv[1], "--help") || !strcmp(argv[1], "-h"))) {
        s_usage(stdout);
        return 0;
    }
    if (argc > 1 && !strcmp(argv[1], "-v")) {
        verbose = 1;
        i++;
    }
    if (argc - i != 3) {
        s_usage(stderr);
        return EXIT_USAGE;
    }
    char err[512];
    requant_stats st;
    if (requant_file(argv[i], argv[i + 1], argv[i + 2], verbose, &st, err, sizeof err)) {
        fprintf(stderr, "swarm quantize: %s\n", err);
        return strstr(err, "unknown type") ? EXIT_USAGE : EXIT_FAIL;
    }
    printf("swarm quantize: %s -> %s (%s): %llu tensors, %llu quantized (%llu fell back: rows "
           "not whole blocks), %.1f MiB -> %.1f MiB\n",
           argv[i], argv[i + 1], argv[i + 2], (unsigned long long)st.tensors,
           (unsigned long long)st.quantized, (unsigned long long)st.fallbacks,
           (double)st.bytes_in / (1 << 20), (double)st.bytes_out / (1 << 20));
    return 0;
}
