#!/bin/bash
# Runs the fabtests clients with their ranks spread over several "hosts":
# network namespaces, each with one NIC (a veth) plugged into a bridge that
# lives in a namespace of its own. Nothing is added to the machine's own
# namespace, and the only addresses used are the ones made here, in a
# private /24; the hosts' loopback has no 127.0.0.1, so a client that would
# quietly fall back to loopback fails instead.
#
# Rank i runs on host i % N (RCOLL_TEST_NETNS, see fabtests/common.hpp).
# Runs a subset of rcoll_p2p_test and rcoll_coll_test that way, then the
# rcoll_netns_test cases (placement, a host going silent).
#
#   RCOLL_NETNS_HOSTS       number of hosts (default 4)
#   RCOLL_NETNS_SUBNET      first three octets of their /24 (default 10.77.0)
#   RCOLL_NETNS_P2P_CASES   rcoll_p2p_test cases (default: a representative subset;
#                           many-peers puts 17 ranks on the 4 hosts)
#   RCOLL_NETNS_COLL_CASES  rcoll_coll_test cases (default: a few, 3 to 8 ranks;
#                           sweep-8 puts 2 on every host; they run with
#                           FI_RCOLL_COLL_PLACEMENT=1, so that algorithms are
#                           chosen by placement there, and, without faults,
#                           sweep-8 once more with the model's choices where
#                           the core's own tuning rules would choose)
#   RCOLL_NETNS_CASES       rcoll_netns_test cases (default: all)
#   RCOLL_NETNS_TCP_RETRIES2  net.ipv4.tcp_retries2 of the hosts during the
#                           silent-host cases (default 4: TCP gives up on
#                           unacknowledged data after ~6 s instead of ~15 min)
#   RCOLL_NETNS_WINDOW      seconds a point-to-point case watches a silent
#                           peer when nothing bounds the wait (default 10)
#   RCOLL_NETNS_LOSS        percent of the packets every host sends that are
#                           dropped at random (nftables; default 0: none)
#   RCOLL_NETNS_RATE        what every host may send, e.g. "20 mbytes/second";
#                           packets over it are dropped (default: no limit)
#                           With either set, the cases run without the
#                           silent-host cases (their timing is the point), and
#                           the packets each host dropped are printed.
#   RCOLL_TEST_PROV, RCOLL_BUILD_DIR, RCOLL_TEST_CASE_LIMIT  as in run-p2p.sh
#
# Prints one line per case and closes with "N passed, N failed". Needs root
# (CAP_NET_ADMIN, /run/netns) and iproute2; without them it prints SKIP and
# exits 77, automake's code for a skipped test.
set -u

prov=${RCOLL_TEST_PROV:-rcoll}
builddir=${RCOLL_BUILD_DIR:-$(pwd)}
hosts=${RCOLL_NETNS_HOSTS:-4}
subnet=${RCOLL_NETNS_SUBNET:-10.77.0}
case_limit=${RCOLL_TEST_CASE_LIMIT:-300}
retries2=${RCOLL_NETNS_TCP_RETRIES2:-4}
window=${RCOLL_NETNS_WINDOW:-10}
loss=${RCOLL_NETNS_LOSS:-0}
rate=${RCOLL_NETNS_RATE:-}
# Set but empty: none of that client's cases.
p2p_cases=${RCOLL_NETNS_P2P_CASES-pingpong-msg pingpong-tagged stream-msg stream-tagged unexpected-flood many-peers
    rma-write rma-read rma-writedata peer-killed}
coll_cases=${RCOLL_NETNS_COLL_CASES-sweep-4 sweep-8 large-3 two-groups-in-flight rank-killed
    node-local-path}
netns_cases=${RCOLL_NETNS_CASES-placement silent-rndv-receiver silent-rndv-sender busy-peer slow-connect connect-timeout
    silent-allreduce silent-barrier}

p2p_client=$builddir/fabtests/rcoll_p2p_test
coll_client=$builddir/fabtests/rcoll_coll_test
netns_client=$builddir/fabtests/rcoll_netns_test
for client in "$p2p_client" "$coll_client" "$netns_client"; do
    if [ ! -x "$client" ]; then
        echo "netns-hosts: $client not built" >&2
        echo "0 passed, 1 failed"
        exit 1
    fi
done
if [ "$hosts" -lt 4 ] || [ "$hosts" -gt 250 ]; then
    echo "netns-hosts: RCOLL_NETNS_HOSTS must be 4..250 (the collective cases need 4 hosts)" >&2
    echo "0 passed, 1 failed"
    exit 1
fi

skip() {
    echo "SKIP netns-hosts: $*"
    exit 77
}
[ "$(id -u)" = 0 ] || skip "not root: creating network namespaces needs CAP_NET_ADMIN and /run/netns"
command -v ip >/dev/null 2>&1 || skip "no ip command (iproute2)"

# Names unique to this run, so that parallel runs do not collide.
prefix=rcoll$$
switch=$prefix-sw
names=()
made=()
errors=$(mktemp)
cleanup() {
    local ns
    for ns in "${made[@]}"; do
        ip netns delete "$ns" 2>/dev/null
    done
    rm -f "$errors"
}
trap cleanup EXIT
trap 'exit 130' INT TERM

# make_namespace NAME: creates it and remembers it for the cleanup.
make_namespace() {
    ip netns add "$1" 2>"$errors" || return 1
    made+=("$1")
}

make_namespace "$switch" || skip "cannot create a network namespace: $(cat "$errors")"
{
    ip -n "$switch" link add br0 type bridge &&
        ip -n "$switch" link set br0 up
} 2>"$errors" || skip "cannot create a bridge in a network namespace: $(cat "$errors")"
for ((i = 0; i < hosts; i++)); do
    ns=$prefix-h$i
    {
        make_namespace "$ns" &&
            ip -n "$ns" link set lo up &&
            ip -n "$ns" addr del 127.0.0.1/8 dev lo &&
            ip link add eth0 netns "$ns" type veth peer name p$i netns "$switch" &&
            ip -n "$switch" link set p$i master br0 &&
            ip -n "$switch" link set p$i up &&
            ip -n "$ns" addr add "$subnet.$((i + 1))/24" dev eth0 &&
            ip -n "$ns" link set eth0 up
    } 2>>"$errors" || skip "cannot set up host $ns (veth pair to a bridge): $(cat "$errors")"
    names+=("$ns")
done

# Every rank joins host (rank % hosts) and binds to that host's only NIC,
# eth0, found by the launcher (RCOLL_TEST_IFACE would name it instead).
RCOLL_TEST_NETNS=$(
    IFS=,
    echo "${names[*]}"
)
export RCOLL_TEST_NETNS
unset RCOLL_TEST_IFACE
export FI_PROVIDER_PATH=${FI_PROVIDER_PATH:-$builddir/.libs}
echo "# provider \"$prov\" on $hosts hosts ${names[*]} ($subnet.1..$subnet.$hosts/24 on one bridge)"

# Faults on every host's outgoing packets: random loss and a rate limit.
faults=
if [ "$loss" != 0 ] || [ -n "$rate" ]; then
    command -v nft >/dev/null 2>&1 || skip "no nft command (nftables) for RCOLL_NETNS_LOSS/RATE"
    for ns in "${names[@]}"; do
        {
            ip netns exec "$ns" nft add table inet faults &&
                ip netns exec "$ns" nft add chain inet faults out \
                    '{ type filter hook output priority 0; }' &&
                { [ "$loss" = 0 ] || ip netns exec "$ns" nft add rule inet faults out \
                    numgen random mod 100 '<' "$loss" counter drop; } &&
                { [ -z "$rate" ] || ip netns exec "$ns" nft add rule inet faults out \
                    limit rate over $rate counter drop; }
        } 2>>"$errors" || skip "cannot add nftables rules on $ns: $(cat "$errors")"
    done
    faults="${loss}% loss${rate:+, at most $rate}"
    echo "# faults on every host's outgoing packets: $faults"
    netns_cases=placement
fi

# What the fault rules dropped, per host.
print_drops() {
    local ns
    [ -n "$faults" ] || return 0
    for ns in "${names[@]}"; do
        echo "# $ns dropped: $(ip netns exec "$ns" nft list chain inet faults out |
            grep -oE 'counter packets [0-9]+ bytes [0-9]+' | sed 's/counter //' | paste -sd ';' -)"
    done
}

# All links up: a case that pulled a cable and failed before plugging it
# back in must not take the next case down with it.
heal_links() {
    local ns
    for ns in "${names[@]}"; do
        ip -n "$ns" link set eth0 up
        # and answering connection requests again (slow-connect, connect-timeout)
        ip netns exec "$ns" nft delete table inet rcoll_syn 2>/dev/null
    done
    return 0
}

# set_tcp_retries2 N: on every host (the sysctl is per network namespace).
set_tcp_retries2() {
    local ns
    for ns in "${names[@]}"; do
        ip netns exec "$ns" sh -c "echo $1 > /proc/sys/net/ipv4/tcp_retries2"
    done
}

. "$(dirname "$0")/cases.sh"

# The placement check first: if ranks do not really sit on separate hosts,
# the rest proves nothing.
for name in $netns_cases; do
    [ "$name" = placement ] && run_case "$netns_client" placement
done
for name in $p2p_cases; do
    run_case "$p2p_client" "$name" --quick
done
for name in $coll_cases; do
    FI_RCOLL_COLL_PLACEMENT=1 run_case "$coll_client" "$name" --quick
done
# sweep-8's groups share hosts, where the core's own tuning rules choose the
# barrier, broadcast, allreduce and reduce: once more with the model's choices
# (on a clean network; with faults the cases above cover what they test).
model="barrier:hosts=shared:@auto#broadcast:hosts=shared:@auto"
model+="#allreduce:hosts=shared:@auto#reduce:hosts=shared:@auto"
for name in $coll_cases; do
    [ "$name" = sweep-8 ] && [ "$loss" = 0 ] && [ -z "$rate" ] &&
        case_label="model's choices" FI_RCOLL_COLL_PLACEMENT=1 FI_RCOLL_COLL_TUNE=$model \
            run_case "$coll_client" "$name" --quick
done
set_tcp_retries2 "$retries2"
for name in $netns_cases; do
    [ "$name" = placement ] && continue
    run_case "$netns_client" "$name" --window "$window" --coll-timeout-ms 2000
    heal_links
done

print_drops
cases_summary "N/A (measurements or not applicable${faults:+; faults: $faults}, listed above)"
