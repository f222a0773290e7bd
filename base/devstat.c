/* devstat.c — map a file to the block device(s) that serve it and read their request counters. base/ */
#include "base/devstat.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/sysmacros.h>
#include <unistd.h>

#include "base/util.h"

#define S_MAX_DEPTH 4          /* dm on md on a partition is three deep; loops mean a bug */

static int s_is_dir(const char *p)
{
    struct stat st;
    return stat(p, &st) == 0 && S_ISDIR(st.st_mode);
}

static int s_exists(const char *p)
{
    return access(p, F_OK) == 0;
}

static const char *s_base(const char *p)
{
    const char *s = strrchr(p, '/');
    return s ? s + 1 : p;
}

/* Add the stat file(s) of the block device at sysfs folder `dir` (a resolved path).
 * - A partition (it has a "partition" file) has its own stat: the block layer accounts each
 *   request to the partition as well as to the whole disk, and the partition's excludes the
 *   disk's other partitions. Same requests, same sizes: use it.
 * - A stacked device (device-mapper, md: a non-empty slaves/ folder) counts the bios it was
 *   handed, which it then remaps and may split or merge before they reach a disk; the request
 *   size "at the device" is the one its slaves see, so follow slaves/ down to the leaves and
 *   sum them (a striped or mirrored device has several).
 * - Anything else (a whole disk, a loop device, zram) is itself the device. */
static int s_add(devstat_dev *d, const char *dir, int depth, char *err, size_t errlen)
{
    char p[PATH_MAX], real[PATH_MAX];
    DIR *sd;
    struct dirent *de;
    int added = 0;
    if (depth > S_MAX_DEPTH) {
        snprintf(err, errlen, "%s: block devices stacked more than %d deep", dir, S_MAX_DEPTH);
        return -1;
    }
    snprintf(p, sizeof p, "%s/slaves", dir);
    if (s_is_dir(p) && (sd = opendir(p))) {
        while ((de = readdir(sd))) {
            char sub[PATH_MAX];
            if (de->d_name[0] == '.')
                continue;
            snprintf(sub, sizeof sub, "%s/%s", p, de->d_name);
            if (!realpath(sub, real) || s_add(d, real, depth + 1, err, errlen)) {
                if (!err[0])
                    snprintf(err, errlen, "%s: cannot resolve %s", dir, sub);
                closedir(sd);
                return -1;
            }
            added++;
        }
        closedir(sd);
        if (added)
            return 0;
    }
    if (d->n >= DEVSTAT_MAX_LEAVES) {
        snprintf(err, errlen, "%s: more than %d disks under one device", dir,
                 DEVSTAT_MAX_LEAVES);
        return -1;
    }
    snprintf(d->stat_path[d->n], sizeof d->stat_path[0], "%s/stat", dir);
    if (!s_exists(d->stat_path[d->n])) {
        snprintf(err, errlen, "%s: no stat file", dir);
        return -1;
    }
    d->n++;
    return 0;
}

int devstat_find(const char *path, devstat_dev *d, char *err, size_t errlen)
{
    struct stat st;
    char link[64], real[PATH_MAX];
    memset(d, 0, sizeof *d);
    if (err && errlen)
        err[0] = 0;
    if (stat(path, &st)) {
        snprintf(err, errlen, "%s: %s", path, strerror(errno));
        return -1;
    }
    /* A block device node names itself (st_rdev); any other file, the one it lives on. */
    dev_t dev = S_ISBLK(st.st_mode) ? st.st_rdev : st.st_dev;
    unsigned maj = major(dev), min = minor(dev);
    snprintf(link, sizeof link, "/sys/dev/block/%u:%u", maj, min);
    /* Major 0 is the kernel's "unnamed" device: tmpfs, overlayfs, proc, FUSE, btrfs
     * subvolumes. No block device's stat can be attributed to the file. */
    if (maj == 0 || !realpath(link, real)) {
        snprintf(err, errlen,
                 "%s: no block device (st_dev %u:%u%s): its reads cannot be seen at a disk", path,
                 maj, min, maj == 0 ? " is a virtual filesystem's, e.g. tmpfs or overlayfs" :
                                      ", not in /sys/dev/block");
        return -1;
    }
    if (s_add(d, real, 0, err, errlen))
        return -1;
    /* Name: the device, "(partition)" or "-> leaves" so a reader sees which stat was used. */
    snprintf(d->name, sizeof d->name, "%s", s_base(real));
    snprintf(link, sizeof link, "%s/partition", real);
    if (s_exists(link))
        snprintf(d->name + strlen(d->name), sizeof d->name - strlen(d->name), " (partition)");
    char leaf[PATH_MAX];
    snprintf(leaf, sizeof leaf, "%s/stat", real);
    if (d->n > 1 || strcmp(d->stat_path[0], leaf)) {
        size_t used = strlen(d->name);
        snprintf(d->name + used, sizeof d->name - used, " ->");
        for (int i = 0; i < d->n; i++) {
            char tmp[PATH_MAX];
            snprintf(tmp, sizeof tmp, "%s", d->stat_path[i]);
            *strrchr(tmp, '/') = 0; /* drop "/stat" */
            used = strlen(d->name);
            snprintf(d->name + used, sizeof d->name - used, " %s", s_base(tmp));
        }
    }
    return 0;
}

int devstat_read(const devstat_dev *d, devstat_sample *s, char *err, size_t errlen)
{
    memset(s, 0, sizeof *s);
    s->t_ns = util_now_ns();
    for (int i = 0; i < d->n; i++) {
        /* Documented in the kernel's Documentation/block/stat.rst: field 1 read I/Os, 3 read
         * sectors (always 512 bytes), 10 io_ticks (ms). */
        unsigned long long f[10];
        char buf[512];
        /* open/read into a stack buffer, not stdio: this runs inside the memory cap, where a
         * FILE's heap buffer is charged too. */
        int fd = open(d->stat_path[i], O_RDONLY | O_CLOEXEC), n = 0;
        ssize_t got = fd >= 0 ? read(fd, buf, sizeof buf - 1) : -1;
        int e = errno;
        if (fd >= 0)
            close(fd);
        if (got > 0) {
            buf[got] = 0;
            n = sscanf(buf, "%llu %llu %llu %llu %llu %llu %llu %llu %llu %llu", &f[0], &f[1],
                       &f[2], &f[3], &f[4], &f[5], &f[6], &f[7], &f[8], &f[9]);
        }
        if (n != 10) {
            snprintf(err, errlen, "%s: %s", d->stat_path[i],
                     got < 0 ? strerror(e) : "unexpected format");
            return -1;
        }
        s->reads += f[0];
        s->sectors += f[2];
        s->io_ticks_ms += f[9];
    }
    return 0;
}

void devstat_diff(const devstat_sample *a, const devstat_sample *b, devstat_delta *o)
{
    memset(o, 0, sizeof *o);
    o->reads = b->reads - a->reads;
    o->read_bytes = (b->sectors - a->sectors) * 512;
    o->avg_request_bytes = o->reads ? o->read_bytes / o->reads : 0;
    o->busy_ms = (double)(b->io_ticks_ms - a->io_ticks_ms);
    o->wall_ms = (b->t_ns - a->t_ns) / 1e6;
    /* io_ticks advances in whole jiffies, so a fully busy interval can read a tick over its
     * wall time; several leaves (a striped device) sum their busy times: clamp to 1. */
    o->util = o->wall_ms > 0 ? o->busy_ms / o->wall_ms : 0;
    if (o->util > 1)
        o->util = 1;
}
