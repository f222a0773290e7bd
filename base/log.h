/* log.h — stderr logging with role and id ("coord", "w1"); results never go here. base/ */
#ifndef SWARM_LOG_H
#define SWARM_LOG_H

/* Role shown in every line, e.g. "coord", "w1", "ssd". Copied. */
void log_set_role(const char *role);
/* 0 = errors only, 1 = info (default), 2 = debug. */
void log_set_level(int level);
int log_get_level(void);

void log_error(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
void log_warn(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
void log_info(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
void log_debug(const char *fmt, ...) __attribute__((format(printf, 1, 2)));

#endif
