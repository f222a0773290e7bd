/* check.h — the tests' tiny harness: CHECK counts, the closing line is "N passed, N failed". tests/ */
#ifndef SWARM_CHECK_H
#define SWARM_CHECK_H

#include <stdio.h>

static int check_pass_, check_fail_;

#define CHECK(cond, ...)                                                           \
    do {                                                                           \
        if (cond) {                                                                \
            check_pass_++;                                                         \
        } else {                                                                   \
            check_fail_++;                                                         \
            fprintf(stderr, "FAIL %s:%d: %s: ", __FILE__, __LINE__, #cond);        \
            fprintf(stderr, __VA_ARGS__);                                          \
            fprintf(stderr, "\n");                                                 \
        }                                                                          \
    } while (0)

#define CHECK_DONE(name)                                                           \
    (printf("%s: %d passed, %d failed\n", (name), check_pass_, check_fail_),       \
     check_fail_ ? 1 : 0)

#endif
