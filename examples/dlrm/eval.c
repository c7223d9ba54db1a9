/* SPDX-License-Identifier: Apache-2.0 */
/*
 * Evaluation of the DLRM on the held-out lines: exact ROC AUC (sort the
 * scores once; a group of tied scores contributes its positives times the
 * negatives below it plus half the negatives within it, which is the
 * average-rank Mann-Whitney statistic) and log loss from the logits.
 */
#include <math.h>
#include <stdlib.h>

#include "dlrm_internal.h"
#include "dlrm_ops.h"

typedef struct scored {
    float score;
    float label;
} scored;

static int by_score(const void *a, const void *b)
{
    float x = ((const scored *)a)->score, y = ((const scored *)b)->score;
    return (x > y) - (x < y);
}

cpr_status dlrm_auc(const float *scores, const float *labels, size_t n, double *auc)
{
    double positives = 0, negatives = 0, pairs = 0;
    for (size_t i = 0; i < n; i++) {
        if (!isfinite(scores[i]))
            return cpr_fail(CPR_INVALID_ARGUMENT, "AUC: score %zu is not finite", i);
        if (labels[i] != 0.0f && labels[i] != 1.0f)
            return cpr_fail(CPR_INVALID_ARGUMENT, "AUC: label %zu is %g, not 0 or 1", i,
                            (double)labels[i]);
        positives += labels[i];
    }
    negatives = (double)n - positives;
    if (positives == 0 || negatives == 0)
        return cpr_fail(CPR_FAILED_PRECONDITION, "AUC needs both classes (%zu samples, %.0f "
                        "positive)", n, positives);
    scored *s = malloc(n * sizeof *s);
    if (!s)
        return cpr_fail(CPR_NO_MEMORY, "out of memory sorting %zu scores", n);
    for (size_t i = 0; i < n; i++)
        s[i] = (scored){scores[i], labels[i]};
    qsort(s, n, sizeof *s, by_score);
    double neg_below = 0;
    for (size_t i = 0; i < n;) {
        double pos_here = 0, neg_here = 0;
        size_t j = i;
        for (; j < n && s[j].score == s[i].score; j++) {
            pos_here += s[j].label;
            neg_here += 1.0f - s[j].label;
        }
        pairs += pos_here * (neg_below + 0.5 * neg_here);
        neg_below += neg_here;
        i = j;
    }
    free(s);
    *auc = pairs / (positives * negatives);
    return CPR_OK;
}

double dlrm_logloss(const float *logits, const float *labels, size_t n)
{
    return dlrm_bce_logits(logits, labels, n, NULL);
}

/* Logits and labels of up to `max` held-out samples into growing arrays. */
static cpr_status score_holdout(dlrm_model *m, dlrm_loader *l, dlrm_batch *b, uint64_t max,
                                float *logits, float *labels, size_t *n)
{
    cpr_status st = dlrm_loader_holdout_rewind(l);
    size_t done = 0;
    while (st == CPR_OK && done < max) {
        st = dlrm_loader_holdout_next(l, b);
        if (st || b->size == 0)
            break;
        if (b->size > max - done)
            b->size = (size_t)(max - done);
        st = dlrm_model_forward(m, b, logits + done);
        memcpy(labels + done, b->labels, b->size * sizeof *labels);
        done += b->size;
    }
    *n = done;
    return st;
}

cpr_status dlrm_evaluate(dlrm_model *m, dlrm_loader *l, dlrm_batch *b, uint64_t max_samples,
                         dlrm_eval_result *out)
{
    uint64_t max = dlrm_loader_holdout_lines(l);
    size_t n = 0;
    dlrm_eval_result r = {0};
    if (max_samples && max_samples < max)
        max = max_samples;
    if (max == 0)
        return cpr_fail(CPR_FAILED_PRECONDITION, "no held-out samples to evaluate on");
    if (b->cap > dlrm_model_config(m)->max_batch)
        return cpr_fail(CPR_INVALID_ARGUMENT, "evaluation batch larger than the model's "
                        "max_batch");
    float *logits = malloc(max * sizeof *logits), *labels = malloc(max * sizeof *labels);
    cpr_status st = logits && labels ? score_holdout(m, l, b, max, logits, labels, &n)
                                     : cpr_fail(CPR_NO_MEMORY, "out of memory for %llu "
                                                "scores", (unsigned long long)max);
    if (st == CPR_OK && n == 0)
        st = cpr_fail(CPR_FAILED_PRECONDITION, "no well-formed held-out line");
    if (st == CPR_OK) {
        r.samples = n;
        for (size_t i = 0; i < n; i++)
            r.positives += labels[i] == 1.0f;
        r.logloss = dlrm_logloss(logits, labels, n);
        if (r.positives == 0 || r.positives == n)
            r.auc = NAN; /* undefined with one class */
        else
            st = dlrm_auc(logits, labels, n, &r.auc);
    }
    free(logits);
    free(labels);
    if (st == CPR_OK)
        *out = r;
    return st;
}
