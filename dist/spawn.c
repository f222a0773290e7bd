/* spawn.c — the one spawn: fork + exec a local worker, read its endpoint, reap it (spawn.h). dist/ */
#include "dist/spawn.h"

#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <stdio.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/wait.h>
#include <unistd.h>

#include "base/cap.h"
#include "base/util.h"

/* "tcp://HOST:PORT\n" in buf[0..got): 1 with ep filled, 0 not whole yet, -1 not that. */
static int s_endpoint_of(const char *buf, size_t got, char *ep, size_t eplen)
{
    const char *nl = memchr(buf, '\n', got);
    if (!nl)
        return 0;
    size_t n = (size_t)(nl - buf);
    if (n < 6 || strncmp(buf, "tcp://", 6) || n >= eplen)
        return -1;
    memcpy(ep, buf, n);
    ep[n] = 0;
    return 1;
}

int spawn_poll_endpoint(int fd, char *buf, size_t cap, size_t *got, int wait_ms, char *ep,
                        size_t eplen)
{
    struct pollfd pfd = { .fd = fd, .events = POLLIN };
    int rc = s_endpoint_of(buf, *got, ep, eplen);
    while (rc == 0) {
        if (*got + 1 >= cap)
            return -1;
        int pr = poll(&pfd, 1, wait_ms);
        if (pr < 0 && errno == EINTR)
            continue;
        if (pr <= 0)
            return 0;
        ssize_t k = read(fd, buf + *got, cap - 1 - *got);
        if (k < 0 && (errno == EINTR || errno == EAGAIN))
            continue;
        if (k <= 0) /* it closed the pipe (or died) without a whole line */
            return -1;
        *got += (size_t)k;
        rc = s_endpoint_of(buf, *got, ep, eplen);
        wait_ms = 0;
    }
    return rc;
}

int spawn_begin(const spawn_opts *o, pid_t *pid, int *fd, char *err, size_t errlen)
{
    int fds[2];
    char cap[32], rfd[16], slow[16], listen[128];
    const char *argv[16];
    int a = 0;
    *pid = 0;
    *fd = -1;
    if (pipe2(fds, O_CLOEXEC)) {
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
        /* the report end stays open across the exec (O_CLOEXEC cleared on it alone): other
         * threads' pipes, forked at the same moment, do not leak into this worker */
        fcntl(fds[1], F_SETFD, 0);
        execv(o->exe, (char *const *)argv);
        _exit(127);
    }
    close(fds[1]);
    *pid = child;
    *fd = fds[0];
    return 0;
}

int spawn_worker(const spawn_opts *o, pid_t *pid, char *ep, size_t eplen, char *err,
                 size_t errlen)
{
    pid_t child;
    int fd, rc = 0;
    char buf[512];
    size_t got = 0;
    if (spawn_begin(o, &child, &fd, err, errlen))
        return -1;
    uint64_t deadline = util_now_ns() + SPAWN_REPORT_MS * 1000000ull;
    while (rc == 0) {
        uint64_t now = util_now_ns();
        if (now >= deadline)
            break;
        rc = spawn_poll_endpoint(fd, buf, sizeof buf, &got,
                                 (int)((deadline - now) / 1000000) + 1, ep, eplen);
    }
    close(fd);
    if (rc != 1) {
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
