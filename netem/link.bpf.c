/* link.bpf.c — tc clsact program for a lab link: random loss, blackhole, EDT delay where fq exists. netem/ */
#include <linux/bpf.h>
#include <linux/pkt_cls.h>
#include <bpf/bpf_helpers.h>

/* Written by netem/kernel.c (netem_kernel_set); one entry, key 0. */
struct netem_link_cfg {
    __u32 loss_ppm;           /* egress drop probability, parts per million */
    __u32 blackhole;          /* 1: drop everything, both directions */
    __u64 delay_ns;           /* egress departure delay (EDT); needs sch_fq on the device */
};

/* Read by netem_kernel_stats; updated atomically by every CPU. */
struct netem_link_stats {
    __u64 passed;
    __u64 dropped;
};

struct {
    __uint(type, BPF_MAP_TYPE_ARRAY);
    __uint(max_entries, 1);
    __type(key, __u32);
    __type(value, struct netem_link_cfg);
} cfg SEC(".maps");

struct {
    __uint(type, BPF_MAP_TYPE_ARRAY);
    __uint(max_entries, 1);
    __type(key, __u32);
    __type(value, struct netem_link_stats);
} stats SEC(".maps");

static __always_inline int s_verdict(struct __sk_buff *skb, int egress)
{
    __u32 k = 0;
    struct netem_link_cfg *c = bpf_map_lookup_elem(&cfg, &k);
    struct netem_link_stats *s = bpf_map_lookup_elem(&stats, &k);

    if (!c || !s)
        return TC_ACT_OK;
    /* A cut link loses traffic both ways; loss is one direction (a profile is one direction). */
    if (c->blackhole || (egress && c->loss_ppm && bpf_get_prandom_u32() % 1000000 < c->loss_ppm)) {
        __sync_fetch_and_add(&s->dropped, 1);
        return TC_ACT_SHOT;
    }
    if (egress && c->delay_ns) {
        /* Earliest departure time: sch_fq holds the skb until tstamp (CLOCK_MONOTONIC). */
        __u64 t = bpf_ktime_get_ns() + c->delay_ns;
        if (skb->tstamp < t)
            skb->tstamp = t;
    }
    __sync_fetch_and_add(&s->passed, 1);
    return TC_ACT_OK;
}

SEC("tc")
int swarm_link_egress(struct __sk_buff *skb)
{
    return s_verdict(skb, 1);
}

SEC("tc")
int swarm_link_ingress(struct __sk_buff *skb)
{
    return s_verdict(skb, 0);
}

char LICENSE[] SEC("license") = "GPL";
