#!/bin/bash
# Runs libfabric's own fabtests (runfabtests.sh, built once by
# scripts/upstream.sh) against rcoll, on loopback or on two hosts, in both of libfabric's
# address-exchange modes: the default one, where a client finds its server
# by node and service, and out-of-band (-b).
#   $1 / $RCOLL_FABTESTS_SET   "check" (default): test sets unit and
#                              functional, rcoll only (make check);
#                              "full": unit, functional and short, for rcoll
#                              and, for comparison (its failures do not
#                              count), tcp;ofi_rxm (make check-fabtests)
#   $RCOLL_FABTESTS_HOSTS      "loopback" (default): server and client on
#                              127.0.0.1; "netns" (root): each on a host of
#                              its own, a network namespace whose only NIC
#                              (eth0, 10.78.0.1 and .2) is one end of a veth
#                              pair and whose loopback has no 127.0.0.1, so
#                              an address that does not name the server's
#                              host cannot reach it
#   $RCOLL_BUILD_DIR           build tree (default: the current directory)
# Tests that rcoll leaves out in a mode, with their reasons, are listed in
# test/fabtests-<mode>.exclude and printed. Closes with rcoll's
# "N passed, N failed" (Notrun and excluded apart).
# Exits 77 (skipped) when the fabtests are not built on this machine.
set -u

here=$(cd "$(dirname "$0")" && pwd)
top=$(cd "$here/../.." && pwd)
set_name=${1:-${RCOLL_FABTESTS_SET:-check}}
builddir=${RCOLL_BUILD_DIR:-$(pwd)}
export FI_PROVIDER_PATH=${FI_PROVIDER_PATH:-$builddir/.libs}
export FI_TCP_IFACE=${FI_TCP_IFACE:-lo}

if ! prefix=$("$top/scripts/upstream.sh" --cached fabtests); then
    echo "SKIP run-fabtests: libfabric's fabtests are not built here (scripts/upstream.sh fabtests builds them)"
    exit 77
fi

case $set_name in
check)
    sets=unit,functional
    providers=(rcoll)
    ;;
full)
    sets=unit,functional,short
    providers=(rcoll "tcp;ofi_rxm")
    ;;
*)
    echo "run-fabtests: unknown set '$set_name' (check or full)" >&2
    exit 2
    ;;
esac

# runfabtests.sh SIGKILLs every process on the machine whose name starts
# with "fi_" (after a test that failed or timed out, and when it ends): two
# runs at once would end each other's tests. The tests themselves do not
# inherit the lock (9>&- below).
lock=${TMPDIR:-/tmp}/rcoll-runfabtests.lock
exec 9>>"$lock" || { echo "run-fabtests: cannot open $lock"; exit 99; }
flock -w 3600 9 || { echo "run-fabtests: another run held $lock for an hour"; exit 99; }

hosts=${RCOLL_FABTESTS_HOSTS:-loopback}
server_addr=127.0.0.1
client_addr=127.0.0.1
# Out of band, client and server each bind the port they are told: on
# loopback they take different addresses.
client_oob_addr=127.0.0.2
host_args=()
case $hosts in
loopback) ;;
netns)
    [ "$(id -u)" = 0 ] || { echo "SKIP run-fabtests: netns hosts need root"; exit 77; }
    command -v ip >/dev/null || { echo "SKIP run-fabtests: no ip command (iproute2)"; exit 77; }
    # Fixed names: runs are serialised by the lock, and a run that was
    # killed leaves nothing the next one trips over.
    server_ns=rcollft-server
    client_ns=rcollft-client
    ip netns delete "$server_ns" 2>/dev/null
    ip netns delete "$client_ns" 2>/dev/null
    shim=$(mktemp -d)
    trap 'ip netns delete "$server_ns" 2>/dev/null; ip netns delete "$client_ns" 2>/dev/null; rm -rf "$shim"' EXIT
    errors=$shim/errors
    # make_host NS ADDRESS
    make_host() {
        ip -n "$1" link set lo up && ip -n "$1" addr del 127.0.0.1/8 dev lo &&
            ip -n "$1" addr add "$2/24" dev eth0 && ip -n "$1" link set eth0 up
    }
    {
        ip netns add "$server_ns" && ip netns add "$client_ns" &&
            ip link add eth0 netns "$server_ns" type veth peer name eth0 netns "$client_ns" &&
            make_host "$server_ns" 10.78.0.1 && make_host "$client_ns" 10.78.0.2
    } 2>"$errors" || { echo "SKIP run-fabtests: cannot make two hosts: $(cat "$errors")"; exit 77; }
    server_addr=10.78.0.1
    client_addr=10.78.0.2
    client_oob_addr=10.78.0.2
    host_args=("$server_ns" "$client_ns")
    export FI_TCP_IFACE=eth0
    # runfabtests.sh starts the server and the client with "ssh HOST
    # COMMAND" once it is given hosts: here a host is a namespace.
    cat >"$shim/ssh" <<'SHIM'
#!/bin/bash
while [ $# -gt 0 ] && [ "${1#-}" != "$1" ]; do
    case $1 in -o | -p | -l | -i) shift 2 ;; *) shift ;; esac
done
host=$1
shift
exec ip netns exec "$host" bash -c "$*"
SHIM
    chmod +x "$shim/ssh"
    export PATH=$shim:$PATH
    ;;
*)
    echo "run-fabtests: unknown hosts '$hosts' (loopback or netns)" >&2
    exit 2
    ;;
esac

echo "# fabtests from $prefix, sets $sets, server $server_addr, client $client_addr ($hosts)"
for mode in node-service out-of-band; do
    [ -f "$top/test/fabtests-$mode.exclude" ] || continue
    echo "# excluded for rcoll in $mode mode (test/fabtests-$mode.exclude):"
    sed -n '/^# *$/,$ s/^# \(.\+\)/#   \1/p' "$top/test/fabtests-$mode.exclude"
done

passed=0
failed=0
notrun=0
started=$(date +%s)
for prov in "${providers[@]}"; do
    for mode in node-service out-of-band; do
        mode_args=()
        [ "$mode" = out-of-band ] && mode_args=(-b -L "-s $server_addr" -C "-s $client_oob_addr")
        excludes=()
        [ "$prov" = rcoll ] && [ -f "$top/test/fabtests-$mode.exclude" ] &&
            excludes=(-f "$top/test/fabtests-$mode.exclude")
        log=$(mktemp)
        mode_started=$(date +%s)
        "$prefix/bin/runfabtests.sh" -v -T 60 -t "$sets" -p "$prefix/bin" -s "$server_addr" -c "$client_addr" \
            ${excludes[@]+"${excludes[@]}"} ${mode_args[@]+"${mode_args[@]}"} "$prov" \
            ${host_args[@]+"${host_args[@]}"} >"$log" 2>&1 9>&-
        p=$(awk '/^# Total Pass/ {print $NF}' "$log")
        f=$(awk '/^# Total Fail/ {print $NF}' "$log")
        n=$(awk '/^# Total Notrun/ {print $NF}' "$log")
        if [ -z "$p" ] || [ -z "$f" ]; then
            echo "FAIL [$prov, $mode, $hosts]: runfabtests.sh printed no totals"
            tail -n 20 "$log" | sed 's/^/    | /'
            failed=$((failed + 1))
        else
            # runfabtests -v reports each test as a YAML block ("- name:",
            # "result:", and the output of failing tests): one line per test
            # here, with the block of each failure.
            awk -v tag="[$prov, $mode, $hosts]" '
                /^- name:/ { flush(); name = $0; sub(/^- name:[[:space:]]*/, "", name); block = ""; result = "" }
                /^  result:/ { result = $2 }
                /^[- ] / { block = block "    | " $0 "\n" }
                function flush() {
                    if (name == "") return
                    print result " " name " " tag
                    if (result == "Fail") printf "%s", block
                }
                END { flush() }' "$log"
            if [ "$prov" = rcoll ]; then
                echo "# $prov, $mode, $hosts: $p passed, $f failed, $n notrun/excluded; $(($(date +%s) - mode_started)) s"
                passed=$((passed + p))
                failed=$((failed + f))
                notrun=$((notrun + n))
            else
                # For comparison only: its failures are not rcoll's.
                echo "# $prov (comparison), $mode, $hosts: $p passed, $f failed, $n notrun/excluded;" \
                    "$(($(date +%s) - mode_started)) s"
            fi
        fi
        rm -f "$log"
    done
done
echo "# $notrun notrun or excluded; $(($(date +%s) - started)) s"
echo "$passed passed, $failed failed"
[ "$failed" -eq 0 ]
