#include "offload.hpp"

#include <array>
#include <atomic>
#include <climits>
#include <cstdint>
#include <cstring>
#include <iterator>
#include <tuple>
#include <type_traits>
#include <utility>
#include <vector>

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

template <class Handle>
uintptr_t key_of(Handle type)
{
	if constexpr (std::is_pointer_v<Handle>)
		return reinterpret_cast<uintptr_t>(type); // Open MPI: an object's address
	else
		return uintptr_t(static_cast<unsigned>(type)); // MPICH: an int handle
}

// Open addressing, at most a quarter full: a probe rarely goes past its slot.
constexpr unsigned kSlotBits = 7;
using PredefinedTable = std::array<Predefined, size_t(1) << kSlotBits>;

size_t slot_of(uintptr_t key)
{
	return size_t((uint64_t(key) * 0x9e3779b97f4a7c15ULL) >>
		      (64 - kSlotBits)); // Fibonacci hashing
}

PredefinedTable make_predefined_table()
{
	// Fixed-width types, then the C types by their size here. MPI_CHAR
	// (not a reduction type for MPI), MPI_LONG_DOUBLE and the pair types
	// of MINLOC/MAXLOC stay with the MPI.
	const std::pair<MPI_Datatype, fi_datatype> named[] = {
		{MPI_INT8_T, FI_INT8},
		{MPI_UINT8_T, FI_UINT8},
		{MPI_INT16_T, FI_INT16},
		{MPI_UINT16_T, FI_UINT16},
		{MPI_INT32_T, FI_INT32},
		{MPI_UINT32_T, FI_UINT32},
		{MPI_INT64_T, FI_INT64},
		{MPI_UINT64_T, FI_UINT64},
		{MPI_SIGNED_CHAR, FI_INT8},
		{MPI_UNSIGNED_CHAR, FI_UINT8},
		{MPI_BYTE, FI_UINT8},
		{MPI_SHORT, integer_of(sizeof(short), true)},
		{MPI_UNSIGNED_SHORT, integer_of(sizeof(unsigned short), false)},
		{MPI_INT, integer_of(sizeof(int), true)},
		{MPI_UNSIGNED, integer_of(sizeof(unsigned), false)},
		{MPI_LONG, integer_of(sizeof(long), true)},
		{MPI_UNSIGNED_LONG, integer_of(sizeof(unsigned long), false)},
		{MPI_LONG_LONG, integer_of(sizeof(long long), true)},
		{MPI_LONG_LONG_INT, integer_of(sizeof(long long), true)},
		{MPI_UNSIGNED_LONG_LONG, integer_of(sizeof(unsigned long long), false)},
		{MPI_FLOAT, FI_FLOAT},
		{MPI_DOUBLE, FI_DOUBLE},
		{MPI_C_FLOAT_COMPLEX, FI_FLOAT_COMPLEX},
		{MPI_C_COMPLEX, FI_FLOAT_COMPLEX},
		{MPI_C_DOUBLE_COMPLEX, FI_DOUBLE_COMPLEX},
	};
	static_assert(std::size(named) * 4 <= std::tuple_size_v<PredefinedTable>);
	PredefinedTable table{};
	for (const auto& [type, dtype] : named) {
		int size = 0;
		const uintptr_t key = key_of(type);
		if (type == MPI_DATATYPE_NULL || key == 0 ||
		    PMPI_Type_size(type, &size) != MPI_SUCCESS || size <= 0)
			continue;
		size_t slot = slot_of(key);
		// Aliases (MPI_LONG_LONG_INT, MPI_C_COMPLEX) may share a handle.
		while (table[slot].key != 0 && table[slot].key != key)
			slot = (slot + 1) % table.size();
		table[slot] = {key, dtype, size};
	}
	return table;
}

} // namespace

// The predefined types libfabric has a datatype for, by handle: one probe of
// a hash table per argument, where a chain of comparisons and a
// PMPI_Type_size per argument cost a handed-back 8 B allgather a tenth of its
// time (and a binary search, a chain of dependent loads, still a twentieth).
// Predefined handles live as long as the MPI, so the table never goes stale.
const Predefined* predefined(MPI_Datatype type)
{
	static const PredefinedTable table = make_predefined_table();
	const uintptr_t key = key_of(type);
	for (size_t slot = slot_of(key);; slot = (slot + 1) % table.size()) {
		if (table[slot].key == key && key != 0)
			return &table[slot];
		if (table[slot].key == 0)
			return nullptr;
	}
}

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
	if (depth > 32 || PMPI_Type_get_envelope(type, &integers, &addresses, &datatypes,
						 &combiner) != MPI_SUCCESS)
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

std::optional<Layout> derived_layout_of(MPI_Datatype type, long long count)
{
	if (count < 0 || type == MPI_DATATYPE_NULL)
		return std::nullopt;
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
	// Nothing to copy is dense too.
	l.dense = (basics.size() == 1 && basics.front() == type) || l.elements == 0;
	// The staging copies count in int. The limit holds whether this rank's
	// layout is dense or not: every rank must decide alike.
	if (l.elements > size_t(INT_MAX))
		return std::nullopt;
	return l;
}

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

std::optional<Layout> derived_moved_layout_of(MPI_Datatype type, long long count)
{
	// One limit whichever layout a rank's datatype gives (MPI_Pack counts
	// in int): on the signature's bytes, which every rank computes alike.
	int size = 0;
	if (count < 0 || type == MPI_DATATYPE_NULL || PMPI_Type_size(type, &size) != MPI_SUCCESS ||
	    size < 0)
		return std::nullopt;
	long long bytes = 0; // count may be p blocks' worth: far above INT_MAX
	if (__builtin_mul_overflow(count, (long long)size, &bytes) || bytes > INT_MAX)
		return std::nullopt;
	if (std::optional<Layout> typed = derived_layout_of(type, count))
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
	// A predefined type without gaps is its packed bytes already; nothing
	// to copy is dense too.
	l.dense = (combiner == MPI_COMBINER_NAMED && lb == 0 && extent == size) || bytes == 0;
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

const void* Staging::stage_in(const void* buf, int count, MPI_Datatype type, const Layout& l)
{
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
		return stage_in(buf, count, type, l);
	in_.resize(l.elements * l.basic_size);
	if (!in_.empty())
		std::memcpy(in_.data(), buf, in_.size());
	return in_.data();
}

void* Staging::stage_out(const Layout& l)
{
	out_.resize(l.elements * l.basic_size);
	return out_.data();
}

void Staging::unstage(void* buf, int count, MPI_Datatype type, const Layout& l)
{
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
