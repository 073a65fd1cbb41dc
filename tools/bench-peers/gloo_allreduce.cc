// gloo-allreduce: Gloo's AllreduceRing, RingChunked, HalvingDoubling, Bcube and gloo::allreduce
// over its TCP transport on loopback, f32 sum, timed as keel-bench --median times keel (each
// iteration alone, slowest rank per iteration, median) and checked exactly; the best algorithm
// per size is the row, each algorithm's median a comment. Peer benchmark for
// tools/bench-peers.sh; never linked into keel.
//   keel-run -n 2 -- gloo-allreduce -s STORE_DIR [-a ALGOS] [-b MIN] [-e MAX] [-f F] [-n N]
// Ranks from RANK/WORLD_SIZE (keel-run, torchrun) or OMPI_COMM_WORLD_RANK/SIZE (mpirun).
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <exception>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "gloo/allreduce.h"
#include "gloo/allreduce_bcube.h"
#include "gloo/allreduce_halving_doubling.h"
#include "gloo/allreduce_ring.h"
#include "gloo/allreduce_ring_chunked.h"
#include "gloo/barrier_all_to_all.h"
#include "gloo/math.h"
#include "gloo/rendezvous/context.h"
#include "gloo/rendezvous/file_store.h"
#include "gloo/transport/tcp/device.h"

#include "peer_common.h"

namespace
{

using Ctx = std::shared_ptr<gloo::Context>;

// One algorithm set up for one size: `call` runs one AllReduce. The algorithm classes reduce in
// place (into buf, refilled from the input before each call, outside the timed region);
// gloo::allreduce reads in and writes out.
struct Setup {
	std::function<void()> call;
	bool in_place;
};

template <typename A> Setup algo_class(const Ctx &ctx, float *buf, size_t count)
{
	auto a = std::make_shared<A>(ctx, std::vector<float *>{buf}, (int)count);
	return Setup{[a] { a->run(); }, true};
}

Setup algo_function(const Ctx &ctx, gloo::AllreduceOptions::Algorithm which, float *in, float *out,
		    size_t count)
{
	auto opts = std::make_shared<gloo::AllreduceOptions>(ctx);
	opts->setAlgorithm(which);
	opts->setInput(in, count);
	opts->setOutput(out, count);
	opts->setReduceFunction(
	    [](void *c, const void *a, const void *b, size_t n) { gloo::sum<float>(c, a, b, n); });
	return Setup{[opts] { gloo::allreduce(*opts); }, false};
}

const char *const ALGOS[] = {"ring",  "ring_chunked",	"halving_doubling",
			     "bcube", "allreduce_ring", "allreduce_bcube"};

Setup make_algo(const std::string &name, const Ctx &ctx, float *in, float *buf, float *out,
		size_t count)
{
	if (name == "ring")
		return algo_class<gloo::AllreduceRing<float>>(ctx, buf, count);
	if (name == "ring_chunked")
		return algo_class<gloo::AllreduceRingChunked<float>>(ctx, buf, count);
	if (name == "halving_doubling")
		return algo_class<gloo::AllreduceHalvingDoubling<float>>(ctx, buf, count);
	if (name == "bcube")
		return algo_class<gloo::AllreduceBcube<float>>(ctx, buf, count);
	if (name == "allreduce_ring")
		return algo_function(ctx, gloo::AllreduceOptions::Algorithm::RING, in, out, count);
	return algo_function(ctx, gloo::AllreduceOptions::Algorithm::BCUBE, in, out, count);
}

// The slowest rank of each iteration (in place in t), after the timed loop.
void max_across(const Ctx &ctx, double *t, uint32_t n)
{
	gloo::AllreduceRing<double> a(ctx, std::vector<double *>{t}, (int)n,
				      gloo::ReductionFunction<double>::max);
	a.run();
}

double sum_across(const Ctx &ctx, double v)
{
	gloo::AllreduceRing<double> a(ctx, std::vector<double *>{&v}, 1);
	a.run();
	return v;
}

struct Bufs {
	std::vector<float> in, buf, out;
	std::vector<double> t;
};

// An algorithm this many times slower than the best at a size is not measured at larger ones:
// on 2 cores with 4 ranks gloo::allreduce's ring takes seconds per call from 1 MiB up (hundreds
// of times the best), which alone would exceed a bench's time limit. Within a size, one whose
// second warm-up call (the first sets up connections) is PROBE_FACTOR x the best median so far
// is skipped: a single call is noisier than a median. Either only when the call also takes over
// SLOW_US: pruning saves time, and on a busy machine a fast algorithm can look 16x slow once.
constexpr double DROP_FACTOR = 16.0;
constexpr double PROBE_FACTOR = 32.0;
constexpr double SLOW_US = 50000.0;

// One algorithm at one size; returns the median (us), adds wrong elements to *wrong. Its second
// warm-up call is timed (slowest rank): above limit_us (when > 0) the algorithm is not measured
// further, *skipped is set and that time returned. Every rank sees the same maxima, so all
// decide alike.
double run_algo(const Ctx &ctx, const peer_opts &o, const std::string &name, Bufs &b, size_t count,
		double limit_us, double *wrong, bool *skipped)
{
	Setup s = make_algo(name, ctx, b.in.data(), b.buf.data(), b.out.data(), count);
	float *res = s.in_place ? b.buf.data() : b.out.data();
	uint32_t warmup = o.warmup > 2 ? o.warmup : 2; // the second is the probe
	uint64_t warm0 = peer_now_ns();
	for (uint32_t i = 0; i < warmup; i++) {
		if (s.in_place)
			std::memcpy(b.buf.data(), b.in.data(), count * sizeof(float));
		uint64_t t0 = peer_now_ns();
		s.call();
		double probe = (double)(peer_now_ns() - t0) / 1e3;
		if (i == 1) {
			max_across(ctx, &probe, 1);
			*skipped = limit_us > 0 && probe > limit_us && probe > SLOW_US;
			if (*skipped) {
				gloo::BarrierAllToAll(ctx).run(); // before its buffers go
				return probe;
			}
		}
	}
	// then rounds until every rank has warmed up for warmup_ms (the time counts from the first
	// call, as in the other programs)
	for (uint64_t w0 = warm0; o.warmup_ms > 0;) {
		double ms = (double)(peer_now_ns() - w0) / 1e6;
		max_across(ctx, &ms, 1);
		if (peer_warm_enough(&o, ms))
			break;
		for (uint32_t i = 0; i < warmup; i++) {
			if (s.in_place)
				std::memcpy(b.buf.data(), b.in.data(), count * sizeof(float));
			s.call();
		}
	}
	peer_poison(res, count);
	gloo::BarrierAllToAll(ctx).run();
	for (uint32_t i = 0; i < o.iters; i++) {
		if (s.in_place)
			std::memcpy(b.buf.data(), b.in.data(), count * sizeof(float));
		uint64_t t0 = peer_now_ns();
		s.call();
		b.t[i] = (double)(peer_now_ns() - t0) / 1e3;
	}
	max_across(ctx, b.t.data(), o.iters);
	*wrong += sum_across(ctx, (double)peer_check(res, count, (uint32_t)ctx->size));
	gloo::BarrierAllToAll(ctx).run(); // no peer still sends into this algorithm's buffers
	return peer_median(b.t.data(), o.iters);
}

int env_int(const char *a, const char *b)
{
	const char *v = std::getenv(a);
	if (v == nullptr)
		v = std::getenv(b);
	return v == nullptr ? -1 : std::atoi(v);
}

std::vector<std::string> algo_list(const char *arg)
{
	std::vector<std::string> out;
	if (arg == nullptr) {
		for (const char *a : ALGOS)
			out.emplace_back(a);
		return out;
	}
	std::string s(arg);
	for (size_t at = 0; at <= s.size();) {
		size_t end = s.find(',', at);
		end = end == std::string::npos ? s.size() : end;
		std::string name = s.substr(at, end - at);
		bool known = false;
		for (const char *a : ALGOS)
			known |= name == a;
		if (!known)
			throw std::runtime_error("unknown algorithm '" + name + "'");
		out.push_back(name);
		at = end + 1;
	}
	return out;
}

Ctx connect(const peer_opts &o, int rank, int size)
{
	gloo::transport::tcp::attr attr;
	attr.hostname = "127.0.0.1"; // loopback, like Open MPI's btl_tcp_if_include lo
	attr.ai_family = AF_INET;
	auto dev = gloo::transport::tcp::CreateDevice(attr);
	gloo::rendezvous::FileStore store(o.store);
	auto ctx = std::make_shared<gloo::rendezvous::Context>(rank, size);
	ctx->setTimeout(std::chrono::seconds(60));
	ctx->connectFullMesh(store, dev);
	return ctx;
}

// One size: every live algorithm, the best kept; those over DROP_FACTOR x the best leave `live`
// (larger sizes only get slower). Returns the wrong elements seen.
double bench_size(const Ctx &ctx, const peer_opts &o, Bufs &b, uint64_t bytes,
		  std::vector<std::string> &live)
{
	size_t count = (size_t)(bytes / sizeof(float));
	peer_fill(b.in.data(), count, (uint32_t)ctx->rank);
	double best = -1, wrong = 0;
	std::string best_name, each, dropped;
	std::vector<double> best_sorted(o.iters), med(live.size());
	std::vector<bool> skipped(live.size());
	for (size_t a = 0; a < live.size(); a++) {
		bool skip = false;
		med[a] = run_algo(ctx, o, live[a], b, count, best > 0 ? PROBE_FACTOR * best : 0,
				  &wrong, &skip);
		skipped[a] = skip;
		char one[128];
		std::snprintf(one, sizeof(one), " %s %s%.2f", live[a].c_str(),
			      skip ? "skipped, one call " : "", med[a]);
		each += one;
		if (!skip && (best < 0 || med[a] < best)) {
			best = med[a];
			best_name = live[a];
			best_sorted = b.t;
		}
	}
	std::vector<std::string> keep;
	for (size_t a = 0; a < live.size(); a++) {
		if (skipped[a] || (med[a] > DROP_FACTOR * best && med[a] > SLOW_US))
			dropped += (dropped.empty() ? "" : ",") + live[a];
		else
			keep.push_back(live[a]);
	}
	live = keep;
	if (ctx->rank == 0) {
		std::printf("# %llu B, median (us) per algorithm:%s\n", (unsigned long long)bytes,
			    each.c_str());
		std::string left;
		for (const std::string &name : keep)
			left += (left.empty() ? "" : ",") + name;
		if (!dropped.empty()) // tools/bench-peers.sh passes `left` on to the next size
			std::printf("# dropped: %s (over %.0fx the best and %.0f ms); left: %s\n",
				    dropped.c_str(), DROP_FACTOR, SLOW_US / 1e3, left.c_str());
		peer_print_row(bytes, count, o.iters, best, best_sorted.data(), (long)wrong,
			       best_name.c_str());
	}
	return wrong;
}

int bench(const peer_opts &o, const std::vector<std::string> &algos, const Ctx &ctx)
{
	size_t cap = (size_t)(o.max_bytes / sizeof(float));
	Bufs b{std::vector<float>(cap), std::vector<float>(cap), std::vector<float>(cap),
	       std::vector<double>(o.iters)};
	if (ctx->rank == 0)
		peer_print_header("gloo-allreduce (tcp, loopback)", (uint32_t)ctx->size, &o);
	double wrong_total = 0;
	std::vector<std::string> live = algos;
	for (uint64_t bytes = o.min_bytes; bytes <= o.max_bytes; bytes *= o.factor)
		wrong_total += bench_size(ctx, o, b, bytes, live);
	if (ctx->rank == 0)
		peer_print_footer((long)wrong_total);
	return wrong_total == 0 ? 0 : 1;
}

} // namespace

int main(int argc, char **argv)
{
	peer_opts o;
	if (peer_parse_opts(argc, argv, "gloo-allreduce", 1u << PEER_ALLREDUCE, &o) != 0)
		return 2;
	int rank = env_int("RANK", "OMPI_COMM_WORLD_RANK");
	int size = env_int("WORLD_SIZE", "OMPI_COMM_WORLD_SIZE");
	if (o.store == nullptr || rank < 0 || size < 1 || rank >= size) {
		std::fprintf(stderr,
			     "gloo-allreduce: needs -s STORE_DIR (an empty folder all ranks "
			     "share) and RANK, WORLD_SIZE from a launcher (keel-run)\n");
		return 2;
	}
	try {
		std::vector<std::string> algos = algo_list(o.algos);
		return bench(o, algos, connect(o, rank, size));
	} catch (const std::exception &e) {
		std::fprintf(stderr, "gloo-allreduce: rank %d: %s\n", rank, e.what());
		return 1;
	}
}
