// A peer that speaks rcoll's wire protocol by hand over a core (tcp) MSG
// connection: it can say anything rcoll's own code never would. Used only
// by the hostile-peer tests.
#pragma once

#include "common.hpp"
#include "proto/wire.hpp"
#include "src/address.hpp"

#include <rdma/fi_cm.h>
#include <rdma/fi_endpoint.h>
#include <rdma/fi_eq.h>

#include <cstdint>
#include <span>
#include <string>
#include <vector>

namespace hostile {

using fabtests::FidPtr;

class RawPeer {
public:
	// Connects to the core listener named by an rcoll endpoint address
	// (fi_getname bytes), presenting `handshake` (its kind is Request).
	RawPeer(std::span<const uint8_t> rcoll_address, const rcoll::proto::Handshake& handshake);
	RawPeer(const RawPeer&) = delete;
	RawPeer& operator=(const RawPeer&) = delete;
	~RawPeer();

	// Whether the endpoint accepted the connection; its accept otherwise.
	bool accepted() const { return accepted_; }
	const rcoll::proto::Handshake& accept() const { return accept_; }
	const std::string& refusal() const { return refusal_; }

	// Sends raw bytes on the connection; waits for the send to complete.
	void send_bytes(std::span<const std::byte> bytes);
	// The next message the endpoint sends on the connection.
	std::vector<std::byte> receive();
	// RDMA into or out of the endpoint's memory through the core: 0, or
	// the fi_errno the operation completed with.
	int read(size_t len, uint64_t addr, uint64_t key);
	int write(size_t len, uint64_t addr, uint64_t key);
	// A write of no bytes to no buffer with `data` as its remote CQ data:
	// the core checks no key for it, so any connected process can send one.
	int write_immediate(uint32_t data);
	// The local buffer of read() and write().
	std::span<std::byte> local() { return {local_.data(), local_.size()}; }
	// Its key (it takes remote writes too).
	uint64_t local_key() const { return fi_mr_key(local_mr_.get()); }
	// A header (src_conn and token as given) and a body.
	void send_message(const rcoll::proto::MsgHeader& header, std::span<const std::byte> body);
	// The same message `count` times, injected back to back (small
	// messages only). Returns how many the core took before the
	// connection ended (`count` when it did not).
	size_t inject_messages(const rcoll::proto::MsgHeader& header,
			       std::span<const std::byte> body, size_t count);

private:
	struct Outcome {
		bool done = false;
		int err = 0;
		size_t len = 0;
	};
	// Waits for the operation posted with `ctx`.
	Outcome wait(fi_context2& ctx);
	void post_receive();

	fabtests::InfoPtr info_;
	FidPtr<fid_fabric> fabric_;
	FidPtr<fid_eq> eq_;
	FidPtr<fid_domain> domain_;
	FidPtr<fid_cq> cq_;
	FidPtr<fid_ep> ep_;
	bool accepted_ = false;
	rcoll::proto::Handshake accept_{};
	std::string refusal_;
	fi_context2 send_ctx_{}, recv_ctx_{}, rma_ctx_{};
	std::vector<Outcome> received_; // receives completed while waiting for another

	std::vector<std::byte> recv_buf_, local_;
	FidPtr<fid_mr> recv_mr_, local_mr_;
};

// Many bare connections from one process to one rcoll endpoint, each
// presenting its own endpoint key: they only connect and close.
class RawCrowd {
public:
	explicit RawCrowd(std::span<const uint8_t> rcoll_address);
	RawCrowd(const RawCrowd&) = delete;
	RawCrowd& operator=(const RawCrowd&) = delete;
	~RawCrowd();

	// Requests `count` connections with new random keys, `batch` at a time.
	// Returns the conn_id of each accepted one (the refused are closed).
	std::vector<uint32_t> connect(size_t count, size_t batch = 64);
	// Closes every accepted connection.
	void close_all();
	size_t refused() const { return refused_; }

private:
	fabtests::InfoPtr info_;
	FidPtr<fid_fabric> fabric_;
	FidPtr<fid_eq> eq_;
	FidPtr<fid_domain> domain_;
	FidPtr<fid_cq> cq_;
	std::vector<FidPtr<fid_ep>> connected_;
	size_t refused_ = 0;
};

// The fields of an rcoll endpoint address the tests need.
rcoll::EpAddress parse_address(std::span<const uint8_t> bytes);

} // namespace hostile
