/* fuzz_proto.c — libFuzzer target for proto_decode and proto_peek on untrusted frames. proto/fuzz/
 * Seeds: proto/fuzz/corpus/ (one valid frame per type, from `test_proto --corpus DIR`).
 * Run: ./fuzz_proto -max_total_time=30 -max_len=4096 /tmp/fuzz-work proto/fuzz/corpus
 */
// Build (a line comment: the glob would end a block comment):
//   clang -g -O1 -fsanitize=fuzzer,address,undefined -I. proto/fuzz/fuzz_proto.c proto/*.c \
//       $(pkg-config --cflags --libs msgpack)
#include "proto/proto.h"

#include <stdint.h>
#include <stdlib.h>
#include <string.h>

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static float s_x[PROTO_MAX_DIM * 4]; /* acts of up to 4 positions */
static proto_msg s_msg;

/* A decode must return 0, -1 or -2, and give a NUL-terminated reason whenever it fails. */
static void s_decode(const uint8_t *data, size_t size, uint32_t expect_dim, uint32_t max_pos)
{
    char err[256];
    memset(&s_msg, 0, sizeof(s_msg));
    s_msg.u.act.x = s_x;
    int rc = proto_decode_n(data, size, expect_dim, max_pos, &s_msg, err, sizeof(err));
    if (rc != 0 && rc != -1 && rc != -2)
        abort();
    if (rc != 0 && (err[0] == '\0' || strnlen(err, sizeof(err)) == sizeof(err)))
        abort();
    if (rc == 0 && (s_msg.type == 0 || s_msg.type >= MSG_TYPE_MAX_))
        abort();
    if (rc == 0 && (s_msg.type == MSG_ACT || s_msg.type == MSG_RESULT) &&
        (s_msg.u.act.dim == 0 || s_msg.u.act.dim > PROTO_MAX_DIM ||
         s_msg.u.act.n_trace > PROTO_MAX_TRACE || (expect_dim && s_msg.u.act.dim != expect_dim) ||
         (s_msg.u.act.n_pos > 1 && s_msg.u.act.n_pos > max_pos)))
        abort();
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    uint32_t v, t;
    s_decode(data, size, 0, 1);
    s_decode(data, size, 16, 1);
    s_decode(data, size, 0, 4);
    s_decode(data, size, 8, 4);
    (void)proto_peek(data, size, &v, &t);
    return 0;
}
