#!/usr/bin/env python3
# sample_ref.py — an independent, plain reference of the sampler (text/sample.c) that prints the
# token ids tests/test_sample.c expects for its fixed-seed sequences. text/
#
# Written from the chain's description, not from the C: a full sort by (logit desc, id asc), no
# heap, llama.cpp's filter order (penalties -> top_k -> top_p -> min_p -> temperature -> draw),
# xoshiro256** seeded with splitmix64. float32 steps (logits, penalties) are rounded through
# struct exactly as C's float arithmetic rounds them; the rest is double, as in the C.
#   python3 text/sample_ref.py      # prints one line of ids per scenario
import math
import struct

M64 = (1 << 64) - 1


def f32(x):
    return struct.unpack('<f', struct.pack('<f', x))[0]


class Rng:
    def __init__(self, seed):
        z, self.s = seed, []
        for _ in range(4):
            z = (z + 0x9e3779b97f4a7c15) & M64
            x = z
            x = ((x ^ (x >> 30)) * 0xbf58476d1ce4e5b9) & M64
            x = ((x ^ (x >> 27)) * 0x94d049bb133111eb) & M64
            self.s.append(x ^ (x >> 31))

    def next(self):
        s = self.s
        rotl = lambda x, k: ((x << k) | (x >> (64 - k))) & M64
        result = (rotl((s[1] * 5) & M64, 7) * 9) & M64
        t = (s[1] << 17) & M64
        s[2] ^= s[0]
        s[3] ^= s[1]
        s[1] ^= s[2]
        s[0] ^= s[3]
        s[2] ^= t
        s[3] = rotl(s[3], 45)
        return result

    def uniform(self):
        return (self.next() >> 11) * 2.0 ** -53


def logits_for(n_vocab, step):
    """The test's logits: a multiplicative hash of (id, step) mapped to [-6, 6), as float32."""
    out = []
    for i in range(n_vocab):
        h = (i * 2654435761 + step * 40503 + 12345) & 0xffffffff
        out.append(f32(h / 4294967296.0 * 12.0 - 6.0))
    return out


def sample(o, logits, recent, rng):
    l = list(logits)
    win = recent[-o['last_n']:] if o['last_n'] > 0 else []
    pen, freq, pres = f32(o['repeat']), f32(o['freq']), f32(o['pres'])
    for tok in sorted(set(win)):
        c = win.count(tok)
        v = l[tok]
        v = f32(v * pen) if v <= 0 else f32(v / pen)
        v = f32(v - f32(f32(c * freq) + pres))
        l[tok] = v
    if o['temp'] == 0:
        return max(range(len(l)), key=lambda i: (l[i], -i))
    cand = sorted(range(len(l)), key=lambda i: (-l[i], i))
    if o['top_k'] > 0:
        cand = cand[:o['top_k']]
    l0 = l[cand[0]]
    top_p = f32(o['top_p'])
    if top_p < 1.0:
        total = sum(math.exp(l[i] - l0) for i in cand)
        cum = 0.0
        for j, i in enumerate(cand):
            cum += math.exp(l[i] - l0) / total
            if cum >= top_p:
                cand = cand[:j + 1]
                break
    min_p = f32(o['min_p'])
    if min_p > 0:
        floor_logit = l0 + math.log(min_p)
        cand = [cand[0]] + [i for i in cand[1:] if l[i] >= floor_logit]
    t = f32(o['temp'])
    w = [math.exp((l[i] - l0) / t) for i in cand]
    u = rng.uniform() * sum(w)
    cum = 0.0
    for j, i in enumerate(cand):
        cum += w[j]
        if u < cum:
            return i
    return cand[-1]


# name, options, vocabulary, steps, prompt (the "recent" history before step 0)
SCENARIOS = [
    ('llama_defaults_penalty', dict(temp=0.8, top_k=40, top_p=0.95, min_p=0.05, repeat=1.1,
                                    last_n=64, freq=0.0, pres=0.0, seed=42), 1000, 16, [1, 2, 3]),
    ('full_vocab_hot', dict(temp=1.5, top_k=0, top_p=1.0, min_p=0.0, repeat=1.0, last_n=64,
                            freq=0.0, pres=0.0, seed=7), 32000, 12, []),
    ('top_p_freq_pres', dict(temp=0.7, top_k=0, top_p=0.9, min_p=0.0, repeat=1.0, last_n=8,
                             freq=0.5, pres=0.3, seed=123), 500, 16, [5, 5, 9]),
]

if __name__ == '__main__':
    for name, o, n_vocab, steps, prompt in SCENARIOS:
        rng, recent, ids = Rng(o['seed']), list(prompt), []
        for step in range(steps):
            tok = sample(o, logits_for(n_vocab, step), recent, rng)
            ids.append(tok)
            recent.append(tok)
        print(name, ' '.join(map(str, ids)))
