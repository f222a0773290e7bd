/* lab_llm.h — `swarm lab CONFIG` for text generation: a config with an [llm] section runs
 * the lab over a real model's generation instead of the dense model's steps. coordinator/ */
#ifndef SWARM_LAB_LLM_H
#define SWARM_LAB_LLM_H

#include <stddef.h>

/* 1 when the INI file at path has an [llm] section (0 otherwise, and when it cannot be
 * read: the dense lab's parser names that error). */
int lab_llm_wants(const char *path);
/* A text-lab config's [llm] model into path (generate, serve and the others take a CONFIG
 * for a model). 0, or -1 with err naming the file and what is missing. */
int lab_llm_model_path(const char *config, char *path, size_t len, char *err, size_t errlen);
/* The text lab (argv as `swarm lab`'s, the config among them); an exit code. */
int lab_llm_main(int argc, char **argv);

#endif
