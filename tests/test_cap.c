/* test_cap.c — runs of memory cgroups: named for their owner, joined through the environment, removed by the owner, never another live run's swept. tests/ */
#include "base/cap.h"
#include "tests/check.h"

#include <errno.h>
#include <fcntl.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#define S_ENV "SWARM_CGROUP_RUN"

/* The run is chosen once per process, so every case runs in a child of its own (forked before
 * this process chooses one); a child's exit status is its number of failed checks. */
static void s_case(const char *what, void (*fn)(void))
{
    int st = 0;
    pid_t pid = fork();
    if (pid == 0) {
        fn();
        _exit(check_fail_ > 100 ? 100 : check_fail_);
    }
    CHECK(pid > 0 && waitpid(pid, &st, 0) == pid && WIFEXITED(st) && WEXITSTATUS(st) == 0,
          "%s: %d failed (status %d)", what, WIFEXITED(st) ? WEXITSTATUS(st) : -1, st);
}

/* /proc/PID/stat field 22, as base/cap.c reads it (0 when unreadable). */
static unsigned long long s_start_of(long pid)
{
    char path[64], buf[1024];
    const char *p;
    ssize_t n;
    int fd;
    snprintf(path, sizeof path, "/proc/%ld/stat", pid);
    if ((fd = open(path, O_RDONLY)) < 0)
        return 0;
    n = read(fd, buf, sizeof buf - 1);
    close(fd);
    if (n <= 0 || !(p = strrchr((buf[n] = 0, buf), ')')))
        return 0;
    for (int field = 2; field < 22 && p; field++)
        p = strchr(p + 1, ' ');
    return p ? strtoull(p + 1, NULL, 10) : 0;
}

/* The memory controller's root where this process may make groups, or NULL. */
static const char *s_root(void)
{
    if (geteuid() != 0)
        return NULL;
    if (access("/sys/fs/cgroup/memory/memory.limit_in_bytes", W_OK) == 0)
        return "/sys/fs/cgroup/memory";
    if (access("/sys/fs/cgroup/cgroup.controllers", F_OK) == 0 &&
        access("/sys/fs/cgroup/cgroup.subtree_control", W_OK) == 0)
        return "/sys/fs/cgroup";
    return NULL;
}

static int s_isdir(const char *root, const char *a, const char *b)
{
    char path[512];
    struct stat st;
    snprintf(path, sizeof path, "%s/%s%s%s", root, a, b ? "/" : "", b ? b : "");
    return stat(path, &st) == 0 && S_ISDIR(st.st_mode);
}

/* No run in the environment: this process owns one named for its pid and start time, and
 * exports it for the processes it starts. */
static void s_own(void)
{
    char want[64];
    unsetenv(S_ENV);
    cap_run_begin();
    snprintf(want, sizeof want, "swarm-run-%d-%llu", (int)getpid(), s_start_of(getpid()));
    CHECK(!strcmp(cap_run_name(), want), "own run '%s', want '%s'", cap_run_name(), want);
    CHECK(getenv(S_ENV) && !strcmp(getenv(S_ENV), want), "exported '%s'", getenv(S_ENV));
    cap_run_begin(); /* again: the same run */
    CHECK(!strcmp(cap_run_name(), want), "begun twice: '%s'", cap_run_name());
}

/* A run in the environment (what a spawned worker sees): joined, and not this process's to
 * remove. */
static void s_member(void)
{
    char err[256] = "";
    setenv(S_ENV, "swarm-run-1-42", 1);
    CHECK(!strcmp(cap_run_name(), "swarm-run-1-42"), "joined '%s'", cap_run_name());
    CHECK(cap_run_end(err, sizeof err) == 0 && !err[0], "a member's end: %s", err);
}

/* Anything but swarm-run-<digits>-<digits> is not a run (a path least of all): own run. */
static void s_malformed(void)
{
    const char *bad[] = { "../../tmp", "swarm-run-1-2/../../x", "swarm-run-0-5", "swarm-run-12",
                          "swarm-run--3-4", "swarm-run-7-", "swarm-run-7-8x", "" };
    for (size_t i = 0; i < sizeof bad / sizeof *bad; i++) {
        int st = 0;
        pid_t pid = fork();
        if (pid == 0) {
            char want[32];
            setenv(S_ENV, bad[i], 1);
            snprintf(want, sizeof want, "swarm-run-%d-", (int)getpid());
            _exit(strncmp(cap_run_name(), want, strlen(want)) != 0);
        }
        CHECK(waitpid(pid, &st, 0) == pid && WIFEXITED(st) && WEXITSTATUS(st) == 0,
              "'%s' taken for a run", bad[i]);
    }
}

/* Root with a memory controller: a group sits under the run, and the owner's end removes both. */
static void s_groups(void)
{
    const char *root = s_root();
    char err[256] = "", name[64];
    cap_t c;
    unsetenv(S_ENV);
    cap_enter(&c, 64u << 20, "t/x", 0);
    CHECK(c.enforced, "not enforced: %s", c.why);
    snprintf(name, sizeof name, "t_x-%d", (int)getpid());
    CHECK(s_isdir(root, cap_run_name(), name), "no %s/%s/%s (dir %s)", root, cap_run_name(),
          name, c.dir);
    CHECK(cap_leave(&c) == 0, "leave");
    CHECK(!s_isdir(root, cap_run_name(), name), "the group stayed after leave");
    /* a group a dead process left (as a SIGKILLed worker does): reaped by its pid */
    pid_t dead = fork();
    if (dead == 0)
        _exit(0);
    waitpid(dead, NULL, 0);
    snprintf(name, sizeof name, "worker-w1-%d", (int)dead);
    char path[512];
    snprintf(path, sizeof path, "%s/%s/%s", root, cap_run_name(), name);
    CHECK(mkdir(path, 0755) == 0, "mkdir %s: %s", path, strerror(errno));
    CHECK(cap_reap((int)dead) == 0 && !s_isdir(root, cap_run_name(), name), "reap %s", name);
    CHECK(s_isdir(root, cap_run_name(), NULL), "the run's parent exists before its end");
    CHECK(cap_run_end(err, sizeof err) == 0, "end: %s", err);
    CHECK(!s_isdir(root, cap_run_name(), NULL), "the run's parent stayed after its end");
}

/* The sweep removes a run whose owner is gone (and its groups), and a flat group of a dead
 * process; it leaves a live run alone, whoever owns it. */
static void s_sweep(void)
{
    const char *root = s_root();
    char dead_run[64], live_run[64], flat[64], path[512];
    pid_t dead = fork(), parent = getppid();
    if (dead == 0)
        _exit(0);
    waitpid(dead, NULL, 0);
    unsetenv(S_ENV);
    cap_run_begin();
    snprintf(dead_run, sizeof dead_run, "swarm-run-%d-%llu", (int)dead, s_start_of(getpid()));
    snprintf(live_run, sizeof live_run, "swarm-run-%d-%llu", (int)parent, s_start_of(parent));
    snprintf(flat, sizeof flat, "swarm-test-%d", (int)dead);
    const char *dirs[] = { dead_run, live_run, flat };
    for (int i = 0; i < 3; i++) {
        snprintf(path, sizeof path, "%s/%s", root, dirs[i]);
        CHECK(mkdir(path, 0755) == 0, "mkdir %s: %s", path, strerror(errno));
        if (i < 2) {
            snprintf(path, sizeof path, "%s/%s/worker-w0-%d", root, dirs[i], (int)dead);
            CHECK(mkdir(path, 0755) == 0, "mkdir %s: %s", path, strerror(errno));
        }
    }
    cap_sweep_stale();
    CHECK(!s_isdir(root, dead_run, NULL), "a dead owner's run stayed");
    CHECK(!s_isdir(root, flat, NULL), "a dead process's flat group stayed");
    CHECK(s_isdir(root, live_run, NULL), "a live run (the test's parent's) was swept");
    snprintf(path, sizeof path, "worker-w0-%d", (int)dead);
    CHECK(s_isdir(root, live_run, path), "a live run's group was swept");
    snprintf(path, sizeof path, "%s/%s/worker-w0-%d", root, live_run, (int)dead);
    rmdir(path);
    snprintf(path, sizeof path, "%s/%s", root, live_run);
    rmdir(path);
}

int main(void)
{
    s_case("own run", s_own);
    s_case("member of a run", s_member);
    s_case("malformed names", s_malformed);
    if (s_root()) {
        s_case("groups under the run", s_groups);
        s_case("sweep", s_sweep);
    } else {
        printf("skip: not root or no writable memory controller (groups and sweep)\n");
    }
    return CHECK_DONE("test_cap");
}
