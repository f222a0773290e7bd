/* lab.h — `swarm lab`'s shared state: conditions with their predictions, and the report. lab/
 *
 * lab.c measures, predicts and runs; lab_report.c reads results.jsonl back into table.md and
 * the plots. Both see one lab_t, owned by cmd_lab.
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

/* `swarm lab [CONFIG]` (argv as the command line's): the dense lab, or the text lab for a
 * config with an [llm] section; an exit code. */
int cmd_lab(int argc, char **argv);

#endif
