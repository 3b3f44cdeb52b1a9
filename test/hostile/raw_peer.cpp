#include "raw_peer.hpp"

#include <cstring>

namespace hostile {

using namespace fabtests;
namespace proto = rcoll::proto;

rcoll::EpAddress parse_address(std::span<const uint8_t> bytes)
{
	rcoll::EpAddress a;
	expect(bytes.size() == sizeof(a), "an rcoll address has %zu bytes, not %zu", sizeof(a),
	       bytes.size());
	std::memcpy(&a, bytes.data(), sizeof(a));
	expect(a.valid(), "not an rcoll address");
	return a;
}

RawPeer::RawPeer(std::span<const uint8_t> rcoll_address, const proto::Handshake& handshake)
{
	const rcoll::EpAddress target = parse_address(rcoll_address);
	InfoPtr hints(fi_allocinfo());
	hints->ep_attr->type = FI_EP_MSG;
	hints->caps = FI_MSG | FI_RMA;
	hints->mode = FI_CONTEXT | FI_CONTEXT2;
	hints->addr_format = FI_SOCKADDR;
	hints->fabric_attr->prov_name = strdup("tcp");
	hints->domain_attr->mr_mode =
		FI_MR_LOCAL | FI_MR_VIRT_ADDR | FI_MR_ALLOCATED | FI_MR_PROV_KEY;
	fi_info* info = nullptr;
	FT_CHECK(fi_getinfo(FI_VERSION(1, 17), nullptr, nullptr, 0, hints.get(), &info));
	info_.reset(info);
	free(info_->dest_addr);
	info_->dest_addr = malloc(target.core_len);
	std::memcpy(info_->dest_addr, target.core, target.core_len);
	info_->dest_addrlen = target.core_len;

	fid_fabric* fabric = nullptr;
	FT_CHECK(fi_fabric(info_->fabric_attr, &fabric, nullptr));
	fabric_.reset(fabric);
	fi_eq_attr eq_attr{};
	eq_attr.wait_obj = FI_WAIT_UNSPEC;
	fid_eq* eq = nullptr;
	FT_CHECK(fi_eq_open(fabric, &eq_attr, &eq, nullptr));
	eq_.reset(eq);
	fid_domain* domain = nullptr;
	FT_CHECK(fi_domain(fabric, info_.get(), &domain, nullptr));
	domain_.reset(domain);
	fi_cq_attr cq_attr{};
	cq_attr.format = FI_CQ_FORMAT_MSG;
	fid_cq* cq = nullptr;
	FT_CHECK(fi_cq_open(domain, &cq_attr, &cq, nullptr));
	cq_.reset(cq);
	fid_ep* ep = nullptr;
	FT_CHECK(fi_endpoint(domain, info_.get(), &ep, nullptr));
	ep_.reset(ep);
	FT_CHECK(fi_ep_bind(ep, &eq->fid, 0));
	FT_CHECK(fi_ep_bind(ep, &cq->fid, FI_TRANSMIT | FI_RECV));
	FT_CHECK(fi_enable(ep));
	recv_buf_.resize(64 * 1024);
	local_.resize(1 << 20);
	fid_mr* mr = nullptr;
	FT_CHECK(fi_mr_reg(domain, recv_buf_.data(), recv_buf_.size(), FI_RECV, 0, 1, 0, &mr,
			   nullptr));
	recv_mr_.reset(mr);
	FT_CHECK(fi_mr_reg(domain, local_.data(), local_.size(), FI_READ | FI_WRITE | FI_SEND, 0, 2,
			   0, &mr, nullptr));
	local_mr_.reset(mr);
	post_receive();

	std::byte blob[proto::Handshake::kWireSize];
	proto::encode_handshake(handshake, blob);
	FT_CHECK(fi_connect(ep, info_->dest_addr, blob, sizeof(blob)));
	alignas(fi_eq_cm_entry) std::byte event[sizeof(fi_eq_cm_entry) + 64] = {};
	uint32_t kind = 0;
	ssize_t n = fi_eq_sread(eq, &kind, event, sizeof(event), 10000, 0);
	if (n == -FI_EAVAIL) {
		fi_eq_err_entry err{};
		fi_eq_readerr(eq, &err, 0);
		refusal_ = fi_strerror(err.err);
		return;
	}
	expect(n > 0 && kind == FI_CONNECTED, "connecting to the rcoll endpoint: event %u, %s",
	       kind, n < 0 ? fi_strerror(int(-n)) : "no error");
	const size_t data_len = size_t(n) - sizeof(fi_eq_cm_entry);
	const auto* entry = reinterpret_cast<const fi_eq_cm_entry*>(event);
	expect(proto::check_handshake(entry->data, data_len, proto::HandshakeKind::Accept,
				      accept_) == proto::WireStatus::Ok,
	       "the rcoll endpoint's accept is not a valid handshake");
	accepted_ = true;
}

RawPeer::~RawPeer()
{
	if (ep_)
		fi_shutdown(ep_.get(), 0);
}

RawPeer::Outcome RawPeer::wait(fi_context2& ctx)
{
	const Deadline deadline(std::chrono::seconds(10));
	for (;;) {
		fi_cq_msg_entry entry{};
		ssize_t n = fi_cq_read(cq_.get(), &entry, 1);
		void* done = nullptr;
		Outcome outcome{true, 0, 0};
		if (n == 1) {
			done = entry.op_context;
			outcome.len = entry.len;
		} else if (n == -FI_EAVAIL) {
			fi_cq_err_entry err{};
			fi_cq_readerr(cq_.get(), &err, 0);
			done = err.op_context;
			outcome.err = err.err ? err.err : FI_EIO;
		}
		if (done == &ctx)
			return outcome;
		if (done == &recv_ctx_)
			received_.push_back(outcome);
		expect(!deadline.expired(), "a raw operation did not complete");
	}
}

void RawPeer::post_receive()
{
	FT_CHECK(fi_recv(ep_.get(), recv_buf_.data(), recv_buf_.size(), fi_mr_desc(recv_mr_.get()),
			 0, &recv_ctx_));
}

std::vector<std::byte> RawPeer::receive()
{
	Outcome got;
	if (!received_.empty()) {
		got = received_.front();
		received_.erase(received_.begin());
	} else {
		got = wait(recv_ctx_);
	}
	expect(got.err == 0, "raw receive failed: %s", fi_strerror(got.err));
	std::vector<std::byte> message(recv_buf_.begin(), recv_buf_.begin() + got.len);
	post_receive();
	return message;
}

int RawPeer::read(size_t len, uint64_t addr, uint64_t key)
{
	FT_CHECK(fi_read(ep_.get(), local_.data(), len, fi_mr_desc(local_mr_.get()), 0, addr, key,
			 &rma_ctx_));
	return wait(rma_ctx_).err;
}

int RawPeer::write(size_t len, uint64_t addr, uint64_t key)
{
	// Delivery complete: the target's core answers once it has placed the
	// bytes, or refused them; a plain write completes once sent.
	iovec iov{local_.data(), len};
	void* desc = fi_mr_desc(local_mr_.get());
	fi_rma_iov rma{addr, len, key};
	fi_msg_rma msg{};
	msg.msg_iov = &iov;
	msg.desc = &desc;
	msg.iov_count = 1;
	msg.rma_iov = &rma;
	msg.rma_iov_count = 1;
	msg.context = &rma_ctx_;
	FT_CHECK(fi_writemsg(ep_.get(), &msg, FI_DELIVERY_COMPLETE | FI_COMPLETION));
	return wait(rma_ctx_).err;
}

int RawPeer::write_immediate(uint32_t data)
{
	fi_msg_rma msg{};
	msg.context = &rma_ctx_;
	msg.data = data;
	FT_CHECK(fi_writemsg(ep_.get(), &msg, FI_REMOTE_CQ_DATA | FI_COMPLETION));
	return wait(rma_ctx_).err;
}

void RawPeer::send_bytes(std::span<const std::byte> bytes)
{
	for (;;) {
		ssize_t ret =
			fi_send(ep_.get(), bytes.data(), bytes.size(), nullptr, 0, &send_ctx_);
		if (ret == -FI_EAGAIN) {
			fi_cq_msg_entry entry;
			fi_cq_read(cq_.get(), &entry, 0);
			continue;
		}
		FT_CHECK(ret);
		break;
	}
	const Outcome sent = wait(send_ctx_);
	if (sent.err)
		throw CheckFailure(std::string("raw send failed: ") + fi_strerror(sent.err));
}

void RawPeer::send_message(const proto::MsgHeader& header, std::span<const std::byte> body)
{
	std::vector<std::byte> bytes(proto::kHeaderSize + body.size());
	proto::encode_header(header, bytes.data());
	std::memcpy(bytes.data() + proto::kHeaderSize, body.data(), body.size());
	send_bytes(bytes);
}

size_t RawPeer::inject_messages(const proto::MsgHeader& header, std::span<const std::byte> body,
				size_t count)
{
	std::vector<std::byte> bytes(proto::kHeaderSize + body.size());
	proto::encode_header(header, bytes.data());
	std::memcpy(bytes.data() + proto::kHeaderSize, body.data(), body.size());
	for (size_t i = 0; i < count; i++) {
		ssize_t ret;
		while ((ret = fi_inject(ep_.get(), bytes.data(), bytes.size(), 0)) == -FI_EAGAIN) {
			fi_cq_msg_entry entry;
			fi_cq_read(cq_.get(), &entry, 0);
		}
		if (ret)
			return i;
		// The core sends only while its queue is read (manual progress).
		if (i % 64 == 63) {
			fi_cq_msg_entry entry;
			if (fi_cq_read(cq_.get(), &entry, 1) == -FI_EAVAIL) {
				fi_cq_err_entry err{};
				fi_cq_readerr(cq_.get(), &err, 0);
				return i + 1;
			}
		}
	}
	try {
		send_bytes(bytes); // behind the injected ones: they all left
	} catch (const CheckFailure&) {
		return count;
	}
	return count + 1;
}

} // namespace hostile
