/* devstat.h — which block device serves a file, and what its requests looked like (/sys/block/DEV/stat). base/
 *
 * /proc/self/io says how many bytes this process fetched from storage; it cannot say how the
 * block layer cut them into requests, nor whether the device was busy. The device's own stat
 * file can: reads completed, sectors read, and io_ticks (ms with at least one request in
 * flight). Sectors ÷ reads is the average request size at the device — 4 MiB when a 4 MiB
 * O_DIRECT read arrived whole, ≈0.5 MB when scattered 4 KiB buffer pages split it. The figures
 * are device-wide: on a shared machine other processes' I/O to the same device is counted too
 * (compare read bytes with what this process asked for).
 */
#ifndef SWARM_DEVSTAT_H
#define SWARM_DEVSTAT_H

#include <stddef.h>
#include <stdint.h>

#define DEVSTAT_MAX_LEAVES 8   /* stacked devices (dm, md) followed down to this many disks */

typedef struct {
    char name[160];            /* "vda", "sda2 (partition)", "dm-0 -> sda2" */
    int n;                     /* stat files summed (leaves of a stacked device) */
    char stat_path[DEVSTAT_MAX_LEAVES][256];
} devstat_dev;

typedef struct {
    uint64_t t_ns;             /* CLOCK_MONOTONIC when read */
    uint64_t reads;            /* read requests completed */
    uint64_t sectors;          /* 512-byte sectors read (the unit is fixed whatever the disk) */
    uint64_t io_ticks_ms;      /* ms the device had a request in flight (busy time) */
} devstat_sample;

typedef struct {
    uint64_t reads;
    uint64_t read_bytes;
    uint64_t avg_request_bytes; /* read_bytes / reads; 0 when no reads */
    double busy_ms;            /* io_ticks over the interval */
    double wall_ms;
    double util;               /* busy_ms / wall_ms, 0..1 */
} devstat_delta;

/* The block device whose requests serve `path` (or that `path` is, for a device node):
 * st_dev (st_rdev) -> /sys/dev/block/MAJ:MIN, a partition
 * as itself, a device-mapper or md device followed through slaves/ down to the disks that
 * receive the requests. -1 with a clear reason when there is none (tmpfs, overlayfs: "no
 * block device"). */
int devstat_find(const char *path, devstat_dev *d, char *err, size_t errlen);
int devstat_read(const devstat_dev *d, devstat_sample *s, char *err, size_t errlen);
void devstat_diff(const devstat_sample *a, const devstat_sample *b, devstat_delta *out);

#endif
