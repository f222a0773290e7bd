/* gguf.h — GGUF v3 container: a validating reader and a streaming writer. gguf/
 *
 * Spec: ggml docs/gguf.md (v3 and v2, little-endian; v2 differs from v3 only in not allowing
 * big-endian files, so one parser reads both). The reader trusts nothing: every count is
 * bounded by the bytes remaining in the file, every string length and tensor extent is checked
 * for overflow and for lying inside the file, tensors may not overlap, and the alignment must
 * be a power of two. Errors name the file and the problem ("model.gguf: tensor 3 'blk.1.w'
 * extends past end of file (offset 123, size 456, file 400)"). The reader never crashes on
 * bad input (fuzzed by tests/test_gguf.c's corruption table).
 */
#ifndef SWARM_GGUF_H
#define SWARM_GGUF_H

#include <stddef.h>
#include <stdint.h>

#define GGUF_MAGIC 0x46554747u /* "GGUF" little-endian */
#define GGUF_VERSION 3
#define GGUF_VERSION_MIN 2 /* v1 (u32 counts) predates every published model we read */
#define GGUF_DEFAULT_ALIGNMENT 32

/* Value types (pinned by the spec). */
typedef enum {
    GGUF_T_UINT8 = 0, GGUF_T_INT8 = 1, GGUF_T_UINT16 = 2, GGUF_T_INT16 = 3,
    GGUF_T_UINT32 = 4, GGUF_T_INT32 = 5, GGUF_T_FLOAT32 = 6, GGUF_T_BOOL = 7,
    GGUF_T_STRING = 8, GGUF_T_ARRAY = 9, GGUF_T_UINT64 = 10, GGUF_T_INT64 = 11,
    GGUF_T_FLOAT64 = 12,
} gguf_vtype;

/* ggml tensor types we use (pinned by ggml). Only F32 is produced; others are parsed for size. */
#define GGML_TYPE_F32 0
#define GGML_TYPE_F16 1

#define GGUF_MAX_DIMS 4
/* Sanity bounds (a file that exceeds them is rejected as corrupt, not allocated). */
#define GGUF_MAX_TENSORS (1u << 20)
#define GGUF_MAX_KV (1u << 20)
#define GGUF_MAX_STRLEN (1u << 20)    /* bytes in one key or string value */
#define GGUF_MAX_ARRAY (1u << 28)     /* elements */
#define GGUF_MAX_HEADER (256u << 20)  /* bytes of header+kv+tensor info we will parse */

typedef struct {
    char *name;            /* NUL-terminated, owned by the gguf_file */
    uint32_t n_dims;
    uint64_t dims[GGUF_MAX_DIMS]; /* ne[0] fastest-varying (ggml order) */
    uint32_t type;         /* GGML_TYPE_* */
    uint64_t offset;       /* absolute byte offset in the file (data section + relative off) */
    uint64_t nbytes;       /* size in bytes */
} gguf_tensor;

typedef struct {
    char *key;             /* owned */
    uint32_t type;         /* gguf_vtype */
    /* scalar value (all integer types widened; bool as 0/1) */
    uint64_t u64;
    int64_t i64;
    double f64;
    char *str;             /* GGUF_T_STRING: owned, NUL-terminated (embedded NULs rejected) */
    uint32_t arr_type;     /* GGUF_T_ARRAY: element type */
    uint64_t arr_n;        /* GGUF_T_ARRAY: element count */
    uint64_t *arr_u64;     /* GGUF_T_ARRAY of integer types: widened copy (owned); else NULL.
                            * Signed elements are stored as (uint64_t)int64: use gguf_arr_i64. */
    double *arr_f64;       /* GGUF_T_ARRAY of f32/f64: widened copy (owned, exact); else NULL */
    char **arr_str;        /* GGUF_T_ARRAY of strings: arr_n pointers into arr_blob; else NULL */
    char *arr_blob;        /* the strings, each NUL-terminated, one allocation (owned) */
} gguf_kv;

typedef struct {
    char *path;            /* owned copy */
    uint64_t file_size;
    uint32_t version;
    uint32_t alignment;    /* general.alignment or 32 */
    uint64_t data_offset;  /* absolute start of the tensor data section */
    uint64_t n_kv;
    gguf_kv *kv;           /* n_kv */
    uint64_t n_tensors;
    gguf_tensor *tensors;  /* n_tensors */
} gguf_file;

/* Parse and validate the header of `path` (reads only metadata, not tensor data).
 * Returns a new gguf_file (caller frees with gguf_close) or NULL with err filled. */
gguf_file *gguf_open(const char *path, char *err, size_t errlen);
void gguf_close(gguf_file **g);

const gguf_kv *gguf_find_kv(const gguf_file *g, const char *key);
const gguf_tensor *gguf_find_tensor(const gguf_file *g, const char *name);
/* Typed getters: 0 on success, -1 (err filled, naming file and key) if missing or wrong type. */
int gguf_get_u64(const gguf_file *g, const char *key, uint64_t *out, char *err, size_t errlen);
int gguf_get_str(const gguf_file *g, const char *key, const char **out, char *err, size_t errlen);
/* Any integer type whose value fits u32 / i64. */
int gguf_get_u32(const gguf_file *g, const char *key, uint32_t *out, char *err, size_t errlen);
int gguf_get_i64(const gguf_file *g, const char *key, int64_t *out, char *err, size_t errlen);
/* f32 or f64 (an f64 outside float's range is an error). */
int gguf_get_f32(const gguf_file *g, const char *key, float *out, char *err, size_t errlen);
int gguf_get_bool(const gguf_file *g, const char *key, int *out, char *err, size_t errlen);
/* An array kv whose elements are of class `want`: GGUF_T_STRING, GGUF_T_FLOAT32 (f32 or f64
 * elements) or GGUF_T_INT32 (any integer or bool element). *kv stays owned by g; *n is its count.
 * Read elements with the gguf_arr_* accessors below. */
int gguf_get_arr(const gguf_file *g, const char *key, uint32_t want, const gguf_kv **kv,
                 uint64_t *n, char *err, size_t errlen);
/* Element i of an array kv (i < kv->arr_n, class as checked by gguf_get_arr). The string is
 * NUL-terminated and owned by the file (embedded NULs are rejected on read). */
const char *gguf_arr_str(const gguf_kv *kv, uint64_t i);
float gguf_arr_f32(const gguf_kv *kv, uint64_t i);
int64_t gguf_arr_i64(const gguf_kv *kv, uint64_t i);

/* ---- writer: metadata first, then tensor data streamed in declaration order ---- */
typedef struct gguf_writer gguf_writer;

gguf_writer *gguf_writer_new(uint32_t alignment); /* alignment power of two; also written as general.alignment */
void gguf_writer_free(gguf_writer **w);
int gguf_writer_kv_str(gguf_writer *w, const char *key, const char *val);
int gguf_writer_kv_u32(gguf_writer *w, const char *key, uint32_t val);
int gguf_writer_kv_u64(gguf_writer *w, const char *key, uint64_t val);
int gguf_writer_kv_f32(gguf_writer *w, const char *key, float val);
int gguf_writer_kv_i32(gguf_writer *w, const char *key, int32_t val);
int gguf_writer_kv_bool(gguf_writer *w, const char *key, int val);
int gguf_writer_kv_arr_u64(gguf_writer *w, const char *key, const uint64_t *vals, uint64_t n);
int gguf_writer_kv_arr_i32(gguf_writer *w, const char *key, const int32_t *vals, uint64_t n);
int gguf_writer_kv_arr_f32(gguf_writer *w, const char *key, const float *vals, uint64_t n);
/* n NUL-terminated strings (copied). */
int gguf_writer_kv_arr_str(gguf_writer *w, const char *key, const char *const *vals, uint64_t n);
/* Copy a kv read by gguf_open (any scalar, string or array type) with its type and value. */
int gguf_writer_kv_copy(gguf_writer *w, const gguf_kv *kv);
/* Declare a tensor (data comes later). dims in ggml order (ne[0] first). Returns index or -1. */
int gguf_writer_tensor(gguf_writer *w, const char *name, uint32_t type, uint32_t n_dims,
                       const uint64_t *dims);
/* Write header, kv and tensor infos (and padding up to the data section) to fd. */
int gguf_writer_write_header(gguf_writer *w, int fd, char *err, size_t errlen);
/* Write tensor data for tensor `idx` (must be called in index order, nbytes exact); pads to
 * alignment after it. May be called in several pieces for one tensor (appends). */
int gguf_writer_write_data(gguf_writer *w, int fd, int idx, const void *data, uint64_t nbytes,
                           char *err, size_t errlen);
/* Absolute file offset at which tensor idx's data will start (valid after all tensors declared). */
uint64_t gguf_writer_tensor_offset(const gguf_writer *w, int idx);
/* Absolute file offset of kv `key`'s value bytes (string: its bytes; array: its first element),
 * valid as soon as that kv is added (kvs come before the tensor infos). Lets a caller pwrite a fixed-size value it only
 * knows after streaming the data (model_gen's checksums). 0, or -1 if no such key. */
int gguf_writer_kv_value_offset(const gguf_writer *w, const char *key, uint64_t *off);

#endif
