# A small llama trained here on train.ids, in llama.cpp's GGUF conventions (adjacent-pair RoPE, grouped
# kv heads in contiguous groups, RMSNorm eps 1e-5, SwiGLU), so its weights go into a `swarm gen` file as is.
import json, math, sys, time, torch, torch.nn as nn, torch.nn.functional as F
torch.set_num_threads(2); torch.manual_seed(0)
D, L, H, KV, FF, V, T = 256, 4, 4, 4, 768, 32000, 256
HD = D // H
# eps as it acts inside a 2048-wide file whose other 1792 dims stay zero: 1e-5 x 2048 / 256
EPS = 8e-5
class Blk(nn.Module):
    def __init__(s):
        super().__init__()
        s.an = nn.Parameter(torch.ones(D)); s.fn = nn.Parameter(torch.ones(D))
        s.q = nn.Linear(D, D, bias=False); s.k = nn.Linear(D, KV*HD, bias=False); s.v = nn.Linear(D, KV*HD, bias=False)
        s.o = nn.Linear(D, D, bias=False)
        s.g = nn.Linear(D, FF, bias=False); s.u = nn.Linear(D, FF, bias=False); s.d = nn.Linear(FF, D, bias=False)
def rms(x, w): return x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + EPS) * w
inv = 10000.0 ** (-torch.arange(0, HD, 2).float() / HD)
ang = torch.arange(T).float()[:, None] * inv[None, :]
COS, SIN = ang.cos(), ang.sin()
def rope(x):  # x [B, h, T, HD]; pairs (2i, 2i+1)
    t = x.shape[2]; c, s = COS[:t], SIN[:t]
    a, b = x[..., 0::2], x[..., 1::2]
    return torch.stack((a * c - b * s, a * s + b * c), -1).flatten(-2)
class M(nn.Module):
    def __init__(s):
        super().__init__()
        s.emb = nn.Embedding(V, D); s.blks = nn.ModuleList(Blk() for _ in range(L))
        s.on = nn.Parameter(torch.ones(D)); s.out = nn.Linear(D, V, bias=False)
        for p in s.parameters():
            if p.dim() == 2: nn.init.normal_(p, std=0.02)
        for b in s.blks:
            nn.init.normal_(b.o.weight, std=0.02 / math.sqrt(2 * L)); nn.init.normal_(b.d.weight, std=0.02 / math.sqrt(2 * L))
    def forward(s, idx):
        B, t = idx.shape; x = s.emb(idx)
        for b in s.blks:
            h = rms(x, b.an)
            q = rope(b.q(h).view(B, t, H, HD).transpose(1, 2))
            k = rope(b.k(h).view(B, t, KV, HD).transpose(1, 2)).repeat_interleave(H // KV, 1)
            v = b.v(h).view(B, t, KV, HD).transpose(1, 2).repeat_interleave(H // KV, 1)
            a = F.scaled_dot_product_attention(q, k, v, is_causal=True) if hasattr(F, 'scaled_dot_product_attention') else None
            if a is None:
                att = (q @ k.transpose(-1, -2)) / math.sqrt(HD)
                att = att.masked_fill(torch.triu(torch.ones(t, t, dtype=torch.bool), 1), float('-inf')).softmax(-1)
                a = att @ v
            x = x + b.o(a.transpose(1, 2).reshape(B, t, D))
            h = rms(x, b.fn)
            x = x + b.d(F.silu(b.g(h)) * b.u(h))
        return s.out(rms(x, s.on))
def export(m, path):
    """Writes the weights into PATH, a `swarm gen --arch llama` file (f32 or f16) of the same shape, in place."""
    from gguf_tensors import gguf_tensors
    base, infos = gguf_tensors(path); f = open(path, 'r+b')
    W = {'token_embd.weight': m.emb.weight, 'output_norm.weight': m.on, 'output.weight': m.out.weight}
    for i, b in enumerate(m.blks):
        for n, t in (('attn_norm', b.an), ('ffn_norm', b.fn), ('attn_q', b.q.weight), ('attn_k', b.k.weight),
                     ('attn_v', b.v.weight), ('attn_output', b.o.weight), ('ffn_gate', b.g.weight),
                     ('ffn_up', b.u.weight), ('ffn_down', b.d.weight)):
            W['blk.%d.%s.weight' % (i, n)] = t
    assert set(W) == set(infos), (set(W) ^ set(infos))
    for n, t in W.items():
        dims, ty, off = infos[n]; assert ty in (0, 1) and dims == list(t.shape[::-1]), n
        a = t.detach().float().contiguous().numpy()
        f.seek(base + off); f.write((a if ty == 0 else a.astype('float16')).tobytes())
    f.close()
if __name__ == '__main__':
    mode = sys.argv[1]
    m = M()
    if mode == 'train':
        secs = float(sys.argv[2]); ids = torch.tensor(json.load(open('train.ids')))
        hold = torch.tensor(json.load(open('heldout.ids')))
        opt = torch.optim.AdamW(m.parameters(), lr=1e-3, betas=(0.9, 0.95), weight_decay=0.1)
        B = 16; t0 = time.time(); step = 0; lr0 = 2e-3
        while True:
            el = time.time() - t0
            if el > secs: break
            frac = el / secs; lr = lr0 * min(1, (step + 1) / 50) * (0.1 + 0.9 * 0.5 * (1 + math.cos(math.pi * frac)))
            for g in opt.param_groups: g['lr'] = lr
            ix = torch.randint(0, len(ids) - T - 1, (B,))
            x = torch.stack([ids[i:i+T] for i in ix]); y = torch.stack([ids[i+1:i+T+1] for i in ix])
            loss = F.cross_entropy(m(x).view(-1, V), y.view(-1))
            opt.zero_grad(); loss.backward(); torch.nn.utils.clip_grad_norm_(m.parameters(), 1.0); opt.step(); step += 1
            if step % 25 == 0:
                with torch.no_grad():
                    hx = hold[:T*4].view(4, T); hl = F.cross_entropy(m(hx[:, :-1]).reshape(-1, V), hx[:, 1:].reshape(-1))
                print('step %d %.0fs lr %.2e loss %.3f heldout %.3f tok/s %.0f' % (step, el, lr, loss.item(), hl.item(), step*B*T/max(el,1)), flush=True)
                torch.save(m.state_dict(), 'ckpt.pt')
        torch.save(m.state_dict(), 'ckpt.pt'); print('done', step, flush=True)
    elif mode == 'export':
        m.load_state_dict(torch.load('ckpt.pt')); export(m, sys.argv[2]); print('exported')
