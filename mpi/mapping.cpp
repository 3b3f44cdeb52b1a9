#include "offload.hpp"

#include <climits>
#include <cstdint>

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
