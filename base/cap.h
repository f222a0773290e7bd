/* cap.h — the working-set cap: a memory cgroup per capped process, or an advisory label. base/
 *
 * v1 (this machine): /sys/fs/cgroup/memory/RUN/<tag>-<pid>/memory.limit_in_bytes, peak from
 * memory.max_usage_in_bytes. v2: /sys/fs/cgroup/RUN/<tag>-<pid>, memory.max and memory.peak. v1 charges page cache too, which
 * is why every capped read is O_DIRECT. Charges made before a process joins stay with its old
 * group (v1 does not move them), so a capped process joins first and allocates after.
 * Where cgroups cannot be written (not root, read-only), the cap is advisory: callers refuse
 * plans over the cap and results say "advisory".
 *
 * Runs: every group sits under its run's parent, RUN = swarm-run-<owner pid>-<owner start time>
 * (the start time, /proc/PID/stat field 22, tells a live owner from a reused pid). The process
 * that starts a run (the command a user typed) owns it; the processes it starts (workers) find
 * the run in the environment (SWARM_CGROUP_RUN, exported by cap_run_begin) and make their groups
 * under it; a worker started by hand owns a run of its own. So runs that share a machine never
 * touch each other's groups: a sweep removes only runs whose owner is gone, a reap only groups
 * of its own run, and a test judges leftovers by its run's name.
 */
#ifndef SWARM_CAP_H
#define SWARM_CAP_H

#include <stddef.h>
#include <stdint.h>

typedef struct {
    int enforced;             /* 1: in a cgroup with the limit set */
    int version;              /* 1 or 2 (0 when advisory) */
    uint64_t limit_bytes;
    char dir[256];            /* the cgroup directory (empty when advisory) */
    char why[256];            /* why advisory, when it is */
} cap_t;

/* The run this process belongs to: the one named in SWARM_CGROUP_RUN (well formed), or a new
 * one owned by this process, then exported so that the processes it starts join it. Makes no
 * group (cap_enter makes the run's parent when a group is first needed). Call it before
 * starting workers or threads (it sets the environment); safe to call again. */
void cap_run_begin(void);
/* The run's parent's name, "swarm-run-<pid>-<start>" (cap_run_begin first if not yet). */
const char *cap_run_name(void);
/* The owner (only): remove the run's groups left by dead processes, then its parent. Other
 * members: nothing. 0, or -1 with err filled when a group could not be removed. */
int cap_run_end(char *err, size_t errlen);

/* Put pid (0 = self) into a new memory cgroup RUN/<tag>-<pid> limited to bytes (the tag's
 * characters outside [A-Za-z0-9_.-] become '_'). Always returns 0: on failure the cap is
 * advisory and c->why says why. */
int cap_enter(cap_t *c, uint64_t bytes, const char *tag, int pid);
/* Peak memory of the group (bytes), 0 when advisory. */
uint64_t cap_peak(const cap_t *c);
/* Current usage of the group. */
uint64_t cap_usage(const cap_t *c);
/* Did the kernel hit the limit (v1 failcnt / v2 events max)? */
uint64_t cap_failcnt(const cap_t *c);
/* Move self back to the root group and remove the group (0 / -1). Safe on advisory caps. */
int cap_leave(cap_t *c);
/* Remove a group left by a dead process (bounded retry while its last task exits). 0 / -1. */
int cap_remove_dir(const char *dir);
/* Remove this run's groups of process pid, which the caller has reaped (a SIGKILLed worker
 * cannot remove its own). 0 / -1. */
int cap_reap(int pid);
/* Remove runs whose owner is gone (their groups first; a group with tasks stays), and flat
 * swarm-<tag>-<pid> groups of dead processes left by builds before runs. Never a live run's. */
void cap_sweep_stale(void);
/* "cgroup v1 (enforced)" / "advisory: <why>" */
const char *cap_describe(const cap_t *c, char *buf, size_t len);

#endif
