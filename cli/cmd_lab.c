/* cmd_lab.c — `swarm lab [CONFIG]`: parse, then the dense lab (lab/lab.c) or, for a config
 * with an [llm] section, the text lab (lab/lab_llm.c). cli/ */
#include <getopt.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/exitcode.h"
#include "base/log.h"
#include "cli/cmd.h"
#include "dist/config.h"
#include "lab/lab.h"
#include "lab/lab_llm.h"

static void s_usage(void)
{
    printf("usage: swarm lab [CONFIG] [--quick] [--out DIR] [--repeats R] [--steps N]\n"
           "                 [--model FILE] [--set SEC.KEY=VAL]...\n"
           "  The lab comparison (default CONFIG configs/lab02.ini): measures the machine (disk at\n"
           "  the SSD arm's queue depth, layer compute, ZeroMQ hop, each profile's added delay),\n"
           "  prints a prediction per condition, then runs every [lab] condition R times\n"
           "  (reference first: the parity reference) and writes DIR/results.jsonl, table.md,\n"
           "  steps_per_s.png, stages.png, latency_cdf.png.\n"
           "  --quick          one repeat per condition (same steps; --repeats wins)\n"
           "  --out DIR        results folder (default [lab] out/lab-YYYYMMDD-HHMMSS)\n"
           "  --repeats R      repeats per condition (default [lab] repeats)\n"
           "  --steps N        steps per run (default [run] steps)\n"
           "  --model FILE     an existing model instead of [model] path; never generated\n"
           "                   (a missing [model] path is generated only with [model]\n"
           "                   generate = 1, as configs/lab02.ini says)\n"
           "  --set SEC.KEY=VAL  override any config key (repeatable)\n"
           "exit: 0 all ran and no gate void, 1 a condition failed, 2 usage/config, 3 a gate void\n");
}

/* A config with an [llm] section is the lab for text generation (lab_llm.c). */
static int s_text_lab(int argc, char **argv)
{
    for (int i = 1; i < argc; i++)
        if (argv[i][0] != '-' && (i == 1 || argv[i - 1][0] != '-' || strchr(argv[i - 1], '=') ||
                                  !strcmp(argv[i - 1], "--quick")) &&
            config_has_llm(argv[i]))
            return 1;
    return 0;
}

/* EXIT_OK after --help, EXIT_USAGE (printed), or -1: parsed into o. */
static int s_parse(lab_opts *o, int argc, char **argv)
{
    static const struct option opts[] = {
        { "quick", no_argument, 0, 'q' },       { "out", required_argument, 0, 'o' },
        { "repeats", required_argument, 0, 'r' }, { "set", required_argument, 0, 'S' },
        { "model", required_argument, 0, 'm' }, { "steps", required_argument, 0, 'n' },
        { "help", no_argument, 0, 'h' },        { 0, 0, 0, 0 }
    };
    static char setbuf[64][PATH_MAX + 32];
    int c;
    optind = 1;
    while ((c = getopt_long(argc, argv, "h", opts, NULL)) != -1) {
        switch (c) {
        case 'q': o->quick = 1; break;
        case 'o': o->out = optarg; break;
        case 'r': if (!(o->repeats = (uint32_t)strtoul(optarg, NULL, 10))) goto usage; break;
        case 'n': if (!(o->steps = (uint32_t)strtoul(optarg, NULL, 10))) goto usage; break;
        case 'S': case 'm':
            if (o->n_sets >= 64)
                goto usage;
            if (c == 'm')
                o->model = optarg;
            else if (!strncmp(optarg, "model.path=", 11))
                o->model = NULL; /* the later one wins, as in the config */
            snprintf(setbuf[o->n_sets], sizeof setbuf[0], "%s%s", c == 'm' ? "model.path=" : "",
                     optarg);
            o->sets[o->n_sets] = setbuf[o->n_sets];
            o->n_sets++;
            break;
        case 'h': s_usage(); return EXIT_OK;
        default: goto usage;
        }
    }
    if (optind < argc)
        o->config = argv[optind++];
    if (optind < argc)
        goto usage;
    return -1;
usage:
    fprintf(stderr, "swarm lab: bad arguments (see swarm lab --help)\n");
    return EXIT_USAGE;
}

int cmd_lab(int argc, char **argv)
{
    lab_opts o = { .config = "configs/lab02.ini" };
    log_set_role("lab");
    if (s_text_lab(argc, argv))
        return lab_llm_main(argc, argv);
    int rc = s_parse(&o, argc, argv);
    return rc >= 0 ? rc : lab_run(&o);
}
