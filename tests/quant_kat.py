#!/usr/bin/env python3
"""quant_kat.py — known answers for tests/test_quant.c, computed independently of quant/.

Regenerate with:  python3 tests/quant_kat.py > tests/quant_kat.h   (standard library only)

Independent means: nothing here is a transcription of quant/*.c. Half floats come from
Python's struct 'e' format (IEEE binary16, round half to even); bf16 rounding and the final
rounding of every dot product are done on exact rationals (fractions.Fraction); f32
arithmetic is emulated by rounding each exactly-computed double to f32 (for +, *, / of two
f32 values a double holds the exact result or rounds it harmlessly: 53 >= 2*24 + 2).
What is transcribed is the *specification*: ggml-quants.c's reference quantizers
(quantize_row_q8_0_ref, quantize_row_q4_0_ref) and the lane order stated in quant/quant.h.
"""
import math
import random
import struct
from fractions import Fraction


def f32(x):
    """Round a double to the nearest f32 (C's (float) conversion: round half to even)."""
    return struct.unpack('<f', struct.pack('<f', x))[0]


def f32_bits(x):
    return struct.unpack('<I', struct.pack('<f', x))[0]


def bits_f32(u):
    return struct.unpack('<f', struct.pack('<I', u))[0]


def f16_bits(x):
    try:
        return struct.unpack('<H', struct.pack('<e', x))[0]
    except OverflowError:  # IEEE: rounding past the largest half gives infinity
        return 0xFC00 if x < 0 else 0x7C00


def f16_val(h):
    return struct.unpack('<e', struct.pack('<H', h))[0]


def round_frac_to_f32(q):
    """Correctly round an exact rational to f32 (half to even), returned as a Python float."""
    if q == 0:
        return 0.0
    sign = -1 if q < 0 else 1
    a = abs(q)
    e = math.floor(math.log2(a.numerator) - math.log2(a.denominator))
    while Fraction(2) ** e > a:
        e -= 1
    while Fraction(2) ** (e + 1) <= a:
        e += 1
    e = max(e, -126)                       # subnormals share the smallest exponent
    ulp = Fraction(2) ** (e - 23)
    m = a / ulp
    lo = math.floor(m)
    rem = m - lo
    if rem > Fraction(1, 2) or (rem == Fraction(1, 2) and lo % 2 == 1):
        lo += 1
    return sign * float(lo * ulp)


def bf16_bits(x):
    """Nearest bf16 (half to even) by comparing exact distances to the two candidates."""
    u = f32_bits(x)
    if math.isnan(x):
        return (u >> 16) | 64
    lo = u >> 16
    cands = [lo, lo + 1]
    best = None
    for c in cands:
        v = bits_f32((c & 0xFFFF) << 16)
        if math.isinf(v) and not math.isinf(x):
            v_exact = Fraction(2) ** 128 * (1 if x > 0 else -1)  # the rounding overflows
        else:
            v_exact = Fraction(v)
        dist = abs(v_exact - Fraction(x))
        key = (dist, c & 1)                # tie: the even one
        if best is None or key < best[0]:
            best = (key, c & 0xFFFF)
    return best[1]


def roundf(v):
    """C roundf: half away from zero."""
    r = math.floor(abs(v) + 0.5)
    return -r if v < 0 else r


def q8_0_block(x):
    """quantize_row_q8_0_ref on one block of 32 f32 values: (d_bits, [32 int8])."""
    amax = 0.0
    for v in x:
        amax = max(amax, abs(v))
    d = f32(amax / 127.0)
    idv = f32(1.0 / d) if d else 0.0
    return f16_bits(d), [int(roundf(f32(v * idv))) for v in x]


def q4_0_block(x):
    """quantize_row_q4_0_ref on one block: (d_bits, [16 bytes])."""
    amax, mx = 0.0, 0.0
    for v in x:
        if amax < abs(v):
            amax, mx = abs(v), v
    d = f32(mx / -8.0)
    idv = f32(1.0 / d) if d else 0.0
    qs = []
    for j in range(16):
        x0 = f32(x[j] * idv)
        x1 = f32(x[16 + j] * idv)
        xi0 = min(15, int(f32(x0 + 8.5)))  # int() truncates like the C cast
        xi1 = min(15, int(f32(x1 + 8.5)))
        qs.append(xi0 | (xi1 << 4))
    return f16_bits(d), qs


def block_bytes(d_bits, qs, signed):
    out = [d_bits & 0xFF, d_bits >> 8]
    out += [(q & 0xFF) if signed else q for q in qs]
    return out


def fma32(a, b, c):
    return round_frac_to_f32(Fraction(a) * Fraction(b) + Fraction(c))


def reduce32(a):
    t = [f32(f32(a[j] + a[j + 8]) + f32(a[j + 16] + a[j + 24])) for j in range(8)]
    u = [f32(t[j] + t[j + 4]) for j in range(4)]
    v = [f32(u[j] + u[j + 2]) for j in range(2)]
    return f32(v[0] + v[1])


def dot_float(w, x):
    a = [0.0] * 32
    for i, (wi, xi) in enumerate(zip(w, x)):
        a[i % 32] = fma32(wi, xi, a[i % 32])
    return reduce32(a)


def reduce16(a):
    t = [f32(a[j] + a[j + 8]) for j in range(8)]
    u = [f32(t[j] + t[j + 4]) for j in range(4)]
    v = [f32(u[j] + u[j + 2]) for j in range(2)]
    return f32(v[0] + v[1])


def dot_quant(wblocks, ablocks):
    """Q8_0 / Q4_0 (quant.h): block b's exact sum, one fma into lane b % 16, the 16-lane tree.
    wblocks: [(d_bits, [32 int values])], ablocks: the activation's Q8_0 blocks."""
    a = [0.0] * 16
    for b, ((dw, wq), (dx, xq)) in enumerate(zip(wblocks, ablocks)):
        d = f32(f16_val(dw) * f16_val(dx))
        s = sum(wq[k] * xq[k] for k in range(32))
        a[b % 16] = fma32(float(s), d, a[b % 16])
    return reduce16(a)


def dot_quant_quads(wblocks, ablocks):
    """The order Q4_0 had before (quads in 32 lanes): only to show the answers tell."""
    a = [0.0] * 32
    for b, ((dw, wq), (dx, xq)) in enumerate(zip(wblocks, ablocks)):
        d = f32(f16_val(dw) * f16_val(dx))
        for q in range(8):
            s = sum(wq[k] * xq[k] for k in range(4 * q, 4 * q + 4))
            lane = 4 * (b % 4) + q if q < 4 else 16 + 4 * (b % 4) + q - 4
            a[lane] = fma32(float(s), d, a[lane])
    return reduce32(a)


def c_array(name, ctype, vals, per_line=12, fmt='0x%08x'):
    lines = ['static const %s %s[%d] = {' % (ctype, name, len(vals))]
    for i in range(0, len(vals), per_line):
        lines.append('    ' + ', '.join(fmt % v for v in vals[i:i + per_line]) + ',')
    lines.append('};')
    return '\n'.join(lines)


def main():
    rng = random.Random(20261201)
    # Conversion probes: ties, subnormals, overflow, signed zero, NaN payloads.
    probes = [0.0, -0.0, 1.0, -1.0, 0.1, 1 / 3, 65504.0, 65519.99, 65520.0, 1e-8, 6.1e-5,
              5.96e-8, 2.98e-8, 2.99e-8, 1.00048828125, 1.00146484375, 3.14159265,
              -2.71828, 1e30, -1e-30, 1.0 + 2 ** -8, 1.0 + 3 * 2 ** -9, 1e-40]
    probes += [rng.uniform(-4, 4) for _ in range(24)]
    probes = [f32(p) for p in probes]
    f16_pairs, bf16_pairs = [], []
    for p in probes:
        f16_pairs += [f32_bits(p), f16_bits(p)]
        bf16_pairs += [f32_bits(p), bf16_bits(p)]
    for u in (0x3f808000, 0x3f818000, 0x7fc00001, 0xff800001, 0x7f7fffff, 0x00008000):
        bf16_pairs += [u, bf16_bits(bits_f32(u))]      # ties, NaNs, overflow, subnormal

    # A 224-element row (7 blocks: a full group of 4 and a short one of 3): a block with
    # exact ties under d = 1, a block of zeros plus one value, random blocks; the activation:
    # random. (Checked below: the order of the sums shows in the bits of these answers.)
    n = 224
    x = [rng.uniform(-100, 100) for _ in range(n)]
    x[0:32] = [127.0, 2.5, -2.5, 0.5, -0.5, 1.5, 126.5, -126.5] + \
              [f32(rng.uniform(-127, 127)) for _ in range(24)]
    x[32:64] = [0.0] * 32
    x[40] = -0.75
    x = [f32(v) for v in x]
    act = [f32(rng.gauss(0, 1)) for _ in range(n)]

    q8 = [q8_0_block(x[b:b + 32]) for b in range(0, n, 32)]
    q4 = [q4_0_block(x[b:b + 32]) for b in range(0, n, 32)]
    aq = [q8_0_block(act[b:b + 32]) for b in range(0, n, 32)]
    q8_bytes = sum((block_bytes(d, q, True) for d, q in q8), [])
    q4_bytes = sum((block_bytes(d, q, False) for d, q in q4), [])
    aq_bytes = sum((block_bytes(d, q, True) for d, q in aq), [])

    def q4_values(qs):
        return [(qs[j] & 15) - 8 for j in range(16)] + [(qs[j] >> 4) - 8 for j in range(16)]

    nf = 205  # float types: a length that leaves a tail of 13 in the 32 lanes
    w16 = [f16_val(f16_bits(v)) for v in x[:nf]]
    wbf = [bits_f32(bf16_bits(v) << 16) for v in x[:nf]]
    dots = [
        dot_float(x[:nf], act[:nf]),
        dot_float(w16, act[:nf]),
        dot_float(wbf, act[:nf]),
        dot_quant(q8, aq),
        dot_quant([(d, q4_values(q)) for d, q in q4], aq),
    ]
    # The order must matter for these inputs, or the known answers would not check it.
    q4w = [(d, q4_values(q)) for d, q in q4]
    assert dot_quant(q4w, aq) != dot_quant_quads(q4w, aq)
    exact = [float(sum(Fraction(a) * Fraction(b) for a, b in zip(w, act[:len(w)])))
             for w in (x[:nf], w16, wbf)]

    print('/* quant_kat.h — generated by tests/quant_kat.py (do not edit; rerun it). tests/ */')
    print('#ifndef SWARM_QUANT_KAT_H\n#define SWARM_QUANT_KAT_H\n#include <stdint.h>')
    print('/* pairs: f32 bits, f16 bits (struct "e": IEEE half, round half to even) */')
    print(c_array('kat_f16', 'uint32_t', f16_pairs, 8))
    print('/* pairs: f32 bits, bf16 bits (nearest by exact distance, ties to even) */')
    print(c_array('kat_bf16', 'uint32_t', bf16_pairs, 8))
    print('#define KAT_N %d\n#define KAT_NF %d' % (n, nf))
    print('/* the row (f32 bits) and the activation (f32 bits) */')
    print(c_array('kat_x', 'uint32_t', [f32_bits(v) for v in x], 8))
    print(c_array('kat_act', 'uint32_t', [f32_bits(v) for v in act], 8))
    print('/* quantize_row_q8_0_ref / quantize_row_q4_0_ref of kat_x, and q8_0 of kat_act */')
    print(c_array('kat_q8_0', 'uint8_t', q8_bytes, 17, '0x%02x'))
    print(c_array('kat_q4_0', 'uint8_t', q4_bytes, 18, '0x%02x'))
    print(c_array('kat_act_q8_0', 'uint8_t', aq_bytes, 17, '0x%02x'))
    print('/* dot products in quant.h\'s lane order (f32 bits): f32, f16, bf16 over KAT_NF\n'
          ' * elements; q8_0, q4_0 over KAT_N with the activation in q8_0 */')
    print(c_array('kat_dot', 'uint32_t', [f32_bits(v) for v in dots], 8))
    print('/* exact (rational) dot products of the f32, f16, bf16 rows, rounded to double */')
    print('static const double kat_dot_exact[3] = { %r, %r, %r };' % tuple(exact))
    print('#endif')


if __name__ == '__main__':
    main()
