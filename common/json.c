/* SPDX-License-Identifier: Apache-2.0 */
/*
 * cpr_json.h on top of cJSON (Debian libcjson-dev): a thin wrapper so that
 * the rest of CPR never includes cJSON and we can swap it without churn.
 */
#include <cjson/cJSON.h>
#include <stdlib.h>

#include "cpr_json.h"

/* cpr_json is cJSON under another name: the wrapper only hides the type. */
#define AS_CJSON(j) ((cJSON *)(j))

cpr_json *cpr_json_object(void) { return (cpr_json *)cJSON_CreateObject(); }
cpr_json *cpr_json_array(void) { return (cpr_json *)cJSON_CreateArray(); }
cpr_json *cpr_json_number(double value) { return (cpr_json *)cJSON_CreateNumber(value); }

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
