/* spawn.h — the one spawn: a local worker process for a coordinator, and its reaping. dist/
 *
 * Both arms start their local workers here: fork + exec `swarm worker --listen tcp://HOST:*
 * --id ID --once --report-fd FD [--cap BYTES] [--slowdown N]`; the worker binds, writes its
 * control endpoint on FD and closes it. A worker that was SIGKILLed cannot remove its own
 * memory cgroup, so reaping removes it (base/cap.h names it swarm-worker-<pid>).
 */
#ifndef SWARM_SPAWN_H
#define SWARM_SPAWN_H

#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>

/* A fresh exec of bin/swarm binds and reports in milliseconds (ASan: well under a second); a
 * worker that has said nothing after this long is not going to. */
#define SPAWN_REPORT_MS 10000

typedef struct {
    const char *exe;              /* the swarm binary ("/proc/self/exe": this one) */
    const char *id;               /* its name (--id) */
    const char *host;             /* where it listens, tcp://HOST:* ("127.0.0.1" when NULL) */
    uint64_t cap_bytes;           /* --cap (0: none) */
    uint32_t slowdown;            /* --slowdown (<= 1: none) */
    int die_with_parent;          /* SIGTERM it when the forking thread ends (PR_SET_PDEATHSIG):
                                   * only for callers whose forking thread outlives the run;
                                   * a worker otherwise drops a silent coordinator itself */
} spawn_opts;

/* Start a worker without waiting for it: *pid set, *fd the pipe's read end (the caller
 * closes it) on which it reports its endpoint (spawn_poll_endpoint). 0 / -1 with err. */
int spawn_begin(const spawn_opts *o, pid_t *pid, int *fd, char *err, size_t errlen);
/* Read what the worker wrote on fd into buf (cap bytes, *got so far), waiting up to wait_ms
 * (0: not at all). 1: the endpoint is in ep; 0: not yet; -1: the pipe closed without one
 * (the worker died or failed to bind) or it wrote something else. */
int spawn_poll_endpoint(int fd, char *buf, size_t cap, size_t *got, int wait_ms, char *ep,
                        size_t eplen);
/* Start a worker and read its control endpoint into ep (at most SPAWN_REPORT_MS). 0 with *pid set; -1 with err naming
 * the worker (a child that did not report is killed and reaped: *pid stays 0). */
int spawn_worker(const spawn_opts *o, pid_t *pid, char *ep, size_t eplen, char *err,
                 size_t errlen);

typedef enum {
    SPAWN_POLL = 0,               /* reap it only if it has exited */
    SPAWN_WAIT = 1,               /* wait for it to exit */
    SPAWN_KILL = 2,               /* SIGKILL it (works on a stopped one too), then wait */
} spawn_reap_how;

/* Reap child pid and remove its cgroup. 1 when reaped: *read_bytes (if not NULL) its storage
 * reads, which the kernel adds to this process's /proc/self/io as it is reaped; how it ended
 * in why (if not NULL: "killed by signal 9", "exited with status 1"). 0 when it still runs
 * (SPAWN_POLL), -1 when it is not a child of ours. */
int spawn_reap(pid_t pid, spawn_reap_how how, uint64_t *read_bytes, char *why, size_t whylen);

#endif
