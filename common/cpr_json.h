/* SPDX-License-Identifier: Apache-2.0 */
/*
 * Small JSON builder for machine-readable output of CPR tools (--json). The
 * only module that uses cJSON. A cpr_json tree is owned by its root: adding a
 * child transfers ownership to the parent; cpr_json_free(root) frees all.
 */
#ifndef CPR_JSON_H
#define CPR_JSON_H

#include <stdint.h>
#include <stdio.h>

typedef struct cpr_json cpr_json;

cpr_json *cpr_json_object(void);
cpr_json *cpr_json_array(void);
/* A lone number, for cpr_json_append to an array; NULL on allocation failure. */
cpr_json *cpr_json_number(double value);
/* Each add returns 0 on success, -1 on allocation failure. */
int cpr_json_add_number(cpr_json *obj, const char *key, double value);
int cpr_json_add_string(cpr_json *obj, const char *key, const char *value);
int cpr_json_add_bool(cpr_json *obj, const char *key, int value);
int cpr_json_add_child(cpr_json *obj, const char *key, cpr_json *child);
int cpr_json_append(cpr_json *array, cpr_json *child);
/* Print compactly as one line followed by '\n'. Returns 0 or -1. */
int cpr_json_print(const cpr_json *root, FILE *out);
void cpr_json_free(cpr_json *root);

#endif /* CPR_JSON_H */
