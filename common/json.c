/* SPDX-License-Identifier: Apache-2.0 */
/*
 * cpr_json.h on top of cJSON (Debian libcjson-dev): a thin wrapper so that
 * the rest of CPR never includes cJSON and we can swap it without churn.
 * Building, printing, and reading back (parse and typed getters).
 */
#include <cjson/cJSON.h>
#include <stdlib.h>
#include <string.h>

#include "cpr_json.h"

/* cpri_json is cJSON under another name: the wrapper only hides the type. */
#define AS_CJSON(j) ((cJSON *)(j))

cpri_json *cpri_json_object(void) { return (cpri_json *)cJSON_CreateObject(); }
cpri_json *cpri_json_array(void) { return (cpri_json *)cJSON_CreateArray(); }
cpri_json *cpri_json_number(double value) { return (cpri_json *)cJSON_CreateNumber(value); }
/* Length of the valid UTF-8 sequence at s (RFC 3629: no overlong forms, no
 * surrogates, nothing above U+10FFFF), or 0 if it is not one. */
static size_t utf8_seq(const unsigned char *s)
{
    if (s[0] < 0x80)
        return 1;
    size_t n = s[0] >= 0xC2 && s[0] <= 0xDF ? 2 : s[0] >= 0xE0 && s[0] <= 0xEF ? 3
             : s[0] >= 0xF0 && s[0] <= 0xF4 ? 4 : 0;
    for (size_t i = 1; i < n; i++)
        if ((s[i] & 0xC0) != 0x80)
            return 0;
    if ((s[0] == 0xE0 && s[1] < 0xA0) || (s[0] == 0xED && s[1] > 0x9F) ||
        (s[0] == 0xF0 && s[1] < 0x90) || (s[0] == 0xF4 && s[1] > 0x8F))
        return 0;
    return n;
}

int cpri_utf8_valid(const char *s)
{
    const unsigned char *p = (const unsigned char *)s;
    for (size_t n; *p; p += n)
        if ((n = utf8_seq(p)) == 0)
            return 0;
    return 1;
}

/* cJSON copies a string's bytes as they are, so a path or name that is not
 * UTF-8 made output no JSON parser accepts. NULL if `s` is valid UTF-8 (use
 * it); else a copy (malloc'd) with each invalid byte replaced by U+FFFD. */
static char *utf8_clean(const char *s)
{
    const unsigned char *p = (const unsigned char *)s;
    size_t len = 0, bad = 0;
    while (p[len]) {
        size_t n = utf8_seq(p + len);
        bad += n == 0;
        len += n ? n : 1;
    }
    if (!bad)
        return NULL;
    char *out = malloc(len + 2 * bad + 1);
    if (!out)
        return NULL;
    size_t o = 0;
    for (size_t i = 0; i < len;) {
        size_t n = utf8_seq(p + i);
        if (n) {
            memcpy(out + o, p + i, n);
            o += n;
            i += n;
        } else {
            memcpy(out + o, "\xEF\xBF\xBD", 3);
            o += 3;
            i++;
        }
    }
    out[o] = '\0';
    return out;
}

cpri_json *cpri_json_string(const char *value)
{
    char *clean = value ? utf8_clean(value) : NULL;
    cpri_json *j = (cpri_json *)cJSON_CreateString(clean ? clean : value);
    free(clean);
    return j;
}
cpri_json *cpri_json_null(void) { return (cpri_json *)cJSON_CreateNull(); }

cpri_json *cpri_json_numbers(const char *const *keys, const double *values, size_t n)
{
    cpri_json *o = cpri_json_object();
    for (size_t i = 0; o && i < n; i++)
        if (cpri_json_add_number(o, keys[i], values[i])) {
            cpri_json_free(o);
            o = NULL;
        }
    return o;
}

int cpri_json_add_number(cpri_json *obj, const char *key, double value)
{
    return cJSON_AddNumberToObject(AS_CJSON(obj), key, value) ? 0 : -1;
}

int cpri_json_add_string(cpri_json *obj, const char *key, const char *value)
{
    return cpri_json_add_child(obj, key, cpri_json_string(value));
}

/* Integers as their digits: cJSON prints a number with 15 significant
 * digits when that reads back within a relative DBL_EPSILON, which rounds
 * integers from about 4.5e15 on (9007199254740979 printed as
 * 9.00719925474098e+15). */
cpri_json *cpri_json_u64(uint64_t value)
{
    char digits[24];
    snprintf(digits, sizeof digits, "%llu", (unsigned long long)value);
    return (cpri_json *)cJSON_CreateRaw(digits);
}

int cpri_json_add_u64(cpri_json *obj, const char *key, uint64_t value)
{
    return cpri_json_add_child(obj, key, cpri_json_u64(value));
}

int cpri_json_add_bool(cpri_json *obj, const char *key, int value)
{
    return cJSON_AddBoolToObject(AS_CJSON(obj), key, value) ? 0 : -1;
}

int cpri_json_add_child(cpri_json *obj, const char *key, cpri_json *child)
{
    if (!child)
        return -1;
    return cJSON_AddItemToObject(AS_CJSON(obj), key, AS_CJSON(child)) ? 0 : -1;
}

int cpri_json_append(cpri_json *array, cpri_json *child)
{
    if (!child)
        return -1;
    return cJSON_AddItemToArray(AS_CJSON(array), AS_CJSON(child)) ? 0 : -1;
}

int cpri_json_print(const cpri_json *root, FILE *out)
{
    char *text = cJSON_PrintUnformatted(AS_CJSON(root));
    if (!text)
        return -1;
    int rc = fprintf(out, "%s\n", text) < 0 ? -1 : 0;
    cJSON_free(text);
    return rc;
}

void cpri_json_free(cpri_json *root)
{
    cJSON_Delete(AS_CJSON(root));
}

/* ---- reading ---------------------------------------------------------------- */

cpri_json *cpri_json_parse(const char *text)
{
    /* The whole text is one value: a torn line with junk after a complete
     * object is refused, not read up to the object's end. */
    return (cpri_json *)cJSON_ParseWithOpts(text, NULL, 1);
}

int cpri_json_is_object(const cpri_json *value)
{
    return value && cJSON_IsObject(AS_CJSON(value));
}

const cpri_json *cpri_json_get(const cpri_json *obj, const char *key)
{
    if (!cpri_json_is_object(obj))
        return NULL;
    return (const cpri_json *)cJSON_GetObjectItemCaseSensitive(AS_CJSON(obj), key);
}

int cpri_json_number_value(const cpri_json *value, double *out)
{
    if (!value || !cJSON_IsNumber(AS_CJSON(value)))
        return -1;
    *out = cJSON_GetNumberValue(AS_CJSON(value));
    return 0;
}

int cpri_json_string_value(const cpri_json *value, const char **out)
{
    if (!value || !cJSON_IsString(AS_CJSON(value)))
        return -1;
    *out = cJSON_GetStringValue(AS_CJSON(value));
    return 0;
}

int cpri_json_get_number(const cpri_json *obj, const char *key, double *out)
{
    return cpri_json_number_value(cpri_json_get(obj, key), out);
}

int cpri_json_get_string(const cpri_json *obj, const char *key, const char **out)
{
    const cpri_json *v = cpri_json_get(obj, key);
    if (!v || !cJSON_IsString(AS_CJSON(v)))
        return -1;
    *out = cJSON_GetStringValue(AS_CJSON(v));
    return 0;
}

int cpri_json_get_bool(const cpri_json *obj, const char *key, int *out)
{
    const cpri_json *v = cpri_json_get(obj, key);
    if (!v || !cJSON_IsBool(AS_CJSON(v)))
        return -1;
    *out = cJSON_IsTrue(AS_CJSON(v)) ? 1 : 0;
    return 0;
}

size_t cpri_json_array_size(const cpri_json *array)
{
    if (!array || !cJSON_IsArray(AS_CJSON(array)))
        return 0;
    return (size_t)cJSON_GetArraySize(AS_CJSON(array));
}

const cpri_json *cpri_json_array_first(const cpri_json *array)
{
    return array && cJSON_IsArray(AS_CJSON(array)) ? (const cpri_json *)AS_CJSON(array)->child
                                                     : NULL;
}

const cpri_json *cpri_json_array_next(const cpri_json *element)
{
    return element ? (const cpri_json *)AS_CJSON(element)->next : NULL;
}

const cpri_json *cpri_json_array_get(const cpri_json *array, size_t i)
{
    if (i >= cpri_json_array_size(array))
        return NULL;
    return (const cpri_json *)cJSON_GetArrayItem(AS_CJSON(array), (int)i);
}
