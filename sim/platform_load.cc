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
#include <set>
#include <vector>

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

int sim_platform_seal(const char *what, char *err, size_t err_len)
{
	try {
		simgrid::s4u::Engine::get_instance()->run_until(0);
	} catch (const std::exception &e) {
		std::snprintf(err, err_len, "%s: %s", what, e.what());
		return -EINVAL;
	}
	return 0;
}

namespace
{

using simgrid::s4u::Host;

// SimGrid's own checks on a route, before a comm takes it: an exception (no gateway, no route
// in a Floyd or Dijkstra zone), or no link and no latency (a pair a Full zone left out), which
// its network model refuses with an abort when a message is sent.
bool route_try(const Host *a, const Host *b, const char *what, char *err, size_t err_len)
{
	std::vector<simgrid::s4u::Link *> links;
	double latency = 0;
	try {
		a->route_to(b, links, &latency);
	} catch (const std::exception &e) {
		std::snprintf(err, err_len, "%s: no route from '%s' to '%s' (SimGrid: %s)", what,
			      a->get_cname(), b->get_cname(), e.what());
		return false;
	}
	if (links.empty() && latency <= 0) {
		std::snprintf(err, err_len,
			      "%s: no route from '%s' to '%s' (no link between them: give them "
			      "a <route>)",
			      what, a->get_cname(), b->get_cname());
		return false;
	}
	return true;
}

// Both ways between every host and one host of every zone: a zone's gateways and the
// routes between zones are what a platform file most often gets wrong.
bool routes_by_zone(Host *const *hosts, size_t n, const char *what, char *err, size_t err_len)
{
	std::set<const simgrid::s4u::NetZone *> seen;
	std::vector<const Host *> firsts;
	for (size_t i = 0; i < n; i++)
		if (seen.insert(hosts[i]->get_englobing_zone()).second)
			firsts.push_back(hosts[i]);
	for (size_t i = 0; i < n; i++)
		for (const Host *f : firsts)
			if (!route_try(hosts[i], f, what, err, err_len) ||
			    !route_try(f, hosts[i], what, err, err_len))
				return false;
	return true;
}

} // namespace

int sim_routes_check(void *const *hosts_in, size_t n, size_t all_pairs_max, const char *what,
		     char *err, size_t err_len)
{
	Host *const *hosts = reinterpret_cast<Host *const *>(hosts_in);
	bool ok = true;
	if (n <= all_pairs_max) { // a host to itself too: keel-sim sends those
		for (size_t i = 0; i < n && ok; i++)
			for (size_t j = 0; j < n && ok; j++)
				ok = route_try(hosts[i], hosts[j], what, err, err_len);
		return ok ? 0 : -EINVAL;
	}
	// The ring's neighbours and the first and last ranks (the routes keel-sim's models read
	// before the run; the ring carries most of the data), each host to itself, then zones.
	for (size_t i = 0; i < n && ok; i++) {
		const Host *next = hosts[(i + 1) % n];
		ok = route_try(hosts[i], next, what, err, err_len) &&
		     route_try(next, hosts[i], what, err, err_len) &&
		     route_try(hosts[i], hosts[i], what, err, err_len);
	}
	ok = ok && route_try(hosts[0], hosts[n - 1], what, err, err_len) &&
	     routes_by_zone(hosts, n, what, err, err_len);
	return ok ? 0 : -EINVAL;
}
