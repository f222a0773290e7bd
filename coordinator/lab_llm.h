/* lab_llm.h — `swarm lab CONFIG` for text generation: a config with an [llm] section runs
 * the lab over a real model's generation instead of the dense model's steps. coordinator/ */
#ifndef SWARM_LAB_LLM_H
#define SWARM_LAB_LLM_H

/* 1 when the INI file at path has an [llm] section (0 otherwise, and when it cannot be
 * read: the dense lab's parser names that error). */
int lab_llm_wants(const char *path);
/* The text lab (argv as `swarm lab`'s, the config among them); an exit code. */
int lab_llm_main(int argc, char **argv);

#endif
