/* What the start-up library's files share and a program does not see. */
#ifndef KEEL_BOOT_INT_H
#define KEEL_BOOT_INT_H

#include <stddef.h>

/* Write a message into err (if not NULL) and return `code`: the one way the start-up fails
 * with a reason. */
__attribute__((format(printf, 4, 5))) int keel_fail(char *err, size_t err_len, int code,
						    const char *fmt, ...);

#endif
