#include "core_rma.hpp"

#include <algorithm>

namespace rcoll {

ssize_t post_core_write(fid_ep* conn, const void* src, size_t len, void* desc, uint64_t addr,
			uint64_t key, void* context)
{
	if (!context)
		return fi_inject_write(conn, src, len, 0, addr, key);
	return fi_write(conn, src, len, desc, 0, addr, key, context);
}

ssize_t ChunkedRma::post_next(fid_ep* conn, void* context, size_t max_chunk)
{
	const uint64_t n = std::min<uint64_t>(length - done, max_chunk);
	ssize_t ret =
		write ? post_core_write(conn, local + done, n, desc, remote_addr + done, key,
					context)
		      : fi_read(conn, local + done, n, desc, 0, remote_addr + done, key, context);
	retry = ret == -FI_EAGAIN;
	if (ret == 0) {
		in_flight = true;
		chunk = n;
	}
	return ret;
}

bool ChunkedRma::chunk_done()
{
	in_flight = false;
	done += chunk;
	chunk = 0;
	return done >= length;
}

} // namespace rcoll
