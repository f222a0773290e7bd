# Corpus for a small trained llama: the Debian Administrator's Handbook (en-US, text of its HTML) and the
# fortune files (English quotes), both from Debian's archive.
import glob, html.parser, os, re
class T(html.parser.HTMLParser):
    def __init__(s): super().__init__(); s.out=[]; s.skip=0
    def handle_starttag(s,t,a):
        if t in ('script','style','head'): s.skip+=1
        if t in ('p','div','li','h1','h2','h3','tr','pre','br'): s.out.append('\n')
    def handle_endtag(s,t):
        if t in ('script','style','head'): s.skip-=1
    def handle_data(s,d):
        if not s.skip: s.out.append(d)
parts=[]
for f in sorted(glob.glob('/usr/share/doc/debian-handbook/html/en-US/*.html')):
    t=T(); t.feed(open(f,encoding='utf-8',errors='replace').read())
    txt=''.join(t.out)
    txt=re.sub(r'[ \t]+',' ',txt); txt=re.sub(r'\n\s*\n+','\n\n',txt)
    parts.append(txt.strip())
for f in sorted(glob.glob('/usr/share/games/fortunes/*')):
    if f.endswith('.dat') or f.endswith('.u8') or os.path.isdir(f) or os.path.islink(f): continue
    parts.append(open(f,encoding='utf-8',errors='replace').read().replace('\n%\n','\n\n'))
text='\n\n'.join(parts)
n=len(text); cut=int(n*0.98)
open('train.txt','w').write(text[:cut]); open('heldout.txt','w').write(text[cut:])
print(n, 'chars')
