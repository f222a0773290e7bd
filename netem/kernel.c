/* kernel.c — libbpf control of netem/link.bpf.c on a tc clsact hook: attach, set, stats, probe. netem/ */
#include "netem/netem.h"

#include "base/log.h"
#include "link.skel.h"

#include <bpf/bpf.h>
#include <bpf/libbpf.h>
#include <errno.h>
#include <linux/pkt_sched.h>
#include <linux/rtnetlink.h>
#include <net/if.h>
#include <sched.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mount.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/statfs.h>
#include <sys/types.h>
#include <sys/wait.h>
#include <unistd.h>

#define S_BPFFS "/sys/fs/bpf"
#define S_BPF_FS_MAGIC 0xcafe4a11
/* Our filter's identity on the hook, so we replace / remove only our own. */
#define S_TC_HANDLE 0x5a17
#define S_TC_PRIO 0x5a1

/* Must match struct netem_link_cfg / netem_link_stats in link.bpf.c. */
typedef struct {
    uint32_t loss_ppm;
    uint32_t blackhole;
    uint64_t delay_ns;
} s_link_cfg;
typedef struct {
    uint64_t passed, dropped;
} s_link_stats;
_Static_assert(sizeof(s_link_cfg) == 16 && sizeof(s_link_stats) == 16, "matches link.bpf.c");

struct netem_kernel {
    struct link_bpf *skel;
    int ifindex;
    char ifname[IF_NAMESIZE];
    char pin_dir[128];        /* /sys/fs/bpf/swarm_IFACE[_nsINODE] */
};

/* libbpf prints its own warnings (e.g. "exclusivity flag on" when clsact exists); only at debug. */
static int s_libbpf_print(enum libbpf_print_level level, const char *fmt, va_list ap)
{
    if (level == LIBBPF_DEBUG || log_get_level() < 2)
        return 0;
    return vfprintf(stderr, fmt, ap);
}

/* Pins live in the bpffs of our mount namespace, shared by every network namespace, so two
 * namespaces' "veth0" must not collide: outside the initial netns the netns inode is appended. */
static void s_pin_dir(const char *ifname, char *buf, size_t len)
{
    struct stat self, init;

    if (stat("/proc/self/ns/net", &self) == 0 && stat("/proc/1/ns/net", &init) == 0 &&
        self.st_ino == init.st_ino)
        snprintf(buf, len, S_BPFFS "/swarm_%s", ifname);
    else
        snprintf(buf, len, S_BPFFS "/swarm_%s_ns%lu", ifname,
                 stat("/proc/self/ns/net", &self) == 0 ? (unsigned long)self.st_ino : 0ul);
}

/* Debian 12 does not always mount bpffs (this machine did not, 2025). Mount it where missing; under
 * `ip netns exec` /sys is a private remount, so pins there die with the command (use --netns). */
static int s_ensure_bpffs(char *err, size_t errlen)
{
    struct statfs st;

    if (statfs(S_BPFFS, &st) == 0 && (unsigned long)st.f_type == S_BPF_FS_MAGIC)
        return 0;
    if (mount("bpf", S_BPFFS, "bpf", 0, "mode=0700") < 0) {
        snprintf(err, errlen, "%s is not a bpffs and mounting one failed: %s", S_BPFFS,
                 strerror(errno));
        return -1;
    }
    log_info("netem: mounted bpffs on %s", S_BPFFS);
    return 0;
}

static int s_attach_one(struct link_bpf *skel, int ifindex, enum bpf_tc_attach_point where,
                        char *err, size_t errlen)
{
    struct bpf_program *prog = where == BPF_TC_EGRESS ? skel->progs.swarm_link_egress
                                                      : skel->progs.swarm_link_ingress;
    LIBBPF_OPTS(bpf_tc_hook, hook, .ifindex = ifindex, .attach_point = where);
    LIBBPF_OPTS(bpf_tc_opts, opts, .handle = S_TC_HANDLE, .priority = S_TC_PRIO,
                .prog_fd = bpf_program__fd(prog), .flags = BPF_TC_F_REPLACE);
    int rc = bpf_tc_attach(&hook, &opts);

    if (rc < 0) {
        snprintf(err, errlen, "tc attach (%s): %s", where == BPF_TC_EGRESS ? "egress" : "ingress",
                 strerror(-rc));
        return -1;
    }
    return 0;
}

netem_kernel *netem_kernel_attach(const char *ifname, char *err, size_t errlen)
{
    netem_kernel *k = calloc(1, sizeof *k);
    char path[192];
    int rc;

    libbpf_set_print(s_libbpf_print);
    if (!k) {
        snprintf(err, errlen, "out of memory");
        return NULL;
    }
    snprintf(k->ifname, sizeof k->ifname, "%s", ifname);
    k->ifindex = (int)if_nametoindex(ifname);
    if (!k->ifindex) {
        snprintf(err, errlen, "interface '%s': %s", ifname, strerror(errno));
        goto err;
    }
    if (s_ensure_bpffs(err, errlen) < 0)
        goto err;
    s_pin_dir(ifname, k->pin_dir, sizeof k->pin_dir);
    if (mkdir(k->pin_dir, 0700) < 0 && errno != EEXIST) {
        snprintf(err, errlen, "mkdir %s: %s", k->pin_dir, strerror(errno));
        goto err;
    }
    k->skel = link_bpf__open();
    if (!k->skel) {
        snprintf(err, errlen, "open BPF object: %s", strerror(errno));
        goto err;
    }
    /* A later command re-attaches a fresh program but reuses the pinned maps, so the config and
     * counters of the link survive (libbpf reuses a map already pinned at the path). */
    snprintf(path, sizeof path, "%s/cfg", k->pin_dir);
    bpf_map__set_pin_path(k->skel->maps.cfg, path);
    snprintf(path, sizeof path, "%s/stats", k->pin_dir);
    bpf_map__set_pin_path(k->skel->maps.stats, path);
    rc = link_bpf__load(k->skel);
    if (rc < 0) {
        snprintf(err, errlen, "load BPF program: %s%s", strerror(-rc),
                 rc == -EPERM ? " (needs root: CAP_BPF + CAP_NET_ADMIN)" : "");
        goto err;
    }
    LIBBPF_OPTS(bpf_tc_hook, hook, .ifindex = k->ifindex,
                .attach_point = BPF_TC_INGRESS | BPF_TC_EGRESS);
    rc = bpf_tc_hook_create(&hook); /* the clsact qdisc */
    if (rc < 0 && rc != -EEXIST) {
        snprintf(err, errlen, "create clsact on %s: %s", ifname, strerror(-rc));
        goto err;
    }
    if (s_attach_one(k->skel, k->ifindex, BPF_TC_EGRESS, err, errlen) < 0 ||
        s_attach_one(k->skel, k->ifindex, BPF_TC_INGRESS, err, errlen) < 0)
        goto err;
    return k;
err:
    if (k->skel)
        link_bpf__destroy(k->skel);
    free(k);
    return NULL;
}

int netem_kernel_set(netem_kernel *k, uint32_t loss_ppm, int blackhole, uint64_t delay_ns,
                     char *err, size_t errlen)
{
    s_link_cfg v = { .loss_ppm = loss_ppm > 1000000 ? 1000000 : loss_ppm,
                     .blackhole = blackhole ? 1 : 0, .delay_ns = delay_ns };
    uint32_t key = 0;
    int rc = bpf_map__update_elem(k->skel->maps.cfg, &key, sizeof key, &v, sizeof v, BPF_ANY);

    if (rc < 0) {
        snprintf(err, errlen, "update link config of %s: %s", k->ifname, strerror(-rc));
        return -1;
    }
    return 0;
}

int netem_kernel_stats(netem_kernel *k, uint64_t *passed, uint64_t *dropped)
{
    s_link_stats v;
    uint32_t key = 0;

    if (bpf_map__lookup_elem(k->skel->maps.stats, &key, sizeof key, &v, sizeof v, 0) < 0)
        return -1;
    *passed = v.passed;
    *dropped = v.dropped;
    return 0;
}

int netem_kernel_get(netem_kernel *k, uint32_t *loss_ppm, int *blackhole, uint64_t *delay_ns)
{
    s_link_cfg v;
    uint32_t key = 0;

    if (bpf_map__lookup_elem(k->skel->maps.cfg, &key, sizeof key, &v, sizeof v, 0) < 0)
        return -1;
    *loss_ppm = v.loss_ppm;
    *blackhole = (int)v.blackhole;
    *delay_ns = v.delay_ns;
    return 0;
}

void netem_kernel_close(netem_kernel **k)
{
    if (!k || !*k)
        return;
    link_bpf__destroy((*k)->skel); /* closes fds only: tc holds the program, bpffs the maps */
    free(*k);
    *k = NULL;
}

void netem_kernel_detach(netem_kernel **k)
{
    netem_kernel *kk;

    if (!k || !*k)
        return;
    kk = *k;
    for (int i = 0; i < 2; i++) {
        LIBBPF_OPTS(bpf_tc_hook, hook, .ifindex = kk->ifindex,
                    .attach_point = i ? BPF_TC_INGRESS : BPF_TC_EGRESS);
        LIBBPF_OPTS(bpf_tc_opts, opts, .handle = S_TC_HANDLE, .priority = S_TC_PRIO);
        bpf_tc_detach(&hook, &opts);
    }
    /* The clsact qdisc goes too: swarm creates it on its lab links and nothing else uses it. */
    LIBBPF_OPTS(bpf_tc_hook, hook, .ifindex = kk->ifindex,
                .attach_point = BPF_TC_INGRESS | BPF_TC_EGRESS);
    bpf_tc_hook_destroy(&hook);
    bpf_map__unpin(kk->skel->maps.cfg, NULL);
    bpf_map__unpin(kk->skel->maps.stats, NULL);
    rmdir(kk->pin_dir);
    netem_kernel_close(k);
}

/* ---- probe: in a throwaway network namespace, so nothing is left behind ---- */

/* Try to create a root qdisc of `kind` on ifindex (rtnetlink RTM_NEWQDISC). 1 created, 0 not. */
static int s_try_qdisc(int ifindex, const char *kind)
{
    struct {
        struct nlmsghdr n;
        struct tcmsg t;
        char attrs[64];
    } req;
    char buf[512];
    struct rtattr *rta;
    struct sockaddr_nl sa = { .nl_family = AF_NETLINK };
    int fd, ok = 0;
    ssize_t n;

    memset(&req, 0, sizeof req);
    req.n.nlmsg_len = NLMSG_LENGTH(sizeof req.t);
    req.n.nlmsg_type = RTM_NEWQDISC;
    req.n.nlmsg_flags = NLM_F_REQUEST | NLM_F_ACK | NLM_F_CREATE | NLM_F_EXCL;
    req.t.tcm_family = AF_UNSPEC;
    req.t.tcm_ifindex = ifindex;
    req.t.tcm_parent = TC_H_ROOT;
    rta = (struct rtattr *)((char *)&req + NLMSG_ALIGN(req.n.nlmsg_len));
    rta->rta_type = TCA_KIND;
    rta->rta_len = (unsigned short)RTA_LENGTH(strlen(kind) + 1);
    memcpy(RTA_DATA(rta), kind, strlen(kind) + 1);
    req.n.nlmsg_len = NLMSG_ALIGN(req.n.nlmsg_len) + RTA_ALIGN(rta->rta_len);

    fd = socket(AF_NETLINK, SOCK_RAW | SOCK_CLOEXEC, NETLINK_ROUTE);
    if (fd < 0)
        return 0;
    if (sendto(fd, &req, req.n.nlmsg_len, 0, (struct sockaddr *)&sa, sizeof sa) < 0)
        goto out;
    n = recv(fd, buf, sizeof buf, 0);
    if (n >= (ssize_t)NLMSG_LENGTH(sizeof(struct nlmsgerr))) {
        struct nlmsghdr *h = (struct nlmsghdr *)buf;
        if (h->nlmsg_type == NLMSG_ERROR)
            ok = ((struct nlmsgerr *)NLMSG_DATA(h))->error == 0;
    }
out:
    close(fd);
    return ok;
}

/* Child of the probe, in a new netns: bit 0 = BPF on clsact works, bit 1 = fq exists. */
static int s_probe_child(int wfd)
{
    struct link_bpf *skel = NULL;
    char why[160] = "";
    int bits = 0, rc;

    if (unshare(CLONE_NEWNET) < 0) {
        snprintf(why, sizeof why, "unshare(CLONE_NEWNET): %s", strerror(errno));
        goto out;
    }
    /* A fresh netns has only lo, ifindex 1. */
    libbpf_set_print(s_libbpf_print);
    skel = link_bpf__open_and_load();
    if (!skel) {
        snprintf(why, sizeof why, "load BPF program: %s", strerror(errno));
    } else {
        LIBBPF_OPTS(bpf_tc_hook, hook, .ifindex = 1, .attach_point = BPF_TC_EGRESS);
        rc = bpf_tc_hook_create(&hook);
        if (rc == 0 || rc == -EEXIST)
            rc = s_attach_one(skel, 1, BPF_TC_EGRESS, why, sizeof why);
        else
            snprintf(why, sizeof why, "create clsact: %s", strerror(-rc));
        if (rc == 0)
            bits |= 1;
        link_bpf__destroy(skel);
    }
    if (s_try_qdisc(1, "fq"))
        bits |= 2;
out:
    if (write(wfd, why, strlen(why)) < 0)
        bits |= 4;
    return bits;
}

/* Fills caps; returns 0 when the probe ran (err then says why BPF is unavailable, if it is) and -1
 * when it could not run. Costs one fork + one netns (a few ms); the netns dies with the child. */
int netem_kernel_probe(netem_kernel_caps *caps, char *err, size_t errlen)
{
    int fds[2], status;
    pid_t pid;
    ssize_t n;

    caps->bpf_ok = caps->fq_ok = 0;
    if (err && errlen)
        err[0] = '\0';
    if (geteuid() != 0) {
        snprintf(err, errlen, "needs root (CAP_BPF, CAP_NET_ADMIN, CAP_SYS_ADMIN for a netns)");
        return 0;
    }
    if (pipe(fds) < 0) {
        snprintf(err, errlen, "pipe: %s", strerror(errno));
        return -1;
    }
    pid = fork();
    if (pid < 0) {
        snprintf(err, errlen, "fork: %s", strerror(errno));
        close(fds[0]);
        close(fds[1]);
        return -1;
    }
    if (pid == 0) {
        close(fds[0]);
        _exit(s_probe_child(fds[1]));
    }
    close(fds[1]);
    n = read(fds[0], err, errlen > 0 ? errlen - 1 : 0);
    if (n >= 0 && errlen)
        err[n] = '\0';
    close(fds[0]);
    if (waitpid(pid, &status, 0) < 0 || !WIFEXITED(status)) {
        snprintf(err, errlen, "probe child failed");
        return -1;
    }
    caps->bpf_ok = WEXITSTATUS(status) & 1;
    caps->fq_ok = (WEXITSTATUS(status) & 2) != 0;
    return 0;
}
