/* SPDX-License-Identifier: Apache-2.0 */
/*
 * What the replay drivers of the fuzz targets share (replay_main.c for
 * fuzz_wire, replay_handlers.c for fuzz_handlers): a seeded generator, the
 * deterministic mutations of a seed (bit flips, truncations, insertions,
 * extreme bytes), every file of a corpus directory through the target, and
 * writing the generated seeds out as a corpus for libFuzzer.
 */
#ifndef CPR_FUZZ_REPLAY_UTIL_H
#define CPR_FUZZ_REPLAY_UTIL_H

#include <stddef.h>
#include <stdint.h>

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

/* xorshift64: the same sequence on every run. */
uint64_t replay_next(void);

/* Mutate buf[keep..len) in place (cap bytes of room; the first `keep`
 * bytes, a type byte, stay); returns the new length. */
size_t replay_mutate(uint8_t *buf, size_t len, size_t cap, size_t keep);

/* Every file of `dir` but README.md and dot files through the target;
 * returns how many (0 if the directory is missing). */
int replay_dir(const char *dir);

/* Write data as dir/name; 0 on success. */
int replay_write(const char *dir, const char *name, const uint8_t *data, size_t len);

#endif /* CPR_FUZZ_REPLAY_UTIL_H */
