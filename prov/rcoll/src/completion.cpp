// Completions to the application: its CQs and counters.
#include "av.hpp"
#include "cntr.hpp"
#include "cq.hpp"
#include "ep.hpp"

namespace rcoll {

fi_addr_t AppBindings::source_of(const Peer* peer) const
{
	return peer && av ? av->find(peer->key) : FI_ADDR_NOTAVAIL;
}

void AppBindings::report_tx(void* context, uint64_t flags, size_t len, int err, bool report,
			    Counter* cntr)
{
	if (err) {
		if (tx_cq) {
			fi_cq_err_entry e{};
			e.op_context = context;
			e.flags = flags;
			e.len = len;
			e.err = err;
			e.prov_errno = -err;
			tx_cq->push_error(e, FI_ADDR_NOTAVAIL);
		}
		if (cntr)
			cntr->errors++;
		return;
	}
	if (report && tx_cq) {
		tx_cq->push(FI_ADDR_NOTAVAIL, [&](fi_cq_tagged_entry& e) {
			e.op_context = context;
			e.flags = flags;
			e.len = len;
		});
	}
	if (cntr)
		cntr->value++;
}

void AppBindings::make_room_tx()
{
	if (tx_cq)
		tx_cq->make_room();
}

void AppBindings::report_rx(const RxCompletion& c)
{
	const uint64_t data = (c.flags & FI_REMOTE_CQ_DATA) ? c.data : 0;
	if (c.err) {
		if (rx_cq) {
			fi_cq_err_entry e{};
			e.op_context = c.context;
			e.flags = c.flags;
			e.len = c.len;
			e.buf = c.buf;
			e.data = data;
			e.tag = c.tag;
			e.olen = c.olen;
			e.err = c.err;
			e.prov_errno = -c.err;
			rx_cq->push_error(e, c.src);
		}
		if (recv_cntr)
			recv_cntr->errors++;
		return;
	}
	if (c.report && rx_cq) {
		rx_cq->push(c.src, [&](fi_cq_tagged_entry& e) {
			e.op_context = c.context;
			e.flags = c.flags;
			e.len = c.len;
			e.buf = c.len ? c.buf : nullptr;
			e.data = data;
			e.tag = (c.flags & FI_TAGGED) ? c.tag : 0;
		});
	}
	// A multi-receive buffer's release alone (no FI_RECV) is no receive.
	if (recv_cntr && (c.flags & FI_RECV))
		recv_cntr->value++;
}

} // namespace rcoll
