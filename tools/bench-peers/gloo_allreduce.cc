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

// One algorithm at one size; returns the median (us), adds wrong elements to *wrong.
double run_algo(const Ctx &ctx, const peer_opts &o, const std::string &name, Bufs &b, size_t count,
		double *wrong)
{
	Setup s = make_algo(name, ctx, b.in.data(), b.buf.data(), b.out.data(), count);
	float *res = s.in_place ? b.buf.data() : b.out.data();
	for (uint32_t i = 0; i < o.warmup; i++) {
		if (s.in_place)
			std::memcpy(b.buf.data(), b.in.data(), count * sizeof(float));
		s.call();
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

int bench(const peer_opts &o, const std::vector<std::string> &algos, const Ctx &ctx)
{
	size_t cap = (size_t)(o.max_bytes / sizeof(float));
	Bufs b{std::vector<float>(cap), std::vector<float>(cap), std::vector<float>(cap),
	       std::vector<double>(o.iters)};
	if (ctx->rank == 0)
		peer_print_header("gloo-allreduce (tcp, loopback)", (uint32_t)ctx->size, &o);
	double wrong_total = 0;
	std::vector<double> best_sorted(o.iters);
	for (uint64_t bytes = o.min_bytes; bytes <= o.max_bytes; bytes *= o.factor) {
		size_t count = (size_t)(bytes / sizeof(float));
		peer_fill(b.in.data(), count, (uint32_t)ctx->rank);
		double best = -1, wrong = 0;
		std::string best_name, each;
		for (const std::string &name : algos) {
			double med = run_algo(ctx, o, name, b, count, &wrong);
			char one[96];
			std::snprintf(one, sizeof(one), " %s %.2f", name.c_str(), med);
			each += one;
			if (best < 0 || med < best) {
				best = med;
				best_name = name;
				best_sorted = b.t;
			}
		}
		wrong_total += wrong;
		if (ctx->rank == 0) {
			std::printf("# %llu B, median (us) per algorithm:%s\n",
				    (unsigned long long)bytes, each.c_str());
			peer_print_row(bytes, count, o.iters, best, best_sorted.data(), (long)wrong,
				       best_name.c_str());
		}
	}
	if (ctx->rank == 0)
		peer_print_footer((long)wrong_total);
	return wrong_total == 0 ? 0 : 1;
}

} // namespace

int main(int argc, char **argv)
{
	peer_opts o;
	if (peer_parse_opts(argc, argv, "gloo-allreduce", &o) != 0)
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
