#include "address.hpp"

#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/socket.h>

#include <cinttypes>
#include <cstdio>

namespace rcoll {

std::string EpAddress::to_string() const
{
	char host[INET6_ADDRSTRLEN] = "?";
	unsigned port = 0;
	sockaddr_storage ss{};
	memcpy(&ss, core, core_len < sizeof(ss) ? core_len : sizeof(ss));
	if (ss.ss_family == AF_INET && core_len >= sizeof(sockaddr_in)) {
		auto* in = reinterpret_cast<const sockaddr_in*>(&ss);
		inet_ntop(AF_INET, &in->sin_addr, host, sizeof(host));
		port = ntohs(in->sin_port);
	} else if (ss.ss_family == AF_INET6 && core_len >= sizeof(sockaddr_in6)) {
		auto* in6 = reinterpret_cast<const sockaddr_in6*>(&ss);
		inet_ntop(AF_INET6, &in6->sin6_addr, host, sizeof(host));
		port = ntohs(in6->sin6_port);
	}
	char out[128];
	if (keyed())
		snprintf(out, sizeof(out), "fi_addr_rcoll://%s:%u/%016" PRIx64, host, port, key);
	else
		snprintf(out, sizeof(out), "fi_addr_rcoll://%s:%u", host, port);
	return out;
}

void clear_port(void* sockaddr_any)
{
	auto* sa = static_cast<sockaddr*>(sockaddr_any);
	if (sa->sa_family == AF_INET)
		reinterpret_cast<sockaddr_in*>(sa)->sin_port = 0;
	else if (sa->sa_family == AF_INET6)
		reinterpret_cast<sockaddr_in6*>(sa)->sin6_port = 0;
}

} // namespace rcoll
