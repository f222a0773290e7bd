#!/bin/bash
# hosts.sh — N test hosts inside this machine: network namespaces on a bridge, one swarm worker each. experiments/
#
# Every `up` takes a tag R of its own (1..499), so runs that share a machine never touch each
# other's hosts: host I is the network namespace swarmRhI with one veth (swRhI inside, swRhIb on
# the bridge swRbr in the root namespace; interface names stay within the kernel's 15
# characters). Addresses come from 198.18.0.0/15 (RFC 2544, reserved for benchmarks: nothing
# there is routed off this machine), one /24 per tag, 198.(18 + R/256).(R%256).0/24: the bridge
# at .1 (where the coordinator binds its result socket, so no two runs may share a /24), host I
# at .(I+1), its worker on port 7000. The tag is the one given (--tag, or $SWARM_HOSTS_TAG),
# else the first free one from a number derived from this process's pid: creating the bridge
# is the claim, so two `up` at once never take the same one.
# `up` writes DIR/hosts.env (the tag, the names, the /24: source it), and `down`, `restart`
# and `status` act only on the tag recorded there (or given), never on another run's.
# The namespaces share the filesystem, so workers can read the model file at the coordinator's
# path (or take it over the wire with --fetch). Root only (namespaces, veth, BPF).
#
#   experiments/hosts.sh up N [options]      create the hosts, start the workers, write
#                                            hosts.ini and hosts.env
#   experiments/hosts.sh down [options]      remove this run's hosts (idempotent; safe after a
#                                            crash)
#   experiments/hosts.sh run N [options] -- CMD...
#                                            up, run CMD (with SWARM_HOSTS_INI and
#                                            SWARM_HOSTS_DIR set), always down
#   experiments/hosts.sh restart I           stop host I's worker if it runs, start it again with
#                                            the options of `up` (a host that comes back)
#   experiments/hosts.sh status              what exists now (of this run)
# options:
#   --dir DIR            state: hosts.ini, hosts.env, worker logs hI.log, caches hI/cache, pids
#                        (default $SWARM_HOSTS_DIR or /tmp/swarm-hosts)
#   --tag R              this run's tag, 1..499 (default $SWARM_HOSTS_TAG, else the one
#                        in DIR/hosts.env for down/restart/status, else a free one for up)
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
#   . "$DIR/hosts.env"; bin/swarm netem --netns ${HOSTS_NS}2 --link ${HOSTS_LINK}2 --loss 0.01
#   (--blackhole on|off, --detach)
set -eu -o pipefail

readonly PORT=7000 TAG_MAX=499
ROOT=$(cd "$(dirname "$0")/.." && pwd)
DIR=${SWARM_HOSTS_DIR:-/tmp/swarm-hosts}
TAG=${SWARM_HOSTS_TAG:-}
NS_PREFIX="" LINK_PREFIX="" BRIDGE="" NET="" # this run's names: s_names sets them from TAG
BIN=${SWARM_BIN:-$ROOT/bin/swarm}
CAP=64M CURVE_DIR="" FETCH=0 WARGS="" MODEL=""

say() { echo "hosts: $*" >&2; }
die() { say "$*"; exit 1; }

usage() {
    sed -n '3,/^set -eu/p' "$0" | sed -e '/^set -eu/d' -e 's/^# \{0,1\}//'
    exit 2
}

# ---- this run's tag and names ---------------------------------------------------------------

s_tag_ok() { [[ $1 =~ ^[1-9][0-9]*$ ]] && [ "$1" -le $TAG_MAX ]; }

s_names() { # R: the names and the /24 of tag R
    NS_PREFIX=swarm${1}h LINK_PREFIX=sw${1}h BRIDGE=sw${1}br
    NET=198.$((18 + $1 / 256)).$(($1 % 256))
}

s_recorded_tag() { # the tag this DIR's `up` recorded (empty when none)
    [ -f "$DIR/hosts.env" ] && sed -n 's/^HOSTS_TAG=\([0-9]*\).*/\1/p' "$DIR/hosts.env" | head -1
    return 0
}

# Claim a tag for `up`: the given one, else the first free one from a pid-derived start. The
# bridge's creation is the claim: `ip link add` fails for a name another run holds.
s_claim() {
    local r
    if [ -n "$TAG" ]; then
        s_names "$TAG"
        ip link add "$BRIDGE" type bridge 2>/dev/null || { BRIDGE=""; die "tag $TAG is in use \
(bridge sw${TAG}br exists): another run's, or a crashed one's (hosts.sh down --tag $TAG)"; }
        return 0
    fi
    r=$(($$ % TAG_MAX + 1))
    for _ in $(seq $TAG_MAX); do
        if s_tag_ok $r; then
            s_names $r
            if ip link add "$BRIDGE" type bridge 2>/dev/null; then TAG=$r; return 0; fi
        fi
        r=$((r % TAG_MAX + 1))
    done
    BRIDGE=""
    die "no free tag in 1..$TAG_MAX (hosts.sh status --tag R, down --tag R)"
}

s_write_env() {
    {
        echo "# hosts.env — written by experiments/hosts.sh up: this run's names (source it)"
        echo "HOSTS_TAG=$TAG"
        echo "HOSTS_NS=$NS_PREFIX          # host I's network namespace: \${HOSTS_NS}I"
        echo "HOSTS_LINK=$LINK_PREFIX         # its interface: \${HOSTS_LINK}I (\${HOSTS_LINK}Ib on the bridge)"
        echo "HOSTS_BRIDGE=$BRIDGE"
        echo "HOSTS_NET=$NET      # the bridge is \$HOSTS_NET.1, host I is \$HOSTS_NET.(I+1)"
    } >"$DIR/hosts.env.tmp"
    mv "$DIR/hosts.env.tmp" "$DIR/hosts.env"
}

# ---- teardown -------------------------------------------------------------------------------

# Our namespaces: every ${NS_PREFIX}N that exists (also ones a crashed run of this tag left).
s_namespaces() { [ -n "$NS_PREFIX" ] && ip netns list 2>/dev/null | awk '{print $1}' | grep -E "^${NS_PREFIX}[0-9]+$" || true; }

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
        ip netns exec "$ns" ip link show "$LINK_PREFIX$i" >/dev/null 2>&1 &&
            "$BIN" netem --netns "$ns" --link "$LINK_PREFIX$i" --detach >/dev/null 2>&1 || true
    done
    # swarm_<link>_ns<inode> (netem/kernel.c); the 'h' after the tag keeps sw5h apart from sw51h
    rm -rf "/sys/fs/bpf/swarm_$LINK_PREFIX"[0-9]* 2>/dev/null || true
}

cmd_down() {
    [ "$(id -u)" = 0 ] || die "needs root"
    [ -n "$TAG" ] || TAG=$(s_recorded_tag)
    if [ -z "$TAG" ]; then # nothing recorded in DIR and no tag given: no hosts of ours exist
        s_stop_workers
        return 0
    fi
    s_tag_ok "$TAG" || die "tag must be 1..$TAG_MAX, not '$TAG'"
    s_names "$TAG"
    s_stop_workers
    s_detach_bpf
    local ns l
    for ns in $(s_namespaces); do ip netns del "$ns" 2>/dev/null || true; done
    # The root-side veth ends go with their namespace peers; remove any that did not.
    for l in $(ip -o link show 2>/dev/null | awk -F': ' '{print $2}' | sed 's/@.*//' |
               grep -E "^${LINK_PREFIX}[0-9]+b\$" || true); do
        ip link del "$l" 2>/dev/null || true
    done
    ip link show "$BRIDGE" >/dev/null 2>&1 && ip link del "$BRIDGE"
    rm -f "$DIR/hosts.ini" "$DIR/hosts.env"
    return 0
}

# ---- bring-up -------------------------------------------------------------------------------

s_bridge() { # made by s_claim: its address, up
    ip addr add "$NET.1/24" dev "$BRIDGE"
    ip link set "$BRIDGE" up
}

s_host() { # I: namespace, veth pair, addresses
    local i=$1 ns=$NS_PREFIX$1
    ip netns add "$ns"
    ip link add "$LINK_PREFIX${i}b" type veth peer name "$LINK_PREFIX$i" netns "$ns"
    ip link set "$LINK_PREFIX${i}b" master "$BRIDGE" up
    ip -n "$ns" addr add "$NET.$((i + 1))/24" dev "$LINK_PREFIX$i"
    ip -n "$ns" link set lo up # the worker's own 127.0.0.1 (cgroup helpers, local tools)
    ip -n "$ns" link set "$LINK_PREFIX$i" up
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
        echo "; hosts.ini — written by experiments/hosts.sh: $n namespace hosts on $BRIDGE (tag $TAG)"
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
    [ -z "$TAG" ] || s_tag_ok "$TAG" || die "tag must be 1..$TAG_MAX, not '$TAG'"
    mkdir -p "$DIR"
    # An earlier run with this state directory (a crash, or no down): remove its hosts first.
    local old; old=$(s_recorded_tag)
    if [ -n "$old" ]; then (TAG=$old && cmd_down); fi
    # Half a setup is worse than none: undo everything if any step fails or we are interrupted
    # (only once a tag is ours: a refused claim leaves the other run alone).
    trap 'rc=$?; trap - EXIT INT TERM; say "setup failed: removing everything"; [ -n "$BRIDGE" ] && cmd_down; exit $((rc ? rc : 1))' EXIT INT TERM
    s_claim
    s_write_env
    s_bridge
    for i in $(seq "$n"); do s_host "$i"; done
    [ -n "$CURVE_DIR" ] && s_keys "$n"
    for i in $(seq "$n"); do s_worker "$i"; done
    s_write_ini "$n"
    # what `restart` needs to start a worker the same way
    printf 'BIN=%q CAP=%q CURVE_DIR=%q FETCH=%q WARGS=%q\n' "$BIN" "$CAP" "$CURVE_DIR" "$FETCH" \
        "$WARGS" >"$DIR/up.opts"
    trap - EXIT INT TERM
    say "$n hosts up (tag $TAG): ${NS_PREFIX}1..$n on $BRIDGE ($NET.1), $( [ -n "$CURVE_DIR" ] && echo curve || echo plaintext); config: $DIR/hosts.ini, names: $DIR/hosts.env"
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
    [ -n "$TAG" ] || TAG=$(s_recorded_tag)
    [ -n "$TAG" ] || die "no $DIR/hosts.env: hosts not started by this script's up"
    s_names "$TAG"
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
    [ -n "$TAG" ] || TAG=$(s_recorded_tag)
    [ -n "$TAG" ] || { echo "no hosts recorded in $DIR (and no --tag)"; return 0; }
    s_names "$TAG"
    echo "tag $TAG: $NET.0/24"
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
    --tag) TAG=$2; shift 2 ;;
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
