// C++ only to catch an exception (like sim/comm_wait.cc): see sim/actor_guard.h.
#include <simgrid/Exception.hpp>
#include <simgrid/s4u/Actor.hpp>

#include <boost/core/demangle.hpp>
#include <cstdio>
#include <exception>
#include <string>
#include <typeinfo>
#include <unistd.h>

#include "actor_guard.h"

static std::string guard_what = "the platform";

extern "C" void sim_actor_guard_name(const char *what)
{
	guard_what = what;
}

extern "C" void sim_actor_start_guarded(sg_actor_t actor, void (*code)(int, char **))
{
	actor->start([code]() {
		// A ForcefulKillException (the actor's host turned off, or the end) is no
		// std::exception: it goes on to SimGrid, as it must.
		try {
			code(0, nullptr);
		} catch (const std::exception &e) {
			std::fprintf(stderr, "keel-sim: %s: the simulation stopped: %s: %s\n",
				     guard_what.c_str(),
				     boost::core::demangle(typeid(e).name()).c_str(), e.what());
			std::fflush(stderr);
			_exit(2);
		}
	});
}
