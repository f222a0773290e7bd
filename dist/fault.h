/* fault.h — the one fault model: what a coordinator injects into one of its workers, the one
 * parser of the flags that ask for it, and the one place the signals are sent. dist/
 *
 * Both arms of the swarm take the same three flags: --kill-worker ID@AT (SIGKILL),
 * --stop-worker ID@AT:SECONDS (SIGSTOP, SIGCONT after SECONDS), --cut-link ID@AT:SECONDS (the
 * coordinator's end of that worker's links goes dark both ways for SECONDS: nothing sent to
 * it, nothing it sends accepted). AT is when: the step for the dense lab model (a stateless
 * architecture: a step is a position), the generated token for a real model (the caller maps
 * it to the position whose pass carries it). The coordinator then finds the loss the way it
 * finds any: the process gone, or the heartbeats unanswered (dist/pirate.h).
 * The resident arm takes a fourth, --drop-result ID@AT: the coordinator discards the first
 * result that worker sends it from the pass carrying AT on (the chain's last worker: the one
 * whose results come back), as if lost on the link; nothing else is told, so only the pass
 * deadline (dist/llm_pipe.c, lp_check_deadline) finds it.
 */
#ifndef SWARM_FAULT_H
#define SWARM_FAULT_H

#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>

#define FAULT_MAX 8               /* faults one run injects at most */
#define FAULT_MAX_SECONDS 3600    /* a stop or cut longer than an hour is a typo */
#define FAULT_ID_MAX 64           /* a worker's name, NUL included */

typedef enum { FAULT_KILL = 1, FAULT_STOP = 2, FAULT_CUT = 3, FAULT_DROP = 4 } fault_kind;

typedef struct {
    fault_kind kind;
    char worker[FAULT_ID_MAX];    /* its name: "w1" (spawned) or a [worker.NAME] */
    uint64_t at;                  /* the step, or the position, it is injected at */
    double seconds;               /* STOP and CUT: how long */
    int done;                     /* injected (or found moot) */
} fault_t;

/* Parse "ID@AT" (KILL) or "ID@AT:SECONDS" (STOP, CUT; 0 < SECONDS < FAULT_MAX_SECONDS) into
 * f. form names the syntax in the error ("ID@STEP", "wI@TOKEN"). 0, or -1 with err saying
 * what was wanted. */
int fault_parse(fault_kind kind, const char *s, const char *form, fault_t *f, char *err,
                size_t errlen);
/* The flag that asks for kind ("--kill-worker", "--stop-worker", "--cut-link"), and the kind a
 * flag asks for (0: none). */
const char *fault_flag(fault_kind kind);
fault_kind fault_kind_of_flag(const char *flag);

/* Inject f into the worker process pid (0: none here, a listed worker on another host) at
 * now_ns: KILL and STOP signal it (STOP sets *cont_at_ns), CUT sets *cut_until_ns. -1 when f
 * needs a process and there is none (nothing done). */
int fault_inject(const fault_t *f, pid_t pid, uint64_t now_ns, uint64_t *cont_at_ns,
                 uint64_t *cut_until_ns);
/* The end of what fault_inject started, when due at now_ns: SIGCONT to pid once *cont_at_ns
 * has passed, a cut healed once *cut_until_ns has (each set back to 0). Returns a bit
 * (1 << FAULT_STOP, 1 << FAULT_CUT) for each that ended, 0 for none. */
int fault_release(pid_t pid, uint64_t now_ns, uint64_t *cont_at_ns, uint64_t *cut_until_ns);

#endif
