/* util.h — small shared helpers: monotonic time, sizes, percentiles, digests. base/ */
#ifndef SWARM_UTIL_H
#define SWARM_UTIL_H

#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>

/* CLOCK_MONOTONIC in nanoseconds. */
uint64_t util_now_ns(void);
/* CLOCK_REALTIME in nanoseconds (only for timestamps in results). */
uint64_t util_wall_ns(void);
/* Sleep to an absolute CLOCK_MONOTONIC deadline (TIMER_ABSTIME, restarts on EINTR). */
void util_sleep_until_ns(uint64_t deadline_ns);
/* Set PR_SET_TIMERSLACK to 1 ns so sub-millisecond sleeps are honoured (default slack 50 us). */
void util_min_timerslack(void);

/* Parse "600M", "64K", "1G", "4096", "1.5G" (binary units) into bytes. 0 / -1. */
int util_parse_size(const char *s, uint64_t *out);
/* Format bytes as "600.0 MiB" into buf. Returns buf. */
const char *util_fmt_size(uint64_t bytes, char *buf, size_t len);

/* p in [0,100]; v sorted ascending, n > 0. Nearest-rank with linear interpolation. */
double util_percentile(const double *v, size_t n, double p);
/* Sort doubles ascending in place. */
void util_sort_doubles(double *v, size_t n);

/* Peak resident set (VmHWM) and current (VmRSS) of pid (0 = self), bytes; 0 if unknown. */
uint64_t util_vmhwm_bytes(int pid);
uint64_t util_vmrss_bytes(int pid);
/* Reset this process's VmHWM (writes 5 to /proc/self/clear_refs). 0 / -1. */
int util_reset_hwm(void);
/* Bytes this process caused to be fetched from storage (/proc/self/io read_bytes). */
uint64_t util_io_read_bytes(void);
/* Same for another process (0 if unreadable). */
uint64_t util_io_read_bytes_pid(int pid);

/* SHA-256 streaming digest (OpenSSL EVP); hex is 65 bytes. */
typedef struct util_sha256 util_sha256;
util_sha256 *util_sha256_new(void);
void util_sha256_update(util_sha256 *s, const void *p, size_t n);
void util_sha256_final_hex(util_sha256 *s, char hex[65]); /* frees s */

/* Deterministic input for step `step`: d floats in [-1,1) from splitmix64(seed, step). */
void util_step_input(uint64_t seed, uint64_t step, float *x, int d);
uint64_t util_splitmix64(uint64_t *state);

/* The project's error line, "WHAT: problem", into a caller's buffer (what NULL: "error").
 * Every module's error helper is this (file, key or peer first, then what is wrong). */
void util_errf(char *err, size_t errlen, const char *what, const char *fmt, ...)
    __attribute__((format(printf, 4, 5)));
void util_verrf(char *err, size_t errlen, const char *what, const char *fmt, va_list ap);

/* mkdir -p: path and every missing folder above it (0755). 0 / -1 with errno. */
int util_mkdir_p(const char *path);

/* git revision baked in at build time ("unknown" if none). */
const char *util_git_rev(void);

#endif
