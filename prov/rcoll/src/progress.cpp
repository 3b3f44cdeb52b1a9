// Progress: the loop that drives the core (connection events, completions,
// refills, retries) and the dispatch of what the core reports: completions
// through their context, messages by opcode.
#include "attr.hpp"
#include "coll.hpp"
#include "config.hpp"
#include "ep.hpp"

#include <vector>

namespace rcoll {

using proto::Opcode;

namespace {

constexpr size_t kCompletionBatch = 32;
constexpr uint64_t kCmPollInterval = 64;
constexpr uint64_t kDeferredClockCalls = 8;

} // namespace

int Endpoint::progress()
{
	if (!enabled)
		return 0;
	int handled = 0;
	if (core_due()) {
		// Connection events are rare and every read of the core EQ costs
		// a system call: read it on each round only while a connection is
		// being set up, else every kCmPollInterval rounds.
		if (pace.cm_busy || pace.core_rounds % kCmPollInterval == 0)
			handled += poll_cm();
		handled += read_core_cq(8);
		refill_rx();
		if (tx.backlogged) {
			// Only connected peers can drain; the others wait for
			// FI_CONNECTED.
			tx.backlogged = 0;
			for (auto& peer : peers) {
				if (peer->state == Peer::State::connected)
					flush_backlog(*peer);
				tx.backlogged += !peer->backlog.empty() || !peer->controls.empty();
			}
		}
		if (pace.stalled)
			retry_stalled();
		if (!rx.polling.empty())
			poll_last_bytes();
		if (pace.core_rounds % kCmPollInterval == 0) {
			probe_silent_peers(); // reads the clock: not on every round
			check_backlogs();
		}
		if (++pace.core_rounds % 1024 == 0)
			check_connect_timeouts();
	}
	if (coll)
		handled += run_collectives([&] { coll->progress(); });
	if (failures_pending())
		settle_failures();
	return handled;
}

// Whether this progress call drives the core. Reading a core CQ or EQ is a
// system call on tcp (a poll of its sockets) whether or not anything
// arrived, so while the endpoint waits only for collectives among members
// on this host, whose writes and arrivals bypass the core, the core is read
// only every FI_RCOLL_CORE_POLL_US: what may still come through it
// unannounced (a peer's message or RMA, a connection event, a failure)
// waits at most that long (plus a tick of the coarse clock that measures
// it, and up to kDeferredClockCalls progress calls). Everything the
// endpoint itself started through the core is driven on every call.
bool Endpoint::core_due()
{
	const bool wanted = pace.cm_busy || tx.backlogged || pace.stalled || tx.sends.live() ||
			    rx.recvs.live() || !rma_ops.empty() || !rx.polling.empty() ||
			    failures_pending() || !tx.buffers->all_free() || !coll ||
			    !coll->waits_only_on_host();
	if (wanted) {
		pace.core_deferred = false;
		return true;
	}
	if (!pace.core_deferred) {
		// The core was read by the previous call: the next round is due
		// one interval later.
		pace.core_deferred = true;
		pace.deferred_calls = 0;
		pace.next_core_round =
			CoarseClock::now() + std::chrono::microseconds(config().core_poll_us);
		return false;
	}
	// Even the coarse clock costs a sub-microsecond collective something:
	// it is read every kDeferredClockCalls calls.
	if (++pace.deferred_calls % kDeferredClockCalls != 0)
		return false;
	const auto now = CoarseClock::now();
	if (now < pace.next_core_round)
		return false;
	pace.next_core_round = now + std::chrono::microseconds(config().core_poll_us);
	return true;
}

// Up to `rounds` batches of core completions; stops early when the core CQ
// runs dry.
int Endpoint::read_core_cq(int rounds)
{
	int handled = 0;
	fi_cq_data_entry batch[kCompletionBatch];
	for (int round = 0; round < rounds; round++) {
		ssize_t ret = fi_cq_read(core.cq.get(), batch, kCompletionBatch);
		if (ret > 0) {
			for (ssize_t i = 0; i < ret; i++)
				on_core_completion(batch[i]);
			// A stream of eager messages can use up the few posted
			// buffers within one call: restock before the core reads on.
			refill_rx();
			handled += int(ret);
			if (size_t(ret) < kCompletionBatch)
				break;
		} else if (ret == -FI_EAVAIL) {
			fi_cq_err_entry err{};
			if (fi_cq_readerr(core.cq.get(), &err, 0) <= 0)
				break;
			on_core_error(err);
			handled++;
		} else {
			break;
		}
	}
	return handled;
}

// Each operation handed to the core carries a CoreContext that knows how
// to finish it. A remote write's immediate comes with the context of the
// posted receive it consumed (verbs) or none (tcp).
void Endpoint::on_core_completion(const fi_cq_data_entry& e)
{
	CoreContext* cc = CoreContext::of(e.op_context);
	if (e.flags & FI_REMOTE_WRITE) {
		if (cc)
			cc->finish(*this, cc->owner, CoreEvent{.remote_write = true});
		if (e.flags & FI_REMOTE_CQ_DATA)
			on_remote_write(e.data);
		return;
	}
	if (cc)
		cc->finish(*this, cc->owner, CoreEvent{.len = e.len});
}

void Endpoint::on_core_error(const fi_cq_err_entry& e)
{
	CoreContext* cc = CoreContext::of(e.op_context);
	const int err = e.err ? e.err : FI_EIO;
	if (!cc) {
		RCOLL_WARN(FI_LOG_EP_DATA, "core completion error without context: %s\n",
			   fi_strerror(err));
		return;
	}
	RCOLL_INFO(FI_LOG_EP_DATA, "core completion error: %s (prov_errno %d)\n", fi_strerror(err),
		   e.prov_errno);
	cc->finish(*this, cc->owner, CoreEvent{.err = err});
}

// Posts a transfer's next chunk. -FI_EAGAIN: progress retries it; another
// error: the transfer failed (its peer too, when the core refused it).
ssize_t Endpoint::post_chunk(Peer& peer, ChunkedRma& transfer, CoreContext& cc)
{
	if (peer.state == Peer::State::failed) {
		// It failed while this transfer waited for its next chunk or a
		// retry: nothing of it is in flight.
		transfer.retry = false;
		return -FI_ENOTCONN;
	}
	ssize_t ret = transfer.post_next(peer.conn.get(), &cc.space, config().rma_chunk);
	if (ret == -FI_EAGAIN)
		pace.stalled++;
	else if (ret)
		RCOLL_WARN(FI_LOG_EP_DATA, "core %s: %s\n", transfer.write ? "write" : "read",
			   fi_strerror(int(-ret)));
	return ret;
}

void Endpoint::on_receive(BufferRecord* r, size_t len)
{
	proto::Limits limits;
	limits.eager_limit = uint32_t(eager_limit);
	limits.connection_count = uint32_t(peers.size());
	limits.max_message_size = kMaxMsgSize;
	proto::ParsedMessage m;
	auto status = proto::validate_message(r->buffer->data(), len, limits, m);
	Peer* peer =
		status == proto::WireStatus::Ok ? peers.by_local_id(m.header.src_conn) : nullptr;
	const char* why =
		status != proto::WireStatus::Ok ? proto::describe(status)
		: !peer || peer->state == Peer::State::idle || peer->state == Peer::State::failed
			? "unknown or closed connection"
		: m.header.token != peer->rx_token
			? "wrong token for its connection (forged, or sent by another peer)"
			: nullptr;
	if (why) {
		RCOLL_WARN(FI_LOG_EP_DATA, "dropping a %zu-byte message: %s\n", len, why);
		return;
	}
	peer->arrivals++; // proof of life for probe_silent_peers
	switch (m.header.opcode) {
	case Opcode::Eager:
	case Opcode::Rts: deliver(*peer, m); break;
	case Opcode::Cts: on_cts(*peer, std::get<proto::CtsBody>(m.body)); break;
	case Opcode::Fin: on_fin(*peer, std::get<proto::FinBody>(m.body)); break;
	case Opcode::WriteData:
		// Only a target of remote writes has such completions; elsewhere
		// one would carry no context of the application's.
		if (!takes_remote_writes(caps)) {
			RCOLL_WARN(FI_LOG_EP_DATA,
				   "WRITE_DATA at an endpoint that takes no remote writes: "
				   "failing its sender\n");
			schedule_failure(*peer, -FI_EOTHER);
			break;
		}
		// The fi_writedata before this message has landed (same connection,
		// in order): the target's completion carries the data.
		app.report_rx({.flags = FI_REMOTE_WRITE | FI_RMA | FI_REMOTE_CQ_DATA,
			       .data = m.header.cq_data,
			       .src = app.source_of(peer)});
		break;
	case Opcode::Probe: break; // counted above; its sender only wanted our kernel's ACK
	case Opcode::ReadDone: on_read_done(*peer, std::get<proto::ReadDoneBody>(m.body)); break;
	case Opcode::DeliveryQuery:
		on_delivery_query(*peer, std::get<proto::DeliveryQueryBody>(m.body));
		break;
	case Opcode::Delivered: on_delivered(*peer, std::get<proto::DeliveredBody>(m.body)); break;
	case Opcode::Arrival:
		if (coll)
			coll->on_arrival(*peer, std::get<proto::ArrivalBody>(m.body), m.payload);
		else
			RCOLL_WARN(FI_LOG_EP_DATA, "collective arrival at an endpoint without "
						   "collectives: dropped\n");
		break;
	}
}

// Immediate data of a core write that landed here. rcoll never sends any
// (its completion would not say who sent it): whoever did is not rcoll.
void Endpoint::on_remote_write(uint64_t data)
{
	RCOLL_WARN(FI_LOG_EP_DATA, "dropping immediate data %#x: rcoll sends none\n",
		   unsigned(data));
}

// Core operations the core refused with -FI_EAGAIN.
void Endpoint::retry_stalled()
{
	pace.stalled = 0;
	tx.sends.for_each([&](SendOp& op) {
		if (op.transfer.retry)
			issue_chunk(op);
	});
	rx.recvs.for_each([&](RecvOp& op) {
		if (op.transfer.retry)
			issue_chunk(op);
	});
	std::vector<RmaOp*> waiting;
	for (auto& op : rma_ops)
		if (op->transfer.retry)
			waiting.push_back(op.get());
	for (RmaOp* op : waiting)
		issue_chunk(*op);
}

} // namespace rcoll
