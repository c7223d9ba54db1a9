/* SPDX-License-Identifier: Apache-2.0 */
/*
 * cpr_json.h on top of cJSON (Debian libcjson-dev): a thin wrapper so that
 * the rest of CPR never includes cJSON and we can swap it without churn.
 * Building, printing, and reading back (parse and typed getters).
 */
#include <cjson/cJSON.h>
#include <stdlib.h>

#include "cpr_json.h"

/* cpr_json is cJSON under another name: the wrapper only hides the type. */
#define AS_CJSON(j) ((cJSON *)(j))

cpr_json *cpr_json_object(void) { return (cpr_json *)cJSON_CreateObject(); }
cpr_json *cpr_json_array(void) { return (cpr_json *)cJSON_CreateArray(); }
cpr_json *cpr_json_number(double value) { return (cpr_json *)cJSON_CreateNumber(value); }
cpr_json *cpr_json_string(const char *value) { return (cpr_json *)cJSON_CreateString(value); }
cpr_json *cpr_json_null(void) { return (cpr_json *)cJSON_CreateNull(); }

cpr_json *cpr_json_numbers(const char *const *keys, const double *values, size_t n)
{
    cpr_json *o = cpr_json_object();
    for (size_t i = 0; o && i < n; i++)
        if (cpr_json_add_number(o, keys[i], values[i])) {
            cpr_json_free(o);
            o = NULL;
        }
    return o;
}

int cpr_json_add_number(cpr_json *obj, const char *key, double value)
{
    return cJSON_AddNumberToObject(AS_CJSON(obj), key, value) ? 0 : -1;
}

int cpr_json_add_string(cpr_json *obj, const char *key, const char *value)
{
    return cJSON_AddStringToObject(AS_CJSON(obj), key, value) ? 0 : -1;
}

int cpr_json_add_bool(cpr_json *obj, const char *key, int value)
{
    return cJSON_AddBoolToObject(AS_CJSON(obj), key, value) ? 0 : -1;
}

int cpr_json_add_child(cpr_json *obj, const char *key, cpr_json *child)
{
    if (!child)
        return -1;
    return cJSON_AddItemToObject(AS_CJSON(obj), key, AS_CJSON(child)) ? 0 : -1;
}

int cpr_json_append(cpr_json *array, cpr_json *child)
{
    if (!child)
        return -1;
    return cJSON_AddItemToArray(AS_CJSON(array), AS_CJSON(child)) ? 0 : -1;
}

int cpr_json_print(const cpr_json *root, FILE *out)
{
    char *text = cJSON_PrintUnformatted(AS_CJSON(root));
    if (!text)
        return -1;
    int rc = fprintf(out, "%s\n", text) < 0 ? -1 : 0;
    cJSON_free(text);
    return rc;
}

void cpr_json_free(cpr_json *root)
{
    cJSON_Delete(AS_CJSON(root));
}

/* ---- reading ---------------------------------------------------------------- */

cpr_json *cpr_json_parse(const char *text)
{
    return (cpr_json *)cJSON_Parse(text);
}

int cpr_json_is_object(const cpr_json *value)
{
    return value && cJSON_IsObject(AS_CJSON(value));
}

const cpr_json *cpr_json_get(const cpr_json *obj, const char *key)
{
    if (!cpr_json_is_object(obj))
        return NULL;
    return (const cpr_json *)cJSON_GetObjectItemCaseSensitive(AS_CJSON(obj), key);
}

int cpr_json_number_value(const cpr_json *value, double *out)
{
    if (!value || !cJSON_IsNumber(AS_CJSON(value)))
        return -1;
    *out = cJSON_GetNumberValue(AS_CJSON(value));
    return 0;
}

int cpr_json_string_value(const cpr_json *value, const char **out)
{
    if (!value || !cJSON_IsString(AS_CJSON(value)))
        return -1;
    *out = cJSON_GetStringValue(AS_CJSON(value));
    return 0;
}

int cpr_json_get_number(const cpr_json *obj, const char *key, double *out)
{
    return cpr_json_number_value(cpr_json_get(obj, key), out);
}

int cpr_json_get_string(const cpr_json *obj, const char *key, const char **out)
{
    const cpr_json *v = cpr_json_get(obj, key);
    if (!v || !cJSON_IsString(AS_CJSON(v)))
        return -1;
    *out = cJSON_GetStringValue(AS_CJSON(v));
    return 0;
}

int cpr_json_get_bool(const cpr_json *obj, const char *key, int *out)
{
    const cpr_json *v = cpr_json_get(obj, key);
    if (!v || !cJSON_IsBool(AS_CJSON(v)))
        return -1;
    *out = cJSON_IsTrue(AS_CJSON(v)) ? 1 : 0;
    return 0;
}

size_t cpr_json_array_size(const cpr_json *array)
{
    if (!array || !cJSON_IsArray(AS_CJSON(array)))
        return 0;
    return (size_t)cJSON_GetArraySize(AS_CJSON(array));
}

const cpr_json *cpr_json_array_get(const cpr_json *array, size_t i)
{
    if (i >= cpr_json_array_size(array))
        return NULL;
    return (const cpr_json *)cJSON_GetArrayItem(AS_CJSON(array), (int)i);
}
