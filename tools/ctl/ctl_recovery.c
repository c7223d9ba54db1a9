/* SPDX-License-Identifier: Apache-2.0 */
/*
 * cprctl recovery JOB: the job's recovery record (docs/model.md), the one
 * decision every process of the job acts on, decoded: generation, action,
 * cut and rewind step, problems, the reason with the estimator's numbers,
 * and what each shard restores. Read-only: records change only by the
 * trainers' compare-and-set.
 */
#include <stdlib.h>
#include <string.h>

#include "cpr/recovery.h"
#include "ctl.h"

static const struct {
    unsigned bit;
    const char *name;
} PROBLEMS[] = {
    {CPR_PLAN_NO_CUT, "no-cut"},
    {CPR_PLAN_SHARD_UNSAVED, "shard-unsaved"},
    {CPR_PLAN_DENSE_UNSAVED, "dense-unsaved"},
    {CPR_PLAN_RESHARDED, "resharded"},
};

/* "none", or the names of the bits, and any this cprctl does not know. */
static void problems_text(unsigned bits, char *out, size_t cap)
{
    size_t used = 0;
    unsigned known = 0;
    out[0] = '\0';
    for (size_t i = 0; i < sizeof PROBLEMS / sizeof PROBLEMS[0]; i++) {
        known |= PROBLEMS[i].bit;
        if ((bits & PROBLEMS[i].bit) && used < cap)
            used += (size_t)snprintf(out + used, cap - used, "%s%s", used ? "," : "",
                                     PROBLEMS[i].name);
    }
    if ((bits & ~known) && used < cap)
        used += (size_t)snprintf(out + used, cap - used, "%sunknown 0x%x", used ? "," : "",
                                 bits & ~known);
    if (!used)
        snprintf(out, cap, "none");
}

static void shard_row(ctl_table *t, const cpr_plan_shard *e)
{
    int store = e->source == CPR_SOURCE_STORE;
    ctl_table_cell(t, "%u", e->shard);
    ctl_table_cell(t, "%s", cpr_shard_source_name(e->source));
    ctl_table_cell(t, store ? "%llu" : "-", (unsigned long long)e->as_of);
    ctl_table_cell(t, "%s", store ? cpr_kind_name(e->kind) : "-");
    ctl_table_cell(t, store ? "%llu" : "-", (unsigned long long)e->step);
    if (e->dense == CPR_DENSE_BLOB) /* the part (shard, checkpoint) holding it */
        ctl_table_cell(t, "%s of shard %u at %llu", cpr_dense_source_name(e->dense),
                       e->dense_shard, (unsigned long long)e->dense_checkpoint);
    else
        ctl_table_cell(t, "%s", cpr_dense_source_name(e->dense));
}

/* bytes[0..len) for a terminal: printable ASCII as it is, every other byte
 * as \xNN (a record's bytes come from any writer; they must not drive the
 * terminal, 8-bit and UTF-8 C1 controls included). */
static int put_escaped(FILE *out, const void *bytes, size_t len)
{
    const unsigned char *b = bytes;
    int bad = 0;
    for (size_t i = 0; i < len; i++) {
        if (b[i] >= 0x20 && b[i] < 0x7f)
            bad |= fputc(b[i], out) == EOF;
        else
            bad |= fprintf(out, "\\x%02x", b[i]) < 0;
    }
    return bad;
}

static int print_text(const char *job, uint64_t generation, const cpr_recovery_plan *plan)
{
    char problems[128];
    ctl_table head, shards;
    ctl_table_init(&head, 2);
    ctl_table_cell(&head, "job");
    ctl_table_cell(&head, "%s", job);
    ctl_table_cell(&head, "generation");
    ctl_table_cell(&head, "%llu", (unsigned long long)generation);
    if (!plan) {
        ctl_table_cell(&head, "record");
        ctl_table_cell(&head, "none (no recovery was ever recorded for this job)");
        return ctl_table_print(&head, stdout) ? EXIT_FAILED : 0;
    }
    problems_text(cpr_recovery_plan_problems(plan), problems, sizeof problems);
    int full = cpr_recovery_plan_action(plan) == CPR_PLAN_FULL;
    ctl_table_cell(&head, "action");
    ctl_table_cell(&head, "%s", cpr_plan_action_name(cpr_recovery_plan_action(plan)));
    ctl_table_cell(&head, "cut");
    ctl_table_cell(&head, full ? "%llu" : "-", (unsigned long long)cpr_recovery_plan_cut(plan));
    ctl_table_cell(&head, "rewind step");
    ctl_table_cell(&head, full ? "%llu" : "-",
                   (unsigned long long)cpr_recovery_plan_rewind_step(plan));
    ctl_table_cell(&head, "problems");
    ctl_table_cell(&head, "%s", problems);
    int bad = ctl_table_print(&head, stdout);
    /* Outside the table, whole: a reason can be longer than a table cell. */
    const char *reason = cpr_recovery_plan_reason(plan);
    bad |= fputs("reason       ", stdout) == EOF;
    bad |= put_escaped(stdout, reason, strlen(reason));
    bad |= fputc('\n', stdout) == EOF;
    ctl_table_init(&shards, 6);
    static const char *const cols[] = {"SHARD", "SOURCE", "AS_OF", "KIND", "STEP", "DENSE"};
    for (size_t i = 0; i < 6; i++)
        ctl_table_cell(&shards, "%s", cols[i]);
    for (size_t i = 0; i < cpr_recovery_plan_count(plan); i++)
        shard_row(&shards, cpr_recovery_plan_shard(plan, i));
    fputc('\n', stdout);
    bad |= ctl_table_print(&shards, stdout);
    return bad ? EXIT_FAILED : 0;
}

/* The recorded bytes as a JSON tree (they decoded as a plan, so they are
 * JSON); NULL only when out of memory. */
static cpri_json *recorded_json(const void *bytes, size_t len)
{
    char *text = malloc(len + 1);
    if (!text)
        return NULL;
    memcpy(text, bytes, len);
    text[len] = '\0';
    cpri_json *p = cpri_json_parse(text);
    free(text);
    return p;
}

int ctl_cmd_recovery(ctl *c)
{
    const char *job = c->args[0];
    uint64_t generation = 0;
    void *bytes = NULL;
    size_t len = 0;
    cpr_recovery_plan *plan = NULL;
    cpr_status st = cpr_client_recovery_get(c->client, job, &generation, &bytes, &len);
    if (st)
        return ctl_fail(c, st);
    if (generation && (st = cpr_recovery_plan_decode(bytes, len, &plan)) != CPR_OK) {
        /* Say what is there before failing: the generation and the bytes. */
        fprintf(stderr, "cprctl: recovery: job %s generation %llu holds %zu bytes this "
                "cprctl cannot read as a plan: ", job, (unsigned long long)generation, len);
        put_escaped(stderr, bytes, len < 4096 ? len : 4096);
        fputc('\n', stderr);
        free(bytes);
        return ctl_fail(c, st);
    }
    int rc;
    if (c->json) {
        /* The plan as recorded (its encoding is already JSON, checked by
         * the decode above); null without a record. */
        ctl_json j;
        ctl_json_begin(c, &j);
        ctl_jstr(&j, j.root, "job", job);
        ctl_jnum(&j, j.root, "generation", generation);
        cpri_json *p = plan ? recorded_json(bytes, len) : cpri_json_null();
        ctl_jchild(&j, j.root, "plan", p);
        rc = ctl_json_emit(c, &j, 0);
    } else {
        rc = print_text(job, generation, plan);
    }
    cpr_recovery_plan_destroy(plan);
    free(bytes);
    return rc;
}
