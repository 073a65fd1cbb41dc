// gloo-coll: Gloo's other collectives and Send/Recv over its TCP transport on loopback (f32;
// sums; root 0), timed as keel-bench --median times keel (each iteration alone, slowest rank
// per iteration, median) and checked exactly. -o picks the operation: all_gather
// (gloo::allgather), reduce_scatter (ReduceScatterHalvingDoubling, in place: the input is
// copied back before each call, outside the timed region), alltoall (gloo::alltoall),
// pingpong and exchange (unbound buffers between ranks 0 and 1: a send and its answer, half
// the round trip; both ways at once), reduce (gloo::reduce), broadcast (gloo::broadcast),
// barrier (gloo::barrier). AllReduce is gloo-allreduce's. Peer benchmark for
// tools/bench-peers.sh; never linked into keel.
//   keel-run -n 2 -- gloo-coll -s STORE_DIR -o OP [-b MIN] [-e MAX] [-f F] [-n N]
// Ranks from RANK/WORLD_SIZE (keel-run, torchrun) or OMPI_COMM_WORLD_RANK/SIZE (mpirun).
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <exception>
#include <functional>
#include <memory>
#include <stdexcept>
#include <string>
#include <vector>

#include "gloo/allgather.h"
#include "gloo/allreduce_ring.h"
#include "gloo/alltoall.h"
#include "gloo/barrier.h"
#include "gloo/barrier_all_to_all.h"
#include "gloo/broadcast.h"
#include "gloo/math.h"
#include "gloo/reduce.h"
#include "gloo/reduce_scatter.h"
#include "gloo/rendezvous/context.h"
#include "gloo/rendezvous/file_store.h"
#include "gloo/transport/tcp/device.h"

#include "peer_common.h"

namespace
{

using Ctx = std::shared_ptr<gloo::Context>;

constexpr uint64_t SLOT = 0x6b65656c; // the unbound buffers' slot ("keel"): one pair at a time

// What a program may be asked for: everything but allreduce (gloo-allreduce's).
constexpr unsigned OPS = ((1u << PEER_OP_COUNT) - 1) & ~(1u << PEER_ALLREDUCE);

struct Bufs {
	std::vector<float> in, buf, out; // buf: reduce_scatter works in place on a copy of in
	std::vector<double> t;
};

// One operation set up for one size: `call` runs it once; `res` is where this rank's result
// lands; `refill`: buf is copied from in before each call.
struct Setup {
	std::function<void()> call;
	float *res;
	bool refill;
};

void sum_fn(void *c, const void *a, const void *b, size_t n)
{
	gloo::sum<float>(c, a, b, n);
}

// Ranks 0 and 1 send `in` and receive into `out`: the ping then its answer, or both at once.
Setup make_p2p(const Ctx &ctx, enum peer_op op, Bufs &b, size_t c)
{
	int rank = ctx->rank, peer = 1 - rank;
	if (rank > 1)
		return Setup{[] {}, b.out.data(), false};
	std::shared_ptr<gloo::transport::UnboundBuffer> s =
	    ctx->createUnboundBuffer(b.in.data(), c * sizeof(float));
	std::shared_ptr<gloo::transport::UnboundBuffer> r =
	    ctx->createUnboundBuffer(b.out.data(), c * sizeof(float));
	if (op == PEER_EXCHANGE)
		return Setup{[s, r, peer] {
				     r->recv(peer, SLOT);
				     s->send(peer, SLOT);
				     s->waitSend();
				     r->waitRecv();
			     },
			     b.out.data(), false};
	return Setup{[s, r, rank, peer] {
			     if (rank == 0) {
				     s->send(peer, SLOT);
				     s->waitSend();
			     }
			     r->recv(peer, SLOT);
			     r->waitRecv();
			     if (rank == 1) {
				     s->send(peer, SLOT);
				     s->waitSend();
			     }
		     },
		     b.out.data(), false};
}

// The rooted ones: reduce (every rank's input, the root's output) and broadcast (the root's
// input, every other rank's output).
Setup make_rooted(const Ctx &ctx, enum peer_op op, Bufs &b, size_t c)
{
	if (op == PEER_REDUCE) {
		auto o = std::make_shared<gloo::ReduceOptions>(ctx);
		o->setInput(b.in.data(), c);
		o->setOutput(b.out.data(), c);
		o->setRoot(0);
		o->setReduceFunction(sum_fn);
		return Setup{[o] { gloo::reduce(*o); }, b.out.data(), false};
	}
	auto o = std::make_shared<gloo::BroadcastOptions>(ctx);
	if (ctx->rank == 0)
		o->setInput(b.in.data(), c);
	o->setOutput(b.out.data(), c);
	o->setRoot(0);
	return Setup{[o] { gloo::broadcast(*o); }, b.out.data(), false};
}

Setup make_op(const Ctx &ctx, enum peer_op op, Bufs &b, const peer_shape &s)
{
	size_t c = s.count, n = (size_t)ctx->size;
	if (op == PEER_ALL_GATHER) {
		auto o = std::make_shared<gloo::AllgatherOptions>(ctx);
		o->setInput(b.in.data(), c);
		o->setOutput(b.out.data(), n * c);
		return Setup{[o] { gloo::allgather(*o); }, b.out.data(), false};
	}
	if (op == PEER_ALLTOALL) {
		auto o = std::make_shared<gloo::AlltoallOptions>(ctx);
		o->setInput(b.in.data(), n * c);
		o->setOutput(b.out.data(), n * c);
		return Setup{[o] { gloo::alltoall(*o); }, b.out.data(), false};
	}
	if (op == PEER_REDUCE_SCATTER) { // this rank's block lands at the start of the buffer
		auto a = std::make_shared<gloo::ReduceScatterHalvingDoubling<float>>(
		    ctx, std::vector<float *>{b.buf.data()}, (int)(n * c),
		    std::vector<int>(n, (int)c));
		return Setup{[a] { a->run(); }, b.buf.data(), true};
	}
	if (op == PEER_BARRIER) {
		auto o = std::make_shared<gloo::BarrierOptions>(ctx);
		return Setup{[o] { gloo::barrier(*o); }, b.out.data(), false};
	}
	if (op == PEER_REDUCE || op == PEER_BROADCAST)
		return make_rooted(ctx, op, b, c);
	return make_p2p(ctx, op, b, c);
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

void call_once(const Setup &s, Bufs &b, size_t send)
{
	if (s.refill)
		std::memcpy(b.buf.data(), b.in.data(), send * sizeof(float));
	s.call();
}

// Warm-up calls, then rounds of them until every rank has warmed up for warmup_ms.
void warm_up(const Ctx &ctx, const peer_opts &o, const Setup &s, Bufs &b, size_t send)
{
	uint64_t w0 = peer_now_ns();
	for (;;) {
		for (uint32_t i = 0; i < (o.warmup > 0 ? o.warmup : 1); i++)
			call_once(s, b, send);
		double ms = (double)(peer_now_ns() - w0) / 1e6;
		if (o.warmup_ms == 0)
			break;
		max_across(ctx, &ms, 1);
		if (peer_warm_enough(&o, ms))
			break;
	}
}

// One size: returns the median (us), adds wrong elements to *wrong.
double run_size(const Ctx &ctx, const peer_opts &o, Bufs &b, const peer_shape &sh, double *wrong)
{
	Setup s = make_op(ctx, o.op, b, sh);
	peer_fill(b.in.data(), sh.send, (uint32_t)ctx->rank);
	warm_up(ctx, o, s, b, sh.send);
	peer_poison(s.res, sh.recv);
	gloo::BarrierAllToAll(ctx).run();
	for (uint32_t i = 0; i < o.iters; i++) {
		if (s.refill)
			std::memcpy(b.buf.data(), b.in.data(), sh.send * sizeof(float));
		uint64_t t0 = peer_now_ns();
		s.call();
		b.t[i] = (double)(peer_now_ns() - t0) / 1e3 / (o.op == PEER_PINGPONG ? 2 : 1);
	}
	max_across(ctx, b.t.data(), o.iters);
	size_t bad = peer_check_op(o.op, &sh, s.res, (uint32_t)ctx->rank, (uint32_t)ctx->size);
	*wrong += sum_across(ctx, (double)bad);
	gloo::BarrierAllToAll(ctx).run(); // no peer still sends into this size's buffers
	return peer_median(b.t.data(), o.iters);
}

const char *gloo_name(enum peer_op op)
{
	static const char *const names[PEER_OP_COUNT] = {
	    "allreduce", "allgather",	 "ReduceScatterHD", "alltoall", "send/recv",
	    "send+recv", "gloo::reduce", "broadcast",	    "barrier"};
	return names[op];
}

int bench(const peer_opts &o, const Ctx &ctx)
{
	size_t cap = (size_t)(o.max_bytes / sizeof(float)) + 1;
	Bufs b{std::vector<float>(cap), std::vector<float>(cap), std::vector<float>(cap),
	       std::vector<double>(o.iters)};
	if (ctx->rank == 0)
		peer_print_header("gloo-coll (tcp, loopback)", (uint32_t)ctx->size, &o);
	double wrong_total = 0;
	for (uint64_t bytes = o.min_bytes; bytes <= o.max_bytes; bytes *= o.factor) {
		peer_shape sh;
		peer_shape_of(o.op, bytes, (uint32_t)ctx->rank, (uint32_t)ctx->size, &sh);
		if (sh.count == 0 && o.op != PEER_BARRIER)
			throw std::runtime_error(std::to_string(bytes) +
						 " B is 0 elements a rank at " +
						 std::to_string(ctx->size) + " ranks");
		double wrong = 0, med = run_size(ctx, o, b, sh, &wrong);
		wrong_total += wrong;
		if (ctx->rank == 0)
			peer_print_row(sh.bytes, sh.bytes / sizeof(float), o.iters, med, b.t.data(),
				       (long)wrong, gloo_name(o.op));
		if (o.op == PEER_BARRIER)
			break; // no sizes: one row
	}
	if (ctx->rank == 0)
		peer_print_footer((long)wrong_total);
	return wrong_total == 0 ? 0 : 1;
}

// The launcher's (keel-run, torchrun), else mpirun's; -1 when neither says.
int env_rank(bool size)
{
	const char *v = size ? std::getenv("WORLD_SIZE") : std::getenv("RANK");
	if (v == nullptr)
		v = size ? std::getenv("OMPI_COMM_WORLD_SIZE")
			 : std::getenv("OMPI_COMM_WORLD_RANK");
	return v == nullptr ? -1 : std::atoi(v);
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

} // namespace

int main(int argc, char **argv)
{
	peer_opts o;
	if (peer_parse_opts(argc, argv, "gloo-coll", OPS, &o) != 0)
		return 2;
	int rank = env_rank(false), size = env_rank(true);
	if (o.store == nullptr || rank < 0 || size < 1 || rank >= size) {
		std::fprintf(stderr, "gloo-coll: needs -s STORE_DIR (an empty folder all ranks "
				     "share) and RANK, WORLD_SIZE from a launcher (keel-run)\n");
		return 2;
	}
	if ((o.op == PEER_PINGPONG || o.op == PEER_EXCHANGE) && size < 2) {
		std::fprintf(stderr, "gloo-coll: %s needs 2 ranks or more\n", peer_op_name(o.op));
		return 2;
	}
	try {
		return bench(o, connect(o, rank, size));
	} catch (const std::exception &e) {
		std::fprintf(stderr, "gloo-coll: rank %d: %s\n", rank, e.what());
		return 1;
	}
}
