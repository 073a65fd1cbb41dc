// The same data-parallel loop as train_loop.c, from C++: keel's headers are plain C and
// compile as C++17; the node is released by a destructor.
//   build: c++ -std=c++17 -O2 train_loop.cc $(pkg-config --cflags --libs keel) -o train_loop_cc
//   run:   keel-run -n 3 ./train_loop_cc [STEPS]
#include <cstdint>
#include <cstdio>
#include <stdexcept>
#include <string>
#include <vector>

#include <keel/boot.h>

namespace {

class Job {
      public:
	Job()
	{
		char err[256];
		if (keel_boot_start(&b_, nullptr, nullptr, err, sizeof(err)) != 0)
			throw std::runtime_error(err);
	}
	~Job() { keel_boot_stop(&b_, 1000000000ull); } // linger for the last acks, then leave
	Job(const Job &) = delete;
	Job &operator=(const Job &) = delete;

	uint32_t rank() const { return b_.launch.rank; }
	bool poll() { return keel_boot_poll(&b_) == 0; }
	// Sum `in` over the members into `out`; returns how many members contributed.
	uint32_t allreduce_sum(const std::vector<float> &in, std::vector<float> &out)
	{
		keel_op *op = nullptr;
		keel_op_info info{};
		int rc = keel_allreduce_start(b_.node, in.data(), out.data(), in.size(), KEEL_F32,
					      KEEL_SUM, &op);
		if (rc == 0)
			rc = keel_boot_wait(&b_, op, &info, nullptr, 0);
		if (rc != 0)
			throw std::runtime_error(std::string("allreduce: ") + keel_strerror(rc));
		return info.member_count;
	}

      private:
	keel_boot b_{};
};

} // namespace

int main(int argc, char **argv)
{
	const size_t params_count = 65536;
	const uint32_t steps = argc > 1 ? uint32_t(std::stoul(argv[1])) : 300;
	try {
		Job job;
		std::vector<float> params(params_count), grad(params_count), sum(params_count);
		uint32_t members = 0;
		for (uint32_t step = 0; step < steps; step++) {
			for (size_t i = 0; i < params_count; i++) { // forward + backward stand-in
				grad[i] = 0.001f * float((i + step + job.rank()) % 7) -
					  0.01f * params[i];
				if (i % 4096 == 0 && !job.poll())
					throw std::runtime_error("poll failed");
			}
			members = job.allreduce_sum(grad, sum); // fewer after a peer died
			for (size_t i = 0; i < params_count; i++)
				params[i] += sum[i] / float(members);
		}
		uint32_t hash = 2166136261u;
		for (float p : params)
			for (size_t k = 0; k < sizeof(p); k++)
				hash = (hash ^ reinterpret_cast<const uint8_t *>(&p)[k]) * 16777619u;
		std::printf("train_loop_cc: rank %u: %u steps, %u members at the end, parameters "
			    "%08x\n",
			    job.rank(), steps, members, hash);
	} catch (const std::exception &e) {
		std::fprintf(stderr, "train_loop_cc: %s\n", e.what());
		return 1;
	}
	return 0;
}
