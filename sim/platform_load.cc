// Loading a SimGrid platform file with SimGrid's own parser, then asking the engine what it
// made. C++ only to catch SimGrid's exceptions (simgrid::ParseError names file:line), which
// would otherwise abort keel-sim.
#include <simgrid/Exception.hpp>
#include <simgrid/s4u/Engine.hpp>
#include <simgrid/s4u/Host.hpp>
#include <simgrid/s4u/Link.hpp>

#include <cerrno>
#include <cstdio>
#include <cstring>
#include <exception>

#include "platform_load.h"

int sim_platform_load(const char *path, char *err, size_t err_len)
{
	try {
		simgrid::s4u::Engine::get_instance()->load_platform(path);
	} catch (const simgrid::ParseError &e) {
		std::snprintf(err, err_len, "%s", e.what());
		return -EINVAL;
	} catch (const std::exception &e) {
		std::snprintf(err, err_len, "platform file '%s': %s", path, e.what());
		return -EINVAL;
	}
	return 0;
}

int sim_platform_open(const char *path, char *err, size_t err_len)
{
	std::FILE *f = std::fopen(path, "r");
	if (f == nullptr) {
		std::snprintf(err, err_len, "platform file '%s': %s", path, std::strerror(errno));
		return -EINVAL;
	}
	std::fclose(f);
	return sim_platform_load(path, err, err_len);
}

int sim_platform_describe(const char *path, std::FILE *out, char *err, size_t err_len)
{
	int rc = sim_platform_open(path, err, err_len);
	if (rc != 0)
		return rc;
	const simgrid::s4u::Engine *e = simgrid::s4u::Engine::get_instance();
	if (e->get_host_count() == 0) { // get_all_hosts would abort ("There is no host!")
		std::snprintf(err, err_len, "platform file '%s' has 0 hosts", path);
		return -EINVAL;
	}
	std::vector<simgrid::s4u::Host *> hosts = e->get_all_hosts();
	std::vector<simgrid::s4u::Link *> links = e->get_all_links();
	std::fprintf(out, "platform %s: %zu hosts, %zu links\n", path, hosts.size(), links.size());
	for (const simgrid::s4u::Host *h : hosts)
		std::fprintf(out, "host %s %.6e flops %d cores\n", h->get_cname(), h->get_speed(),
			     h->get_core_count());
	for (const simgrid::s4u::Link *l : links)
		std::fprintf(out, "link %s %.6e Bps %.6e s\n", l->get_cname(), l->get_bandwidth(),
			     l->get_latency());
	return 0;
}
