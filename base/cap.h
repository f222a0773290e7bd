/* cap.h — the working-set cap: a memory cgroup per capped process, or an advisory label. base/
 *
 * v1 (this machine): /sys/fs/cgroup/memory/swarm-<pid>/memory.limit_in_bytes, peak from
 * memory.max_usage_in_bytes. v2: memory.max and memory.peak. v1 charges page cache too, which
 * is why every capped read is O_DIRECT. Charges made before a process joins stay with its old
 * group (v1 does not move them), so a capped process joins first and allocates after.
 * Where cgroups cannot be written (not root, read-only), the cap is advisory: callers refuse
 * plans over the cap and results say "advisory".
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

/* Put pid (0 = self) into a new memory cgroup named swarm-<tag>-<pid> limited to bytes.
 * Always returns 0: on failure the cap is advisory and c->why says why. */
int cap_enter(cap_t *c, uint64_t bytes, const char *tag, int pid);
/* Peak memory of the group (bytes), 0 when advisory. */
uint64_t cap_peak(const cap_t *c);
/* Current usage of the group. */
uint64_t cap_usage(const cap_t *c);
/* Did the kernel hit the limit (v1 failcnt / v2 events max)? */
uint64_t cap_failcnt(const cap_t *c);
/* Move self back to the root group and remove the group (0 / -1). Safe on advisory caps. */
int cap_leave(cap_t *c);
/* Remove a group left by a dead process (the coordinator calls it after reaping a worker). */
int cap_remove_dir(const char *dir);
/* Remove empty swarm-* groups whose process is gone (left by a SIGKILLed worker). */
void cap_sweep_stale(void);
/* "cgroup v1 (enforced)" / "advisory: <why>" */
const char *cap_describe(const cap_t *c, char *buf, size_t len);

#endif
