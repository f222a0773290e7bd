/* args.c — what every model command does with an argument no flag parser took (args.h). cli/ */
#include "cli/args.h"

#include <string.h>

#include "base/exitcode.h"

int cli_arg_rest(const cli_cmd *c, const char *arg, const char **model)
{
    if (!strcmp(arg, "--help") || !strcmp(arg, "-h")) {
        c->usage(stdout);
        return EXIT_OK;
    }
    if (arg[0] == '-') {
        fprintf(stderr, "swarm %s: unknown option or missing value '%s'\n", c->name, arg);
        c->usage(stderr);
        return EXIT_USAGE;
    }
    if (!*model) {
        *model = arg;
        return CLI_ARG_NEXT;
    }
    fprintf(stderr, "swarm %s: unexpected argument '%s'%s\n", c->name, arg,
            c->extra_hint ? c->extra_hint : "");
    return EXIT_USAGE;
}

int cli_need(const cli_cmd *c, int have, const char *what)
{
    if (have)
        return CLI_ARG_NEXT;
    fprintf(stderr, "swarm %s: need %s\n", c->name, what);
    c->usage(stderr);
    return EXIT_USAGE;
}
