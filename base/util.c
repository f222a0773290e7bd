/* util.c — time, sizes, percentiles, /proc readings, SHA-256, deterministic inputs. base/ */
#include "base/util.h"

#include <ctype.h>
#include <errno.h>
#include <fcntl.h>
#include <math.h>
#include <openssl/evp.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#ifndef SWARM_GIT_REV
#define SWARM_GIT_REV "unknown"
#endif

uint64_t util_now_ns(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
}

uint64_t util_wall_ns(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    return (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
}

void util_sleep_until_ns(uint64_t deadline_ns)
{
    struct timespec ts = { .tv_sec = (time_t)(deadline_ns / 1000000000ull),
                           .tv_nsec = (long)(deadline_ns % 1000000000ull) };
    while (clock_nanosleep(CLOCK_MONOTONIC, TIMER_ABSTIME, &ts, NULL) == EINTR)
        ;
}

void util_min_timerslack(void)
{
    prctl(PR_SET_TIMERSLACK, 1UL, 0, 0, 0);
}

int util_parse_size(const char *s, uint64_t *out)
{
    char *end;
    double v;
    double mul = 1;

    if (!s || !*s)
        return -1;
    errno = 0;
    v = strtod(s, &end);
    if (errno || end == s || v < 0 || !isfinite(v))
        return -1;
    switch (toupper((unsigned char)*end)) {
    case '\0': break;
    case 'K': mul = 1024.0; end++; break;
    case 'M': mul = 1024.0 * 1024; end++; break;
    case 'G': mul = 1024.0 * 1024 * 1024; end++; break;
    case 'T': mul = 1024.0 * 1024 * 1024 * 1024; end++; break;
    case 'B': break;
    default: return -1;
    }
    if (*end == 'i' || *end == 'I')
        end++;
    if (*end == 'B' || *end == 'b')
        end++;
    if (*end)
        return -1;
    if (v * mul > 1.8e19)
        return -1;
    *out = (uint64_t)(v * mul + 0.5);
    return 0;
}

const char *util_fmt_size(uint64_t bytes, char *buf, size_t len)
{
    const char *units[] = { "B", "KiB", "MiB", "GiB", "TiB" };
    double v = (double)bytes;
    int u = 0;
    while (v >= 1024 && u < 4) {
        v /= 1024;
        u++;
    }
    snprintf(buf, len, u ? "%.1f %s" : "%.0f %s", v, units[u]);
    return buf;
}

static int s_cmp_double(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

void util_sort_doubles(double *v, size_t n)
{
    if (n > 1)
        qsort(v, n, sizeof *v, s_cmp_double);
}

double util_percentile(const double *v, size_t n, double p)
{
    double rank, frac;
    size_t lo;
    if (n == 0)
        return NAN;
    if (n == 1)
        return v[0];
    rank = p / 100.0 * (double)(n - 1);
    lo = (size_t)rank;
    if (lo >= n - 1)
        return v[n - 1];
    frac = rank - (double)lo;
    return v[lo] + frac * (v[lo + 1] - v[lo]);
}

static uint64_t s_status_kb(int pid, const char *key)
{
    char path[64], line[256];
    FILE *f;
    uint64_t kb = 0;
    size_t klen = strlen(key);

    if (pid)
        snprintf(path, sizeof path, "/proc/%d/status", pid);
    else
        snprintf(path, sizeof path, "/proc/self/status");
    f = fopen(path, "r");
    if (!f)
        return 0;
    while (fgets(line, sizeof line, f)) {
        if (!strncmp(line, key, klen) && line[klen] == ':') {
            kb = strtoull(line + klen + 1, NULL, 10);
            break;
        }
    }
    fclose(f);
    return kb * 1024;
}

uint64_t util_vmhwm_bytes(int pid)
{
    return s_status_kb(pid, "VmHWM");
}

uint64_t util_vmrss_bytes(int pid)
{
    return s_status_kb(pid, "VmRSS");
}

int util_reset_hwm(void)
{
    int fd = open("/proc/self/clear_refs", O_WRONLY);
    int rc;
    if (fd < 0)
        return -1;
    rc = write(fd, "5", 1) == 1 ? 0 : -1;
    close(fd);
    return rc;
}

uint64_t util_io_read_bytes(void)
{
    return util_io_read_bytes_pid(0);
}

uint64_t util_io_read_bytes_pid(int pid)
{
    char line[256], path[64];
    uint64_t v = 0;
    FILE *f;
    if (pid)
        snprintf(path, sizeof path, "/proc/%d/io", pid);
    else
        snprintf(path, sizeof path, "/proc/self/io");
    f = fopen(path, "r");
    if (!f)
        return 0;
    while (fgets(line, sizeof line, f)) {
        if (!strncmp(line, "read_bytes:", 11)) {
            v = strtoull(line + 11, NULL, 10);
            break;
        }
    }
    fclose(f);
    return v;
}

struct util_sha256 {
    EVP_MD_CTX *ctx;
};

util_sha256 *util_sha256_new(void)
{
    util_sha256 *s = calloc(1, sizeof *s);
    if (!s)
        return NULL;
    s->ctx = EVP_MD_CTX_new();
    if (!s->ctx || EVP_DigestInit_ex(s->ctx, EVP_sha256(), NULL) != 1) {
        EVP_MD_CTX_free(s->ctx);
        free(s);
        return NULL;
    }
    return s;
}

void util_sha256_update(util_sha256 *s, const void *p, size_t n)
{
    EVP_DigestUpdate(s->ctx, p, n);
}

void util_sha256_final_hex(util_sha256 *s, char hex[65])
{
    unsigned char md[32];
    unsigned int len = 0;
    EVP_DigestFinal_ex(s->ctx, md, &len);
    for (unsigned i = 0; i < 32; i++)
        snprintf(hex + 2 * i, 3, "%02x", md[i]);
    EVP_MD_CTX_free(s->ctx);
    free(s);
}

uint64_t util_splitmix64(uint64_t *state)
{
    uint64_t z = (*state += 0x9e3779b97f4a7c15ull);
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    return z ^ (z >> 31);
}

void util_step_input(uint64_t seed, uint64_t step, float *x, int d)
{
    uint64_t st = seed * 0x100000001b3ull ^ (step + 1) * 0x9e3779b97f4a7c15ull;
    for (int i = 0; i < d; i++) {
        /* 24 random bits -> [-1, 1): exact in f32, so the input is the same bits everywhere. */
        uint32_t r = (uint32_t)(util_splitmix64(&st) >> 40);
        x[i] = (float)r / 8388608.0f - 1.0f;
    }
}

int util_mkdir_p(const char *path)
{
    char tmp[4096];
    if (snprintf(tmp, sizeof tmp, "%s", path) >= (int)sizeof tmp) {
        errno = ENAMETOOLONG;
        return -1;
    }
    for (char *p = tmp + 1; *p; p++) {
        if (*p != '/')
            continue;
        *p = 0;
        if (mkdir(tmp, 0755) && errno != EEXIST)
            return -1;
        *p = '/';
    }
    return mkdir(tmp, 0755) && errno != EEXIST ? -1 : 0;
}

const char *util_git_rev(void)
{
    return SWARM_GIT_REV;
}

void util_verrf(char *err, size_t errlen, const char *what, const char *fmt, va_list ap)
{
    if (!err || !errlen)
        return;
    int n = snprintf(err, errlen, "%s: ", what ? what : "error");
    if (n < 0 || (size_t)n >= errlen)
        return;
    vsnprintf(err + n, errlen - (size_t)n, fmt, ap);
}

void util_errf(char *err, size_t errlen, const char *what, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    util_verrf(err, errlen, what, fmt, ap);
    va_end(ap);
}
