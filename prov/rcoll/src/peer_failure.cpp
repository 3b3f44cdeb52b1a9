// Peer failure: finding a peer dead (a failed core operation, a connect
// that timed out, a silent host that leaves a probe unacknowledged), and
// what follows: every pending operation with it completes with an error,
// its connection closes, and the endpoint keeps working with the others.
#include "coll.hpp"
#include "config.hpp"
#include "ep.hpp"
#include "secret.hpp"

#include <utility>
#include <vector>

namespace rcoll {

// Silent hosts. A host that lost its link sends no reset: TCP notices only
// when it has unacknowledged data of its own (after tcp_retries2
// retransmissions), an RC queue pair only when a work request runs out of
// retries. A side that merely waits on the peer (a rendezvous receive whose
// data stopped coming, a send waiting for READ_DONE, an RMA read) has
// nothing outstanding and would wait forever. So a peer that operations
// wait on and that sent nothing for FI_RCOLL_PROBE_INTERVAL_MS gets a PROBE.
// The peer's kernel or HCA acknowledges it, not its application: a peer
// busy computing without calling into libfabric is never taken for dead, as
// a ping/pong timeout would take it under manual progress. A dead host
// leaves the probe unacknowledged, the core fails the connection, and
// fail_peer completes the peer's operations with FI_EIO.

// Stamps every peer an operation waits on with a new scan number, returned.
uint64_t Endpoint::mark_awaited_peers()
{
	const uint64_t scan = ++pace.probe_scans;
	auto mark = [scan](Peer* peer) {
		if (peer)
			peer->awaited_in_scan = scan;
	};
	tx.sends.for_each([&](SendOp& op) { mark(op.peer); });
	rx.recvs.for_each([&](RecvOp& op) {
		if (op.machine) // matched a rendezvous request: waits on its sender
			mark(op.peer);
	});
	for (const auto& op : rma_ops)
		mark(op->peer);
	// A member waiting for another's collective write has nothing
	// outstanding either: every member of a group with work pending counts.
	if (coll)
		coll->for_each_awaited_peer([&](Peer& peer) { mark(&peer); });
	return scan;
}

// Called from progress every kCmPollInterval calls; reads the clock there,
// and scans four times per interval, so a peer is probed between one and
// one and a quarter intervals after its last arrival.
void Endpoint::probe_silent_peers()
{
	const size_t interval_ms = config().probe_interval_ms;
	if (!interval_ms)
		return;
	const auto now = std::chrono::steady_clock::now();
	if (now < pace.next_probe_scan)
		return;
	const auto interval = std::chrono::milliseconds(interval_ms);
	pace.next_probe_scan = now + interval / 4;
	const uint64_t scan = mark_awaited_peers();
	for (const auto& p : peers) {
		Peer& peer = *p;
		if (peer.awaited_in_scan != scan || peer.state != Peer::State::connected) {
			peer.watched = false;
			continue;
		}
		if (!peer.watched || peer.arrivals != peer.arrivals_seen) {
			// Newly awaited, or heard from since the last scan.
			peer.watched = true;
			peer.arrivals_seen = peer.arrivals;
			peer.quiet_since = now;
			continue;
		}
		// At most one probe per interval. A control message still waiting
		// for a transmit buffer goes out before a probe queued now would,
		// and gives the peer as much to acknowledge.
		if (now - peer.quiet_since < interval || !peer.controls.empty())
			continue;
		RCOLL_DBG(FI_LOG_EP_CTRL, "probing %s: awaited, silent for %lld ms\n",
			  peer.address.to_string().c_str(),
			  (long long)std::chrono::duration_cast<std::chrono::milliseconds>(
				  now - peer.quiet_since)
				  .count());
		peer.quiet_since = now;
		send_probe(peer);
	}
}

// A peer that stopped reading: what we send it waits in the core or in its
// backlog, and nothing of it leaves for FI_RCOLL_BACKLOG_TIMEOUT_MS. It
// fails, so its transmit buffers serve the other peers again. A slow reader
// moves its backlog now and then and is never failed. Called with
// probe_silent_peers; reads the clock only while some buffer is in use.
void Endpoint::check_backlogs()
{
	const size_t timeout_ms = config().backlog_timeout_ms;
	if (!timeout_ms || tx.buffers->all_free())
		return;
	const auto now = std::chrono::steady_clock::now();
	for (const auto& p : peers) {
		Peer& peer = *p;
		const bool moved = peer.tx_left != peer.tx_left_seen;
		peer.tx_left_seen = peer.tx_left;
		if (peer.state != Peer::State::connected || !peer.tx_held) {
			peer.backlog_watched = false;
		} else if (!peer.backlog_watched || moved) {
			// Newly backlogged, or it read since the last scan.
			peer.backlog_watched = true;
			peer.stuck_since = now;
		} else if (now - peer.stuck_since > std::chrono::milliseconds(timeout_ms)) {
			RCOLL_WARN(FI_LOG_EP_DATA,
				   "peer %s read none of %zu messages for %zu ms "
				   "(FI_RCOLL_BACKLOG_TIMEOUT_MS): failing it\n",
				   peer.address.to_string().c_str(), peer.tx_held, timeout_ms);
			fail_peer(peer, -FI_ETIMEDOUT);
		}
	}
}

// A probe carries a completion (never injected): its error fails a dead
// host's connection, and its success proves that every message injected to
// the peer before it has left (InjectLedger).
void Endpoint::send_probe(Peer& peer)
{
	proto::MsgHeader probe;
	probe.opcode = proto::Opcode::Probe;
	send_control(peer, probe, nullptr, 0);
}

// Peer failure: every pending operation with that peer completes with an
// error; nothing waits forever. The connection is closed, which makes the
// core flush what it still holds as error completions.

void Endpoint::fail_peer(Peer& peer, int err)
{
	if (peer.state == Peer::State::failed)
		return;
	RCOLL_WARN(FI_LOG_EP_CTRL, "peer %s failed: %s\n", peer.address.to_string().c_str(),
		   fi_strerror(-err));
	peer.state = Peer::State::failed;
	peer.failures++;
	peer.rx_token = unguessable_u64(); // what the far end was told dies with it
	count_peers_on_host();
	if (peer.conn)
		graveyard.push_back(std::move(peer.conn));
	if (peer.losing)
		graveyard.push_back(std::move(peer.losing));
	peer.backlog.for_each([&](BufferRecord* r) {
		if (r->count)
			app.report_tx(r->context, r->cq_flags, 0, FI_EIO, true, app.send_cntr);
		r->sent.run(FI_EIO);
		tx.buffers->release(*r);
	});
	peer.backlog.clear();
	peer.controls.for_each([](QueuedControl& c) { c.sent.run(FI_EIO); });
	peer.controls.clear();
	// Writes waiting for a delivery answer have nothing in the core: the
	// answer died with the connection.
	std::vector<RmaOp*> unanswered;
	for (auto& op : rma_ops)
		if (op->peer == &peer && op->query_seq)
			unanswered.push_back(op.get());
	for (RmaOp* op : unanswered)
		complete_rma(*op, FI_EIO);
	std::vector<uint32_t> doomed;
	tx.sends.for_each([&](SendOp& op) {
		if (op.peer == &peer)
			doomed.push_back(op.cookie);
	});
	for (uint32_t id : doomed)
		if (SendOp* op = tx.sends.find(id))
			run_send_actions(*op, op->machine->on_peer_failed());
	doomed.clear();
	rx.recvs.for_each([&](RecvOp& op) {
		if (op.peer == &peer && op.machine)
			doomed.push_back(op.id);
	});
	for (uint32_t id : doomed)
		if (RecvOp* op = rx.recvs.find(id))
			run_recv_actions(*op, op->machine->on_peer_failed());
	if (coll)
		coll->on_peer_failed(peer);
	// Receives directed at the peer can never match now. What it delivered
	// stays receivable: a peer that sends and closes (an MPI rank reaching
	// MPI_Finalize) loses nothing; a receive that meets one of its
	// rendezvous requests fails (match_unexpected).
	for (proto::MatchQueue* q : {&rx.msg_queue, &rx.tagged_queue})
		q->drain_directed(peer.key, [&](proto::PostedReceive& pr) {
			end_receive(static_cast<RecvOp&>(pr), FI_EIO);
		});
}

void Endpoint::fail_connection_of(Peer* peer, int err)
{
	if (peer && peer->state == Peer::State::connected)
		fail_peer(*peer, -err);
}

void Endpoint::schedule_failure(Peer& peer, int err)
{
	failing.push_back({&peer, peer.conn.get(), err});
}

// Fails the peers scheduled for it, then closes the connections of failed
// peers. fi_close discards what a connection still held (fi_endpoint(3)):
// tcp and net flush those operations into the core CQ during the close, so
// the CQ is read dry right away and their error handling runs as usual;
// what still waits for the core after that never hears from it again.
void Endpoint::settle_failures()
{
	while (failures_pending()) {
		for (const PendingFailure& f : std::exchange(failing, {}))
			if (f.peer->conn.get() == f.conn)
				fail_peer(*f.peer, f.err);
		if (graveyard.empty())
			continue;
		graveyard.clear();
		while (read_core_cq(8) > 0) {
		}
		complete_orphans();
	}
}

// Everything of a failed peer still waiting for a core completion, once its
// connection is closed and the core CQ read dry: a verbs QP, say, is
// destroyed without flushing its work requests. Without this, such an
// operation would never complete.
void Endpoint::complete_orphans()
{
	auto orphaned = [](const Peer* peer) { return peer && peer->state == Peer::State::failed; };
	tx.buffers->for_each([&](BufferRecord& r) {
		if (r.in_core && orphaned(r.peer)) {
			r.in_core = false;
			if (r.count)
				app.report_tx(r.context, r.cq_flags, 0, FI_EIO, true,
					      app.send_cntr);
			r.sent.run(FI_EIO);
			tx.buffers->release(r);
		}
	});
	// Transfers waiting for a retry belong to the closed connection too: a
	// later connection to the same peer must not carry them.
	std::vector<uint32_t> ids;
	tx.sends.for_each([&](SendOp& op) {
		if (!op.transfer.idle() && orphaned(op.peer))
			ids.push_back(op.cookie);
	});
	for (uint32_t id : ids)
		if (SendOp* op = tx.sends.find(id))
			on_chunk_done(*op, FI_EIO);
	ids.clear();
	rx.recvs.for_each([&](RecvOp& op) {
		if (!op.transfer.idle() && orphaned(op.peer))
			ids.push_back(op.id);
	});
	for (uint32_t id : ids)
		if (RecvOp* op = rx.recvs.find(id))
			on_chunk_done(*op, FI_EIO);
	std::vector<RmaOp*> rma;
	for (auto& op : rma_ops)
		if (orphaned(op->peer))
			rma.push_back(op.get());
	for (RmaOp* op : rma)
		on_chunk_done(*op, FI_EIO);
}

} // namespace rcoll
