/* log.c — stderr logging with a role tag and monotonic timestamp. base/ */
#include "base/log.h"

#include <stdarg.h>
#include <stdio.h>
#include <string.h>
#include <time.h>

static char s_role[32] = "swarm";
static int s_level = 1;

void log_set_role(const char *role)
{
    snprintf(s_role, sizeof s_role, "%s", role);
}

void log_set_level(int level)
{
    s_level = level;
}

int log_get_level(void)
{
    return s_level;
}

static void s_vlog(const char *tag, const char *fmt, va_list ap)
{
    struct timespec ts;
    char line[2048];
    int n;

    clock_gettime(CLOCK_MONOTONIC, &ts);
    n = snprintf(line, sizeof line, "[%6lld.%03ld %s] %s", (long long)ts.tv_sec,
                 ts.tv_nsec / 1000000, s_role, tag);
    if (n < 0 || (size_t)n >= sizeof line)
        n = 0;
    vsnprintf(line + n, sizeof line - (size_t)n, fmt, ap);
    /* One write per line so lines from several processes do not interleave mid-line. */
    fprintf(stderr, "%s\n", line);
}

#define S_DEFINE(fn, lvl, tag)                                                     \
    void fn(const char *fmt, ...)                                                  \
    {                                                                              \
        va_list ap;                                                                \
        if (s_level < (lvl))                                                       \
            return;                                                                \
        va_start(ap, fmt);                                                         \
        s_vlog(tag, fmt, ap);                                                      \
        va_end(ap);                                                                \
    }

S_DEFINE(log_error, 0, "error: ")
S_DEFINE(log_warn, 0, "warning: ")
S_DEFINE(log_info, 1, "")
S_DEFINE(log_debug, 2, "debug: ")
