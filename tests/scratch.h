/* scratch.h — the model tests' scratch folder: SWARM_TEST_TMP/NAME (tests/tmp/NAME when unset)
 * with the llama vocabulary fixture unpacked in it, and the tiny llama test_gen and test_spec
 * both generate. Include after tests/check.h. tests/ */
#ifndef SWARM_SCRATCH_H
#define SWARM_SCRATCH_H

#include <stdio.h>
#include <stdlib.h>

#include "arch/gen.h"
#include "base/util.h"
#include "tests/check.h"

/* dir = SWARM_TEST_TMP/name, made; vocab = dir/llama-spm.gguf, unpacked from
 * tests/fixtures/tok/llama-spm.gguf.gz (the tests run from the repository root) */
static inline void scratch_open(const char *name, char *dir, size_t dir_size, char *vocab,
                                size_t vocab_size)
{
    const char *base = getenv("SWARM_TEST_TMP") ? getenv("SWARM_TEST_TMP") : "tests/tmp";
    char cmd[2600];
    snprintf(dir, dir_size, "%s/%s", base, name);
    util_mkdir_p(dir);
    snprintf(vocab, vocab_size, "%s/llama-spm.gguf", dir);
    snprintf(cmd, sizeof cmd, "gzip -dc tests/fixtures/tok/llama-spm.gguf.gz > '%s'", vocab);
    CHECK(system(cmd) == 0, "cannot unpack the vocabulary fixture (run from the repository root)");
}

/* 2 layers x 64, 4 heads (2 kv), ff 96, q8_0, seed 3, on that vocabulary */
static inline arch_gen_opts scratch_tiny_llama(const char *vocab)
{
    return (arch_gen_opts){ .arch = "llama", .dim = 64, .n_layers = 2, .n_head = 4,
                            .n_head_kv = 2, .n_ff = 96, .vocab_from = vocab,
                            .type = QUANT_Q8_0, .n_ctx = 256, .seed = 3 };
}

#endif
