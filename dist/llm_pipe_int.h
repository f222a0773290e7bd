/* llm_pipe_int.h — what llm_pipe.c (the workers' processes, control plane and routes) and
 * llm_pass.c (a pass through the units) share, and nothing else includes. dist/ */
#ifndef SWARM_LLM_PIPE_INT_H
#define SWARM_LLM_PIPE_INT_H

#include <stdint.h>

#include "dist/llm_swarm_int.h"

/* The control plane's period and liveness: a config's, or the defaults (pirate.h). */
uint32_t lp_hb_ms(const llm_swarm *sw);
uint32_t lp_liveness(const llm_swarm *sw);
/* sw->b on sock, never blocking (a dead peer's queue goes with its socket when fenced). */
void lp_send(llm_swarm *sw, void *sock);
/* Is there a worker at the other end: a spawned process, or a listed worker's connection? */
int lp_attached(const ls_worker *w);
/* Wait up to LS_POLL_MS for anything on the control sockets (and the result socket). */
void lp_wait(llm_swarm *sw, int with_pull);
/* p out of the list in flight. */
void lp_unlink(llm_swarm *sw, ls_pass *p);

#endif
