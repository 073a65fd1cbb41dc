/* libFuzzer entry point over wire_decode: any bytes in, a verdict out, never a crash or a read
 * outside the input. Built and run by `make fuzz` (clang, mk/fuzz.mk); `make test` replays
 * its corpus (tests/fuzz/corpus/fuzz_wire/) and fuzzes it for a few seconds.
 * The first input byte picks the receiver's expectations (self, world size, whether the
 * transport knows the sender), so source and destination checks are explored as well as the
 * header; the rest is the datagram, decoded from an exactly sized copy so ASan catches any
 * read past its end. A crc-valid datagram is rare by chance, so with a 1-in-2 choice the
 * harness also re-stamps the CRC, letting the fuzzer reach the job/destination/source/epoch
 * checks behind it. */
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "wire_int.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static void restamp_crc(uint8_t *buf, size_t len)
{
	static const uint8_t zero[4];
	uint32_t crc;

	crc = crc32c(0, buf, 52);
	crc = crc32c(crc, zero, sizeof(zero));
	crc = crc32c(crc, buf + WIRE_HEADER_SIZE, len - WIRE_HEADER_SIZE);
	for (int i = 0; i < 4; i++)
		buf[52 + i] = (uint8_t)(crc >> (8 * i));
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	struct wire_expect exp = {.job_id = 0x0badcafeu, .epoch = 7};
	struct wire_header h;
	enum wire_verdict v;
	uint8_t *dgram;
	uint8_t mode;

	if (size == 0)
		return 0;
	mode = data[0];
	data++;
	size--;
	/* bits 0-1 self, 2-3 world size - 1, 4 sender unknown, 5-6 sender, 7 re-stamp the CRC */
	exp.self = mode & 3u;
	exp.world_size = 1u + ((mode >> 2) & 3u);
	exp.transport_src = (mode & 0x10u) ? UINT32_MAX : (mode >> 5) & 3u;
	exp.intact = (size & 1u) != 0; /* as if through shared memory (WIRE_FLAG_NO_CRC passes) */

	dgram = malloc(size ? size : 1);
	if (dgram == NULL)
		return 0;
	if (size > 0)
		memcpy(dgram, data, size);
	if ((mode & 0x80u) && size >= WIRE_HEADER_SIZE)
		restamp_crc(dgram, size);
	v = wire_decode(dgram, size, &exp, &h);
	if ((unsigned)v >= WIRE_VERDICT_COUNT)
		abort();
	if (v == WIRE_OK) {
		/* What a consumer relies on after WIRE_OK. */
		if (WIRE_HEADER_SIZE + (size_t)h.payload_len != size || h.dst != exp.self ||
		    h.src == exp.self || h.src >= exp.world_size || h.job_id != exp.job_id ||
		    ((h.type == WIRE_DATA || h.type == WIRE_ACK) && h.epoch != exp.epoch))
			abort();
		if (h.type == WIRE_DATA && (uint64_t)h.offset + h.payload_len > h.total_len)
			abort();
		if (h.type == WIRE_HEARTBEAT) {
			struct wire_heartbeat hb;

			wire_heartbeat_decode(dgram + WIRE_HEADER_SIZE, &hb);
		}
	}
	(void)wire_verdict_name(v);
	free(dgram);
	return 0;
}
