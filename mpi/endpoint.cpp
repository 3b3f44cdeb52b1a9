#include "offload.hpp"

#include <rdma/fi_cm.h>
#include <rdma/fi_endpoint.h>
#include <rdma/fi_eq.h>
#include <rdma/fi_errno.h>

#include <sched.h>

#include <algorithm>
#include <cstdio>
#include <cstring>

namespace rcoll::mpi {

void FidCloser::operator()(fid* f) const noexcept
{
	if (f)
		fi_close(f);
}

namespace {

std::string fabric_error(const char* call, long rc)
{
	return std::string(call) + ": " + fi_strerror(int(rc < 0 ? -rc : rc));
}

struct InfoDeleter {
	void operator()(fi_info* info) const noexcept { fi_freeinfo(info); }
};
using InfoPtr = std::unique_ptr<fi_info, InfoDeleter>;

} // namespace

std::string Endpoint::open()
{
	InfoPtr hints(fi_allocinfo());
	if (!hints)
		return "fi_allocinfo: out of memory";
	hints->caps = FI_COLLECTIVE | FI_MSG;
	hints->ep_attr->type = FI_EP_RDM;
	hints->domain_attr->threading = FI_THREAD_SAFE;
	hints->fabric_attr->prov_name = strdup("rcoll");
	fi_info* found = nullptr;
	long rc = fi_getinfo(FI_VERSION(1, 17), nullptr, nullptr, 0, hints.get(), &found);
	if (rc)
		return fabric_error("fi_getinfo for provider rcoll", rc);
	InfoPtr info(found);

	fid_fabric* fabric = nullptr;
	if ((rc = fi_fabric(info->fabric_attr, &fabric, nullptr)))
		return fabric_error("fi_fabric", rc);
	fabric_.reset(fabric);
	fid_domain* domain = nullptr;
	if ((rc = fi_domain(fabric, info.get(), &domain, nullptr)))
		return fabric_error("fi_domain", rc);
	domain_.reset(domain);
	fi_av_attr av_attr{};
	av_attr.type = FI_AV_TABLE;
	fid_av* av = nullptr;
	if ((rc = fi_av_open(domain, &av_attr, &av, nullptr)))
		return fabric_error("fi_av_open", rc);
	av_.reset(av);
	fi_cq_attr cq_attr{};
	cq_attr.format = FI_CQ_FORMAT_CONTEXT;
	fid_cq* cq = nullptr;
	if ((rc = fi_cq_open(domain, &cq_attr, &cq, nullptr)))
		return fabric_error("fi_cq_open", rc);
	cq_.reset(cq);
	fi_eq_attr eq_attr{};
	fid_eq* eq = nullptr;
	if ((rc = fi_eq_open(fabric, &eq_attr, &eq, nullptr)))
		return fabric_error("fi_eq_open", rc);
	eq_.reset(eq);
	fid_ep* ep = nullptr;
	if ((rc = fi_endpoint(domain, info.get(), &ep, nullptr)))
		return fabric_error("fi_endpoint", rc);
	ep_.reset(ep);
	if ((rc = fi_ep_bind(ep, &av->fid, 0)) ||
	    (rc = fi_ep_bind(ep, &cq->fid, FI_TRANSMIT | FI_RECV)) ||
	    (rc = fi_ep_bind(ep, &eq->fid, 0)) || (rc = fi_enable(ep)))
		return fabric_error("binding and enabling the endpoint", rc);
	fi_rcoll_finishing_coll_ops* finishing = nullptr;
	blocking_ = fi_open_ops(&ep->fid, FI_RCOLL_FINISHING_COLL_OPS, 0,
				reinterpret_cast<void**>(&finishing), nullptr) == 0 &&
				    finishing->size >= sizeof(*finishing)
			    ? &finishing->coll
			    : ep->collective;
	return "";
}

std::string Endpoint::exchange_names()
{
	std::string error;
	// Every rank's name, in world rank order, into the AV: index = world rank.
	std::vector<char> name(256);
	size_t len = name.size();
	if (long rc = fi_getname(&ep_->fid, name.data(), &len)) {
		error = fabric_error("fi_getname", rc);
		len = 0;
	}
	int size = 0;
	PMPI_Comm_size(MPI_COMM_WORLD, &size);
	int longest = int(len);
	PMPI_Allreduce(MPI_IN_PLACE, &longest, 1, MPI_INT, MPI_MAX, MPI_COMM_WORLD);
	name.resize(size_t(longest));
	std::vector<char> names(size_t(longest) * size_t(size));
	PMPI_Allgather(name.data(), longest, MPI_BYTE, names.data(), longest, MPI_BYTE,
		       MPI_COMM_WORLD);
	world_.assign(size_t(size), FI_ADDR_NOTAVAIL);
	for (int r = 0; r < size && error.empty(); r++) {
		const long rc = fi_av_insert(av_.get(), names.data() + size_t(r) * size_t(longest),
					     1, &world_[size_t(r)], 0, nullptr);
		if (rc != 1)
			error = fabric_error("fi_av_insert", rc < 0 ? rc : -FI_EINVAL);
	}
	// Every rank's host, by the name the MPI gives it.
	char host[MPI_MAX_PROCESSOR_NAME] = {};
	int host_len = 0;
	PMPI_Get_processor_name(host, &host_len);
	uint64_t host_id = fnv1a(kFnvBasis, host, size_t(host_len));
	hosts_.assign(size_t(size), 0);
	PMPI_Allgather(&host_id, 1, MPI_UINT64_T, hosts_.data(), 1, MPI_UINT64_T, MPI_COMM_WORLD);
	return error;
}

std::vector<int> world_ranks_of(MPI_Comm comm)
{
	int size = 0;
	PMPI_Comm_size(comm, &size);
	MPI_Group group, world;
	PMPI_Comm_group(comm, &group);
	PMPI_Comm_group(MPI_COMM_WORLD, &world);
	std::vector<int> ranks(static_cast<size_t>(size)), world_ranks(ranks.size());
	for (int r = 0; r < size; r++)
		ranks[size_t(r)] = r;
	PMPI_Group_translate_ranks(group, size, ranks.data(), world, world_ranks.data());
	PMPI_Group_free(&group);
	PMPI_Group_free(&world);
	return world_ranks;
}

Spread Endpoint::spread_of(MPI_Comm comm) const
{
	std::vector<uint64_t> hosts;
	for (int w : world_ranks_of(comm)) {
		if (w < 0 || size_t(w) >= hosts_.size())
			return Spread::apart; // not a member of the world: as if alone
		hosts.push_back(hosts_[size_t(w)]);
	}
	std::sort(hosts.begin(), hosts.end());
	if (hosts.empty() || hosts.front() == hosts.back())
		return Spread::host;
	return std::adjacent_find(hosts.begin(), hosts.end()) != hosts.end() ? Spread::shared
									     : Spread::apart;
}

void Operation::end(int err, std::string text)
{
	error = err;
	error_text = std::move(text);
	done.store(true, std::memory_order_release);
}

CommGroup::~CommGroup()
{
	// A call that completed may leave writes of rcoll's behind it for a
	// moment: fi_close says so with -FI_EBUSY, and the group must be
	// closed, or it is never retired.
	// After MPI_Finalize closed the endpoint (a request completed but never
	// freed), rcoll already freed the group and its set.
	if (!offload_endpoint().is_open()) {
		(void)set.release();
		return;
	}
	if (mc)
		while (fi_close(&mc->fid) == -FI_EBUSY)
			offload_endpoint().poll();
}

void Endpoint::poll()
{
	if (broken_.load(std::memory_order_acquire))
		return;
	fi_cq_entry entries[16];
	const ssize_t n = fi_cq_read(cq_.get(), entries, 16);
	for (ssize_t i = 0; i < n; i++)
		if (entries[i].op_context) // every completion of ours has one
			static_cast<Operation*>(entries[i].op_context)
				->done.store(true, std::memory_order_release);
	if (n == -FI_EAVAIL) {
		fi_cq_err_entry e{};
		if (fi_cq_readerr(cq_.get(), &e, 0) == 1 && e.op_context) {
			const int err = e.err ? e.err : FI_EIO;
			static_cast<Operation*>(e.op_context)->end(err, fi_strerror(err));
		}
	} else if (n < 0 && n != -FI_EAGAIN) {
		std::lock_guard guard(broken_lock_);
		if (!broken_.load(std::memory_order_relaxed)) {
			broken_text_ = fabric_error("fi_cq_read", n);
			broken_.store(true, std::memory_order_release);
		}
	}
}

void Endpoint::abort_if_broken()
{
	if (!broken_.load(std::memory_order_acquire))
		return;
	std::fprintf(stderr, "rcoll-mpi: the rcoll endpoint failed (%s); ending the job\n",
		     broken_text_.c_str());
	PMPI_Abort(MPI_COMM_WORLD, 1);
}

void Endpoint::advance()
{
	poll();
	if (joins_pending_.load(std::memory_order_acquire) == 0)
		return;
	std::lock_guard guard(lock_);
	read_join_events();
}

bool Endpoint::wait(Operation& op)
{
	while (!op.done.load(std::memory_order_acquire)) {
		advance();
		abort_if_broken();
	}
	return op.error == 0;
}

void Endpoint::read_join_events()
{
	for (;;) {
		uint32_t event = 0;
		fi_eq_err_entry entry{}; // an fi_eq_entry, or the error entry
		ssize_t got = fi_eq_read(eq_.get(), &event, &entry, sizeof(fi_eq_entry), 0);
		if (got == -FI_EAVAIL)
			got = fi_eq_readerr(eq_.get(), &entry, 0) > 0 ? 1 : 0;
		else if (got > 0 && event != FI_JOIN_COMPLETE)
			continue;
		if (got <= 0)
			break;
		auto* g = static_cast<CommGroup*>(entry.context);
		auto it = std::find_if(joining_.begin(), joining_.end(),
				       [g](const auto& each) { return each.get() == g; });
		if (it == joining_.end())
			continue;
		if (entry.err)
			g->failure = fabric_error("fi_join_collective completed", entry.err);
		else
			g->coll_addr = fi_mc_addr(g->mc);
		g->joined = true;
	}
	// Joined groups post what they held back; one stays here until all
	// of it went (-FI_EAGAIN leaves the rest for the next round).
	std::vector<std::shared_ptr<CommGroup>> done; // released after the walk
	for (auto it = joining_.begin(); it != joining_.end();) {
		CommGroup& g = **it;
		if (g.joined)
			post_queued(g);
		if (g.joined && g.queued.empty()) {
			done.push_back(std::move(*it));
			it = joining_.erase(it);
			joins_pending_.fetch_sub(1, std::memory_order_release);
		} else {
			++it;
		}
	}
}

// Under lock_, once joined: the held-back calls, in their order; -FI_EAGAIN
// leaves the rest for the next round.
void Endpoint::post_queued(CommGroup& g)
{
	while (!g.queued.empty()) {
		CommGroup::Queued& q = g.queued.front();
		if (!g.failure.empty()) {
			q.op->end(FI_EIO, g.failure);
		} else {
			const long rc = q.post(g.coll_addr, &q.op->context);
			if (rc == -FI_EAGAIN)
				return;
			if (rc)
				q.op->end(int(-rc), fi_strerror(int(-rc)));
		}
		g.queued.pop_front();
	}
	if (g.failure.empty())
		g.ready.store(true, std::memory_order_release);
}

bool Endpoint::await_ready(CommGroup& g)
{
	while (!g.ready.load(std::memory_order_acquire)) {
		poll();
		abort_if_broken();
		std::lock_guard guard(lock_);
		read_join_events(); // which also posts what joined groups held back
		if (g.joined && !g.failure.empty())
			return false;
	}
	return true;
}

long Endpoint::submit(CommGroup& g, Operation& op, Post post)
{
	if (!g.ready.load(std::memory_order_acquire)) {
		std::lock_guard guard(lock_);
		if (!g.ready.load(std::memory_order_relaxed)) {
			if (g.joined && !g.failure.empty())
				return -FI_EIO;
			g.queued.push_back({&op, std::move(post)});
			return 0;
		}
	}
	return post(g.coll_addr, &op.context);
}

std::shared_ptr<CommGroup> Endpoint::join(MPI_Comm comm, std::optional<uint64_t> key,
					  std::string& error)
{
	const std::vector<int> world_ranks = world_ranks_of(comm);
	const int size = int(world_ranks.size());
	auto g = std::make_shared<CommGroup>();
	for (int w : world_ranks) {
		if (w < 0 || size_t(w) >= world_.size()) {
			error = "a member is not in MPI_COMM_WORLD";
			return nullptr;
		}
		g->members.push_back(world_[size_t(w)]);
	}
	fi_av_set_attr attr{};
	attr.count = size_t(size);
	attr.start_addr = FI_ADDR_NOTAVAIL;
	attr.end_addr = FI_ADDR_NOTAVAIL;
	uint64_t key_bytes = key.value_or(0);
	if (key) {
		attr.comm_key = reinterpret_cast<uint8_t*>(&key_bytes);
		attr.comm_key_size = sizeof(key_bytes);
	}
	fid_av_set* set = nullptr;
	long rc = fi_av_set(av_.get(), &attr, &set, nullptr);
	if (rc) {
		error = fabric_error("fi_av_set", rc);
		return nullptr;
	}
	g->set.reset(set);
	for (fi_addr_t member : g->members)
		if ((rc = fi_av_set_insert(set, member))) {
			error = fabric_error("fi_av_set_insert", rc);
			return nullptr;
		}
	fi_addr_t set_addr = FI_ADDR_NOTAVAIL;
	if ((rc = fi_av_set_addr(set, &set_addr))) {
		error = fabric_error("fi_av_set_addr", rc);
		return nullptr;
	}
	std::lock_guard guard(lock_);
	if ((rc = fi_join_collective(ep_.get(), set_addr, set, 0, &g->mc, g.get()))) {
		error = fabric_error("fi_join_collective", rc);
		return nullptr;
	}
	// FI_JOIN_COMPLETE arrives while rcoll progresses (the other members'
	// join records come through it): read_join_events().
	joining_.push_back(g);
	joins_pending_.fetch_add(1, std::memory_order_release);
	return g;
}

void Endpoint::close()
{
	joining_.clear();
	ep_.reset();
	eq_.reset();
	cq_.reset();
	av_.reset();
	domain_.reset();
	fabric_.reset();
	world_.clear();
	hosts_.clear();
}

} // namespace rcoll::mpi
