# Sourced by scripts that run MPI jobs across several "hosts" on one
# machine: network namespaces, each with one NIC (eth0, a veth plugged into
# a bridge in a namespace of its own), its own host name (a UTS namespace)
# and an /etc/hosts that names every host. The launcher runs on the first
# host and starts its daemons on the others through an rsh agent that enters
# their namespaces, so ranks on different hosts share neither a network nor a
# host name: MPI places them as it would on separate machines, and rcoll
# tells hosts apart as it does between machines (its host identity includes
# the network namespace). Each host runs on a share of this machine's CPUs
# of its own (taskset, when there are at least as many CPUs as hosts; else
# host i shares CPU i mod the count), as separate machines would: without
# it, ranks of different hosts took turns on one CPU while ranks of one host
# spread over several, which no cluster does, and which rank the scheduler
# happened to pair with which swung a 4-rank broadcast's time by 2x from one
# job to the next. Needs root and iproute2, util-linux (unshare, taskset).
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
# Open MPI:  "$mpi_on_first_host" mpirun --hostfile "$mpi_hostfile" --map-by node --bind-to none
#              --mca plm_rsh_agent "$mpi_agent" --mca oob_tcp_if_include eth0 ...
#            (a host has fewer hardware threads than Open MPI sees: with
#            more ranks than its share, add --mca mpi_yield_when_idle 1,
#            which it sets by itself on one host)
# MPICH:     "$mpi_on_first_host" mpiexec -hosts "$mpi_host_list" -launcher rsh
#              -launcher-exec "$mpi_agent" ...

mpi_hosts=()
mpi_host_cpus=() # each host's CPUs, as taskset -c takes them
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
	mpi_host_cpus=()
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
	# Host i's CPUs: the i-th of `count` shares of the ones this shell may
	# use (the first hosts, which --map-by node gives the most ranks, take
	# what does not divide), or one of them in turn when they are fewer.
	# Ordered by core, so that a host takes whole cores, hardware threads
	# and all, where lscpu tells which share one.
	local cpus=() share cpu_case= n start end
	command -v taskset >/dev/null || { echo "mpi-netns-hosts: needs taskset (util-linux)" >&2; return 1; }
	mapfile -t cpus < <(taskset -pc $$ | sed 's/.*: //' | tr ',' '\n' |
		awk -F- '{ for (c = $1; c <= ($2 == "" ? $1 : $2); c++) print c }')
	if [ ${#cpus[@]} -gt 1 ] && command -v lscpu >/dev/null; then
		mapfile -t cpus < <(lscpu -p=CPU,CORE 2>/dev/null | grep -v '^#' |
			awk -F, -v allowed=" ${cpus[*]} " 'index(allowed, " " $1 " ") { print $2, $1 }' |
			sort -n -k1,1 -k2,2 | awk '{ print $2 }')
	fi
	[ ${#cpus[@]} -gt 0 ] || { echo "mpi-netns-hosts: cannot read this shell's CPUs" >&2; return 1; }
	n=${#cpus[@]}
	for ((i = 0; i < count; i++)); do
		if ((n >= count)); then
			start=$(((i * n + count - 1) / count)) end=$((((i + 1) * n + count - 1) / count))
			share=$(printf '%s\n' "${cpus[@]:start:end - start}" | paste -sd,)
		else
			share=${cpus[i % n]}
		fi
		mpi_host_cpus[i]=$share
		cpu_case="$cpu_case ${mpi_hosts[i]}) cpus=$share ;;"
	done
	# The launchers call "AGENT [options] HOST COMMAND...", as they would rsh.
	mpi_agent=$work/rsh-agent
	cat >"$mpi_agent" <<-EOF
		#!/bin/sh
		while [ \$# -gt 0 ] && [ "\${1#-}" != "\$1" ]; do shift; done
		host=\$1
		shift
		case \$host in $cpu_case *) echo "rsh-agent: no host \$host" >&2; exit 1 ;; esac
		exec taskset -c "\$cpus" ip netns exec "\$host" unshare --uts sh -c 'hostname "\$0" && exec sh -c "\$1"' "\$host" "\$*"
	EOF
	chmod +x "$mpi_agent" || return 1
	mpi_on_first_host=$work/on-first-host
	cat >"$mpi_on_first_host" <<-EOF
		#!/bin/sh
		exec taskset -c ${mpi_host_cpus[0]} ip netns exec ${mpi_hosts[0]} unshare --uts sh -c 'hostname "\$0" && exec "\$@"' ${mpi_hosts[0]} "\$@"
	EOF
	chmod +x "$mpi_on_first_host" || return 1
}
