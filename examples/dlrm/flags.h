/* SPDX-License-Identifier: Apache-2.0 */
/*
 * flags.h - strict flag values for cpr-dlrm's command line (main.c): whole
 * numbers and finite numbers within bounds, and the value of `--flag V` or
 * `--flag=V`. A refusal is printed on stderr as "cpr-dlrm: ..." naming the
 * flag, and the caller exits 2; nothing is half-parsed into the options.
 */
#ifndef CPR_DLRM_FLAGS_H
#define CPR_DLRM_FLAGS_H

#include <stdint.h>

/* Decimal digits only (no sign, no spaces) for a value in [lo, hi]: 0 and
 * *out set, or -1 with the refusal printed. */
int dlrm_flag_u64(const char *flag, const char *text, uint64_t lo, uint64_t hi, uint64_t *out);

/* A finite number within lo and hi; `ends` says which bounds are included,
 * as an interval is written: "[]", "[)", "(]" or "()". 0 and *out set, or -1
 * with the refusal printed. */
int dlrm_flag_number(const char *flag, const char *text, double lo, double hi, const char *ends,
                     double *out);

/* A CPU list's form: numbers and ranges (N or N-M) separated by commas, as
 * "1" or "2-7,12". 0, or -1 with the refusal printed; which CPUs the machine
 * has is the client's to check (cpr_client_options.thread_cpus). */
int dlrm_flag_cpu_list(const char *flag, const char *text);

/* argv[*i] as `flag V` (then *i moves to V) or `flag=V`: the value V, or
 * NULL when argv[*i] is not this flag. A flag without its value sets
 * *missing to 1 (returning NULL) with the refusal printed. */
const char *dlrm_flag_value(int argc, char **argv, int *i, const char *flag, int *missing);

#endif /* CPR_DLRM_FLAGS_H */
