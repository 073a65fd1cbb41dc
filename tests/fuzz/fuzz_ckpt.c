/* libFuzzer entry point over the checkpoint reader: the input becomes a checkpoint file in a
 * directory of its own, and keel_ckpt_restore must reject it with a reason or restore it into
 * the registered buffers, never crash, read past what it was given or write past a buffer.
 * First byte, bit 0: the rest is the whole file as it is; otherwise the rest is laid over a
 * real checkpoint (written once at start, so the fuzzer starts from a valid file) at an offset
 * from the next two bytes, and bit 1 re-stamps the header's CRC32C so the fields behind it are
 * reached. Built and run by `make fuzz` (mk/fuzz.mk); `make test` runs a smoke of it. */
#include <fcntl.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "crc32c_int.h"
#include "keel/checkpoint.h"

#define A_BYTES	   300u
#define B_BYTES	   5000u
#define FILE_MAX   (KEEL_CKPT_HEADER_BYTES + 4 * 4096u)
#define CRC_OFFSET 12u

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static char g_dir[] = "/tmp/keel-fuzz-ckpt-XXXXXX";
static char g_path[128];
static _Alignas(KEEL_CKPT_ALIGN) uint8_t g_scratch[64 * 1024];
static _Alignas(64) uint8_t g_mem[1 << 16];
static uint8_t g_a[A_BYTES], g_b[B_BYTES];
static uint8_t g_real[FILE_MAX], g_file[FILE_MAX];
static size_t g_real_len;
static struct keel_ckpt *g_ck;

static void cleanup(void)
{
	unlink(g_path);
	rmdir(g_dir);
}

static void setup_once(void)
{
	struct keel_ckpt_config cfg;
	if (mkdtemp(g_dir) == NULL)
		__builtin_trap();
	atexit(cleanup);
	keel_ckpt_config_default(&cfg);
	cfg.dir = g_dir;
	cfg.config_hash = 7;
	cfg.interval_ns = 0;
	cfg.scratch = g_scratch;
	cfg.scratch_len = sizeof(g_scratch);
	cfg.keep = 1;
	if (keel_ckpt_init(&g_ck, g_mem, sizeof(g_mem), &cfg) != 0 ||
	    keel_ckpt_register(g_ck, "a", g_a, A_BYTES) != 0 ||
	    keel_ckpt_register(g_ck, "b", g_b, B_BYTES) != 0)
		__builtin_trap();
	for (uint32_t i = 0; i < B_BYTES; i++)
		g_b[i] = (uint8_t)(i * 13);
	if (keel_ckpt_write(g_ck, 1, 1, 0) != 0)
		__builtin_trap();
	snprintf(g_path, sizeof(g_path), "%s/ckpt-%020u.keel", g_dir, 1u);
	FILE *f = fopen(g_path, "rb");
	if (f == NULL)
		__builtin_trap();
	g_real_len = fread(g_real, 1, sizeof(g_real), f);
	fclose(f);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	if (g_ck == NULL)
		setup_once();
	if (size < 3)
		return 0;
	size_t len;
	if (data[0] & 1) {
		len = size - 1 < FILE_MAX ? size - 1 : FILE_MAX;
		memcpy(g_file, data + 1, len);
	} else {
		size_t at = ((size_t)data[1] | (size_t)data[2] << 8) % g_real_len;
		size_t n = size - 3;
		memcpy(g_file, g_real, g_real_len);
		len = g_real_len;
		if (n > len - at)
			n = len - at;
		memcpy(g_file + at, data + 3, n);
		if ((data[0] & 2) && len >= KEEL_CKPT_HEADER_BYTES) {
			memset(g_file + CRC_OFFSET, 0, 4);
			uint32_t crc = crc32c(0, g_file, KEEL_CKPT_HEADER_BYTES);
			for (int i = 0; i < 4; i++)
				g_file[CRC_OFFSET + i] = (uint8_t)(crc >> (8 * i));
		}
	}
	int fd = open(g_path, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0600);
	if (fd < 0 || write(fd, g_file, len) != (ssize_t)len)
		__builtin_trap();
	close(fd);
	struct keel_ckpt_report rep;
	(void)keel_ckpt_restore(g_ck, UINT64_MAX, &rep);
	return 0;
}
