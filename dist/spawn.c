/* spawn.c — the one spawn: fork + exec a local worker, read its endpoint, reap it (spawn.h). dist/ */
#include "dist/spawn.h"

#include <errno.h>
#include <poll.h>
#include <signal.h>
#include <stdio.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/wait.h>
#include <unistd.h>

#include "base/cap.h"
#include "base/util.h"

/* Read "tcp://HOST:PORT\n" from fd within SPAWN_REPORT_MS. 0 / -1. */
static int s_read_endpoint(int fd, char *ep, size_t eplen)
{
    struct pollfd pfd = { .fd = fd, .events = POLLIN };
    size_t got = 0;
    uint64_t deadline = util_now_ns() + SPAWN_REPORT_MS * 1000000ull;
    while (got + 1 < eplen) {
        uint64_t now = util_now_ns();
        if (now >= deadline || poll(&pfd, 1, (int)((deadline - now) / 1000000) + 1) <= 0)
            break;
        ssize_t k = read(fd, ep + got, eplen - 1 - got);
        if (k <= 0)
            break;
        got += (size_t)k;
        if (memchr(ep, '\n', got))
            break;
    }
    ep[got] = 0;
    char *nl = strchr(ep, '\n');
    if (!nl || strncmp(ep, "tcp://", 6))
        return -1;
    *nl = 0;
    return 0;
}

int spawn_worker(const spawn_opts *o, pid_t *pid, char *ep, size_t eplen, char *err,
                 size_t errlen)
{
    int fds[2];
    char cap[32], rfd[16], slow[16], listen[128];
    const char *argv[16];
    int a = 0;
    *pid = 0;
    if (pipe(fds)) {
        snprintf(err, errlen, "%s: pipe: %s", o->id, strerror(errno));
        return -1;
    }
    snprintf(cap, sizeof cap, "%llu", (unsigned long long)o->cap_bytes);
    snprintf(rfd, sizeof rfd, "%d", fds[1]);
    snprintf(slow, sizeof slow, "%u", o->slowdown);
    snprintf(listen, sizeof listen, "tcp://%s:*", o->host && o->host[0] ? o->host : "127.0.0.1");
    argv[a++] = "swarm";
    argv[a++] = "worker";
    argv[a++] = "--listen";
    argv[a++] = listen;
    argv[a++] = "--id";
    argv[a++] = o->id;
    argv[a++] = "--once";
    argv[a++] = "--report-fd";
    argv[a++] = rfd;
    if (o->cap_bytes) {
        argv[a++] = "--cap";
        argv[a++] = cap;
    }
    if (o->slowdown > 1) {
        argv[a++] = "--slowdown";
        argv[a++] = slow;
    }
    argv[a] = NULL;
    pid_t child = fork();
    if (child < 0) {
        snprintf(err, errlen, "%s: fork: %s", o->id, strerror(errno));
        close(fds[0]);
        close(fds[1]);
        return -1;
    }
    if (child == 0) {
        if (o->die_with_parent) /* Ctrl-C or SIGKILL of the coordinator takes it along */
            prctl(PR_SET_PDEATHSIG, SIGTERM);
        close(fds[0]);
        execv(o->exe, (char *const *)argv);
        _exit(127);
    }
    close(fds[1]);
    int rc = s_read_endpoint(fds[0], ep, eplen);
    close(fds[0]);
    if (rc) {
        snprintf(err, errlen, "%s: spawned worker (pid %d, %s) did not report its endpoint",
                 o->id, (int)child, o->exe);
        spawn_reap(child, SPAWN_KILL, NULL, NULL, 0);
        return -1;
    }
    *pid = child;
    return 0;
}

int spawn_reap(pid_t pid, spawn_reap_how how, uint64_t *read_bytes, char *why, size_t whylen)
{
    siginfo_t si = { 0 };
    if (pid <= 0)
        return -1;
    if (how == SPAWN_KILL)
        kill(pid, SIGKILL);
    /* Peek first (WNOWAIT): reaping adds the child's I/O to ours, which the cache gate reads,
     * so the zombie's read_bytes are noted for the caller to take out again. */
    if (waitid(P_PID, (id_t)pid, &si, WEXITED | WNOWAIT | (how == SPAWN_POLL ? WNOHANG : 0)))
        return errno == ECHILD ? -1 : 0;
    if (si.si_pid != pid)
        return 0;
    if (read_bytes)
        *read_bytes = util_io_read_bytes_pid((int)pid);
    if (why && (si.si_code == CLD_KILLED || si.si_code == CLD_DUMPED))
        snprintf(why, whylen, "killed by signal %d", si.si_status);
    else if (why)
        snprintf(why, whylen, "exited with status %d", si.si_status);
    waitpid(pid, NULL, 0);
    cap_reap((int)pid); /* a SIGKILLed worker cannot remove its own cgroup */
    return 1;
}
