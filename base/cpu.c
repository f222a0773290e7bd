/* cpu.c — the machine's physical cores from sysfs topology, online CPUs only. base/ */
#include "base/cpu.h"

#include <stdio.h>
#include <stdlib.h>
#include <unistd.h>

#define CPU_MAX 4096 /* CPU numbers scanned: more than any machine this runs on */

/* One integer from a sysfs file; -1 when it cannot be read. */
static long s_read_long(const char *path)
{
    FILE *f = fopen(path, "r");
    long v = -1;
    if (!f)
        return -1;
    if (fscanf(f, "%ld", &v) != 1)
        v = -1;
    fclose(f);
    return v;
}

/* 1 when cpuN is online: cpu0 often has no "online" file (it cannot be taken offline). */
static int s_online(int cpu)
{
    char p[96];
    snprintf(p, sizeof p, "/sys/devices/system/cpu/cpu%d/online", cpu);
    long v = s_read_long(p);
    return v != 0; /* -1: no file, online */
}

static int s_online_cpus(void)
{
    long n = sysconf(_SC_NPROCESSORS_ONLN);
    return n > 0 ? (int)n : 1;
}

int cpu_physical_cores(void)
{
    long *seen = malloc(2 * CPU_MAX * sizeof *seen); /* (package, core) pairs */
    int n = 0, missing = 0;
    if (!seen)
        return s_online_cpus();
    for (int cpu = 0; cpu < CPU_MAX; cpu++) {
        char p[128];
        snprintf(p, sizeof p, "/sys/devices/system/cpu/cpu%d/topology/core_id", cpu);
        long core = s_read_long(p);
        if (core < 0) {
            snprintf(p, sizeof p, "/sys/devices/system/cpu/cpu%d", cpu);
            if (access(p, F_OK)) /* CPU numbers are dense: the first absent one ends them */
                break;
            if (s_online(cpu))
                missing = 1; /* an online CPU without topology: trust sysconf instead */
            continue;
        }
        if (!s_online(cpu))
            continue;
        snprintf(p, sizeof p, "/sys/devices/system/cpu/cpu%d/topology/physical_package_id",
                 cpu);
        long pkg = s_read_long(p);
        int dup = 0;
        for (int i = 0; i < n && !dup; i++)
            dup = seen[2 * i] == pkg && seen[2 * i + 1] == core;
        if (!dup) {
            seen[2 * n] = pkg;
            seen[2 * n + 1] = core;
            n++;
        }
    }
    free(seen);
    return n > 0 && !missing ? n : s_online_cpus();
}
