/* SPDX-License-Identifier: Apache-2.0 */
/*
 * dlrm.h - the reference DLRM trainer of the CPR examples (cpr_dlrm, not an
 * installed API): the model (bottom MLP, one cpr_emb table per categorical
 * feature, pairwise dot interaction, top MLP, sigmoid + binary cross-entropy),
 * a Criteo data loader with a held-out split and exact resume, evaluation
 * (exact AUC, log loss), and a training loop with hooks at step boundaries
 * where checkpointing and failure injection plug in. docs/dlrm.md describes
 * the model, the formats and the hooks.
 *
 * Ownership: every handle is created and destroyed by its caller; pointers
 * passed in are borrowed for the call unless a comment says otherwise.
 * Threading: a model, loader or trainer is used by one thread at a time.
 * Errors: cpr_status with cpr_errmsg(); out-parameters are written only on
 * success. A failed call leaves its object unchanged unless stated.
 */
#ifndef CPR_DLRM_H
#define CPR_DLRM_H

#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

#include <cjson/cJSON.h>

#include "cpr/data.h"
#include "cpr/embedding.h"
#include "cpr/status.h"

#define DLRM_MAX_LAYERS 16        /* linear layers per MLP */
#define DLRM_MAX_WIDTH 65536u     /* widest layer */

/* ---- configuration ------------------------------------------------------------ */

/* Layer widths of an MLP, "13-64-16" style. */
typedef struct dlrm_layers {
    uint32_t count;                        /* widths given, 1..DLRM_MAX_LAYERS+1 */
    uint32_t size[DLRM_MAX_LAYERS + 1];
} dlrm_layers;

/* Parse "W1-W2-...-Wn" (each 1..DLRM_MAX_WIDTH, at most DLRM_MAX_LAYERS+1
 * widths). CPR_INVALID_ARGUMENT with the reason otherwise. */
cpr_status dlrm_layers_parse(const char *text, dlrm_layers *out);

typedef enum dlrm_optimizer { DLRM_OPT_SGD = 0, DLRM_OPT_ADAGRAD = 1 } dlrm_optimizer;

typedef struct dlrm_config {
    uint32_t num_tables;          /* categoricals C1..C(num_tables) used, 1..26 */
    uint64_t table_rows;          /* rows of every table (the hash modulus) */
    uint32_t emb_dim;             /* embedding width = bottom MLP output width */
    dlrm_layers bottom;           /* widths incl. the input: 13-...-emb_dim */
    dlrm_layers top;              /* widths after the interaction (input width
                                     implied), the last one 1 */
    dlrm_optimizer optimizer;     /* for the MLP weights */
    float lr;                     /* MLP learning rate */
    float eps;                    /* Adagrad epsilon (MLPs and tables) */
    cpr_optimizer emb_optimizer;  /* the tables' optimizer (cpr_emb's) */
    float emb_lr;                 /* the tables' learning rate */
    uint32_t num_shards;          /* shards per table (cpr_emb sharding) */
    cpr_shard_scheme shard_scheme;
    unsigned track;               /* CPR_TRACK_* bits for every table */
    double ssu_rate;              /* passed to cpr_emb (0: its default) */
    uint64_t ssu_capacity;        /* passed to cpr_emb (0: its default) */
    cpr_device_kind device;       /* where the tables live; MLPs are on the CPU */
    int cuda_device;
    uint32_t max_batch;           /* largest batch train/forward accept */
    uint64_t seed;                /* MLP init and (mixed per table) table init */
} dlrm_config;

/* The defaults: 26 tables of 100000 rows, dim 16, bottom 13-64-16, top
 * 128-64-1, Adagrad lr 0.05 for the MLPs, row-wise Adagrad lr 0.05 for the
 * tables, eps 1e-8, 1 shard (range), no tracking, CPU, batch <= 128, seed 0. */
void dlrm_config_init(dlrm_config *cfg);

/* ---- batches ------------------------------------------------------------------ */

/*
 * A mini-batch in the model's layout. `indices` is table-major: table t's
 * row indices are indices[t * cap .. t * cap + size). A plain value type the
 * loader fills; dlrm_batch_init allocates, dlrm_batch_release frees.
 */
typedef struct dlrm_batch {
    size_t size;        /* samples held */
    size_t cap;         /* samples it can hold */
    uint32_t num_tables;
    float *dense;       /* cap x 13 */
    int64_t *indices;   /* num_tables x cap */
    float *labels;      /* cap, 0 or 1 */
} dlrm_batch;

cpr_status dlrm_batch_init(dlrm_batch *batch, size_t cap, uint32_t num_tables);
/* Frees the arrays; a zeroed or released batch is a no-op. */
void dlrm_batch_release(dlrm_batch *batch);

/* ---- the model ------------------------------------------------------------------ */

typedef struct dlrm_model dlrm_model;

/*
 * Create a model: MLP weights ~ N(0, 2/(in+out)), biases ~ N(0, 1/out), from
 * cfg->seed; tables from cpr_emb (seed mixed with the table number), each
 * split into cfg->num_shards shards. Errors: CPR_INVALID_ARGUMENT (the
 * message names the field), CPR_NO_MEMORY, CPR_CUDA (device tables asked for
 * but not available).
 */
cpr_status dlrm_model_create(const dlrm_config *cfg, dlrm_model **out);
/* NULL is a no-op. */
void dlrm_model_destroy(dlrm_model *model);

/* The configuration in use (valid while the model lives). */
const dlrm_config *dlrm_model_config(const dlrm_model *model);

/*
 * One step of mini-batch training: forward, mean binary cross-entropy over
 * the batch, backward, then the MLP optimizer step and the tables' sparse
 * updates (cpr_emb_backward, which also feeds the trackers); the step counter
 * goes up by one. *loss (may be NULL) receives the batch's mean loss.
 * Errors: CPR_INVALID_ARGUMENT (empty or too large batch, index outside a
 * table: nothing changed), CPR_CUDA (the model may be partly updated).
 */
cpr_status dlrm_model_train_step(dlrm_model *model, const dlrm_batch *batch, double *loss);

/* Logits of the batch (batch->size floats) without changing any parameter. */
cpr_status dlrm_model_forward(dlrm_model *model, const dlrm_batch *batch, float *logits);

/* Steps applied so far; set by dlrm_model_dense_load or explicitly (a
 * recovery that rewinds). */
uint64_t dlrm_model_step(const dlrm_model *model);
void dlrm_model_set_step(dlrm_model *model, uint64_t step);

/* Table t (0-based, < num_tables), owned by the model: the checkpoint code
 * selects, gathers, applies and wipes shards through it. */
cpr_emb *dlrm_model_table(dlrm_model *model, uint32_t t);

/* Number of MLP parameters (weights and biases of both MLPs). */
uint64_t dlrm_model_dense_params(const dlrm_model *model);

/*
 * The dense state as a byte string: the step counter, every MLP weight and
 * bias and their optimizer state, versioned, little-endian, ending in a
 * CRC32C (format in docs/dlrm.md). dlrm_model_dense_bytes() is its exact
 * size; save needs cap >= it (CPR_INVALID_ARGUMENT otherwise).
 */
size_t dlrm_model_dense_bytes(const dlrm_model *model);
cpr_status dlrm_model_dense_save(const dlrm_model *model, void *buf, size_t cap, size_t *len);
/*
 * Restore what dense_save wrote (the step counter included). Errors:
 * CPR_CORRUPT (wrong magic, length or checksum), CPR_INVALID_ARGUMENT (an
 * unknown version, or a blob of another architecture or optimizer). The
 * model is unchanged on failure.
 */
cpr_status dlrm_model_dense_load(dlrm_model *model, const void *buf, size_t len);

/* ---- the data loader --------------------------------------------------------- */

typedef struct dlrm_loader dlrm_loader;

typedef struct dlrm_loader_options {
    const char *path;          /* Criteo TSV or CSV (cpr_criteo_open, AUTO) */
    uint32_t num_tables;       /* as the model's */
    uint64_t table_rows;       /* as the model's */
    double holdout;            /* fraction in [0, 1): the last ceil(fraction x
                                  data lines) lines are held out for evaluation */
    uint64_t shuffle_window;   /* 0: file order; else samples shuffled within
                                  consecutive windows of this many */
    uint64_t seed;             /* the shuffle's RNG */
} dlrm_loader_options;

/*
 * Open the file for training and evaluation. With a holdout the file is
 * scanned once for its line count (and the split's byte offset). Errors:
 * CPR_NOT_FOUND, CPR_IO, CPR_INVALID_ARGUMENT (bad options, or no training
 * line left), CPR_NO_MEMORY.
 */
cpr_status dlrm_loader_open(const dlrm_loader_options *opts, dlrm_loader **out);
/* NULL is a no-op. */
void dlrm_loader_close(dlrm_loader *loader);

/*
 * Fill `batch` (size set, at most batch->cap) with the next training samples.
 * A batch never spans two epochs: the last one of an epoch may be short, and
 * the call after it starts the next epoch from the first line. Malformed
 * lines are skipped and counted. Errors: CPR_IO, CPR_INVALID_ARGUMENT (batch
 * of other tables), CPR_FAILED_PRECONDITION (an epoch without one good line).
 */
cpr_status dlrm_loader_next(dlrm_loader *loader, dlrm_batch *batch);

/* Completed epochs (the last sample of an epoch completes it). */
uint64_t dlrm_loader_epoch(const dlrm_loader *loader);
uint64_t dlrm_loader_train_lines(const dlrm_loader *loader);
uint64_t dlrm_loader_holdout_lines(const dlrm_loader *loader);
/* Malformed lines skipped so far (training and held-out reads). */
uint64_t dlrm_loader_malformed(const dlrm_loader *loader);

/* Held-out samples: rewind to the first, then read batches until size 0. */
cpr_status dlrm_loader_holdout_rewind(dlrm_loader *loader);
cpr_status dlrm_loader_holdout_next(dlrm_loader *loader, dlrm_batch *batch);

/*
 * The training position as a small blob (DLRM_LOADER_STATE_BYTES: epoch,
 * reader position of the current shuffle window, the RNG state before that
 * window was shuffled, samples already served from it; CRC32C at the end).
 * Loading it into a loader of the same file and options continues with
 * exactly the samples the saving loader would have returned (the RNG and
 * epoch come from the blob, not from the options' seed). Errors of load:
 * CPR_CORRUPT (magic, length, checksum), CPR_INVALID_ARGUMENT (another
 * version, split or window; or, after repositioning, a window shorter than
 * the blob says: the file changed), CPR_IO. The loader is unchanged after
 * CPR_CORRUPT and the first kind of CPR_INVALID_ARGUMENT.
 */
#define DLRM_LOADER_STATE_BYTES 112
cpr_status dlrm_loader_state_save(const dlrm_loader *loader, void *buf, size_t cap,
                                  size_t *len);
cpr_status dlrm_loader_state_load(dlrm_loader *loader, const void *buf, size_t len);

/* ---- evaluation ------------------------------------------------------------------ */

/*
 * Exact ROC AUC of scores against 0/1 labels: the Mann-Whitney statistic with
 * tied scores given their average rank (a tie between a positive and a
 * negative counts one half). Errors: CPR_INVALID_ARGUMENT (a non-finite
 * score, a label other than 0 or 1), CPR_FAILED_PRECONDITION (only one
 * class present), CPR_NO_MEMORY.
 */
cpr_status dlrm_auc(const float *scores, const float *labels, size_t n, double *auc);

/* Mean binary cross-entropy of sigmoid(logits) against labels (natural log),
 * computed from the logits so it never takes log(0). 0 when n is 0. */
double dlrm_logloss(const float *logits, const float *labels, size_t n);

typedef struct dlrm_eval_result {
    uint64_t samples;
    uint64_t positives;
    double auc;       /* NaN when the samples hold a single class */
    double logloss;
} dlrm_eval_result;

/* Score the held-out samples (at most max_samples of them; 0: all) with
 * `batch` as scratch. CPR_FAILED_PRECONDITION when there are none. */
cpr_status dlrm_evaluate(dlrm_model *model, dlrm_loader *loader, dlrm_batch *batch,
                         uint64_t max_samples, dlrm_eval_result *out);

/* ---- the training loop and its hooks --------------------------------------- */

typedef struct dlrm_trainer dlrm_trainer;

/*
 * Where checkpointing and failure injection plug in. Every callback may be
 * NULL; each runs on the training thread at a step boundary, where no batch
 * is in flight, so it may use the model (tables, dense blob, step counter)
 * and the loader (state blob) freely, and may rewind both (full recovery:
 * load an older dense blob and loader state and apply older rows; the loop
 * continues from dlrm_model_step(), so lost steps are recomputed). The time
 * spent in callbacks is reported as hook_s, apart from training time. A
 * callback that returns non-OK ends the run with that status.
 */
typedef struct dlrm_hooks {
    void *ctx;
    /* Before each step's batch is read: failure injection (wipe a shard and
     * recover), or resuming once at the start. */
    cpr_status (*before_step)(void *ctx, dlrm_trainer *trainer);
    /* After each step's update (dlrm_model_step() is the step just done):
     * start a checkpoint, poll background saves. */
    cpr_status (*after_step)(void *ctx, dlrm_trainer *trainer);
    /* After the last step and the final evaluation, before the summary:
     * drain saves, final checkpoint. */
    cpr_status (*on_finish)(void *ctx, dlrm_trainer *trainer);
    /* Add fields to the summary event (checkpoint bytes, PLS, ...): a cJSON
     * object the trainer owns and prints after the call. */
    void (*on_summary)(void *ctx, dlrm_trainer *trainer, cJSON *summary);
} dlrm_hooks;

/* Progress for a front end to print (the library prints nothing). */
typedef struct dlrm_progress {
    uint64_t step, steps_total;   /* steps_total 0 when the run is by epochs */
    uint64_t epoch;
    double loss;                  /* mean training loss since the last report */
    double elapsed_s;
    double steps_per_s;           /* training steps per second of wall time */
    const dlrm_eval_result *eval; /* set when this report is an evaluation */
} dlrm_progress;

typedef struct dlrm_train_options {
    uint64_t steps;          /* stop when dlrm_model_step() reaches this; 0: by epochs */
    uint64_t epochs;         /* stop after this many epochs (when steps is 0) */
    size_t batch;            /* samples per step, <= the model's max_batch */
    uint64_t log_every;      /* a "step" event every K steps (0: none) */
    uint64_t eval_every;     /* evaluate every K steps (0: only at the end) */
    uint64_t eval_max;       /* held-out samples per evaluation (0: all) */
    FILE *json_log;          /* borrowed; NULL for no log */
    void (*progress)(void *ctx, const dlrm_progress *p);
    void *progress_ctx;
} dlrm_train_options;

/* The time breakdown and final figures of a run. */
typedef struct dlrm_run_result {
    uint64_t steps, samples, epochs;
    double train_s, eval_s, io_s, hook_s, total_s;
    double last_loss;            /* mean loss of the last logging period */
    int evaluated;
    dlrm_eval_result eval;       /* the final evaluation, when evaluated */
} dlrm_run_result;

/* A trainer over a model and a loader (both borrowed: they must outlive it).
 * `hooks` is copied and may be NULL. */
cpr_status dlrm_trainer_create(dlrm_model *model, dlrm_loader *loader,
                               const dlrm_train_options *opts, const dlrm_hooks *hooks,
                               dlrm_trainer **out);
void dlrm_trainer_destroy(dlrm_trainer *trainer);

/*
 * Train until the step or epoch target, evaluating and logging as asked,
 * then a final evaluation (with a holdout), on_finish and the summary event.
 * Errors: the loader's and model's, a hook's status, CPR_IO (the log cannot
 * be written), CPR_FAILED_PRECONDITION (the loss became NaN or infinite).
 */
cpr_status dlrm_trainer_run(dlrm_trainer *trainer, dlrm_run_result *out);

dlrm_model *dlrm_trainer_model(dlrm_trainer *trainer);
dlrm_loader *dlrm_trainer_loader(dlrm_trainer *trainer);
/* Seconds since the run started (the "t" of log events). */
double dlrm_trainer_elapsed_s(const dlrm_trainer *trainer);
/* The time breakdown so far (steps and samples included). */
void dlrm_trainer_times(const dlrm_trainer *trainer, dlrm_run_result *out);

/*
 * Log events for hooks, as cJSON objects (the log is JSON lines, and cJSON is
 * what the example links for it): dlrm_trainer_event() returns a new object
 * holding "event", "step", "t" and "t_s" (NULL on allocation failure); add
 * fields with cJSON's adders, then dlrm_trainer_emit() writes it as one
 * line, flushes, and frees it (always, even on error; a NULL event is
 * CPR_NO_MEMORY). Emitting without a log only frees. CPR_IO on a write error.
 */
cJSON *dlrm_trainer_event(dlrm_trainer *trainer, const char *name);
cpr_status dlrm_trainer_emit(dlrm_trainer *trainer, cJSON *event);

#endif /* CPR_DLRM_H */
