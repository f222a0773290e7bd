#!/bin/bash
# e2e_generate.sh — swarm generate, chat and perplexity from the command line on a tiny random
# llama model with the fixture vocabulary: greedy and seeded runs reproducible across thread
# counts, stop strings cut exactly, context overflow, bad flags, the --out fields, the parity
# gate, chat with a recognised and an unrecognised template, perplexity and KL. tests/
# Env: SWARM_BIN (bin/swarm), SWARM_TEST_TMP (scratch). Closes with "e2e_generate: N passed, N failed".
set -u
cd "$(dirname "$0")/.."
: "${SWARM_BIN:=$PWD/bin/swarm}" "${SWARM_TEST_TMP:=$PWD/tests/tmp}"
T="$SWARM_TEST_TMP/e2e_generate"
rm -rf "$T" && mkdir -p "$T"
pass=0; fail=0
. tests/lib.sh

gzip -dc tests/fixtures/tok/llama-spm.gguf.gz > "$T/vocab.gguf"
shape=(--arch llama --dim 64 --layers 2 --heads 4 --kv-heads 2 --ff 96 --vocab-from "$T/vocab.gguf"
       --ctx 256 --seed 9)
sw g8 gen "${shape[@]}" --type q8_0 -o "$T/m.gguf"; expect_rc g8 0
sw g16 gen "${shape[@]}" --type f16 -o "$T/m16.gguf"; expect_rc g16 0
sw gtl gen "${shape[@]}" --type q8_0 -o "$T/tl.gguf" \
    --chat-template tests/fixtures/chat/tinyllama-1.1b-chat.jinja; expect_rc gtl 0
sw gphi gen "${shape[@]}" --type q8_0 -o "$T/phi.gguf" \
    --chat-template tests/fixtures/chat/phi-3-mini.jinja; expect_rc gphi 0
sw gvic gen "${shape[@]}" --type q8_0 -o "$T/vic.gguf" \
    --chat-template tests/fixtures/chat/vicuna-1.1.jinja; expect_rc gvic 0
P="Once upon a time"

# greedy: the same text and digests on 1 and 2 threads; the parity gate passes
sw gr1 generate "$T/m.gguf" --prompt "$P" -n 24 --temp 0 --threads 1 --out "$T/r.jsonl"
expect_rc gr1 0
sw gr2 generate "$T/m.gguf" --prompt "$P" -n 24 --temp 0 --threads 2 --batch 3 --parity \
    --out "$T/r.jsonl"; expect_rc gr2 0
eq "greedy text, threads 1 vs 2" "$(cat "$T/gr2.out")" "$(cat "$T/gr1.out")"
d1=$(sed -n 1p "$T/r.jsonl" | python3 -c 'import json,sys; o=json.load(sys.stdin); print(o["ids_digest"], o["logits_digest"])')
d2=$(sed -n 2p "$T/r.jsonl" | python3 -c 'import json,sys; o=json.load(sys.stdin); print(o["ids_digest"], o["logits_digest"])')
eq "greedy digests, threads 1 vs 2" "$d2" "$d1"
eq "parity gate" "$(jfield "$T/r.jsonl" gates.parity)" pass
has gr2 err "parity: pass"
has gr1 err "ttft"
has gr1 err "itl p50"
for k in model architecture tensor_types.q8_0 ctx tokens_in tokens_out ttft_ms itl_ms_p50 \
         itl_ms_p95 itl_ms_p99 prompt_tok_s gen_tok_s peak_rss_bytes cap_bytes ssd_read_bytes \
         gates.parity ids_digest logits_digest finish_reason sampling.seed; do
    v=$(jfield "$T/r.jsonl" "$k")
    if [ "$v" != MISSING ] && [ "$v" != null ]; then ok; else bad "--out lacks $k"; fi
done
eq "tokens_out" "$(jfield "$T/r.jsonl" tokens_out)" 24
eq "finish_reason" "$(jfield "$T/r.jsonl" finish_reason)" length
eq "architecture" "$(jfield "$T/r.jsonl" architecture)" llama

# seeded sampling: the same on every run and thread count
samp=(--temp 1.0 --top-k 0 --top-p 1 --min-p 0 --seed 7 -n 24)
sw s1 generate "$T/m.gguf" --prompt "$P" "${samp[@]}" --threads 1; expect_rc s1 0
sw s2 generate "$T/m.gguf" --prompt "$P" "${samp[@]}" --threads 2; expect_rc s2 0
sw s3 generate "$T/m.gguf" --prompt "$P" "${samp[@]}" --threads 1; expect_rc s3 0
eq "seed 7, threads 1 vs 2" "$(cat "$T/s2.out")" "$(cat "$T/s1.out")"
eq "seed 7, twice" "$(cat "$T/s3.out")" "$(cat "$T/s1.out")"

# a stop string from the middle of the greedy text: the output is exactly what came before it
full=$(cat "$T/gr1.out")
stop=$(python3 -c 'import sys; t=sys.argv[1]; n=len(t)//2; print(t[n:n+3])' "$full")
want=$(python3 -c 'import sys; t,s=sys.argv[1],sys.argv[2]; print(t[:t.index(s)])' "$full" "$stop")
sw stop generate "$T/m.gguf" --prompt "$P" -n 24 --temp 0 --stop "$stop" --out "$T/stop.jsonl"
expect_rc stop 0
eq "stop '$stop' cuts the text" "$(cat "$T/stop.out")" "$want"
eq "finish stop" "$(jfield "$T/stop.jsonl" finish_reason)" stop

# context overflow: one clear error before any work
sw over generate "$T/m.gguf" --prompt "$P" -n 300 --ctx 256; expect_fail over
has over err "exceed the context of 256"
sw overctx generate "$T/m.gguf" --prompt "$P" --ctx 999; expect_fail overctx
has overctx err "trained for 256"
# bad flags exit 2, with the flag named
sw b1 generate "$T/m.gguf" --prompt "$P" --temp abc; expect_rc b1 2; has b1 err "--temp 'abc'"
sw b2 generate "$T/m.gguf" --prompt "$P" --threads 0; expect_rc b2 2; has b2 err "--threads"
sw b3 generate "$T/m.gguf" --prompt "$P" -n -1; expect_rc b3 2
sw b4 generate "$T/m.gguf" --prompt "$P" --bogus; expect_rc b4 2; has b4 err "--bogus"
sw b5 generate "$T/m.gguf"; expect_rc b5 2
sw b6 generate "$T/m.gguf" --prompt "$P" --top-p 1.5; expect_rc b6 2
sw b7 generate "$T/m.gguf" --prompt "$P" -n; expect_rc b7 2
# --arm ssd runs (tests/e2e_generate_ssd.sh); an unknown arm is refused naming the choices
sw arm generate "$T/m.gguf" --prompt "$P" --arm bogus; expect_rc arm 2
has arm err "arms: reference, ssd"
sw nofile generate "$T/none.gguf" --prompt "$P"; expect_fail nofile; has nofile err "none.gguf"
# a config naming the file works as the file does
printf '[model]\npath = %s\n' "$T/m.gguf" > "$T/m.ini"
sw cfg generate "$T/m.ini" --prompt "$P" -n 24 --temp 0; expect_rc cfg 0
eq "a config's model" "$(cat "$T/cfg.out")" "$(cat "$T/gr1.out")"
sw nojinja gen "${shape[@]}" -o "$T/x.gguf" --chat-template "$T/none.jinja"; expect_rc nojinja 2
has nojinja err "none.jinja"
# KL of a file against itself at the generated positions: 0, top-1 1
sw kls generate "$T/m.gguf" --prompt "$P" -n 8 --temp 0 --kl-base "$T/m.gguf"; expect_rc kls 0
has kls err "mean 0 p99 0 max 0, top-1 agreement 1.0000"

# chat: the template recognised in the file, two turns in one session
printf 'Hello there\nAnd again?\n' > "$T/chat.in"
sw chat chat "$T/tl.gguf" -n 6 --temp 0 < "$T/chat.in"; expect_rc chat 0
has chat err "chat template: tinyllama"
eq "two replies" "$(grep -c 'tokens, length' "$T/chat.err")" 2
# the second turn runs only what the cache lacks
newt=$(sed -n 's/.*prompt \([0-9]*\) tokens, \([0-9]*\) of them new.*/\1 \2/p' "$T/chat.err" | tail -1)
read -r tot new <<<"$newt"
if [ -n "${new:-}" ] && [ "$new" -lt "$tot" ]; then ok; else bad "second turn reran all: $newt"; fi
sw chatphi chat "$T/phi.gguf" -n 4 --temp 0 < "$T/chat.in"; expect_rc chatphi 0
has chatphi err "chat template: phi3-4k"
sw chatvic chat "$T/vic.gguf" < "$T/chat.in"; expect_fail chatvic
has chatvic err "chatml"
has chatvic err "--chat-template"
sw chatnone chat "$T/m.gguf" < "$T/chat.in"; expect_fail chatnone
sw chatov chat "$T/vic.gguf" --chat-template chatml -n 4 --temp 0 < "$T/chat.in"
expect_rc chatov 0; has chatov err "chat template: chatml"
sw chatbad chat "$T/tl.gguf" --chat-template nosuch < "$T/chat.in"; expect_fail chatbad
has chatbad err "nosuch"

# perplexity: finite; a file against itself has KL 0 and top-1 1; q8_0 against f16 is close
for i in $(seq 20); do echo "The robot counted $i stars over the quiet sea, and then it slept."; done > "$T/text.txt"
sw ppl perplexity "$T/m.gguf" --file "$T/text.txt" --ctx 64; expect_rc ppl 0
ppl=$(sed -n 's/.*perplexity \([0-9.]*\) .*/\1/p' "$T/ppl.out")
python3 -c 'import math,sys; v=float(sys.argv[1]); sys.exit(0 if math.isfinite(v) and v > 1 else 1)' \
    "${ppl:-nan}" && ok || bad "perplexity '$ppl'"
sw pself perplexity "$T/m.gguf" --file "$T/text.txt" --ctx 64 --kl-base "$T/m.gguf"
expect_rc pself 0; has pself out "KL mean 0, p99 0, max 0; top-1 agreement 1.0000"
sw pq perplexity "$T/m.gguf" --file "$T/text.txt" --ctx 64 --kl-base "$T/m16.gguf"; expect_rc pq 0
sw pshort perplexity "$T/m.gguf" --file "$T/text.txt" --ctx 256; expect_fail pshort
has pshort err "needs at least 512"
sw pnofile perplexity "$T/m.gguf" --file "$T/nothere.txt"; expect_fail pnofile
has pnofile err "nothere.txt"
sw pbad perplexity "$T/m.gguf" --file "$T/text.txt" --ctx x; expect_rc pbad 2

echo "e2e_generate: $pass passed, $fail failed"
[ "$fail" = 0 ]
