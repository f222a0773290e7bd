/* arm_flags.c — the flags every command that runs a model shares: one parser, one spelling,
 * refusals by name. dist/ */
#include "dist/arm_open.h"

#include <stdio.h>
#include <string.h>

#include "base/util.h"
#include "quant/quant.h"

void arm_flags_init(arm_flags *f)
{
    memset(f, 0, sizeof *f);
    f->arm = LLM_ARM_REFERENCE;
    f->arm_name = "reference";
    f->workers = 3;
    f->respawn = -1;
    f->slowdown = 1;
    llm_cli_ssd_init(&f->ssd);
}

static void s_given(arm_flags *f, unsigned bit, const char *flag)
{
    for (int k = 0; k < ARM_F_N; k++)
        if (bit == 1u << k && !f->name[k])
            f->name[k] = flag;
    f->given |= bit;
}

static int s_arm(arm_flags *f, const char *v, char *err, size_t errlen)
{
    static const char *const names[] = { "reference", "ssd", "resident" };
    for (int a = 0; a < 3; a++)
        if (!strcmp(v, names[a])) {
            f->arm = (llm_arm)a;
            f->arm_name = names[a];
            return 0;
        }
    snprintf(err, errlen, "unknown arm '%s' (arms: reference, ssd, resident)", v);
    return -1;
}

/* --kill-worker wI@TOKEN, --stop-worker / --cut-link wI@TOKEN:SECONDS */
static int s_fault(arm_flags *f, const char *flag, const char *v, char *err, size_t errlen)
{
    char why[256];
    if (f->n_faults == FAULT_MAX) {
        snprintf(err, errlen, "%s: too many faults", flag);
        return -1;
    }
    if (fault_parse(fault_kind_of_flag(flag), v, "wI@TOKEN", &f->faults[f->n_faults], why,
                    sizeof why)) {
        snprintf(err, errlen, "%s: %s", flag, why);
        return -1;
    }
    if (f->faults[f->n_faults].at < 1) {
        snprintf(err, errlen, "%s %s: tokens count from 1", flag, v);
        return -1;
    }
    f->n_faults++;
    return 0;
}

/* The flags that take a value; v is it. */
static int s_valued(arm_flags *f, const char *k, const char *v, char *err, size_t errlen)
{
    if (!strcmp(k, "--arm")) {
        s_given(f, ARM_F_ARM, k);
        return s_arm(f, v, err, errlen);
    }
    if (!strcmp(k, "--threads")) {
        s_given(f, ARM_F_THREADS, k);
        return llm_cli_u32(k, v, 1, QUANT_MAX_THREADS, &f->threads, err, errlen);
    }
    if (!strcmp(k, "--workers")) {
        s_given(f, ARM_F_WORKERS, k);
        return llm_cli_u32(k, v, 1, 8, &f->workers, err, errlen);
    }
    if (!strcmp(k, "--worker-cap")) {
        s_given(f, ARM_F_WORKER_CAP, k);
        if (util_parse_size(v, &f->worker_cap)) {
            snprintf(err, errlen, "--worker-cap '%s': not a size (800M, ...)", v);
            return -1;
        }
        return 0;
    }
    if (!strcmp(k, "--profile")) {
        if (netem_profile_builtin(v, &f->profile)) {
            snprintf(err, errlen, "unknown profile '%s' (profiles: none, lan, wifi, wan)", v);
            return -1;
        }
        if (!netem_profile_is_none(&f->profile)) /* "none" asks for nothing of any arm */
            s_given(f, ARM_F_PROFILE, k);
        return 0;
    }
    if (!strcmp(k, "--worker-slowdown")) {
        if (llm_cli_u32(k, v, 1, 1024, &f->slowdown, err, errlen))
            return -1;
        if (f->slowdown > 1) /* 1 is the default: asks for nothing */
            s_given(f, ARM_F_SLOWDOWN, k);
        return 0;
    }
    s_given(f, ARM_F_FAULTS, k);
    return s_fault(f, k, v, err, errlen);
}

int arm_flags_parse(arm_flags *f, int argc, char **argv, int *i, char *err, size_t errlen)
{
    static const char *const with_value[] = { "--arm", "--threads", "--workers",
                                              "--worker-cap", "--profile", "--worker-slowdown",
                                              "--kill-worker", "--stop-worker", "--cut-link",
                                              "--drop-result", NULL };
    const char *k = argv[*i];
    if (!strcmp(k, "--no-pipeline")) {
        f->no_pipeline = 1;
        s_given(f, ARM_F_PIPELINE, k);
        return 1;
    }
    if (!strcmp(k, "--respawn") || !strcmp(k, "--no-respawn")) {
        f->respawn = !strcmp(k, "--respawn");
        s_given(f, ARM_F_RESPAWN, k);
        return 1;
    }
    int r = llm_cli_ssd_flag(&f->ssd, argc, argv, i, err, errlen);
    if (r) {
        if (r > 0)
            s_given(f, ARM_F_SSD, k);
        return r;
    }
    int known = 0;
    for (int n = 0; with_value[n]; n++)
        known |= !strcmp(k, with_value[n]);
    if (!known)
        return 0;
    if (*i + 1 >= argc) {
        snprintf(err, errlen, "%s needs a value", k);
        return -1;
    }
    return s_valued(f, k, argv[++*i], err, errlen) ? -1 : 1;
}

int arm_flags_check(const arm_flags *f, unsigned honours, unsigned arms, const char *cmd,
                    char *err, size_t errlen)
{
    /* --workers alone is let through on any arm, as before: it asks for nothing */
    const unsigned resident = ARM_F_WORKER_CAP | ARM_F_RESPAWN | ARM_F_PROFILE |
                              ARM_F_SLOWDOWN | ARM_F_FAULTS | ARM_F_PIPELINE;
    for (int k = 0; k < ARM_F_N; k++) {
        unsigned bit = 1u << k;
        if ((f->given & bit) && !(honours & bit)) {
            snprintf(err, errlen, "%s is not a flag of swarm %s", f->name[k], cmd);
            return -1;
        }
    }
    if (!(arms & (1u << f->arm))) {
        snprintf(err, errlen, "--arm %s: not an arm swarm %s runs", f->arm_name, cmd);
        return -1;
    }
    for (int k = 0; k < ARM_F_N; k++) {
        unsigned bit = 1u << k;
        if (!(f->given & bit))
            continue;
        if ((bit & resident) && f->arm != LLM_ARM_RESIDENT) {
            snprintf(err, errlen, "%s: --worker-cap, --respawn, --no-respawn, --profile, "
                     "--worker-slowdown, --kill-worker, --stop-worker, --cut-link, --drop-result "
                     "and --no-pipeline are the "
                     "resident arm's (add --arm resident)", f->name[k]);
            return -1;
        }
        if (bit == ARM_F_SSD && f->arm != LLM_ARM_SSD) {
            snprintf(err, errlen, "%s: --cap, --queue-depth, --chunk, --buffered and "
                     "--stream-all-experts are the SSD arm's (add --arm ssd)", f->name[k]);
            return -1;
        }
    }
    return 0;
}
