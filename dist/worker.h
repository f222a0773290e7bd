/* worker.h — a worker: holds a slice of layers resident and serves activations. dist/
 *
 * Control plane: a ROUTER bound at --listen; one coordinator at a time (others get
 * PERR_BUSY). Data plane: a PULL bound on an ephemeral port of the same host (announced in
 * hello) and a PUSH to the next hop named by `route`. States: WAITING (no coordinator) ->
 * LOADED (after assign) -> SERVING (after route). A coordinator silent for longer than the
 * coordinator timeout, or a bye, returns the worker to WAITING with its layers released.
 */
#ifndef SWARM_WORKER_H
#define SWARM_WORKER_H

#include <stdint.h>

/* `swarm worker`: parse flags, serve until SIGINT/SIGTERM; returns an EXIT_* code. */
int worker_main(int argc, char **argv);

/* Sockets common to both ends: linger, max message size, keepalive. */
void *zsock_new(void *ctx, int type, char *err, unsigned long errlen);

#endif
