/* A stranger on the network at start-up (tests/integ/rendezvous_attack.sh): it knows the job's
 * rank-0 address, world size and job id, but not its key, and tries the attacks of issue 15
 * on rank 0's rendezvous. It prints every byte it receives, in hex, so that the test can check
 * that nothing but greetings came back (no job id, no table).
 *   integ-rendezvous_attacker PORT JOB WORLD keyed|open HOLD_MS
 *     wrong-job: a hello of job JOB + 1; rank7: a hello claiming rank 7; fake-rank2 (keyed
 *     only: without a key a stranger who knows the job id does take a seat): a hello for
 *     rank 2 with a proof under a key that is not the job's. Then 40 idle connections,
 *     "idle: ready" on stdout, held until rank 0 closed them all or HOLD_MS passed.
 *   integ-rendezvous_attacker --free-port    print a free TCP port on 127.0.0.1
 *   integ-rendezvous_attacker --can-prove    exit 0 if keel was built with libsodium */
#include <arpa/inet.h>
#include <errno.h>
#include <netinet/in.h>
#include <poll.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#include "keel/posix.h"
#include "rendezvous_int.h"

#define IDLE_CONNS 40

static uint16_t port;

static int tcp_connect(void)
{
	struct sockaddr_in a = {.sin_family = AF_INET, .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};

	a.sin_port = htons(port);
	for (int i = 0; i < 2000; i++) { /* rank 0 may not listen yet: up to 10 s */
		int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);

		if (fd < 0)
			break;
		if (connect(fd, (struct sockaddr *)&a, sizeof(a)) == 0)
			return fd;
		close(fd);
		usleep(5000);
	}
	fprintf(stderr, "attacker: nothing listens on 127.0.0.1:%u\n", port);
	exit(2);
}

static void print_hex(const char *what, const uint8_t *b, size_t n, const char *how)
{
	printf("%s: %zu bytes%s:", what, n, how);
	for (size_t i = 0; i < n; i++)
		printf("%s%02x", i == 0 ? " " : "", b[i]);
	printf("\n");
}

/* Everything that comes on fd until rank 0 closes it (at most 10 s), printed. */
static void receive_all(int fd, const char *what)
{
	uint8_t buf[1 << 16];
	size_t n = 0;
	uint64_t end = keel_posix_now_ns() + 10000000000ull;
	bool closed = false;

	while (!closed && n < sizeof(buf) && keel_posix_now_ns() < end) {
		struct pollfd p = {.fd = fd, .events = POLLIN};
		ssize_t got;

		if (poll(&p, 1, 100) <= 0)
			continue;
		got = recv(fd, buf + n, sizeof(buf) - n, 0);
		closed = got <= 0;
		n += got > 0 ? (size_t)got : 0;
	}
	print_hex(what, buf, n, closed ? " (closed by rank 0)" : " (still open after 10 s)");
}

/* One hello as a stranger: read the greeting, send the hello, print what comes back. */
static void hello_attack(const char *name, uint32_t job, uint32_t world, uint32_t rank, bool keyed)
{
	static const uint8_t not_the_key[32] = {0xba, 0xd0, 0xca, 0xfe};
	struct keel_rv_hello h = {.version = KEEL_RENDEZVOUS_VERSION,
				  .flags = RV_FLAG_JOB_FIXED | (keyed ? RV_FLAG_KEYED : 0),
				  .job = job,
				  .world = world,
				  .rank = rank};
	uint8_t greeting[RV_GREETING_LEN], nonce_s[RV_NONCE_LEN], hello[RV_HELLO_LEN], k[32];
	struct sockaddr_storage at;
	char what[64];
	bool rank0_keyed;
	int fd = tcp_connect();

	if (recv(fd, greeting, sizeof(greeting), MSG_WAITALL) != (ssize_t)sizeof(greeting) ||
	    keel_rv_greeting_parse(greeting, &rank0_keyed, nonce_s) != KEEL_RV_ACCEPT) {
		printf("%s: no greeting from rank 0\n", name);
		exit(2);
	}
	snprintf(what, sizeof(what), "%s: greeting", name);
	print_hex(what, greeting, sizeof(greeting), "");
	keel_rv_random(h.nonce, sizeof(h.nonce));
	memset(&at, 0, sizeof(at));
	at.ss_family = AF_INET;
	((struct sockaddr_in *)&at)->sin_addr.s_addr = htonl(INADDR_LOOPBACK);
	((struct sockaddr_in *)&at)->sin_port = htons(9); /* discard: where it wants the job */
	keel_rv_entry_put(h.entry, &at, NULL);
	keel_rv_hello_encode(&h, hello);
	if (keyed) {
		keel_rv_key_derive(not_the_key, k);
		keel_rv_hello_sign(k, nonce_s, hello);
	}
	if (send(fd, hello, sizeof(hello), MSG_NOSIGNAL) != (ssize_t)sizeof(hello))
		printf("%s: rank 0 closed before the whole hello went\n", name);
	snprintf(what, sizeof(what), "%s: after the hello", name);
	receive_all(fd, what);
	close(fd);
}

/* 40 idle connections; held until rank 0 closed them all or hold_ms passed. */
static void idle_attack(uint64_t hold_ms)
{
	int fds[IDLE_CONNS];
	size_t got[IDLE_CONNS] = {0}, total = 0;
	bool closed[IDLE_CONNS] = {false};
	uint32_t n_closed = 0;
	uint64_t end;

	for (int i = 0; i < IDLE_CONNS; i++)
		fds[i] = tcp_connect();
	printf("idle: ready, %d connections open\n", IDLE_CONNS);
	fflush(stdout);
	end = keel_posix_now_ns() + hold_ms * 1000000ull;
	while (n_closed < IDLE_CONNS && keel_posix_now_ns() < end) {
		for (int i = 0; i < IDLE_CONNS; i++) {
			uint8_t buf[256];
			ssize_t r;

			if (closed[i])
				continue;
			r = recv(fds[i], buf, sizeof(buf), MSG_DONTWAIT);
			if (r > 0)
				got[i] += (size_t)r;
			else if (r == 0 || (errno != EAGAIN && errno != EWOULDBLOCK)) {
				closed[i] = true;
				n_closed++;
			}
		}
		usleep(20000);
	}
	for (int i = 0; i < IDLE_CONNS; i++) {
		/* A greeting is all an idle connection may have had (none if never accepted). */
		total += got[i] > RV_GREETING_LEN ? got[i] - RV_GREETING_LEN : 0;
		close(fds[i]);
	}
	printf("idle: %u of %d closed by rank 0; %zu bytes beyond greetings\n", n_closed,
	       IDLE_CONNS, total);
}

static uint16_t free_port(void)
{
	struct sockaddr_in a = {.sin_family = AF_INET, .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
	socklen_t len = sizeof(a);
	int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);

	if (fd < 0 || bind(fd, (struct sockaddr *)&a, sizeof(a)) != 0 ||
	    getsockname(fd, (struct sockaddr *)&a, &len) != 0) {
		perror("attacker: a free port");
		exit(2);
	}
	close(fd);
	return ntohs(a.sin_port);
}

int main(int argc, char **argv)
{
	uint32_t job, world;
	bool keyed;

	if (argc == 2 && strcmp(argv[1], "--free-port") == 0) {
		printf("%u\n", free_port());
		return 0;
	}
	if (argc == 2 && strcmp(argv[1], "--can-prove") == 0)
		return keel_rv_proof_available() ? 0 : 1;
	if (argc != 6) {
		fprintf(stderr,
			"usage: %s PORT JOB WORLD keyed|open HOLD_MS | --free-port | "
			"--can-prove\n",
			argv[0]);
		return 2;
	}
	port = (uint16_t)strtoul(argv[1], NULL, 10);
	job = (uint32_t)strtoul(argv[2], NULL, 10);
	world = (uint32_t)strtoul(argv[3], NULL, 10);
	keyed = strcmp(argv[4], "keyed") == 0;
	setvbuf(stdout, NULL, _IOLBF, 0);
	hello_attack("wrong-job", job + 1, world, 1, keyed);
	hello_attack("rank7", job, world, 7, keyed);
	if (keyed)
		hello_attack("fake-rank2", job, world, 2, true);
	idle_attack(strtoull(argv[5], NULL, 10));
	return 0;
}
