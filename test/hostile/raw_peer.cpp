#include "raw_peer.hpp"

#include <sys/random.h>

#include <algorithm>
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

namespace {

// A tcp fabric, domain, EQ and CQ, and the info that connects to the core
// listener an rcoll address names.
void open_core(std::span<const uint8_t> rcoll_address, uint64_t caps, uint64_t mr_mode,
	       InfoPtr& info_out, FidPtr<fid_fabric>& fabric_out, FidPtr<fid_eq>& eq_out,
	       FidPtr<fid_domain>& domain_out, FidPtr<fid_cq>& cq_out)
{
	const rcoll::EpAddress target = parse_address(rcoll_address);
	InfoPtr hints(fi_allocinfo());
	hints->ep_attr->type = FI_EP_MSG;
	hints->caps = caps;
	hints->mode = FI_CONTEXT | FI_CONTEXT2;
	hints->addr_format = FI_SOCKADDR;
	hints->fabric_attr->prov_name = strdup("tcp");
	hints->domain_attr->mr_mode = int(mr_mode);
	fi_info* info = nullptr;
	FT_CHECK(fi_getinfo(FI_VERSION(1, 17), nullptr, nullptr, 0, hints.get(), &info));
	info_out.reset(info);
	free(info->dest_addr);
	info->dest_addr = malloc(target.core_len);
	std::memcpy(info->dest_addr, target.core, target.core_len);
	info->dest_addrlen = target.core_len;
	fid_fabric* fabric = nullptr;
	FT_CHECK(fi_fabric(info->fabric_attr, &fabric, nullptr));
	fabric_out.reset(fabric);
	fi_eq_attr eq_attr{};
	eq_attr.wait_obj = FI_WAIT_UNSPEC;
	eq_attr.size = 4096; // a crowd's connection events
	fid_eq* eq = nullptr;
	FT_CHECK(fi_eq_open(fabric, &eq_attr, &eq, nullptr));
	eq_out.reset(eq);
	fid_domain* domain = nullptr;
	FT_CHECK(fi_domain(fabric, info, &domain, nullptr));
	domain_out.reset(domain);
	fi_cq_attr cq_attr{};
	cq_attr.format = FI_CQ_FORMAT_MSG;
	fid_cq* cq = nullptr;
	FT_CHECK(fi_cq_open(domain, &cq_attr, &cq, nullptr));
	cq_out.reset(cq);
}

} // namespace

RawPeer::RawPeer(std::span<const uint8_t> rcoll_address, const proto::Handshake& handshake)
{
	open_core(rcoll_address, FI_MSG | FI_RMA,
		  FI_MR_LOCAL | FI_MR_VIRT_ADDR | FI_MR_ALLOCATED | FI_MR_PROV_KEY, info_, fabric_,
		  eq_, domain_, cq_);
	fid_eq* eq = eq_.get();
	fid_domain* domain = domain_.get();
	fid_cq* cq = cq_.get();
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
	FT_CHECK(fi_mr_reg(domain, local_.data(), local_.size(),
			   FI_READ | FI_WRITE | FI_SEND | FI_REMOTE_WRITE, 0, 2, 0, &mr, nullptr));
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

namespace {

// A message as it goes on the wire: the header, then the body.
std::vector<std::byte> framed(const proto::MsgHeader& header, std::span<const std::byte> body)
{
	std::vector<std::byte> bytes(proto::kHeaderSize + body.size());
	proto::encode_header(header, bytes.data());
	if (!body.empty()) // an empty body may have no data pointer
		std::memcpy(bytes.data() + proto::kHeaderSize, body.data(), body.size());
	return bytes;
}

} // namespace

void RawPeer::send_message(const proto::MsgHeader& header, std::span<const std::byte> body)
{
	send_bytes(framed(header, body));
}

size_t RawPeer::inject_messages(const proto::MsgHeader& header, std::span<const std::byte> body,
				size_t count)
{
	const std::vector<std::byte> bytes = framed(header, body);
	for (size_t i = 0; i < count; i++) {
		ssize_t ret;
		while ((ret = fi_inject(ep_.get(), bytes.data(), bytes.size(), 0)) == -FI_EAGAIN) {
			fi_cq_msg_entry entry;
			fi_cq_read(cq_.get(), &entry, 0);
		}
		if (ret)
			return i;
		// The core sends only while its queue is read (manual progress).
		// A receive that completes meanwhile is kept for receive().
		if (i % 64 == 63) {
			fi_cq_msg_entry entry{};
			const ssize_t n = fi_cq_read(cq_.get(), &entry, 1);
			if (n == 1 && entry.op_context == &recv_ctx_)
				received_.push_back({true, 0, entry.len});
			if (n == -FI_EAVAIL) {
				fi_cq_err_entry err{};
				fi_cq_readerr(cq_.get(), &err, 0);
				if (err.op_context == &recv_ctx_)
					received_.push_back({true, err.err ? err.err : FI_EIO, 0});
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

RawCrowd::RawCrowd(std::span<const uint8_t> rcoll_address)
{
	open_core(rcoll_address, FI_MSG, 0, info_, fabric_, eq_, domain_, cq_);
}

RawCrowd::~RawCrowd() { close_all(); }

std::vector<uint32_t> RawCrowd::connect(size_t count, size_t batch)
{
	std::vector<uint32_t> ids;
	for (size_t first = 0; first < count; first += batch) {
		const size_t n = std::min(batch, count - first);
		std::vector<FidPtr<fid_ep>> pending(n);
		std::vector<size_t> slot(n);
		for (size_t i = 0; i < n; i++) {
			slot[i] = i;
			fid_ep* ep = nullptr;
			FT_CHECK(fi_endpoint(domain_.get(), info_.get(), &ep, &slot[i]));
			pending[i].reset(ep);
			FT_CHECK(fi_ep_bind(ep, &eq_->fid, 0));
			FT_CHECK(fi_ep_bind(ep, &cq_->fid, FI_TRANSMIT | FI_RECV));
			FT_CHECK(fi_enable(ep));
			proto::Handshake h;
			h.kind = proto::HandshakeKind::Request;
			uint64_t key = 0;
			while (key == 0)
				expect(getrandom(&key, sizeof(key), 0) == ssize_t(sizeof(key)),
				       "getrandom");
			h.endpoint_key = key;
			h.eager_limit = 4096;
			h.token = key ^ 0x5a5a5a5a5a5a5a5aULL;
			std::byte blob[proto::Handshake::kWireSize];
			proto::encode_handshake(h, blob);
			FT_CHECK(fi_connect(ep, info_->dest_addr, blob, sizeof(blob)));
		}
		for (size_t resolved = 0; resolved < n;) {
			alignas(fi_eq_cm_entry) std::byte event[sizeof(fi_eq_cm_entry) + 64] = {};
			uint32_t kind = 0;
			ssize_t got = fi_eq_sread(eq_.get(), &kind, event, sizeof(event), 10000, 0);
			if (got == -FI_EAVAIL) {
				fi_eq_err_entry err{};
				fi_eq_readerr(eq_.get(), &err, 0);
				const size_t i = *static_cast<size_t*>(err.fid->context);
				pending[i].reset();
				refused_++;
				resolved++;
				continue;
			}
			expect(got > 0, "connecting: %s", fi_strerror(int(-got)));
			const auto* entry = reinterpret_cast<const fi_eq_cm_entry*>(event);
			if (kind == FI_SHUTDOWN)
				continue; // an earlier connection ended
			expect(kind == FI_CONNECTED, "connecting: event %u", kind);
			proto::Handshake accept;
			expect(proto::check_handshake(entry->data,
						      size_t(got) - sizeof(fi_eq_cm_entry),
						      proto::HandshakeKind::Accept,
						      accept) == proto::WireStatus::Ok,
			       "the rcoll endpoint's accept is not a valid handshake");
			const size_t i = *static_cast<size_t*>(entry->fid->context);
			ids.push_back(accept.conn_id);
			connected_.push_back(std::move(pending[i]));
			resolved++;
		}
	}
	return ids;
}

void RawCrowd::close_all()
{
	for (FidPtr<fid_ep>& ep : connected_)
		fi_shutdown(ep.get(), 0);
	connected_.clear();
	// What the shutdowns left in the EQ belongs to closed endpoints.
	alignas(fi_eq_cm_entry) std::byte event[sizeof(fi_eq_cm_entry) + 64];
	uint32_t kind;
	for (;;) {
		const ssize_t ret = fi_eq_read(eq_.get(), &kind, event, sizeof(event), 0);
		if (ret == -FI_EAVAIL) {
			fi_eq_err_entry err{};
			fi_eq_readerr(eq_.get(), &err, 0);
		} else if (ret <= 0) {
			break;
		}
	}
}

} // namespace hostile
