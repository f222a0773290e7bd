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

int cap_enter(cap_t *c, uint64_t bytes, const char *tag, int pid)
{
    char val[64];
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
    snprintf(c->dir, sizeof c->dir, "%s/swarm-%s-%d", c->version == 1 ? S_V1_ROOT : S_V2_ROOT,
             tag, pid);
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
            if (strncmp(de->d_name, "swarm-", 6) || !(dash = strrchr(de->d_name, '-')))
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
