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
#include <string>
#include <sys/mman.h>
#include <sys/wait.h>
#include <unistd.h>
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

// Where a child process checking the routes says how far it got (shared with its parent):
// SimGrid ends a process with an abort on some platforms, not with an exception.
struct route_probe {
	char from[128], to[128];
	char err[640];
};
route_probe *probe;

// SimGrid's own checks on a route, before a comm takes it: an exception (no gateway, no route
// in a Floyd or Dijkstra zone), or no link and no latency (a pair a Full zone left out), which
// its network model refuses with an abort when a message is sent.
bool route_try(const Host *a, const Host *b, const char *what, char *err, size_t err_len)
{
	std::vector<simgrid::s4u::Link *> links;
	double latency = 0;
	if (probe != nullptr) {
		std::snprintf(probe->from, sizeof(probe->from), "%s", a->get_cname());
		std::snprintf(probe->to, sizeof(probe->to), "%s", b->get_cname());
	}
	try {
		a->route_to(b, links, &latency);
	} catch (const std::exception &e) {
		std::snprintf(err, err_len, "%s: no route from '%s' to '%s' (SimGrid: %s)", what,
			      a->get_cname(), b->get_cname(), e.what());
		return false;
	}
	for (const simgrid::s4u::Link *l : links)
		if (l->get_sharing_policy() == simgrid::s4u::Link::SharingPolicy::WIFI) {
			std::snprintf(err, err_len,
				      "%s: the route from '%s' to '%s' takes the WIFI link '%s', "
				      "which keel-sim does not model",
				      what, a->get_cname(), b->get_cname(), l->get_cname());
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

// Every route sim_routes_check asks for, in this process: false with the message in err.
static bool routes_check_all(Host *const *hosts, size_t n, size_t all_pairs_max, const char *what,
			     char *err, size_t err_len)
{
	bool ok = true;
	if (n <= all_pairs_max) { // a host to itself too: keel-sim sends those
		for (size_t i = 0; i < n && ok; i++)
			for (size_t j = 0; j < n && ok; j++)
				ok = route_try(hosts[i], hosts[j], what, err, err_len);
		return ok;
	}
	// The ring's neighbours and the first and last ranks (the routes keel-sim's models read
	// before the run; the ring carries most of the data), each host to itself, then zones.
	for (size_t i = 0; i < n && ok; i++) {
		const Host *next = hosts[(i + 1) % n];
		ok = route_try(hosts[i], next, what, err, err_len) &&
		     route_try(next, hosts[i], what, err, err_len) &&
		     route_try(hosts[i], hosts[i], what, err, err_len);
	}
	return ok && route_try(hosts[0], hosts[n - 1], what, err, err_len) &&
	       routes_by_zone(hosts, n, what, err, err_len);
}

// SimGrid's first CRITICAL line in a process's stderr (what its assertion said), bare.
static std::string critical_line(const std::string &out)
{
	const std::string tag = "/CRITICAL] ";
	size_t k = out.find(tag);
	if (k == std::string::npos)
		return "it aborted";
	k += tag.size();
	std::string line = out.substr(k, out.find('\n', k) - k);
	size_t at = line.rfind(" (0x"); // an object's address: noise to a reader
	return at != std::string::npos && line.back() == ')' ? line.substr(0, at) : line;
}

// The child's side: its stderr (SimGrid's report, backtrace included) goes to the parent.
[[noreturn]] static void routes_child(int out_fd, Host *const *hosts, size_t n, size_t all_pairs,
				      const char *what)
{
	dup2(out_fd, 2);
	close(out_fd);
	bool ok = routes_check_all(hosts, n, all_pairs, what, probe->err, sizeof(probe->err));
	_exit(ok ? 0 : 1);
}

int sim_routes_check(void *const *hosts_in, size_t n, size_t all_pairs_max, const char *what,
		     char *err, size_t err_len)
{
	Host *const *hosts = reinterpret_cast<Host *const *>(hosts_in);
	void *mem = mmap(nullptr, sizeof(route_probe), PROT_READ | PROT_WRITE,
			 MAP_SHARED | MAP_ANONYMOUS, -1, 0);
	int fds[2];
	if (mem == MAP_FAILED || pipe(fds) != 0) // checked here then, without the abort guard
		return routes_check_all(hosts, n, all_pairs_max, what, err, err_len) ? 0 : -EINVAL;
	probe = new (mem) route_probe();
	std::fflush(nullptr);
	pid_t pid = fork();
	if (pid == 0) {
		close(fds[0]);
		routes_child(fds[1], hosts, n, all_pairs_max, what);
	}
	close(fds[1]);
	std::string out;
	char buf[4096];
	for (ssize_t got; (got = read(fds[0], buf, sizeof(buf))) != 0;)
		if (got > 0)
			out.append(buf, static_cast<size_t>(got));
		else if (errno != EINTR)
			break;
	close(fds[0]);
	int status = 0;
	int rc = pid > 0 && waitpid(pid, &status, 0) == pid ? 0 : -ECHILD;
	if (rc == 0 && WIFEXITED(status) && WEXITSTATUS(status) == 1) {
		std::snprintf(err, err_len, "%s", probe->err);
		rc = -EINVAL;
	} else if (rc == 0 && !(WIFEXITED(status) && WEXITSTATUS(status) == 0)) {
		std::snprintf(err, err_len,
			      "%s: SimGrid cannot compute the route from '%s' to '%s': %s", what,
			      probe->from, probe->to, critical_line(out).c_str());
		rc = -EINVAL;
	} else if (rc != 0) {
		std::snprintf(err, err_len, "%s: cannot check its routes (fork: %s)", what,
			      std::strerror(errno));
	}
	probe = nullptr;
	munmap(mem, sizeof(route_probe));
	return rc;
}

extern "C" void sim_host_off_watch(void (*off)(sg_host_t host))
{
	simgrid::s4u::Host::on_state_change.connect([off](simgrid::s4u::Host const &h) {
		if (!h.is_on())
			off(const_cast<simgrid::s4u::Host *>(&h));
	});
}
