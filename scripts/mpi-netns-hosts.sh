# Sourced by scripts that run MPI jobs across several "hosts" on one
# machine: network namespaces, each with one NIC (eth0, a veth plugged into
# a bridge in a namespace of its own), its own host name (a UTS namespace)
# and an /etc/hosts that names every host. The launcher runs on the first
# host and starts its daemons on the others through an rsh agent that enters
# their namespaces, so ranks on different hosts share neither a network nor a
# host name: MPI places them as it would on separate machines, and rcoll
# tells hosts apart as it does between machines (its host identity includes
# the network namespace). Needs root and iproute2, util-linux (unshare).
#
#   mpi_hosts_up N SUBNET WORKDIR   creates hosts SUBNET.1 .. SUBNET.N; sets
#                                   mpi_hosts (their names), mpi_host_list
#                                   (the same, comma-separated), mpi_hostfile
#                                   (Open MPI's: "name slots=64" per host),
#                                   mpi_agent (the rsh agent) and
#                                   mpi_on_first_host (a command that runs
#                                   the rest of its command line on the first
#                                   host, where the launcher goes)
#   mpi_hosts_down                  removes everything mpi_hosts_up made
#
# Open MPI:  "$mpi_on_first_host" mpirun --hostfile "$mpi_hostfile" --map-by node
#              --mca plm_rsh_agent "$mpi_agent" --mca oob_tcp_if_include eth0 ...
#            (the hosts share this machine's hardware threads, which Open MPI
#            cannot see: with more ranks than threads, add --mca
#            mpi_yield_when_idle 1, which it sets by itself on one host)
# MPICH:     "$mpi_on_first_host" mpiexec -hosts "$mpi_host_list" -launcher rsh
#              -launcher-exec "$mpi_agent" ...

mpi_hosts=()
mpi_hosts_made=()

# Safe in an EXIT trap under set -e: nothing here stops the cleanup.
mpi_hosts_down() {
	local ns pids
	for ns in "${mpi_hosts_made[@]}"; do
		# Whatever still runs there (an interrupted job) goes with its host.
		pids=$(ip netns pids "$ns" 2>/dev/null) || true
		[ -z "$pids" ] || kill -KILL $pids 2>/dev/null || true
		ip netns delete "$ns" 2>/dev/null || true
		rm -rf "/etc/netns/$ns" || true
	done
	mpi_hosts_made=()
}

mpi_hosts_up() {
	local count=$1 subnet=$2 work=$3 prefix=rcmpi$$ i j ns
	[ "$(id -u)" = 0 ] || { echo "mpi-netns-hosts: needs root (network namespaces)" >&2; return 1; }
	command -v ip >/dev/null && command -v unshare >/dev/null ||
		{ echo "mpi-netns-hosts: needs ip (iproute2) and unshare (util-linux)" >&2; return 1; }
	ip netns add "$prefix-sw" && mpi_hosts_made+=("$prefix-sw") &&
		ip -n "$prefix-sw" link add br0 type bridge && ip -n "$prefix-sw" link set br0 up || return 1
	mpi_hosts=()
	for ((i = 0; i < count; i++)); do
		ns=$prefix-h$i
		ip netns add "$ns" && mpi_hosts_made+=("$ns") &&
			ip -n "$ns" link set lo up &&
			ip link add eth0 netns "$ns" type veth peer name p$i netns "$prefix-sw" &&
			ip -n "$prefix-sw" link set p$i master br0 && ip -n "$prefix-sw" link set p$i up &&
			ip -n "$ns" addr add "$subnet.$((i + 1))/24" dev eth0 && ip -n "$ns" link set eth0 up || return 1
		mpi_hosts+=("$ns")
	done
	# `ip netns exec NAME` mounts /etc/netns/NAME/hosts over /etc/hosts.
	for ((i = 0; i < count; i++)); do
		mkdir -p "/etc/netns/${mpi_hosts[i]}" &&
			{
				echo "127.0.0.1 localhost"
				for ((j = 0; j < count; j++)); do echo "$subnet.$((j + 1)) ${mpi_hosts[j]}"; done
			} >"/etc/netns/${mpi_hosts[i]}/hosts" || return 1
	done
	mpi_hostfile=$work/hostfile
	printf '%s slots=64\n' "${mpi_hosts[@]}" >"$mpi_hostfile" || return 1
	mpi_host_list=$(IFS=, && echo "${mpi_hosts[*]}")
	# The launchers call "AGENT [options] HOST COMMAND...", as they would rsh.
	mpi_agent=$work/rsh-agent
	cat >"$mpi_agent" <<-'EOF'
		#!/bin/sh
		while [ $# -gt 0 ] && [ "${1#-}" != "$1" ]; do shift; done
		host=$1
		shift
		exec ip netns exec "$host" unshare --uts sh -c 'hostname "$0" && exec sh -c "$1"' "$host" "$*"
	EOF
	chmod +x "$mpi_agent" || return 1
	mpi_on_first_host=$work/on-first-host
	cat >"$mpi_on_first_host" <<-EOF
		#!/bin/sh
		exec ip netns exec ${mpi_hosts[0]} unshare --uts sh -c 'hostname "\$0" && exec "\$@"' ${mpi_hosts[0]} "\$@"
	EOF
	chmod +x "$mpi_on_first_host" || return 1
}
