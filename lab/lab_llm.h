/* lab_llm.h — `swarm lab CONFIG` for text generation: a config with an [llm] section runs
 * the lab over a real model's generation instead of the dense model's steps. lab/ */
#ifndef SWARM_LAB_LLM_H
#define SWARM_LAB_LLM_H

#include <stddef.h>

/* The text lab (argv as `swarm lab`'s, the config among them); an exit code. */
int lab_llm_main(int argc, char **argv);

#endif
