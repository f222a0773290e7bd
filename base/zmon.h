/* zmon.h — a ZeroMQ socket's monitor: open it, drain what it saw into one event mask, close
 * it. The coordinators watch their control connections with it: a worker that is loading
 * cannot answer heartbeats, but the kernel still says when its process dies (the connection
 * drops) and CURVE says when a handshake is refused. base/
 */
#ifndef SWARM_ZMON_H
#define SWARM_ZMON_H

#include <stdint.h>

/* A PAIR socket on zctx that receives sock's events in mask, or NULL (then nothing is
 * watched: callers fall back to heartbeats). name and gen make the inproc address unique:
 * one per socket ever opened, as a reconnect opens a new one. */
void *zmon_open(void *zctx, void *sock, const char *name, uint32_t idx, uint32_t gen,
                int mask);

/* The OR of every event the monitor has queued since the last call; 0 for a NULL monitor.
 * Never blocks. */
int zmon_drain(void *mon);

/* Stop sock's monitor and close the PAIR socket (*mon becomes NULL). Either may be NULL. */
void zmon_close(void **mon, void *sock);

#endif
