// Core messages through the transmit bounce pool: eager sends, rendezvous
// requests and control messages, each in order on its peer's connection,
// waiting in the peer's backlog while it connects or the core is full.
#include "config.hpp"
#include "ep.hpp"

#include <cstring>

namespace rcoll {

using proto::MsgHeader;
using proto::Opcode;

// The core sent a buffered message, or failed to: the send it carries
// completes, and a failure ends the connection.
void BufferRecord::finish_send(Endpoint& ep, void* owner, const CoreEvent& event)
{
	auto* r = static_cast<BufferRecord*>(owner);
	Peer* peer = r->peer;
	r->in_core = false;
	r->sent.run(event.err);
	if (!event.err && peer) {
		peer->injects.prove(r->proves);
		peer->tx_left++; // the peer reads: its backlog moved
	}
	if (r->count)
		ep.app.report_tx(r->context, r->cq_flags, event.err ? 0 : r->header.size, event.err,
				 event.err || r->report, ep.app.send_cntr);
	ep.tx.buffers->release(*r);
	if (event.err)
		ep.fail_connection_of(peer, event.err);
}

ssize_t Endpoint::post_tx(BufferRecord* r)
{
	Peer& peer = *r->peer;
	r->held = true; // until released: sent, injected, or failed
	peer.tx_held++;
	if (peer.state != Peer::State::connected || !peer.backlog.empty()) {
		peer.backlog.push_back(r);
		tx.backlogged++;
		return 0;
	}
	ssize_t ret = transmit(peer, r);
	if (ret == -FI_EAGAIN) {
		peer.backlog.push_back(r);
		tx.backlogged++;
		return 0;
	}
	if (ret) {
		// The connection is unusable: fail it rather than let operations
		// wait for messages that never left.
		RCOLL_WARN(FI_LOG_EP_DATA, "core send: %s\n", fi_strerror(int(-ret)));
		schedule_failure(peer, int(ret));
	}
	return ret;
}

// Hands one message to the core connection. One that fits the core's
// inject size is injected, unless someone must hear that it left (a
// SentHook): the core then writes no completion, which on tcp
// also spares the wait-fd signal it raises per completion and the CQ poll
// that would fetch it, so the buffer and the send it carries complete here.
// A direct send gathers the header and the application's payload.
ssize_t Endpoint::transmit(Peer& peer, BufferRecord* r)
{
	r->header.src_conn = peer.remote_id;
	r->header.token = peer.tx_token;
	proto::encode_header(r->header, r->buffer->data());
	ssize_t ret;
	if (r->payload_len) {
		iovec iov[2] = {{r->buffer->data(), r->len},
				{const_cast<std::byte*>(r->payload), r->payload_len}};
		void* descs[2] = {r->buffer->desc(), r->payload_desc};
		fi_msg msg{};
		msg.msg_iov = iov;
		msg.desc = descs;
		msg.iov_count = 2;
		msg.context = &r->cc.space;
		ret = fi_sendmsg(peer.conn.get(), &msg, FI_COMPLETION);
	} else if (r->may_inject && r->len <= tx.inject_size && peer.injects.may_inject()) {
		ret = fi_inject(peer.conn.get(), r->buffer->data(), r->len, 0);
		if (ret == 0) {
			peer.injects.posted++;
			if (r->count)
				app.report_tx(r->context, r->cq_flags, r->header.size, 0, r->report,
					      app.send_cntr);
			tx.buffers->release(*r);
			return 0;
		}
		return ret;
	} else {
		ret = fi_send(peer.conn.get(), r->buffer->data(), r->len, r->buffer->desc(), 0,
			      &r->cc.space);
	}
	if (ret == 0) {
		r->in_core = true;
		r->proves = peer.injects.posted;
	}
	return ret;
}

void Endpoint::flush_backlog(Peer& peer)
{
	while (peer.state == Peer::State::connected && !peer.backlog.empty()) {
		BufferRecord* r = peer.backlog.front();
		if (r->header.opcode == Opcode::Eager && r->header.size > peer.eager_limit) {
			// Queued before the handshake told us the peer takes less.
			peer.backlog.pop_front();
			RCOLL_WARN(FI_LOG_EP_DATA,
				   "eager message of %llu bytes above the peer's limit %u\n",
				   (unsigned long long)r->header.size, peer.eager_limit);
			app.report_tx(r->context, r->cq_flags, 0, FI_EMSGSIZE, true, app.send_cntr);
			r->sent.run(FI_EMSGSIZE);
			tx.buffers->release(*r);
			continue;
		}
		ssize_t ret = transmit(peer, r);
		if (ret == -FI_EAGAIN)
			return;
		peer.backlog.pop_front();
		if (ret) {
			RCOLL_WARN(FI_LOG_EP_DATA, "core send: %s\n", fi_strerror(int(-ret)));
			app.report_tx(r->context, r->cq_flags, 0, int(-ret), true,
				      r->count ? app.send_cntr : nullptr);
			r->sent.run(int(-ret));
			tx.buffers->release(*r);
			schedule_failure(peer, int(ret));
			return;
		}
	}
	// Control messages go after the buffered ones, which already hold
	// buffers: waiting for them could only hold those buffers longer.
	while (peer.state == Peer::State::connected && !peer.controls.empty()) {
		QueuedControl& c = peer.controls.front();
		if (c.header.opcode == Opcode::Delivered && peer.answer_held)
			return; // one answer at a time (on_delivery_query)
		ssize_t ret =
			send_buffered(peer, c.header, c.body.data(), c.body.size(), {}, c.sent);
		if (ret == -FI_EAGAIN)
			return; // the pool is still empty: a later progress call retries
		if (ret)
			c.sent.run(int(-ret));
		peer.controls.pop_front();
	}
}

// A header-and-body message through a bounce buffer, in order with the
// peer's other buffered messages; -FI_EAGAIN when the pool is empty.
ssize_t Endpoint::send_buffered(Peer& peer, const MsgHeader& header, const void* body,
				size_t body_len, std::span<const std::byte> tail, SentHook sent)
{
	BufferRecord* r = tx.buffers->take();
	if (!r)
		return -FI_EAGAIN;
	r->peer = &peer;
	r->header = header;
	std::byte* out = r->buffer->data() + proto::kHeaderSize;
	if (body_len)
		memcpy(out, body, body_len);
	if (!tail.empty())
		memcpy(out + body_len, tail.data(), tail.size());
	r->len = proto::kHeaderSize + body_len + tail.size();
	// A probe exists to fail: it needs a completion. verbs (1.17) drops
	// the error of an injected send without a trace, and only an error
	// completion tells us which connection died.
	r->may_inject = header.opcode != Opcode::Probe && !sent;
	r->sent = sent;
	if (header.opcode == Opcode::Delivered)
		r->answer = peer.answer_held = true;
	ssize_t ret = post_tx(r);
	if (ret) {
		r->sent = {}; // the caller hears of it from the return value
		tx.buffers->release(*r);
	}
	return ret;
}

// Never fails for want of a transmit buffer (see QueuedControl). A message
// for a failed peer is dropped: the operations it belonged to are failing.
ssize_t Endpoint::send_control(Peer& peer, const MsgHeader& header, const void* body,
			       size_t body_len, std::span<const std::byte> tail, SentHook sent)
{
	if (peer.state == Peer::State::failed)
		return -FI_ENOTCONN;
	if (peer.controls.empty()) {
		ssize_t ret = send_buffered(peer, header, body, body_len, tail, sent);
		if (ret != -FI_EAGAIN)
			return ret;
	}
	queue_control(peer, header, body, body_len, tail, sent);
	return 0;
}

void Endpoint::queue_control(Peer& peer, const MsgHeader& header, const void* body, size_t body_len,
			     std::span<const std::byte> tail, SentHook sent)
{
	auto* bytes = static_cast<const std::byte*>(body);
	QueuedControl c{header, {bytes, bytes + body_len}, sent};
	c.body.insert(c.body.end(), tail.begin(), tail.end());
	peer.controls.push_back(std::move(c));
	tx.backlogged++;
}

} // namespace rcoll
