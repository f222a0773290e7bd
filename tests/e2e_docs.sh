#!/bin/bash
# e2e_docs.sh — the docs stay true: README.md is at most 200 lines; every relative link in
# README.md and docs/**/*.md resolves (the file or folder exists and a #anchor names one of the
# target's headings); every command `swarm --help` lists has a "## `swarm CMD`" section in
# docs/cli.md, and every flag (--xxx, -x) `swarm CMD --help` prints appears in that section.
# A failure names the file and line of the broken link, or the command and the missing flag. tests/
# Env: SWARM_BIN (bin/swarm). Closes with "e2e_docs: N passed, N failed".
set -u
cd "$(dirname "$0")/.."
: "${SWARM_BIN:=$PWD/bin/swarm}"
pass=0; fail=0
. tests/lib.sh

# ---- README.md is the user's door: at most 200 lines ----------------------------------------
n=$(wc -l <README.md)
if [ "$n" -le 200 ]; then ok; else bad "README.md has $n lines; at most 200 (move the rest to docs/)"; fi
# It opens with exactly two commands, one that sets up and runs the main job and one that runs
# the tests: the first code block holds those two lines and nothing else.
first=$(awk '/^```/{n++; next} n==1' README.md)
if [ "$(grep -c . <<<"$first")" = 2 ] && grep -q '^make lab' <<<"$first" &&
   grep -q '^make test' <<<"$first"; then ok
else bad "README.md's first code block must hold exactly the two commands (make lab, make test); it holds: $first"; fi

# ---- every relative link resolves -----------------------------------------------------------
# Anchors are GitHub's: a heading's text lower-cased, markup and punctuation other than '-' and
# '_' dropped, spaces turned into '-', a repeated heading suffixed -1, -2, ... Headings and links
# inside fenced code blocks and `code spans` are not markdown and are skipped.
while IFS= read -r line; do
    case $line in
        ok) ok ;;
        *) bad "$line" ;;
    esac
done < <(find README.md docs -name '*.md' | sort | python3 -c '
import os, re, sys
LINK = re.compile(r"!?\[(?:[^\]\\]|\\.)*\]\(\s*<?([^)\s>]+)>?(?:\s+\"[^\"]*\")?\s*\)")
REF = re.compile(r"^\s{0,3}\[[^\]]+\]:\s*<?(\S+?)>?(?:\s|$)")
FENCE = re.compile(r"^\s{0,3}(```|~~~)")
def lines_outside_code(path):
    fence = None
    for no, line in enumerate(open(path, encoding="utf-8"), 1):
        m = FENCE.match(line)
        if m:
            if fence is None: fence = m.group(1)
            elif m.group(1) == fence: fence = None
            continue
        if fence is None:
            yield no, line.rstrip("\n")
def slug(text):
    text = re.sub(r"\[([^\]]*)\]\([^)]*\)", r"\1", text)   # a link: its text
    text = re.sub(r"<[^>]+>", "", text).strip().lower()    # inline html
    text = re.sub(r"[^\w\- ]", "", text)                   # punctuation, markup (` * ...)
    return text.replace(" ", "-")
anchors = {}
def anchors_of(path):
    if path not in anchors:
        seen, out = {}, set()
        for _, line in lines_outside_code(path):
            m = re.match(r"^\s{0,3}#{1,6}\s+(.*?)\s*#*\s*$", line)
            if not m: continue
            s = slug(m.group(1))
            k = seen.get(s, 0); seen[s] = k + 1
            out.add(s if k == 0 else "%s-%d" % (s, k))
        anchors[path] = out
    return anchors[path]
for path in sys.stdin.read().split():
    # the file with fenced blocks blanked and code spans removed, lines kept: link text may wrap
    body = [""] * sum(1 for _ in open(path, encoding="utf-8"))
    for no, line in lines_outside_code(path):
        body[no - 1] = re.sub(r"(`+)(?:(?!\1).)+\1", "", line)
    text = "\n".join(body)
    found = [(m.start(), m.group(1)) for m in LINK.finditer(text)]
    for no, line in enumerate(body, 1):
        m = REF.match(line)
        if m: found.append((sum(len(l) + 1 for l in body[:no - 1]), m.group(1)))
    for at, t in found:
        no = text.count("\n", 0, at) + 1
        if re.match(r"^[A-Za-z][A-Za-z0-9+.-]*:", t): continue   # http:, mailto:, ...
        file, _, anchor = t.partition("#")
        where = "%s:%d: link \"%s\"" % (path, no, t)
        dest = os.path.normpath(os.path.join(os.path.dirname(path), file)) if file else path
        if not os.path.exists(dest):
            print("%s: %s does not exist" % (where, dest)); continue
        if anchor and dest.endswith(".md") and os.path.isfile(dest) \
                and anchor.lower() not in anchors_of(dest):
            print("%s: %s has no heading for #%s" % (where, dest, anchor)); continue
        print("ok")
')

# ---- docs/cli.md names every command and every flag its --help prints ------------------------
if [ ! -x "$SWARM_BIN" ]; then
    bad "$SWARM_BIN is not built (make -j2 first)"
else
    cmds=$("$SWARM_BIN" --help 2>&1 | sed -nE 's/^  ([a-z][a-z0-9-]*)( .*)?$/\1/p')
    [ -n "$cmds" ] && ok || bad "swarm --help lists no commands"
    for c in $cmds; do
        # the section: from its heading to the next level-2 heading
        sec=$(awk -v h="## \`swarm $c\`" '$0 == h {on = 1; next} on && /^## / {exit} on' docs/cli.md)
        if [ -z "$sec" ]; then bad "docs/cli.md has no section '## \`swarm $c\`'"; continue; fi
        ok
        if help=$("$SWARM_BIN" "$c" --help 2>&1); then ok; else bad "swarm $c --help exits non-zero"; fi
        for f in $(grep -oE '(^|[^A-Za-z0-9_-])--?[A-Za-z][A-Za-z0-9-]*' <<<"$help" |
                   sed -E 's/^[^-]//' | sort -u); do
            if grep -qE -- "(^|[^A-Za-z0-9_-])$f([^A-Za-z0-9_-]|\$)" <<<"$sec"; then ok; else
                bad "docs/cli.md: swarm $c: flag $f (printed by swarm $c --help) is not in its section"; fi
        done
    done
fi

echo "e2e_docs: $pass passed, $fail failed"
[ "$fail" = 0 ]
