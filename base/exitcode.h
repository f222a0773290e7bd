/* exitcode.h — the process exit codes every subcommand and the worker share. base/
 *
 * Scripts and the lab tell these apart (docs/cli.md, "Exit codes"), so the values are pinned.
 */
#ifndef SWARM_EXITCODE_H
#define SWARM_EXITCODE_H

#define EXIT_OK 0
#define EXIT_FAIL 1        /* error before or during the run */
#define EXIT_USAGE 2       /* bad flags or config */
#define EXIT_VOID 3        /* a gate marked the run void; also, on every arm, a model file
                           * whose layer failed its checksum (at load, or the content gate
                           * on a streamed layer: the run then stops there) */
#define EXIT_BUDGET 4      /* fallback impossible: a lost worker's range exceeds the budget */

#endif
