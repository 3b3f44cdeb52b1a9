#include "offload.hpp"

#include <atomic>
#include <climits>
#include <cstdint>
#include <cstring>
#include <utility>

namespace rcoll::mpi {

namespace {

// An integer MPI type of `bytes` bytes and the given signedness.
fi_datatype integer_of(size_t bytes, bool is_signed)
{
	switch (bytes) {
	case 1: return is_signed ? FI_INT8 : FI_UINT8;
	case 2: return is_signed ? FI_INT16 : FI_UINT16;
	case 4: return is_signed ? FI_INT32 : FI_UINT32;
	default: return is_signed ? FI_INT64 : FI_UINT64;
	}
}

} // namespace

std::optional<fi_datatype> datatype_of(MPI_Datatype type)
{
	// Fixed-width types first, then the C types by their size here.
	if (type == MPI_INT8_T)
		return FI_INT8;
	if (type == MPI_UINT8_T)
		return FI_UINT8;
	if (type == MPI_INT16_T)
		return FI_INT16;
	if (type == MPI_UINT16_T)
		return FI_UINT16;
	if (type == MPI_INT32_T)
		return FI_INT32;
	if (type == MPI_UINT32_T)
		return FI_UINT32;
	if (type == MPI_INT64_T)
		return FI_INT64;
	if (type == MPI_UINT64_T)
		return FI_UINT64;
	if (type == MPI_SIGNED_CHAR)
		return FI_INT8;
	if (type == MPI_UNSIGNED_CHAR || type == MPI_BYTE)
		return FI_UINT8;
	if (type == MPI_SHORT)
		return integer_of(sizeof(short), true);
	if (type == MPI_UNSIGNED_SHORT)
		return integer_of(sizeof(unsigned short), false);
	if (type == MPI_INT)
		return integer_of(sizeof(int), true);
	if (type == MPI_UNSIGNED)
		return integer_of(sizeof(unsigned), false);
	if (type == MPI_LONG)
		return integer_of(sizeof(long), true);
	if (type == MPI_UNSIGNED_LONG)
		return integer_of(sizeof(unsigned long), false);
	if (type == MPI_LONG_LONG || type == MPI_LONG_LONG_INT)
		return integer_of(sizeof(long long), true);
	if (type == MPI_UNSIGNED_LONG_LONG)
		return integer_of(sizeof(unsigned long long), false);
	if (type == MPI_FLOAT)
		return FI_FLOAT;
	if (type == MPI_DOUBLE)
		return FI_DOUBLE;
	if (type == MPI_C_FLOAT_COMPLEX || type == MPI_C_COMPLEX)
		return FI_FLOAT_COMPLEX;
	if (type == MPI_C_DOUBLE_COMPLEX)
		return FI_DOUBLE_COMPLEX;
	// MPI_CHAR (not a reduction type for MPI), MPI_LONG_DOUBLE and the
	// pair types of MINLOC/MAXLOC stay with the MPI.
	return std::nullopt;
}

std::optional<fi_op> op_of(MPI_Op op)
{
	if (op == MPI_SUM)
		return FI_SUM;
	if (op == MPI_PROD)
		return FI_PROD;
	if (op == MPI_MIN)
		return FI_MIN;
	if (op == MPI_MAX)
		return FI_MAX;
	if (op == MPI_LAND)
		return FI_LAND;
	if (op == MPI_LOR)
		return FI_LOR;
	if (op == MPI_LXOR)
		return FI_LXOR;
	if (op == MPI_BAND)
		return FI_BAND;
	if (op == MPI_BOR)
		return FI_BOR;
	if (op == MPI_BXOR)
		return FI_BXOR;
	return std::nullopt; // MINLOC, MAXLOC, REPLACE, NO_OP, user-defined
}

} // namespace rcoll::mpi

namespace rcoll::mpi {

namespace {

std::optional<std::pair<MPI_Datatype, MPI_Datatype>> pair_members(MPI_Datatype type)
{
	if (type == MPI_2INT)
		return std::pair{MPI_INT, MPI_INT};
	if (type == MPI_FLOAT_INT)
		return std::pair{MPI_FLOAT, MPI_INT};
	if (type == MPI_DOUBLE_INT)
		return std::pair{MPI_DOUBLE, MPI_INT};
	if (type == MPI_LONG_INT)
		return std::pair{MPI_LONG, MPI_INT};
	if (type == MPI_SHORT_INT)
		return std::pair{MPI_SHORT, MPI_INT};
	if (type == MPI_LONG_DOUBLE_INT)
		return std::pair{MPI_LONG_DOUBLE, MPI_INT};
	return std::nullopt;
}

// The predefined types `type` is made of (MPI_Type_get_envelope and
// _get_contents, recursively); false when a level cannot be read.
bool collect_basic_types(MPI_Datatype type, std::vector<MPI_Datatype>& out, int depth = 0)
{
	int integers = 0, addresses = 0, datatypes = 0, combiner = 0;
	if (depth > 32 ||
	    PMPI_Type_get_envelope(type, &integers, &addresses, &datatypes, &combiner) != MPI_SUCCESS)
		return false;
	if (combiner == MPI_COMBINER_NAMED) {
		// The pair types of MINLOC and MAXLOC are named, yet their
		// signature is their two members: another rank may pass those.
		if (const auto members = pair_members(type)) {
			out.push_back(members->first);
			out.push_back(members->second);
		} else {
			out.push_back(type);
		}
		return true;
	}
	std::vector<int> ints(size_t(integers) + 1);
	std::vector<MPI_Aint> addrs(size_t(addresses) + 1);
	std::vector<MPI_Datatype> types(size_t(datatypes) + 1);
	if (PMPI_Type_get_contents(type, integers, addresses, datatypes, ints.data(), addrs.data(),
				   types.data()) != MPI_SUCCESS)
		return false;
	bool ok = true;
	for (int i = 0; i < datatypes; i++) {
		ok = ok && collect_basic_types(types[size_t(i)], out, depth + 1);
		int ni = 0, na = 0, nd = 0, c = 0;
		PMPI_Type_get_envelope(types[size_t(i)], &ni, &na, &nd, &c);
		if (c != MPI_COMBINER_NAMED)
			PMPI_Type_free(&types[size_t(i)]);
	}
	return ok;
}

} // namespace

std::optional<Layout> layout_of(MPI_Datatype type, long long count)
{
	if (count < 0 || type == MPI_DATATYPE_NULL)
		return std::nullopt;
	// A predefined type, the common case, is its own single basic type: no
	// walk of its contents (which allocates) on every call.
	if (const std::optional<fi_datatype> dtype = datatype_of(type)) {
		int size = 0;
		if (PMPI_Type_size(type, &size) != MPI_SUCCESS || size <= 0 ||
		    size_t(count) > size_t(INT_MAX))
			return std::nullopt;
		return Layout{*dtype, type, size_t(size), size_t(count), true};
	}
	std::vector<MPI_Datatype> basics;
	if (!collect_basic_types(type, basics) || basics.empty())
		return std::nullopt;
	for (MPI_Datatype b : basics)
		if (b != basics.front())
			return std::nullopt; // a signature of mixed types: not one fi_datatype
	const std::optional<fi_datatype> dtype = datatype_of(basics.front());
	int size = 0, basic_size = 0;
	if (!dtype || PMPI_Type_size(type, &size) != MPI_SUCCESS ||
	    PMPI_Type_size(basics.front(), &basic_size) != MPI_SUCCESS || basic_size <= 0)
		return std::nullopt;
	Layout l;
	l.dtype = *dtype;
	l.basic = basics.front();
	l.basic_size = size_t(basic_size);
	l.elements = size_t(count) * size_t(size) / size_t(basic_size);
	l.dense = basics.size() == 1 && basics.front() == type;
	// The staging copies count in int. The limit holds whether this rank's
	// layout is dense or not: every rank must decide alike.
	if (l.elements > size_t(INT_MAX))
		return std::nullopt;
	return l;
}

uint64_t bytes_of(const Layout& l) { return l.elements * l.basic_size; }

namespace {

// Whether MPI_Pack's form of data is its bytes and nothing else (no header,
// no portable encoding), as in Open MPI and MPICH on one architecture. The
// same on every rank of a job.
bool packs_plainly()
{
	static const bool plain = [] {
		int of_byte = 0, of_int = 0;
		return PMPI_Pack_size(1, MPI_BYTE, MPI_COMM_SELF, &of_byte) == MPI_SUCCESS &&
		       PMPI_Pack_size(1, MPI_INT, MPI_COMM_SELF, &of_int) == MPI_SUCCESS &&
		       of_byte == 1 && of_int == int(sizeof(int));
	}();
	return plain;
}

} // namespace

std::optional<Layout> moved_layout_of(MPI_Datatype type, long long count)
{
	int size = 0;
	if (count < 0 || type == MPI_DATATYPE_NULL || PMPI_Type_size(type, &size) != MPI_SUCCESS ||
	    size < 0)
		return std::nullopt;
	// One limit whichever layout a rank's datatype gives (MPI_Pack counts
	// in int): on the signature's bytes, which every rank computes alike.
	const long long bytes = count * size;
	if (bytes > INT_MAX)
		return std::nullopt;
	if (std::optional<Layout> typed = layout_of(type, count))
		return typed;
	if (!packs_plainly())
		return std::nullopt;
	int integers = 0, addresses = 0, datatypes = 0, combiner = 0;
	MPI_Aint lb = 0, extent = 0;
	PMPI_Type_get_envelope(type, &integers, &addresses, &datatypes, &combiner);
	PMPI_Type_get_extent(type, &lb, &extent);
	Layout l;
	l.dtype = FI_UINT8;
	l.basic = MPI_PACKED;
	l.basic_size = 1;
	l.elements = size_t(bytes);
	// A predefined type without gaps is its packed bytes already.
	l.dense = combiner == MPI_COMBINER_NAMED && lb == 0 && extent == size;
	return l;
}

namespace {

// Each copy's own tag: threads of an MPI_THREAD_MULTIPLE job stage at once
// on the one communicator, and must not receive each other's data.
int staging_tag()
{
	static std::atomic<unsigned> next = 0;
	return int(next.fetch_add(1, std::memory_order_relaxed) % 32768); // MPI_TAG_UB >= 32767
}

} // namespace

const void* Staging::gather(const void* buf, int count, MPI_Datatype type, const Layout& l)
{
	if (l.dense)
		return buf;
	in_.resize(l.elements * l.basic_size);
	if (l.basic == MPI_PACKED) {
		int position = 0;
		PMPI_Pack(buf, count, type, in_.data(), int(in_.size()), &position, MPI_COMM_SELF);
		return in_.data();
	}
	const int tag = staging_tag();
	PMPI_Sendrecv(buf, count, type, 0, tag, in_.data(), int(l.elements), l.basic, 0, tag,
		      staging_comm(), MPI_STATUS_IGNORE);
	return in_.data();
}

const void* Staging::copy(const void* buf, int count, MPI_Datatype type, const Layout& l)
{
	if (!l.dense)
		return gather(buf, count, type, l);
	in_.resize(l.elements * l.basic_size);
	if (!in_.empty())
		std::memcpy(in_.data(), buf, in_.size());
	return in_.data();
}

void* Staging::result(void* buf, const Layout& l)
{
	if (l.dense)
		return buf;
	out_.resize(l.elements * l.basic_size);
	return out_.data();
}

void Staging::scatter(void* buf, int count, MPI_Datatype type, const Layout& l)
{
	if (l.dense)
		return;
	if (l.basic == MPI_PACKED) {
		int position = 0;
		PMPI_Unpack(out_.data(), int(out_.size()), &position, buf, count, type,
			    MPI_COMM_SELF);
		return;
	}
	const int tag = staging_tag();
	PMPI_Sendrecv(out_.data(), int(l.elements), l.basic, 0, tag, buf, count, type, 0, tag,
		      staging_comm(), MPI_STATUS_IGNORE);
}

} // namespace rcoll::mpi
