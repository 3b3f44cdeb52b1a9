#include "secret.hpp"

#include <sys/random.h>

#include <random>

namespace rcoll {

uint64_t unguessable_u64()
{
	uint64_t value = 0;
	while (value == 0) {
		if (getrandom(&value, sizeof(value), 0) != ssize_t(sizeof(value))) {
			std::random_device device; // also the kernel's source, by another door
			value = uint64_t(device()) << 32 | device();
		}
	}
	return value;
}

} // namespace rcoll
