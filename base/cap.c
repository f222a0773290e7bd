/* cap.c — memory cgroups (v1 or v2) for capped processes; advisory fallback. base/ */
#include "base/cap.h"

#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <dirent.h>
#include <signal.h>
#include <sys/stat.h>
#include <unistd.h>

#define S_V1_ROOT "/sys/fs/cgroup/memory"
#define S_V2_ROOT "/sys/fs/cgroup"

static int s_write(const char *dir, const char *file, const char *val)
{
    char path[512];
    int fd, rc;
    snprintf(path, sizeof path, "%s/%s", dir, file);
    fd = open(path, O_WRONLY | O_CLOEXEC);
    if (fd < 0)
        return -1;
    rc = write(fd, val, strlen(val)) == (ssize_t)strlen(val) ? 0 : -1;
    close(fd);
    return rc;
}

static uint64_t s_read_u64(const char *dir, const char *file)
{
    char path[512], buf[64];
    ssize_t n;
    int fd;
    snprintf(path, sizeof path, "%s/%s", dir, file);
    fd = open(path, O_RDONLY | O_CLOEXEC);
    if (fd < 0)
        return 0;
    n = read(fd, buf, sizeof buf - 1);
    close(fd);
    if (n <= 0)
        return 0;
    buf[n] = 0;
    return strtoull(buf, NULL, 10);
}

static int s_is_v1(void)
{
    struct stat st;
    char p[256];
    snprintf(p, sizeof p, "%s/memory.limit_in_bytes", S_V1_ROOT);
    return stat(p, &st) == 0;
}

static int s_is_v2(void)
{
    struct stat st;
    char p[256];
    snprintf(p, sizeof p, "%s/cgroup.controllers", S_V2_ROOT);
    if (stat(p, &st))
        return 0;
    /* memory must be enabled for children */
    FILE *f;
    char line[512] = "";
    snprintf(p, sizeof p, "%s/cgroup.subtree_control", S_V2_ROOT);
    f = fopen(p, "r");
    if (!f)
        return 0;
    if (!fgets(line, sizeof line, f))
        line[0] = 0;
    fclose(f);
    return strstr(line, "memory") != NULL;
}

/* ------------------------------------------------------------ runs */

#define S_RUN_ENV "SWARM_CGROUP_RUN"
#define S_RUN_PREFIX "swarm-run-"

static char s_run[64]; /* "swarm-run-<pid>-<start>", empty until cap_run_begin */

/* Field 22 of /proc/PID/stat (start time in clock ticks since boot): with the pid, it names one
 * process for the machine's uptime. 0 / -1. */
static int s_start_time(long pid, unsigned long long *start)
{
    char path[64], buf[1024];
    const char *p;
    ssize_t n;
    int fd;
    snprintf(path, sizeof path, "/proc/%ld/stat", pid);
    fd = open(path, O_RDONLY | O_CLOEXEC);
    if (fd < 0)
        return -1;
    n = read(fd, buf, sizeof buf - 1);
    close(fd);
    if (n <= 0)
        return -1;
    buf[n] = 0;
    /* comm (field 2) may hold spaces and parentheses: count fields from the last ')' */
    if (!(p = strrchr(buf, ')')))
        return -1;
    p++;
    for (int field = 2; field < 21; field++)
        if (!(p = strchr(p + 1, ' ')))
            return -1;
    *start = strtoull(p + 1, NULL, 10);
    return 0;
}

/* "swarm-run-<pid>-<start>", digits only: anything else (a path, a stale format) is not a run.
 * 0 / -1. */
static int s_run_parse(const char *name, long *pid, unsigned long long *start)
{
    const char *p = name + strlen(S_RUN_PREFIX);
    char *end;
    if (strncmp(name, S_RUN_PREFIX, strlen(S_RUN_PREFIX)) || *p < '1' || *p > '9')
        return -1;
    *pid = strtol(p, &end, 10);
    if (*end != '-' || end[1] < '0' || end[1] > '9')
        return -1;
    *start = strtoull(end + 1, &end, 10);
    return *end || *pid <= 0 || strlen(name) >= sizeof s_run ? -1 : 0;
}

/* Is the run's owner still the process that began it? A name that does not parse is no run. */
static int s_run_live(const char *name)
{
    unsigned long long start, now;
    long pid;
    if (s_run_parse(name, &pid, &start))
        return 0;
    return s_start_time(pid, &now) == 0 && now == start;
}

void cap_run_begin(void)
{
    const char *env = getenv(S_RUN_ENV);
    unsigned long long start = 0;
    long pid;
    if (s_run[0])
        return;
    if (env && s_run_parse(env, &pid, &start) == 0) {
        snprintf(s_run, sizeof s_run, "%s", env);
        return;
    }
    s_start_time((long)getpid(), &start); /* 0 when /proc is not mounted: still unique per pid */
    snprintf(s_run, sizeof s_run, S_RUN_PREFIX "%ld-%llu", (long)getpid(), start);
    setenv(S_RUN_ENV, s_run, 1);
}

const char *cap_run_name(void)
{
    cap_run_begin();
    return s_run;
}

/* Remove every group in root/run (their tasks are gone, or they stay), then root/run itself. */
static int s_run_remove(const char *root, const char *run, int wait)
{
    char dir[512], sub[800];
    struct dirent *de;
    DIR *d;
    snprintf(dir, sizeof dir, "%s/%s", root, run);
    if (!(d = opendir(dir)))
        return errno == ENOENT ? 0 : -1;
    while ((de = readdir(d)))
        if (de->d_type == DT_DIR && de->d_name[0] != '.') {
            snprintf(sub, sizeof sub, "%s/%s", dir, de->d_name);
            if (wait)
                cap_remove_dir(sub);
            else
                rmdir(sub); /* fails harmlessly if tasks remain */
        }
    closedir(d);
    return wait ? cap_remove_dir(dir) : (rmdir(dir) == 0 || errno == ENOENT ? 0 : -1);
}

int cap_run_end(char *err, size_t errlen)
{
    const char *roots[] = { S_V1_ROOT, S_V2_ROOT };
    unsigned long long start;
    long pid;
    int rc = 0;
    if (!s_run[0] || s_run_parse(s_run, &pid, &start) || pid != (long)getpid())
        return 0; /* not begun here, or a member (a worker) of another process's run */
    for (int r = 0; r < 2; r++)
        if (s_run_remove(roots[r], s_run, 1)) {
            snprintf(err, errlen, "cannot remove %s/%s: %s", roots[r], s_run, strerror(errno));
            rc = -1;
        }
    return rc;
}

/* The run's parent under root: made when the first group of the run needs it (by whichever
 * member comes first, EEXIST is fine); on v2 its children get the memory controller. */
static int s_run_parent(const char *root, int version, char *dir, size_t len)
{
    snprintf(dir, len, "%s/%s", root, cap_run_name());
    if (mkdir(dir, 0755) && errno != EEXIST)
        return -1;
    if (version == 2 && s_write(dir, "cgroup.subtree_control", "+memory"))
        return -1;
    return 0;
}

/* ------------------------------------------------------------ one capped process */

int cap_enter(cap_t *c, uint64_t bytes, const char *tag, int pid)
{
    char val[64], parent[128], name[64];
    memset(c, 0, sizeof *c);
    c->limit_bytes = bytes;
    if (pid == 0)
        pid = getpid();
    if (s_is_v1())
        c->version = 1;
    else if (s_is_v2())
        c->version = 2;
    else {
        snprintf(c->why, sizeof c->why, "no writable memory cgroup controller found");
        return 0;
    }
    if (s_run_parent(c->version == 1 ? S_V1_ROOT : S_V2_ROOT, c->version, parent,
                     sizeof parent)) {
        snprintf(c->why, sizeof c->why, "cannot create %s: %s", parent, strerror(errno));
        goto advisory;
    }
    snprintf(name, sizeof name, "%s", tag);
    for (char *q = name; *q; q++)
        if (!(*q >= 'a' && *q <= 'z') && !(*q >= 'A' && *q <= 'Z') && !(*q >= '0' && *q <= '9') &&
            *q != '_' && *q != '.' && *q != '-')
            *q = '_';
    snprintf(c->dir, sizeof c->dir, "%s/%s-%d", parent, name, pid);
    if (mkdir(c->dir, 0755) && errno != EEXIST) {
        snprintf(c->why, sizeof c->why, "cannot create %s: %s", c->dir, strerror(errno));
        goto advisory;
    }
    snprintf(val, sizeof val, "%llu", (unsigned long long)bytes);
    if (s_write(c->dir, c->version == 1 ? "memory.limit_in_bytes" : "memory.max", val)) {
        snprintf(c->why, sizeof c->why, "cannot set the limit in %s: %s", c->dir,
                 strerror(errno));
        goto err_rmdir;
    }
    if (c->version == 2)
        s_write(c->dir, "memory.swap.max", "0");
    snprintf(val, sizeof val, "%d", pid);
    if (s_write(c->dir, "cgroup.procs", val)) {
        snprintf(c->why, sizeof c->why, "cannot join %s: %s", c->dir, strerror(errno));
        goto err_rmdir;
    }
    c->enforced = 1;
    return 0;
err_rmdir:
    rmdir(c->dir);
advisory:
    c->dir[0] = 0;
    c->version = 0;
    return 0;
}

uint64_t cap_peak(const cap_t *c)
{
    if (!c->enforced)
        return 0;
    return s_read_u64(c->dir, c->version == 1 ? "memory.max_usage_in_bytes" : "memory.peak");
}

uint64_t cap_usage(const cap_t *c)
{
    if (!c->enforced)
        return 0;
    return s_read_u64(c->dir, c->version == 1 ? "memory.usage_in_bytes" : "memory.current");
}

uint64_t cap_failcnt(const cap_t *c)
{
    if (!c->enforced)
        return 0;
    if (c->version == 1)
        return s_read_u64(c->dir, "memory.failcnt");
    /* v2: "max N" line of memory.events */
    char path[512], line[128];
    uint64_t n = 0;
    snprintf(path, sizeof path, "%s/memory.events", c->dir);
    FILE *f = fopen(path, "r");
    if (!f)
        return 0;
    while (fgets(line, sizeof line, f))
        if (!strncmp(line, "max ", 4))
            n = strtoull(line + 4, NULL, 10);
    fclose(f);
    return n;
}

int cap_remove_dir(const char *dir)
{
    /* rmdir can race the last task's exit for a few ms: retry briefly (bounded, 200 ms). */
    for (int i = 0; i < 40; i++) {
        if (rmdir(dir) == 0 || errno == ENOENT)
            return 0;
        if (errno != EBUSY)
            return -1;
        usleep(5000);
    }
    return -1;
}

int cap_leave(cap_t *c)
{
    char val[32];
    int rc;
    if (!c->enforced)
        return 0;
    snprintf(val, sizeof val, "%d", getpid());
    s_write(c->version == 1 ? S_V1_ROOT : S_V2_ROOT, "cgroup.procs", val);
    rc = cap_remove_dir(c->dir);
    c->enforced = 0;
    return rc;
}

const char *cap_describe(const cap_t *c, char *buf, size_t len)
{
    if (c->enforced)
        snprintf(buf, len, "enforced (cgroup v%d)", c->version);
    else
        snprintf(buf, len, "advisory (%s)", c->why[0] ? c->why : "no cgroup");
    return buf;
}

int cap_reap(int pid)
{
    const char *roots[] = { S_V1_ROOT, S_V2_ROOT };
    char dir[512], sub[800], suffix[24];
    int rc = 0;
    snprintf(suffix, sizeof suffix, "-%d", pid);
    for (int r = 0; r < 2; r++) {
        struct dirent *de;
        DIR *d;
        snprintf(dir, sizeof dir, "%s/%s", roots[r], cap_run_name());
        if (!(d = opendir(dir)))
            continue;
        while ((de = readdir(d))) {
            size_t n = strlen(de->d_name), k = strlen(suffix);
            if (de->d_type != DT_DIR || n <= k || strcmp(de->d_name + n - k, suffix))
                continue;
            snprintf(sub, sizeof sub, "%s/%s", dir, de->d_name);
            if (cap_remove_dir(sub))
                rc = -1;
        }
        closedir(d);
    }
    return rc;
}

void cap_sweep_stale(void)
{
    const char *roots[] = { S_V1_ROOT, S_V2_ROOT };
    for (int r = 0; r < 2; r++) {
        DIR *d = opendir(roots[r]);
        struct dirent *de;
        if (!d)
            continue;
        while ((de = readdir(d))) {
            const char *dash;
            char dir[512];
            long pid;
            if (strncmp(de->d_name, "swarm-", 6) || de->d_type != DT_DIR)
                continue;
            if (!strncmp(de->d_name, S_RUN_PREFIX, strlen(S_RUN_PREFIX))) {
                /* a run: only when its owner is gone (a live run's groups are never ours) */
                if (!s_run_live(de->d_name) && strcmp(de->d_name, s_run))
                    s_run_remove(roots[r], de->d_name, 0);
                continue;
            }
            /* a flat group of a build before runs: its own process is its owner */
            if (!(dash = strrchr(de->d_name, '-')))
                continue;
            pid = strtol(dash + 1, NULL, 10);
            if (pid <= 0 || (kill((pid_t)pid, 0) == 0 || errno != ESRCH))
                continue;
            snprintf(dir, sizeof dir, "%s/%s", roots[r], de->d_name);
            rmdir(dir); /* fails harmlessly if tasks remain */
        }
        closedir(d);
    }
}
