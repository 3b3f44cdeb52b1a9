// Receiving: posted receives matched against arriving messages (rcoll's
// own tag matching, proto::MatchQueue), messages that arrived first, the
// shared receive context's bounce buffers, and the receiver's half of the
// rendezvous (Takagi et al. 2013; its state machine is
// proto::RendezvousReceiver).
#include "av.hpp"
#include "coll.hpp"
#include "config.hpp"
#include "domain.hpp"
#include "ep.hpp"

#include <cstring>

namespace rcoll {

using proto::MsgHeader;
using proto::Opcode;

namespace {

uint64_t completion_flags(const MsgHeader& h)
{
	uint64_t f = FI_RECV | ((h.flags & proto::kFlagTagged) ? FI_TAGGED : FI_MSG);
	if (h.flags & proto::kFlagRemoteCqData)
		f |= FI_REMOTE_CQ_DATA;
	return f;
}

} // namespace

// Keeps the shared receive context stocked (ReceiveBuffers).
void Endpoint::refill_rx()
{
	for (size_t n = rx.buffers->refill_count(); n > 0; n--) {
		BufferRecord* r = rx.buffers->next_to_post();
		if (!r)
			return;
		proto::BounceBuffer* b = r->buffer;
		ssize_t ret = fi_recv(core.srx.get(), b->data(), b->size(), b->desc(),
				      FI_ADDR_UNSPEC, &r->cc.space);
		if (ret) {
			rx.buffers->post_failed(*r);
			if (ret != -FI_EAGAIN)
				RCOLL_WARN(FI_LOG_EP_DATA,
					   "posting to the shared receive context: %s\n",
					   fi_strerror(int(-ret)));
			return;
		}
	}
}

// A receive buffer came back from the core: with a message, flushed (its
// connection closed), or consumed by a remote write's immediate (verbs).
// Either way it returns to the pool, and the refill posts it again.
void BufferRecord::finish_receive(Endpoint& ep, void* owner, const CoreEvent& event)
{
	auto* r = static_cast<BufferRecord*>(owner);
	ep.rx.buffers->consumed(*r);
	if (!event.err && !event.remote_write)
		ep.on_receive(r, event.len);
	else if (event.err && event.err != FI_ECANCELED)
		RCOLL_INFO(FI_LOG_EP_DATA, "receive error: %s\n", fi_strerror(event.err));
	ep.rx.buffers->release(*r);
}

ssize_t Endpoint::recv(void* buf, size_t len, void* desc, fi_addr_t src, uint64_t tag,
		       uint64_t ignore, uint64_t flags, void* context)
{
	if (!enabled)
		return -FI_EOPBADSTATE;
	if (len && !buf)
		return -FI_EINVAL;
	uint64_t source = proto::kAnySource;
	if (src != FI_ADDR_UNSPEC && (caps & FI_DIRECTED_RECV)) {
		const EpAddress* a = app.av ? app.av->lookup(src) : nullptr;
		if (!a) {
			RCOLL_WARN(FI_LOG_EP_DATA,
				   "receive from fi_addr %llu, not in the address vector\n",
				   (unsigned long long)src);
			return -FI_EINVAL;
		}
		source = a->key;
	}
	const bool tagged = flags & FI_TAGGED;
	const bool multi = flags & FI_MULTI_RECV;
	if (multi && (tagged || !(caps & FI_MULTI_RECV))) {
		RCOLL_WARN(FI_LOG_EP_DATA, "FI_MULTI_RECV %s\n",
			   tagged ? "takes untagged receives only"
				  : "on an endpoint opened without that capability");
		return -FI_EBADFLAGS;
	}
	proto::MatchQueue& queue = rx.queue_for(flags);
	const bool report = !app.rx_selective || (flags & FI_COMPLETION);

	if (tagged && (flags & FI_PEEK)) {
		Unexpected* u = nullptr;
		if (auto* m = queue.peek(source, tag, ignore))
			u = static_cast<Unexpected*>(m->context);
		if (!u) {
			app.report_rx({.context = context,
				       .flags = FI_RECV | FI_TAGGED,
				       .tag = tag,
				       .err = FI_ENOMSG});
			return 0;
		}
		// FI_CLAIM keeps the message for the FI_CLAIM receive that follows;
		// FI_DISCARD (with or without FI_CLAIM) drops it now.
		if (flags & (FI_CLAIM | FI_DISCARD))
			queue.claim(u->match);
		if ((flags & FI_CLAIM) && !(flags & FI_DISCARD) && context)
			static_cast<fi_context*>(context)->internal[0] = u;
		app.report_rx({.context = context,
			       .flags = completion_flags(u->header),
			       .len = u->header.size,
			       .data = u->header.cq_data,
			       .tag = u->header.tag,
			       .src = app.source_of(u->peer)});
		if (flags & FI_DISCARD)
			discard_unexpected(u);
		return 0;
	}

	uint32_t id = 0;
	RecvOp* op = rx.recvs.create(id);
	if (!op)
		return -FI_EAGAIN;
	op->id = id;
	op->flags = FI_RECV | (tagged ? FI_TAGGED : FI_MSG);
	op->report = report;
	op->buf = static_cast<std::byte*>(buf);
	op->len = len;
	op->app_mr = static_cast<MemoryRegion*>(desc);
	op->core_desc = core_desc_of(desc);
	op->source = source;
	op->tag = tagged ? tag : 0;
	op->ignore = tagged ? ignore : 0;
	op->context = context;
	if (multi) {
		op->keep_posted = true;
		return post_multi_recv(*op);
	}

	Unexpected* u = nullptr;
	if (tagged && (flags & FI_CLAIM)) {
		u = context ? static_cast<Unexpected*>(
				      static_cast<fi_context*>(context)->internal[0])
			    : nullptr;
		if (!u) {
			rx.recvs.destroy(id);
			return -FI_EINVAL;
		}
		if (flags & FI_DISCARD) {
			app.report_rx({.context = context,
				       .flags = completion_flags(u->header),
				       .data = u->header.cq_data,
				       .tag = u->header.tag,
				       .src = app.source_of(u->peer),
				       .report = report});
			discard_unexpected(u);
			rx.recvs.destroy(id);
			return 0;
		}
	} else if (auto* m = queue.post(*op)) {
		u = static_cast<Unexpected*>(m->context);
	} else {
		end_if_source_failed(*op);
		return 0;
	}
	if (u)
		match_unexpected(*op, u);
	return 0;
}

// A receive left posted for one source that failed ends at once: nothing
// that source delivered matches it, and it will send nothing more.
void Endpoint::end_if_source_failed(RecvOp& op)
{
	if (op.source == proto::kAnySource || !failed_source(op.source))
		return;
	rx.queue_for(op.flags).remove(op);
	end_receive(op, FI_EIO);
}

bool Endpoint::failed_source(uint64_t key) const
{
	const Peer* peer = peers.by_key(key);
	return peer && peer->state == Peer::State::failed;
}

// A receive met a message that had arrived before it.
void Endpoint::match_unexpected(RecvOp& posted, Unexpected* u)
{
	RecvOp* taker = receive_for(posted, *u->peer, u->header.size);
	if (!taker) {
		drop_unexpected(u);
		return;
	}
	RecvOp& op = *taker;
	if (u->header.opcode == Opcode::Eager) {
		complete_eager(op, u->peer, u->header, u->payload.data(), u->payload.size());
	} else if (u->peer->state == Peer::State::failed || u->peer_failures != u->peer->failures) {
		// Its sender's connection ended since: no one can serve the request.
		finish_recv(op, {.context = op.context,
				 .flags = op.flags,
				 .buf = op.buf,
				 .tag = u->header.tag,
				 .src = app.source_of(u->peer),
				 .err = FI_EIO});
	} else {
		start_rendezvous_recv(op, *u->peer, u->header, u->rts);
	}
	drop_unexpected(u);
}

// FI_DISCARD: the message is consumed without its data. A rendezvous
// sender still waits for its buffer to be released: tell it we are done.
void Endpoint::discard_unexpected(Unexpected* u)
{
	if (u->header.opcode == Opcode::Rts && u->peer->state == Peer::State::connected &&
	    u->peer_failures == u->peer->failures) {
		MsgHeader h;
		h.opcode = Opcode::ReadDone;
		send_control(*u->peer, h, proto::ReadDoneBody{u->rts.sender_cookie});
	}
	drop_unexpected(u);
}

// A few records are kept for reuse, without their payload memory: what a
// burst of unexpected messages allocated goes back once they are received.
void Endpoint::drop_unexpected(Unexpected* u)
{
	constexpr size_t kSpares = 64;
	if (u->peer) {
		u->peer->unexpected_bytes -= u->charged;
		if (u->charged_to_strangers)
			rx.strangers_unexpected_bytes -= u->charged;
		u->charged = 0;
		u->charged_to_strangers = false;
	}
	if (rx.spare_unexpected.size() >= kSpares) {
		delete u;
		return;
	}
	std::vector<std::byte>().swap(u->payload);
	rx.spare_unexpected.emplace_back(u);
}

Unexpected* Endpoint::new_unexpected()
{
	if (rx.spare_unexpected.empty())
		return new Unexpected();
	Unexpected* u = rx.spare_unexpected.back().release();
	rx.spare_unexpected.pop_back();
	u->peer = nullptr;
	u->header = proto::MsgHeader{};
	u->rts = proto::RtsBody{};
	u->charged = 0;
	u->charged_to_strangers = false;
	return u;
}

void Endpoint::complete_eager(RecvOp& op, Peer* peer, const MsgHeader& h, const std::byte* data,
			      size_t size)
{
	const size_t n = std::min(size, op.len);
	if (n)
		memcpy(op.buf, data, n);
	const uint64_t cflags = completion_flags(h);
	RxCompletion c{.context = op.context,
		       .flags = cflags,
		       .len = n,
		       .buf = op.buf,
		       .data = h.cq_data,
		       .tag = h.tag,
		       .src = app.source_of(peer),
		       .report = op.report};
	if (size > op.len) {
		c.err = FI_ETRUNC; // an error is always reported
		c.olen = size - op.len;
	}
	finish_recv(op, c);
}

void Endpoint::start_rendezvous_recv(RecvOp& op, Peer& peer, const MsgHeader& h,
				     const proto::RtsBody& rts)
{
	op.peer = &peer;
	op.header = h;
	const uint64_t transfer = std::min<uint64_t>(h.size, op.len);
	uint64_t key = 0;
	if (transfer) {
		// The sender gets a key to exactly the bytes it may write, for
		// writing only, whatever the application's registration covers;
		// the GET path reads into them.
		int ret = op.own_mr.reg(*domain, op.buf, transfer, FI_READ | FI_REMOTE_WRITE);
		if (ret) {
			finish_recv(op, {.context = op.context,
					 .flags = completion_flags(h),
					 .buf = op.buf,
					 .data = h.cq_data,
					 .tag = h.tag,
					 .src = app.source_of(&peer),
					 .err = -ret});
			return;
		}
		if (!op.app_mr)
			op.core_desc = op.own_mr.desc();
		key = op.own_mr.key();
	}
	op.machine.emplace(op.id, std::span<std::byte>(op.buf, transfer),
			   proto::RemoteBuffer{reinterpret_cast<uint64_t>(op.buf), key});
	const auto path = proto::RendezvousReceiver::path_for(op.source);
	const auto mode = config().rndv_poll_last_byte() ? proto::CompletionMode::PollLastByte
							 : proto::CompletionMode::Fin;
	run_recv_actions(op, op.machine->on_rts(rts, h.size, path, mode, slot_random));
}

void Endpoint::run_recv_actions(RecvOp& op, const proto::Actions& actions)
{
	for (const proto::Action& a : actions) {
		if (auto* cts = std::get_if<proto::action::SendCts>(&a)) {
			MsgHeader h;
			h.opcode = Opcode::Cts;
			send_control(*op.peer, h, cts->body);
			if (cts->body.mode == proto::CompletionMode::PollLastByte && !op.polling) {
				op.polling = true;
				rx.polling.push_back(op.id);
			}
		} else if (auto* rd = std::get_if<proto::action::Read>(&a)) {
			ChunkedRma& t = op.transfer;
			t.write = false;
			t.local = op.buf;
			t.desc = op.core_desc;
			t.remote_addr = rd->source.addr;
			t.key = rd->source.key;
			t.length = rd->length;
			t.done = 0;
			issue_chunk(op);
		} else if (auto* done = std::get_if<proto::action::SendReadDone>(&a)) {
			MsgHeader h;
			h.opcode = Opcode::ReadDone;
			send_control(*op.peer, h, done->body);
		} else if (auto* c = std::get_if<proto::action::Complete>(&a)) {
			const MsgHeader& h = op.header;
			int err = outcome_errno(c->outcome);
			size_t olen = c->outcome == proto::Outcome::Truncated
					      ? size_t(c->message_length - c->transferred)
					      : 0;
			finish_recv(op, {.context = op.context,
					 .flags = completion_flags(h),
					 .len = size_t(c->transferred),
					 .buf = op.buf,
					 .data = h.cq_data,
					 .tag = h.tag,
					 .src = app.source_of(op.peer),
					 .err = err,
					 .olen = olen,
					 .report = op.report});
			return; // op is gone
		} else if (auto* v = std::get_if<proto::action::Violation>(&a)) {
			RCOLL_WARN(FI_LOG_EP_DATA, "rendezvous protocol violation from %s: %s\n",
				   op.peer->address.to_string().c_str(), v->what);
			schedule_failure(*op.peer, -FI_EOTHER);
		}
	}
}

// The GET data, chunk by chunk.
void Endpoint::issue_chunk(RecvOp& op)
{
	ssize_t ret = post_chunk(*op.peer, op.transfer, op.transfer_cc);
	if (ret && ret != -FI_EAGAIN)
		run_recv_actions(op, op.machine->on_read_failed());
}

void Endpoint::on_chunk_done(RecvOp& op, int err)
{
	if (err) {
		op.transfer.in_flight = op.transfer.retry = false;
		run_recv_actions(op, op.machine->on_read_failed());
	} else if (op.transfer.chunk_done()) {
		run_recv_actions(op, op.machine->on_read_complete());
	} else {
		issue_chunk(op);
	}
}

void Endpoint::on_fin(Peer& peer, const proto::FinBody& fin)
{
	RecvOp* op = rx.recvs.find(fin.receiver_op_id);
	if (!op || op->peer != &peer || !op->machine) {
		RCOLL_WARN(FI_LOG_EP_DATA, "FIN for an unknown receive\n");
		return;
	}
	run_recv_actions(*op, op->machine->on_fin(fin));
}

// An eager message or a rendezvous request: to the oldest posted receive
// that accepts it, else queued as unexpected (its payload copied out so the
// bounce buffer goes straight back to the shared receive context).
void Endpoint::deliver(Peer& peer, const proto::ParsedMessage& m)
{
	if (m.header.flags & proto::kFlagCollective) {
		if (coll)
			coll->on_join_message(peer, m.header, m.payload);
		return;
	}
	Unexpected* u = new_unexpected();
	u->match.source = peer.key;
	u->match.tag = m.header.tag;
	u->match.context = u;
	proto::MatchQueue& queue =
		(m.header.flags & proto::kFlagTagged) ? rx.tagged_queue : rx.msg_queue;
	proto::PostedReceive* posted = queue.deliver(u->match);
	if (!posted) {
		// Kept until a receive takes it, within the peer's budget (peers
		// outside the address vector share one): a peer that sends more
		// than the application receives fails rather than exhaust this
		// process's memory.
		const size_t charge = sizeof(Unexpected) + m.payload.size();
		const size_t limit = config().unexpected_max;
		// A stranger the application named since it connected has a
		// budget of its own.
		if (peer.stranger && app.av && app.av->find(peer.key) != FI_ADDR_NOTAVAIL)
			peer.stranger = false;
		const size_t held =
			peer.stranger ? rx.strangers_unexpected_bytes : peer.unexpected_bytes;
		if (limit && held + charge > limit) {
			RCOLL_WARN(FI_LOG_EP_DATA,
				   "%s %016llx has %zu bytes of messages waiting for a receive, "
				   "FI_RCOLL_UNEXPECTED_MAX is %zu: failing it\n",
				   peer.stranger ? "peers outside the address vector, with"
						 : "peer",
				   (unsigned long long)peer.key, held, limit);
			queue.claim(u->match);
			drop_unexpected(u);
			schedule_failure(peer, -FI_ENOSPC);
			return;
		}
		u->peer = &peer;
		u->peer_failures = peer.failures;
		u->header = m.header;
		u->charged = charge;
		u->charged_to_strangers = peer.stranger;
		peer.unexpected_bytes += charge;
		if (peer.stranger)
			rx.strangers_unexpected_bytes += charge;
		if (m.header.opcode == Opcode::Eager)
			u->payload.assign(m.payload.begin(), m.payload.end());
		else
			u->rts = std::get<proto::RtsBody>(m.body);
		return;
	}
	drop_unexpected(u);
	RecvOp* taker = receive_for(*static_cast<RecvOp*>(posted), peer, m.header.size);
	if (!taker)
		return;
	RecvOp& op = *taker;
	if (m.header.opcode == Opcode::Eager)
		complete_eager(op, &peer, m.header, m.payload.data(), m.payload.size());
	else
		start_rendezvous_recv(op, peer, m.header, std::get<proto::RtsBody>(m.body));
}

// POLL_LAST_BYTE mode: receives whose slot byte may have changed.
void Endpoint::poll_last_bytes()
{
	for (size_t i = 0; i < rx.polling.size();) {
		RecvOp* op = rx.recvs.find(rx.polling[i]);
		if (!op || !op->machine || op->machine->done()) {
			rx.polling[i] = rx.polling.back();
			rx.polling.pop_back();
			continue;
		}
		i++;
		run_recv_actions(*op, op->machine->poll());
	}
}

void Endpoint::end_receive(RecvOp& op, int err)
{
	if (op.keep_posted) {
		op.released = true;
		if (op.pieces)
			return; // the last piece's completion releases the buffer
	}
	finish_recv(op, {.context = op.context,
			 .flags = op.flags,
			 .buf = op.buf,
			 .tag = op.tag,
			 .err = err});
}

// A piece counts down its multi-receive buffer: the completion after which
// the buffer is the application's again (released, no piece outstanding)
// carries FI_MULTI_RECV, and is written even under FI_SELECTIVE_COMPLETION.
// A CQ hands out errors before the entries queued ahead of them, so an error
// never carries the release: an entry of its own, with FI_MULTI_RECV alone,
// follows it, behind every earlier message into the buffer.
void Endpoint::finish_recv(RecvOp& op, RxCompletion c)
{
	RecvOp* buffer = op.keep_posted ? &op : op.buffer;
	if (op.buffer)
		op.buffer->pieces--;
	const bool release = buffer && buffer->released && buffer->pieces == 0;
	if (release && !c.err) {
		c.flags |= FI_MULTI_RECV;
		c.report = true;
	}
	app.report_rx(c);
	if (release && c.err)
		app.report_rx({.context = c.context, .flags = FI_MULTI_RECV});
	if (&op != buffer)
		rx.recvs.destroy(op.id);
	if (release)
		rx.recvs.destroy(buffer->id);
}

// fi_cancel: a posted receive completes with FI_ECANCELED.

ssize_t Endpoint::cancel(void* context)
{
	for (proto::MatchQueue* q : {&rx.msg_queue, &rx.tagged_queue}) {
		if (proto::PostedReceive* pr = q->cancel(context)) {
			end_receive(*static_cast<RecvOp*>(pr), FI_ECANCELED);
			return 0;
		}
	}
	return -FI_ENOENT;
}

} // namespace rcoll
