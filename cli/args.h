/* args.h — the end of every model command's argument loop, written once: --help, an unknown
 * option, the MODEL positional, one positional too many, and what is still missing. cli/ */
#ifndef SWARM_ARGS_H
#define SWARM_ARGS_H

#include <stdio.h>

#define CLI_ARG_NEXT (-1)         /* not an exit code: go on parsing */

typedef struct {
    const char *name;             /* "generate": errors say "swarm generate: ..." */
    void (*usage)(FILE *f);       /* the command's --help text */
    const char *extra_hint;       /* after "unexpected argument 'X'" (" (quote the prompt)") */
} cli_cmd;

/* arg is what no flag parser took: --help (usage to stdout, EXIT_OK), an unknown option
 * (EXIT_USAGE, named), the model when *model is unset (stored, CLI_ARG_NEXT), else a second
 * positional (EXIT_USAGE, named). */
int cli_arg_rest(const cli_cmd *c, const char *arg, const char **model);
/* have == 0: "need WHAT" and the usage on stderr, EXIT_USAGE; else CLI_ARG_NEXT. */
int cli_need(const cli_cmd *c, int have, const char *what);

#endif
