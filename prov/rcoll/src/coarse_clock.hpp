// A clock for the millisecond timeouts and intervals checked on every
// progress call: the kernel's coarse monotonic clock costs a few
// nanoseconds to read (steady_clock, a few dozen, which a sub-microsecond
// collective notices), at the price of ticks of 1-4 ms.
#pragma once

#include <time.h>

#include <chrono>

namespace rcoll {

struct CoarseClock {
	using duration = std::chrono::nanoseconds;
	using rep = duration::rep;
	using period = duration::period;
	using time_point = std::chrono::time_point<CoarseClock>;
	static constexpr bool is_steady = true;

	static time_point now() noexcept
	{
		timespec ts{};
		clock_gettime(CLOCK_MONOTONIC_COARSE, &ts);
		return time_point(std::chrono::seconds(ts.tv_sec) + duration(ts.tv_nsec));
	}
};

// The time, read on first use only: a progress call that finds everything
// moving needs no clock.
class LazyNow {
public:
	CoarseClock::time_point operator()() noexcept
	{
		if (!read_) {
			now_ = CoarseClock::now();
			read_ = true;
		}
		return now_;
	}

private:
	CoarseClock::time_point now_{};
	bool read_ = false;
};

} // namespace rcoll
