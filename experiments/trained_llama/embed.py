# embed.py BIG.gguf — writes the trained 4-layer x 256 model (ckpt.pt) into a TinyLlama-shaped
# `swarm gen --arch llama --dim 2048 --layers 22 --heads 32 --kv-heads 4 --ff 5632 --type f16` file:
# residual dims 0..255 carry the trained model, every other weight is zero. Dense kernels do the same
# work on zeros, so the file costs what TinyLlama costs a token, and its next-token distribution is the
# trained model's: RMSNorm over 2048 dims of which 1792 are zero is sqrt(8) times RMSNorm over the 256
# (norm weights / sqrt(8); the trained model used eps 8e-5 = 1e-5 x 8); trained q head i is big head 8i,
# which reads kv head i as llama.cpp groups them (8 q heads a kv head); other q heads' o columns are zero.
import math, sys, numpy as np, torch
from gguf_tensors import gguf_tensors
sd = {k: v.float().numpy() for k, v in torch.load('ckpt.pt').items()}
D, HD, NH, NKV = 256, 64, 4, 4
base, infos = gguf_tensors(sys.argv[1]); f = open(sys.argv[1], 'r+b'); s8 = 1 / math.sqrt(8)
def put(name, a):
    dims, ty, off = infos[name]; assert list(a.shape) == dims[::-1], (name, a.shape, dims)
    f.seek(base + off); f.write(a.astype(np.float32 if ty == 0 else np.float16).tobytes())
    assert ty in (0, 1), name
def zeros(name): return np.zeros(infos[name][0][::-1], np.float32)
for name in infos:
    z = zeros(name)
    if name == 'token_embd.weight': z[:, :D] = sd['emb.weight']
    elif name == 'output.weight': z[:, :D] = sd['out.weight']
    elif name == 'output_norm.weight': z[:D] = sd['on'] * s8
    else:
        _, l, t, _ = name.split('.'); l = int(l); b = 'blks.%d.' % l
        if l < 4:
            if t == 'attn_norm': z[:D] = sd[b + 'an'] * s8
            elif t == 'ffn_norm': z[:D] = sd[b + 'fn'] * s8
            elif t == 'attn_q':
                for i in range(NH): z[8*i*HD:(8*i+1)*HD, :D] = sd[b + 'q.weight'][i*HD:(i+1)*HD]
            elif t == 'attn_k': z[:NKV*HD, :D] = sd[b + 'k.weight']
            elif t == 'attn_v': z[:NKV*HD, :D] = sd[b + 'v.weight']
            elif t == 'attn_output':
                for i in range(NH): z[:D, 8*i*HD:(8*i+1)*HD] = sd[b + 'o.weight'][:, i*HD:(i+1)*HD]
            elif t == 'ffn_gate': z[:768, :D] = sd[b + 'g.weight']
            elif t == 'ffn_up': z[:768, :D] = sd[b + 'u.weight']
            elif t == 'ffn_down': z[:D, :768] = sd[b + 'd.weight']
            else: raise SystemExit('unknown ' + name)
    put(name, z)
f.close(); print('embedded into', sys.argv[1])
