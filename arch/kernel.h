/* kernel.h — the one layer function every arm runs: x' = x + silu(W (rmsnorm(x) . g)). arch/
 *
 * The only caller of BLAS in swarm. Split in three so a streamed layer can be computed chunk
 * by chunk as its rows arrive from disk:
 *   kernel_prepare  u = rmsnorm(x) . g            (needs g and x only)
 *   kernel_rows     y[r0:r0+n] = W[r0:r0+n, :] u  (one sgemv over n contiguous rows)
 *   kernel_finish   x += silu(y)
 * Bit-identity across arms: OpenBLAS gives the same bits for a row range as for the whole
 * matrix only when the range starts on a multiple of 4 rows ("Determinism" in docs/design.md),
 * so callers must start every row chunk at a multiple of KERNEL_ROW_ALIGN; kernel_rows
 * rejects anything else.
 */
#ifndef SWARM_KERNEL_H
#define SWARM_KERNEL_H

#include <stdint.h>

#define KERNEL_ROW_ALIGN 4
#define KERNEL_EPS 1e-5f

/* "OpenBLAS 0.3.21 ... SkylakeX": the library's build and the core kernel it picked. */
const char *kernel_blas_info(void);

/* Set BLAS threads for this process (1 in workers: several share 2 cores). */
void kernel_set_threads(int n);

void kernel_prepare(const float *g /* (d,) */, const float *x /* (d,) */, float *u /* (d,) */,
                    uint32_t d);
/* W points at row r0 (n rows of d floats). Returns 0, or -1 if r0 is not 4-aligned. */
int kernel_rows(const float *W /* (n, d) */, const float *u /* (d,) */, float *y /* (d,) */,
                uint32_t r0, uint32_t n, uint32_t d);
void kernel_finish(float *x /* (d,) */, const float *y /* (d,) */, uint32_t d);

/* Whole resident layer: prepare, one sgemv over all rows, finish. u, y: scratch (d,). */
void kernel_layer(const float *W, const float *g, float *x, float *u, float *y, uint32_t d);

/* Plain C loop of the same function in double accumulation (tests' independent check). */
void kernel_layer_naive(const float *W, const float *g, float *x, uint32_t d);

#endif
