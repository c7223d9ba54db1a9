/* SPDX-License-Identifier: Apache-2.0 */
/*
 * Small JSON builder for machine-readable output of CPR tools (--json), and
 * a small reader for the logs tools read back. The only module that uses
 * cJSON. A cpri_json tree is owned by its root: adding a
 * child transfers ownership to the parent; cpri_json_free(root) frees all.
 */
#ifndef CPR_JSON_H
#define CPR_JSON_H

#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

#include "cpr_common.h" /* CPR_INTERNAL_API: libcpr-store parses JSON too */

typedef struct cpri_json cpri_json;

cpri_json *cpri_json_object(void);
cpri_json *cpri_json_array(void);
/* A lone number or string (copied), for cpri_json_append to an array; NULL on
 * allocation failure. */
cpri_json *cpri_json_number(double value);
/* 1 if the NUL-terminated s is valid UTF-8 (what cpri_json_string keeps as
 * it is; it replaces each invalid byte with U+FFFD). */
int cpri_utf8_valid(const char *s);
/* An integer, printed exactly (cpri_json_number may round one past 2^52). */
cpri_json *cpri_json_u64(uint64_t value);
cpri_json *cpri_json_string(const char *value);
cpri_json *cpri_json_null(void);
/* An object of n numbers, keys[i]: values[i]; NULL on allocation failure. */
cpri_json *cpri_json_numbers(const char *const *keys, const double *values, size_t n);
/* Each add returns 0 on success, -1 on allocation failure. */
int cpri_json_add_number(cpri_json *obj, const char *key, double value);
int cpri_json_add_string(cpri_json *obj, const char *key, const char *value);
/* A whole number written exactly: as a JSON number of its decimal digits
 * (a double past 2^53 would round it; JSON parsers that read integers, e.g.
 * Python's, read it exactly). */
int cpri_json_add_u64(cpri_json *obj, const char *key, uint64_t value);
int cpri_json_add_bool(cpri_json *obj, const char *key, int value);
int cpri_json_add_child(cpri_json *obj, const char *key, cpri_json *child);
int cpri_json_append(cpri_json *array, cpri_json *child);
/* Print compactly as one line followed by '\n'. Returns 0 or -1. */
int cpri_json_print(const cpri_json *root, FILE *out);
CPR_INTERNAL_API void cpri_json_free(cpri_json *root);

/*
 * Reading (for tools that read JSON logs). A parsed tree is owned by the
 * caller (cpri_json_free); the const pointers the getters return point into
 * it and live as long as it does.
 */

/* Parse one NUL-terminated JSON text; NULL if it is not valid JSON (or on
 * allocation failure). */
CPR_INTERNAL_API cpri_json *cpri_json_parse(const char *text);
int cpri_json_is_object(const cpri_json *value);
/* Member `key` of an object (case-sensitive); NULL if absent or `obj` is
 * not an object. */
CPR_INTERNAL_API const cpri_json *cpri_json_get(const cpri_json *obj, const char *key);
/* Member `key` as a number, string or boolean: 0 and *out set; -1 if
 * absent or of another type (*out untouched). */
CPR_INTERNAL_API int cpri_json_get_number(const cpri_json *obj, const char *key, double *out);
CPR_INTERNAL_API int cpri_json_get_string(const cpri_json *obj, const char *key, const char **out);
int cpri_json_get_bool(const cpri_json *obj, const char *key, int *out);
/* Elements of an array (0 and NULL for anything else). */
CPR_INTERNAL_API size_t cpri_json_array_size(const cpri_json *array);
CPR_INTERNAL_API const cpri_json *cpri_json_array_get(const cpri_json *array, size_t i);
/* The elements in order without the cost of an index each (array_get
 * walks the list): the first (NULL if none or not an array), then the one
 * after `element` (NULL after the last). */
CPR_INTERNAL_API const cpri_json *cpri_json_array_first(const cpri_json *array);
CPR_INTERNAL_API const cpri_json *cpri_json_array_next(const cpri_json *element);
/* A value that is a number: 0 and *out set, else -1. */
int cpri_json_number_value(const cpri_json *value, double *out);
/* A value that is a string: 0 and *out set (it lives as long as the tree), else -1. */
int cpri_json_string_value(const cpri_json *value, const char **out);

#endif /* CPR_JSON_H */
