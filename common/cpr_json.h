/* SPDX-License-Identifier: Apache-2.0 */
/*
 * Small JSON builder for machine-readable output of CPR tools (--json), and
 * a small reader for the logs tools read back. The only module that uses
 * cJSON. A cpr_json tree is owned by its root: adding a
 * child transfers ownership to the parent; cpr_json_free(root) frees all.
 */
#ifndef CPR_JSON_H
#define CPR_JSON_H

#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

typedef struct cpr_json cpr_json;

cpr_json *cpr_json_object(void);
cpr_json *cpr_json_array(void);
/* A lone number or string (copied), for cpr_json_append to an array; NULL on
 * allocation failure. */
cpr_json *cpr_json_number(double value);
cpr_json *cpr_json_string(const char *value);
cpr_json *cpr_json_null(void);
/* An object of n numbers, keys[i]: values[i]; NULL on allocation failure. */
cpr_json *cpr_json_numbers(const char *const *keys, const double *values, size_t n);
/* Each add returns 0 on success, -1 on allocation failure. */
int cpr_json_add_number(cpr_json *obj, const char *key, double value);
int cpr_json_add_string(cpr_json *obj, const char *key, const char *value);
int cpr_json_add_bool(cpr_json *obj, const char *key, int value);
int cpr_json_add_child(cpr_json *obj, const char *key, cpr_json *child);
int cpr_json_append(cpr_json *array, cpr_json *child);
/* Print compactly as one line followed by '\n'. Returns 0 or -1. */
int cpr_json_print(const cpr_json *root, FILE *out);
void cpr_json_free(cpr_json *root);

/*
 * Reading (for tools that read JSON logs). A parsed tree is owned by the
 * caller (cpr_json_free); the const pointers the getters return point into
 * it and live as long as it does.
 */

/* Parse one NUL-terminated JSON text; NULL if it is not valid JSON (or on
 * allocation failure). */
cpr_json *cpr_json_parse(const char *text);
int cpr_json_is_object(const cpr_json *value);
/* Member `key` of an object (case-sensitive); NULL if absent or `obj` is
 * not an object. */
const cpr_json *cpr_json_get(const cpr_json *obj, const char *key);
/* Member `key` as a number, string or boolean: 0 and *out set; -1 if
 * absent or of another type (*out untouched). */
int cpr_json_get_number(const cpr_json *obj, const char *key, double *out);
int cpr_json_get_string(const cpr_json *obj, const char *key, const char **out);
int cpr_json_get_bool(const cpr_json *obj, const char *key, int *out);
/* Elements of an array (0 and NULL for anything else). */
size_t cpr_json_array_size(const cpr_json *array);
const cpr_json *cpr_json_array_get(const cpr_json *array, size_t i);
/* A value that is a number: 0 and *out set, else -1. */
int cpr_json_number_value(const cpr_json *value, double *out);
/* A value that is a string: 0 and *out set (it lives as long as the tree), else -1. */
int cpr_json_string_value(const cpr_json *value, const char **out);

#endif /* CPR_JSON_H */
