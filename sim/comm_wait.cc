// C++ only to catch an exception (like sim/platform_load.cc): SimGrid 3.32's C sg_comm_wait_any
// lets a NetworkFailureException escape when any comm in the set fails (its sender's host was
// turned off mid-transfer), which C cannot catch: the simulation aborts. This wrapper catches it
// and says which comm failed, with the same ownership rules as sg_comm_wait_any.
#include <simgrid/Exception.hpp>
#include <simgrid/s4u/Comm.hpp>

#include <vector>

#include "comm_wait.h"

extern "C" ssize_t sim_comm_wait_any(sg_comm_t *comms, size_t count, int *failed)
{
	std::vector<simgrid::s4u::CommPtr> set;
	set.reserve(count);
	for (size_t i = 0; i < count; i++)
		set.emplace_back(comms[i], false); // adopt the caller's reference
	ssize_t done = -1;
	*failed = 0;
	try {
		done = simgrid::s4u::Comm::wait_any(set);
	} catch (const simgrid::NetworkFailureException &) {
		for (size_t i = 0; i < count && done < 0; i++) {
			auto st = set[i]->get_state();
			if (st == simgrid::s4u::Activity::State::FAILED ||
			    st == simgrid::s4u::Activity::State::CANCELED) {
				done = static_cast<ssize_t>(i);
				*failed = 1;
			}
		}
	}
	// The caller keeps every comm but the one that ended (finished or failed).
	for (size_t i = 0; i < count; i++)
		if (done < 0 || static_cast<size_t>(done) != i)
			set[i]->add_ref();
	return done;
}

extern "C" void sim_comm_cancel(sg_comm_t *comms, size_t count)
{
	for (size_t i = 0; i < count; i++) {
		simgrid::s4u::CommPtr comm(comms[i], false); // released here, once cancelled
		comm->cancel();
		comms[i] = nullptr;
	}
}
