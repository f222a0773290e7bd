/* lab.h — `swarm lab`'s shared state: conditions with their predictions, and the report. lab/
 *
 * lab.c measures, predicts and runs; lab_report.c reads results.jsonl back into table.md and
 * the plots. Both see one lab_t, owned by lab_run.
 */
#ifndef SWARM_LAB_H
#define SWARM_LAB_H

#include <limits.h>
#include <stdint.h>

#include "dist/config.h"
#include "arch/model.h"
#include "lab/predict.h"
#include "netem/netem.h"

typedef struct {
    char name[64];             /* as in [lab] conditions, e.g. "resident/wan" */
    const char *arm;           /* reference | ssd | resident | quantized */
    predict_kind kind;
    netem_profile profile;     /* resident: applied to each data link */
    int fault;                 /* "+fault": kill the middle worker a quarter of the way in */
    double profile_configured_ms, profile_measured_ms; /* per hop, one way; NaN: not measured */
    prediction pred;
} lab_cond;

typedef struct {
    config_t cfg;
    model_t m;
    model_t qm;                /* the quantized file, when a condition is "quantized" */
    int has_quant;
    predict_machine pm;
    lab_cond cond[CONFIG_MAX_CONDITIONS];
    uint32_t n_cond;
    uint32_t repeats;
    char dir[PATH_MAX];
    char jsonl[PATH_MAX + 16];
    float *inputs, *outputs, *refout; /* (steps, dim) each */
    int have_ref;
    int n_failed, n_void;
} lab_t;

/* Read DIR/results.jsonl back and write DIR/table.md, the plot data, plots.gp and the PNGs
 * (gnuplot; a missing gnuplot is a warning). 0 / -1 (results unreadable or table unwritable). */
int lab_report(const lab_t *L);

/* The dense lab's options, as cli/cmd_lab.c parsed them. */
typedef struct {
    const char *config;           /* the CONFIG (configs/lab02.ini by default) */
    const char *out;              /* the results folder; NULL: [lab] out/lab-YYYYMMDD-HHMMSS */
    const char *model;            /* --model: an existing file instead of [model] path; NULL */
    const char *sets[64];         /* SEC.KEY=VAL overrides, applied in order (not owned) */
    uint32_t n_sets;
    uint32_t repeats, steps;      /* 0: the config's */
    int quick;                    /* one repeat per condition unless repeats says otherwise */
} lab_opts;

/* The dense lab: load and check the config, make the results folder, measure the machine,
 * predict, run every condition x repeat, write the report. An exit code (0 all ran and no
 * gate void, 1 a condition failed, 2 usage/config, 3 a gate void). */
int lab_run(const lab_opts *o);

#endif
