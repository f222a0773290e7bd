/* cmd.h — subcommand entry points of bin/swarm (each parses its own flags, has --help). coordinator/ */
#ifndef SWARM_CMD_H
#define SWARM_CMD_H

int cmd_gen(int argc, char **argv);
int cmd_keygen(int argc, char **argv);
int cmd_run(int argc, char **argv);
int cmd_bench_disk(int argc, char **argv);
int cmd_bench_mem(int argc, char **argv);
int cmd_lab(int argc, char **argv);
int worker_main(int argc, char **argv);

/* Exit codes shared by subcommands (documented in README). */
#define EXIT_OK 0
#define EXIT_FAIL 1        /* error before or during the run */
#define EXIT_USAGE 2       /* bad flags or config */
#define EXIT_VOID 3        /* the run finished but a gate marked it void */
#define EXIT_BUDGET 4      /* fallback impossible: a lost worker's range exceeds the budget */

#endif
