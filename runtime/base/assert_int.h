/* Assertions that stay on in release builds. Assert programmer errors only — never wire data,
 * NIC status or peer behaviour (those are counted and returned). */
#ifndef KEEL_ASSERT_INT_H
#define KEEL_ASSERT_INT_H

_Noreturn void keel_assert_fail(const char *expr, const char *file, int line);

#define KEEL_ASSERT(c)                                                                             \
	do {                                                                                       \
		if (__builtin_expect(!(c), 0))                                                     \
			keel_assert_fail(#c, __FILE__, __LINE__);                                  \
	} while (0)

#ifdef KEEL_DEBUG
#define KEEL_ASSERT_DEBUG(c) KEEL_ASSERT(c)
#else
#define KEEL_ASSERT_DEBUG(c) ((void)0)
#endif

#endif
