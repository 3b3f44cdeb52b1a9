#include "offload.hpp"

#include <rdma/fi_cm.h>
#include <rdma/fi_endpoint.h>
#include <rdma/fi_eq.h>
#include <rdma/fi_errno.h>

#include <sched.h>

#include <algorithm>
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
	if ((rc = fi_ep_bind(ep, &av->fid, 0)) || (rc = fi_ep_bind(ep, &cq->fid, FI_TRANSMIT | FI_RECV)) ||
	    (rc = fi_ep_bind(ep, &eq->fid, 0)) || (rc = fi_enable(ep)))
		return fabric_error("binding and enabling the endpoint", rc);

	// Every rank's name, in world rank order, into the AV: index = world rank.
	std::vector<char> name(256);
	size_t len = name.size();
	if ((rc = fi_getname(&ep->fid, name.data(), &len)))
		return fabric_error("fi_getname", rc);
	int size = 0;
	PMPI_Comm_size(MPI_COMM_WORLD, &size);
	int longest = int(len);
	PMPI_Allreduce(MPI_IN_PLACE, &longest, 1, MPI_INT, MPI_MAX, MPI_COMM_WORLD);
	name.resize(size_t(longest));
	std::vector<char> names(size_t(longest) * size_t(size));
	PMPI_Allgather(name.data(), longest, MPI_BYTE, names.data(), longest, MPI_BYTE,
		       MPI_COMM_WORLD);
	world_.assign(size_t(size), FI_ADDR_NOTAVAIL);
	for (int r = 0; r < size; r++) {
		rc = fi_av_insert(av, names.data() + size_t(r) * size_t(longest), 1, &world_[size_t(r)], 0,
				  nullptr);
		if (rc != 1)
			return fabric_error("fi_av_insert", rc < 0 ? rc : -FI_EINVAL);
	}
	return "";
}

bool Endpoint::poll(std::string& error)
{
	fi_cq_entry entries[16];
	const ssize_t n = fi_cq_read(cq_.get(), entries, 16);
	for (ssize_t i = 0; i < n; i++)
		static_cast<Operation*>(entries[i].op_context)->done = true;
	if (n == -FI_EAVAIL) {
		fi_cq_err_entry e{};
		if (fi_cq_readerr(cq_.get(), &e, 0) == 1 && e.op_context) {
			auto* op = static_cast<Operation*>(e.op_context);
			op->done = true;
			op->error = e.err ? e.err : FI_EIO;
			op->error_text = fi_strerror(op->error);
		}
	} else if (n < 0 && n != -FI_EAGAIN) {
		error = fabric_error("fi_cq_read", n);
		return false;
	}
	return true;
}

bool Endpoint::wait(Operation& op)
{
	while (!op.done) {
		std::string error;
		if (!poll(error)) {
			op.error = FI_EIO;
			op.error_text = error;
			return false;
		}
	}
	return op.error == 0;
}

std::unique_ptr<CommGroup> Endpoint::join(MPI_Comm comm, std::string& error)
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

	auto g = std::make_unique<CommGroup>();
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
	fid_mc* mc = nullptr;
	if ((rc = fi_join_collective(ep_.get(), set_addr, set, 0, &mc, g.get()))) {
		error = fabric_error("fi_join_collective", rc);
		return nullptr;
	}
	g->mc.reset(mc);
	// FI_JOIN_COMPLETE for this group, progressing meanwhile (the other
	// members' join records arrive through the CQ's progress).
	for (;;) {
		uint32_t event = 0;
		fi_eq_entry entry{};
		const ssize_t got = fi_eq_read(eq_.get(), &event, &entry, sizeof entry, 0);
		if (got > 0 && event == FI_JOIN_COMPLETE && entry.fid == &mc->fid)
			break;
		if (got == -FI_EAVAIL) {
			fi_eq_err_entry e{};
			fi_eq_readerr(eq_.get(), &e, 0);
			if (e.fid == &mc->fid) {
				error = fabric_error("fi_join_collective completed", e.err ? e.err : FI_EIO);
				return nullptr;
			}
		}
		if (!poll(error))
			return nullptr;
	}
	g->coll_addr = fi_mc_addr(mc);
	return g;
}

void Endpoint::close()
{
	ep_.reset();
	eq_.reset();
	cq_.reset();
	av_.reset();
	domain_.reset();
	fabric_.reset();
	world_.clear();
}

} // namespace rcoll::mpi
