/* test_devstat.c — a file's block device found through st_dev, request counters read and differenced, tmpfs refused clearly. tests/ */
#include "base/devstat.h"
#include "tests/check.h"

#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/sysmacros.h>
#include <sys/vfs.h>
#include <unistd.h>

#define S_FILE_BYTES (4u << 20)

/* The arithmetic on two samples, independently of any device. */
static void s_diff(void)
{
    devstat_sample a = { .t_ns = 1000000000ull, .reads = 10, .sectors = 80, .io_ticks_ms = 5 };
    devstat_sample b = { .t_ns = 1100000000ull, .reads = 14, .sectors = 80 + 4 * 8192,
                         .io_ticks_ms = 55 };
    devstat_delta d;
    devstat_diff(&a, &b, &d);
    CHECK(d.reads == 4 && d.read_bytes == 4ull * 8192 * 512, "reads %llu bytes %llu",
          (unsigned long long)d.reads, (unsigned long long)d.read_bytes);
    CHECK(d.avg_request_bytes == 4u << 20, "avg %llu", (unsigned long long)d.avg_request_bytes);
    CHECK(d.busy_ms == 50 && d.wall_ms == 100 && d.util == 0.5, "busy %g wall %g util %g",
          d.busy_ms, d.wall_ms, d.util);
    b.io_ticks_ms = 120; /* a tick over the wall time: clamped */
    devstat_diff(&a, &b, &d);
    CHECK(d.util == 1, "util %g not clamped", d.util);
    b = a;
    devstat_diff(&a, &b, &d);
    CHECK(d.reads == 0 && d.avg_request_bytes == 0 && d.util == 0, "idle interval");
}

/* Filesystems without a block device: one clear answer, no crash. */
static void s_no_device(void)
{
    devstat_dev d;
    char err[512] = "";
    struct statfs sf;
    CHECK(devstat_find("/proc/self/status", &d, err, sizeof err) == -1, "procfs has a device?");
    CHECK(strstr(err, "no block device") != NULL, "procfs: '%s'", err);
    CHECK(strstr(err, "/proc/self/status") != NULL, "error does not name the file: '%s'", err);
    if (statfs("/dev/shm", &sf) == 0 && sf.f_type == 0x01021994 /* TMPFS_MAGIC */) {
        CHECK(devstat_find("/dev/shm", &d, err, sizeof err) == -1, "tmpfs has a device?");
        CHECK(strstr(err, "no block device") != NULL, "tmpfs: '%s'", err);
    } else {
        printf("note: /dev/shm is not tmpfs here; tmpfs answer not tested\n");
    }
    CHECK(devstat_find("/nonexistent/swarm-model.gguf", &d, err, sizeof err) == -1,
          "a missing file was mapped");
    CHECK(strstr(err, "/nonexistent/swarm-model.gguf") && strstr(err, strerror(ENOENT)),
          "missing file: '%s'", err);
}

/* A file on the test scratch folder: if that folder sits on a block device, the device found
 * is the one /sys/dev/block names for its st_dev (or, stacked, its disks), and an O_DIRECT
 * read of the file shows up in its counters as at least that many bytes in positive-sized
 * requests. Other processes' I/O can only add to a device-wide counter, never subtract. */
static void s_real_file(const char *dir)
{
    char path[PATH_MAX], link[64], real[PATH_MAX], err[512] = "";
    devstat_dev d;
    devstat_sample a, b;
    devstat_delta dd;
    struct stat st;
    void *buf = NULL;
    int fd;
    snprintf(path, sizeof path, "%s/test_devstat.bin", dir);
    fd = open(path, O_WRONLY | O_CREAT | O_TRUNC, 0644);
    CHECK(fd >= 0, "create %s: %s", path, strerror(errno));
    if (fd < 0)
        return;
    CHECK(posix_memalign(&buf, 4096, S_FILE_BYTES) == 0, "out of memory");
    memset(buf, 0x5a, S_FILE_BYTES);
    CHECK(write(fd, buf, S_FILE_BYTES) == (ssize_t)S_FILE_BYTES && fsync(fd) == 0,
          "write %s", path);
    close(fd);
    if (devstat_find(path, &d, err, sizeof err)) {
        CHECK(strstr(err, "no block device") != NULL, "no device, unclear reason: '%s'", err);
        printf("note: %s: %s (device counters not tested)\n", dir, err);
        goto out;
    }
    printf("note: %s is served by %s\n", dir, d.name);
    CHECK(d.n >= 1 && d.name[0], "device found but empty (%d stat files)", d.n);
    /* Independently: the device sysfs names for the file's st_dev. */
    CHECK(stat(path, &st) == 0, "stat");
    snprintf(link, sizeof link, "/sys/dev/block/%u:%u", major(st.st_dev), minor(st.st_dev));
    if (realpath(link, real)) {
        const char *base = strrchr(real, '/') + 1;
        CHECK(strncmp(d.name, base, strlen(base)) == 0, "device '%s', sysfs says %s", d.name,
              base);
    }
    /* Its device node, where /dev has one, names the same device. */
    char node[300], first[160];
    snprintf(first, sizeof first, "%.*s", (int)strcspn(d.name, " "), d.name);
    snprintf(node, sizeof node, "/dev/%s", first);
    if (stat(node, &st) == 0 && S_ISBLK(st.st_mode)) {
        devstat_dev dn;
        CHECK(devstat_find(node, &dn, err, sizeof err) == 0 && strcmp(dn.name, d.name) == 0,
              "%s names '%s', the file's device is '%s' (%s)", node, dn.name, d.name, err);
    }
    CHECK(devstat_read(&d, &a, err, sizeof err) == 0, "read: %s", err);
    fd = open(path, O_RDONLY | O_DIRECT);
    if (fd < 0) {
        printf("note: %s refuses O_DIRECT; device counters not tested\n", dir);
        goto out;
    }
    CHECK(pread(fd, buf, S_FILE_BYTES, 0) == (ssize_t)S_FILE_BYTES, "O_DIRECT read");
    close(fd);
    CHECK(devstat_read(&d, &b, err, sizeof err) == 0, "read: %s", err);
    devstat_diff(&a, &b, &dd);
    CHECK(dd.reads >= 1, "the device saw no read request");
    CHECK(dd.read_bytes >= S_FILE_BYTES, "the device read %llu bytes, the file is %u",
          (unsigned long long)dd.read_bytes, S_FILE_BYTES);
    CHECK(dd.avg_request_bytes > 0, "average request size %llu",
          (unsigned long long)dd.avg_request_bytes);
    CHECK(dd.util >= 0 && dd.util <= 1, "util %g", dd.util);
out:
    free(buf);
    unlink(path);
}

int main(void)
{
    const char *t = getenv("SWARM_TEST_TMP");
    char dir[PATH_MAX];
    snprintf(dir, sizeof dir, "%s", t && *t ? t : "tests/tmp");
    mkdir(dir, 0755);
    s_diff();
    s_no_device();
    s_real_file(dir);
    return CHECK_DONE("test_devstat");
}
