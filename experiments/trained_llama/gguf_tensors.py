# gguf_tensors.py — a GGUF v3 file's tensor table (name -> dims, type, offset) and where its data
# starts: what train.py's export and embed.py need to write weights into a `swarm gen` file in place.
import struct
def gguf_tensors(path):
    buf = open(path, 'rb').read(64 << 20); p = 0
    def rd(fmt):
        nonlocal p; v = struct.unpack_from(fmt, buf, p); p += struct.calcsize(fmt); return v[0]
    def rstr():
        nonlocal p; n = rd('<Q'); s = buf[p:p+n].decode(); p += n; return s
    def rval(t):
        if t == 8: return rstr()
        if t == 9:
            et = rd('<I'); n = rd('<Q'); return [rval(et) for _ in range(n)]
        return rd({0:'<B',1:'<b',2:'<H',3:'<h',4:'<I',5:'<i',6:'<f',7:'<B',10:'<Q',11:'<q',12:'<d'}[t])
    assert buf[:4] == b'GGUF'; p = 4; rd('<I'); nt = rd('<Q'); nkv = rd('<Q'); align = 32
    for _ in range(nkv):
        k = rstr(); t = rd('<I'); v = rval(t)
        if k == 'general.alignment': align = v
    infos = {}
    for _ in range(nt):
        n = rstr(); nd = rd('<I'); dims = [rd('<Q') for _ in range(nd)]; t = rd('<I'); off = rd('<Q')
        infos[n] = (dims, t, off)
    return (p + align - 1) // align * align, infos
