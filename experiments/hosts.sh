#!/bin/bash
# hosts.sh — N test hosts inside this machine: network namespaces on a bridge, one swarm worker each. experiments/
#
# A host is a network namespace swarmhI with one veth (swhI inside, swhIbr on the bridge swarmbr0
# in the root namespace). Addresses come from 198.18.0.0/15 (RFC 2544, reserved for benchmarks:
# nothing there is routed off this machine): the bridge is 198.18.0.1/24 (where the coordinator
# binds its result socket), host I is 198.18.0.(I+1)/24 and its worker listens on port 7000.
# The namespaces share the filesystem, so workers can read the model file at the coordinator's
# path (or take it over the wire with --fetch). Root only (namespaces, veth, BPF).
#
#   experiments/hosts.sh up N [options]      create the hosts, start the workers, write hosts.ini
#   experiments/hosts.sh down                remove everything (idempotent; safe after a crash)
#   experiments/hosts.sh run N [options] -- CMD...
#                                            up, run CMD (with SWARM_HOSTS_INI set), always down
#   experiments/hosts.sh restart I           stop host I's worker if it runs, start it again with
#                                            the options of `up` (a host that comes back)
#   experiments/hosts.sh status              what exists now
# options:
#   --dir DIR            state: hosts.ini, worker logs hI.log, caches hI/cache, pids
#                        (default $SWARM_HOSTS_DIR or /tmp/swarm-hosts)
#   --bin PATH           the swarm binary (default $SWARM_BIN or bin/swarm)
#   --cap SIZE           each worker's cap, also written to hosts.ini (default 64M)
#   --curve KEYDIR       CURVE: keys coord.key/.pub and hI.key/.pub in KEYDIR (made when missing);
#                        workers get --key hI.key --allow coord.pub, hosts.ini gets the keys
#                        (default: plaintext, with [swarm] plaintext = 1 and workers --plaintext)
#   --fetch              workers take their layers from the coordinator (into DIR/hI/cache)
#   --workers-args "..." extra arguments for every worker
#   --model F            only written into hosts.ini as [model] path (absolute)
#
# Use hosts.ini as the tail of a coordinator config (sections may repeat; later keys win):
#   cat configs/tiny.ini "$DIR/hosts.ini" > my.ini && bin/swarm run my.ini --arm resident
# Link faults apply to the hosts' links with the BPF path, from the root namespace:
#   bin/swarm netem --netns swarmh2 --link swh2 --loss 0.01   (--blackhole on|off, --detach)
set -eu -o pipefail

readonly NS_PREFIX=swarmh BRIDGE=swarmbr0 NET=198.18.0 PORT=7000
ROOT=$(cd "$(dirname "$0")/.." && pwd)
DIR=${SWARM_HOSTS_DIR:-/tmp/swarm-hosts}
BIN=${SWARM_BIN:-$ROOT/bin/swarm}
CAP=64M CURVE_DIR="" FETCH=0 WARGS="" MODEL=""

say() { echo "hosts: $*" >&2; }
die() { say "$*"; exit 1; }

usage() {
    sed -n '3,/^set -eu/p' "$0" | sed -e '/^set -eu/d' -e 's/^# \{0,1\}//'
    exit 2
}

# ---- teardown -------------------------------------------------------------------------------

# Our namespaces: every swarmhN that exists (also ones a crashed run left behind).
s_namespaces() { ip netns list 2>/dev/null | awk '{print $1}' | grep -E "^${NS_PREFIX}[0-9]+$" || true; }

# Stop the workers we started (pid files), then anything still inside our namespaces: a process
# keeps a deleted namespace (and its veth) alive, so none may survive.
s_stop_workers() {
    local f pid ns
    for f in "$DIR"/*.pid; do
        [ -f "$f" ] || continue
        pid=$(cat "$f")
        kill -TERM "$pid" 2>/dev/null || true
    done
    for ns in $(s_namespaces); do
        for pid in $(ip netns pids "$ns" 2>/dev/null); do kill -TERM "$pid" 2>/dev/null || true; done
    done
    # Workers stop within a poll interval; give them 2 s, then SIGKILL the stragglers.
    local t
    for t in $(seq 20); do
        local alive=0
        for ns in $(s_namespaces); do [ -n "$(ip netns pids "$ns" 2>/dev/null)" ] && alive=1; done
        [ $alive = 0 ] && break
        sleep 0.1
    done
    for ns in $(s_namespaces); do
        for pid in $(ip netns pids "$ns" 2>/dev/null); do kill -KILL "$pid" 2>/dev/null || true; done
    done
    rm -f "$DIR"/*.pid
}

# BPF programs and pinned maps: detach while the namespace exists (the pin directory's name
# carries the namespace's inode); remove pins whose namespace is already gone.
s_detach_bpf() {
    local ns
    for ns in $(s_namespaces); do
        local i=${ns#"$NS_PREFIX"}
        ip netns exec "$ns" ip link show "swh$i" >/dev/null 2>&1 &&
            "$BIN" netem --netns "$ns" --link "swh$i" --detach >/dev/null 2>&1 || true
    done
    rm -rf /sys/fs/bpf/swarm_swh[0-9]* 2>/dev/null || true
}

cmd_down() {
    [ "$(id -u)" = 0 ] || die "needs root"
    s_stop_workers
    s_detach_bpf
    local ns l
    for ns in $(s_namespaces); do ip netns del "$ns" 2>/dev/null || true; done
    # The root-side veth ends go with their namespace peers; remove any that did not.
    for l in $(ip -o link show 2>/dev/null | awk -F': ' '{print $2}' | sed 's/@.*//' |
               grep -E '^swh[0-9]+br$' || true); do
        ip link del "$l" 2>/dev/null || true
    done
    ip link show "$BRIDGE" >/dev/null 2>&1 && ip link del "$BRIDGE"
    rm -f "$DIR/hosts.ini"
    return 0
}

# ---- bring-up -------------------------------------------------------------------------------

s_bridge() {
    ip link add "$BRIDGE" type bridge
    ip addr add "$NET.1/24" dev "$BRIDGE"
    ip link set "$BRIDGE" up
}

s_host() { # I: namespace, veth pair, addresses
    local i=$1 ns=$NS_PREFIX$1
    ip netns add "$ns"
    ip link add "swh${i}br" type veth peer name "swh$i" netns "$ns"
    ip link set "swh${i}br" master "$BRIDGE" up
    ip -n "$ns" addr add "$NET.$((i + 1))/24" dev "swh$i"
    ip -n "$ns" link set lo up # the worker's own 127.0.0.1 (cgroup helpers, local tools)
    ip -n "$ns" link set "swh$i" up
}

s_keys() { # N: make missing key pairs in CURVE_DIR
    local n=$1 name
    mkdir -p "$CURVE_DIR"
    for name in coord $(seq -f 'h%g' 1 "$n"); do
        [ -f "$CURVE_DIR/$name.key" ] || (cd "$CURVE_DIR" && "$BIN" keygen "$name" >/dev/null)
    done
}

s_worker() { # I [append]: start hI's worker inside its namespace, wait until it listens
    local i=$1 ns=$NS_PREFIX$1 id=h$1 args=() from=0
    args=(--listen "tcp://$NET.$((i + 1)):$PORT" --id "$id" --cap "$CAP" --cache "$DIR/$id/cache")
    if [ -n "$CURVE_DIR" ]; then
        args+=(--key "$CURVE_DIR/$id.key" --allow "$CURVE_DIR/coord.pub")
    else
        args+=(--plaintext) # off loopback a worker refuses plaintext unless told
    fi
    [ $FETCH = 1 ] && args+=(--fetch)
    mkdir -p "$DIR/$id"
    # nsenter enters only the network namespace; `ip netns exec` would also remount /sys, which
    # hides the memory cgroup mount (the worker's cap would become advisory) and the BPF pins.
    local enter=(ip netns exec "$ns")
    command -v nsenter >/dev/null && enter=(nsenter "--net=/var/run/netns/$ns")
    # shellcheck disable=SC2086 # WARGS is a list of words on purpose
    if [ "${2:-}" = append ]; then # a restart: its log goes on; only new lines count
        from=$(wc -l <"$DIR/$id.log" 2>/dev/null || echo 0)
        "${enter[@]}" "$BIN" worker "${args[@]}" $WARGS >>"$DIR/$id.log" 2>&1 &
    else
        "${enter[@]}" "$BIN" worker "${args[@]}" $WARGS >"$DIR/$id.log" 2>&1 &
    fi
    echo $! >"$DIR/$id.pid"
    local t
    for t in $(seq 100); do # a fresh worker listens within ~50 ms; allow 5 s on a busy machine
        tail -n +"$((from + 1))" "$DIR/$id.log" | grep -q "listening on" && return 0
        kill -0 "$(cat "$DIR/$id.pid")" 2>/dev/null || break
        sleep 0.05
    done
    cat "$DIR/$id.log" >&2
    die "worker $id did not start (log: $DIR/$id.log)"
}

s_write_ini() { # N
    local n=$1 i f="$DIR/hosts.ini"
    {
        echo "; hosts.ini — written by experiments/hosts.sh: $n namespace hosts on $BRIDGE"
        [ -n "$MODEL" ] && printf '[model]\npath = %s\n' "$MODEL"
        echo "[swarm]"
        echo "host = $NET.1                  ; the bridge: where the result socket binds"
        [ -z "$CURVE_DIR" ] && echo "plaintext = 1                  ; veth links are not loopback"
        [ -n "$CURVE_DIR" ] && printf '[security]\nkey = %s\n' "$CURVE_DIR/coord.key"
        for i in $(seq "$n"); do
            echo "[worker.h$i]"
            echo "endpoint = tcp://$NET.$((i + 1)):$PORT"
            echo "cap = $CAP"
            [ -n "$CURVE_DIR" ] && echo "public_key = $CURVE_DIR/h$i.pub"
        done
    } >"$f.tmp"
    mv "$f.tmp" "$f"
}

cmd_up() { # N
    local n=$1 i
    [ "$(id -u)" = 0 ] || die "needs root (namespaces, veth, BPF)"
    [[ $n =~ ^[0-9]+$ ]] && [ "$n" -ge 1 ] && [ "$n" -le 200 ] || die "N must be 1..200, not '$n'"
    [ -x "$BIN" ] || die "no swarm binary at $BIN (make)"
    mkdir -p "$DIR"
    # Leftovers from an earlier run would collide with the names below.
    if [ -n "$(s_namespaces)" ] || ip link show "$BRIDGE" >/dev/null 2>&1; then cmd_down; fi
    # Half a setup is worse than none: undo everything if any step fails or we are interrupted.
    trap 'rc=$?; trap - EXIT INT TERM; say "setup failed: removing everything"; cmd_down; exit $((rc ? rc : 1))' EXIT INT TERM
    s_bridge
    for i in $(seq "$n"); do s_host "$i"; done
    [ -n "$CURVE_DIR" ] && s_keys "$n"
    for i in $(seq "$n"); do s_worker "$i"; done
    s_write_ini "$n"
    # what `restart` needs to start a worker the same way
    printf 'BIN=%q CAP=%q CURVE_DIR=%q FETCH=%q WARGS=%q\n' "$BIN" "$CAP" "$CURVE_DIR" "$FETCH" \
        "$WARGS" >"$DIR/up.opts"
    trap - EXIT INT TERM
    say "$n hosts up: ${NS_PREFIX}1..$n on $BRIDGE ($NET.1), $( [ -n "$CURVE_DIR" ] && echo curve || echo plaintext); config: $DIR/hosts.ini"
}

cmd_run() { # N -- CMD...
    local n=$1; shift
    [ $# -ge 1 ] || die "run: no command"
    cmd_up "$n"
    # The hosts go away whatever happens to CMD: failure, Ctrl-C, SIGTERM. CMD runs in the
    # background (stdin kept) so that a signal to this script is handled at once, not after CMD.
    child=""
    trap 'rc=$?; trap - EXIT INT TERM; [ -n "$child" ] && kill -TERM "$child" 2>/dev/null; cmd_down; exit $rc' EXIT
    trap 'exit 130' INT
    trap 'exit 143' TERM
    SWARM_HOSTS_INI="$DIR/hosts.ini" SWARM_HOSTS_DIR="$DIR" "$@" <&0 &
    child=$!
    local rc=0
    wait "$child" || rc=$?
    child=""
    return $rc
}

cmd_restart() { # I
    local i=$1 pid
    [[ $i =~ ^[0-9]+$ ]] && ip netns list | grep -q "^$NS_PREFIX$i\b" || die "no host $i (up first)"
    [ -f "$DIR/up.opts" ] || die "no $DIR/up.opts: hosts not started by this script's up"
    # shellcheck disable=SC1091 # written by cmd_up
    . "$DIR/up.opts"
    if [ -f "$DIR/h$i.pid" ] && pid=$(cat "$DIR/h$i.pid") && kill -0 "$pid" 2>/dev/null; then
        kill -TERM "$pid"
        local t
        for t in $(seq 20); do kill -0 "$pid" 2>/dev/null || break; sleep 0.1; done
        kill -KILL "$pid" 2>/dev/null || true
    fi
    s_worker "$i" append
    say "h$i restarted (pid $(cat "$DIR/h$i.pid"))"
}

cmd_status() {
    echo "namespaces: $(s_namespaces | tr '\n' ' ')"
    ip -br addr show "$BRIDGE" 2>/dev/null || echo "bridge: none"
    local f
    for f in "$DIR"/*.pid; do
        [ -f "$f" ] && echo "$(basename "$f" .pid): pid $(cat "$f") $(kill -0 "$(cat "$f")" 2>/dev/null && echo running || echo gone)"
    done
    return 0
}

# ---- main -----------------------------------------------------------------------------------

[ $# -ge 1 ] || usage
verb=$1; shift
n=""
if [ "$verb" = up ] || [ "$verb" = run ] || [ "$verb" = restart ]; then
    [ $# -ge 1 ] || usage
    n=$1; shift
fi
while [ $# -gt 0 ]; do
    case $1 in
    --dir) DIR=$2; shift 2 ;;
    --bin) BIN=$2; shift 2 ;;
    --cap) CAP=$2; shift 2 ;;
    --curve) CURVE_DIR=$(mkdir -p "$2" && cd "$2" && pwd); shift 2 ;;
    --fetch) FETCH=1; shift ;;
    --workers-args) WARGS=$2; shift 2 ;;
    --model) MODEL=$(realpath "$2"); shift 2 ;;
    --) shift; break ;;
    -h|--help) usage ;;
    *) [ "$verb" = run ] && break; die "unknown option '$1' (--help)" ;;
    esac
done
DIR=$(mkdir -p "$DIR" && cd "$DIR" && pwd)
case $verb in
up) cmd_up "$n" ;;
down) cmd_down ;;
run) cmd_run "$n" "$@" ;;
restart) cmd_restart "$n" ;;
status) cmd_status ;;
-h|--help|help) usage ;;
*) die "unknown command '$verb' (up, down, run, restart, status)" ;;
esac
