/* gguf_int.h — helpers the GGUF reader and writer share; not part of the API. gguf/ */
#ifndef SWARM_GGUF_INT_H
#define SWARM_GGUF_INT_H

#include <stddef.h>
#include <stdint.h>

/* a + b into *out; -1 on overflow. */
int gguf_checked_add(uint64_t a, uint64_t b, uint64_t *out);
int gguf_is_pow2(uint64_t x);
/* Bytes of a tensor; -1 with a reason on an unknown type, a bad shape or overflow. */
int gguf_tensor_nbytes(uint32_t type, uint32_t n_dims, const uint64_t *dims, uint64_t *out,
                       const char **why);
/* "PATH: problem" into err (truncated safely). */
void gguf_err(char *err, size_t errlen, const char *path, const char *fmt, ...)
    __attribute__((format(printf, 4, 5)));

#endif
