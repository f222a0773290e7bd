/* cpu.h — the machine's physical cores: the thread count every command that computes starts
 * from unless --threads says otherwise. base/ */
#ifndef SWARM_CPU_H
#define SWARM_CPU_H

/* Distinct (physical package, core) pairs among the online CPUs, as llama.cpp's tools count
 * them (a hyperthread's sibling shares its core's caches and units, so it adds little to
 * products bound by memory bandwidth). Read from /sys/devices/system/cpu/cpuN/topology;
 * where that cannot be read, the online CPUs (sysconf); at least 1. */
int cpu_physical_cores(void);

#endif
