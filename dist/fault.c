/* fault.c — the one fault model: the flags' parser and the signals (fault.h). dist/ */
#include "dist/fault.h"

#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

int fault_parse(fault_kind kind, const char *s, const char *form, fault_t *f, char *err,
                size_t errlen)
{
    const char *at = strchr(s, '@');
    char *end = NULL;
    memset(f, 0, sizeof *f);
    f->kind = kind;
    if (!at || at == s || (size_t)(at - s) >= sizeof f->worker || at[1] < '0' || at[1] > '9')
        goto bad;
    memcpy(f->worker, s, (size_t)(at - s));
    f->at = strtoull(at + 1, &end, 10);
    if (kind != FAULT_KILL && kind != FAULT_DROP) {
        if (*end != ':')
            goto bad;
        const char *v = end + 1;
        f->seconds = strtod(v, &end);
        if (end == v || !(f->seconds > 0 && f->seconds < FAULT_MAX_SECONDS))
            goto bad;
    }
    if (*end)
        goto bad;
    return 0;
bad:
    if (kind == FAULT_KILL || kind == FAULT_DROP)
        snprintf(err, errlen, "'%s': want %s", s, form);
    else
        snprintf(err, errlen, "'%s': want %s:SECONDS (0 < SECONDS < %d)", s, form,
                 FAULT_MAX_SECONDS);
    return -1;
}

const char *fault_flag(fault_kind kind)
{
    return kind == FAULT_KILL   ? "--kill-worker"
           : kind == FAULT_STOP ? "--stop-worker"
           : kind == FAULT_CUT  ? "--cut-link"
                                : "--drop-result";
}

fault_kind fault_kind_of_flag(const char *flag)
{
    for (fault_kind k = FAULT_KILL; k <= FAULT_DROP; k++)
        if (!strcmp(flag, fault_flag(k)))
            return k;
    return (fault_kind)0;
}

int fault_inject(const fault_t *f, pid_t pid, uint64_t now_ns, uint64_t *cont_at_ns,
                 uint64_t *cut_until_ns)
{
    uint64_t dur = (uint64_t)(f->seconds * 1e9);
    switch (f->kind) {
    case FAULT_KILL:
        if (pid <= 0)
            return -1;
        kill(pid, SIGKILL);
        return 0;
    case FAULT_STOP:
        if (pid <= 0)
            return -1;
        kill(pid, SIGSTOP);
        *cont_at_ns = now_ns + dur;
        return 0;
    case FAULT_CUT:
        *cut_until_ns = now_ns + dur;
        return 0;
    case FAULT_DROP: /* the coordinator's own doing (llm_pipe.c): nothing to signal */
        return 0;
    }
    return -1;
}

int fault_release(pid_t pid, uint64_t now_ns, uint64_t *cont_at_ns, uint64_t *cut_until_ns)
{
    int ended = 0;
    if (*cont_at_ns && now_ns >= *cont_at_ns) {
        if (pid > 0)
            kill(pid, SIGCONT);
        *cont_at_ns = 0;
        ended |= 1 << FAULT_STOP;
    }
    if (*cut_until_ns && now_ns >= *cut_until_ns) {
        *cut_until_ns = 0;
        ended |= 1 << FAULT_CUT;
    }
    return ended;
}
