/* cmd.h — subcommand entry points of bin/swarm (each parses its own flags, has --help). cli/ */
#ifndef SWARM_CMD_H
#define SWARM_CMD_H

int cmd_gen(int argc, char **argv);
int cmd_keygen(int argc, char **argv);
int cmd_run(int argc, char **argv);
int cmd_bench_disk(int argc, char **argv);
int cmd_bench_mem(int argc, char **argv);
int cmd_bench_quant(int argc, char **argv);
int cmd_bench_llm(int argc, char **argv);
int cmd_tokenize(int argc, char **argv);
int cmd_quantize(int argc, char **argv);
int cmd_generate(int argc, char **argv);
int cmd_chat(int argc, char **argv);
int cmd_perplexity(int argc, char **argv);
int cmd_plan(int argc, char **argv);
int cmd_lab(int argc, char **argv);

#endif
