/* The job's key (keel/launch.h, docs/guide/security.md): KEEL_JOB_KEY_FILE or KEEL_JOB_KEY. A key
 * file is refused, like ssh refuses a private key, when anyone but its owner may read or write
 * it. No message ever quotes a key. */
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "boot_int.h"
#include "keel/env.h"
#include "keel/launch.h"
#include "rendezvous_int.h"

#define KEY_HEX_LEN (2u * KEEL_AUTH_KEY_BYTES)
/* What a key file may hold: 32 raw bytes, or 64 hex digits and a newline; one more byte
 * tells a longer file. */
#define KEY_FILE_MAX (KEY_HEX_LEN + 2u)

static int hex_value(char c)
{
	if (c >= '0' && c <= '9')
		return c - '0';
	if (c >= 'a' && c <= 'f')
		return c - 'a' + 10;
	if (c >= 'A' && c <= 'F')
		return c - 'A' + 10;
	return -1;
}

/* 64 hex digits of s into key. `what` names where they came from. */
static int key_from_hex(const char *what, const char *s, size_t len, uint8_t *key, char *err,
			size_t err_len)
{
	if (len != KEY_HEX_LEN)
		return keel_fail(
		    err, err_len, -EINVAL,
		    "%s: %zu characters where the key needs %u hex digits (32 bytes; "
		    "make one with: head -c 32 /dev/urandom | od -An -tx1 | tr -d ' \\n')",
		    what, len, KEY_HEX_LEN);
	for (size_t i = 0; i < KEEL_AUTH_KEY_BYTES; i++) {
		int hi = hex_value(s[2 * i]), lo = hex_value(s[2 * i + 1]);

		if (hi < 0 || lo < 0) {
			keel_rv_wipe(key, KEEL_AUTH_KEY_BYTES);
			return keel_fail(err, err_len, -EINVAL,
					 "%s: character %zu is not a hex digit (the key is %u hex "
					 "digits)",
					 what, 2 * i + (hi < 0 ? 1 : 2), KEY_HEX_LEN);
		}
		key[i] = (uint8_t)(hi << 4 | lo);
	}
	return 0;
}

/* Only its owner (this user, or root) may read or write a key file. */
static int key_file_check(int fd, const char *what, const char *path, char *err, size_t err_len)
{
	struct stat st;

	if (fstat(fd, &st) != 0)
		return keel_fail(err, err_len, -EINVAL, "%s: cannot stat it: %s", what,
				 strerror(errno));
	if (!S_ISREG(st.st_mode))
		return keel_fail(err, err_len, -EINVAL, "%s is not a regular file", what);
	if ((st.st_mode & 077) != 0)
		return keel_fail(err, err_len, -EINVAL,
				 "%s: permissions %04o are too open: the key must be readable by "
				 "its owner only (chmod 600 %s)",
				 what, (unsigned)(st.st_mode & 07777), path);
	if (st.st_uid != geteuid() && st.st_uid != 0)
		return keel_fail(err, err_len, -EINVAL,
				 "%s is owned by uid %u, not by this user (uid %u) or root", what,
				 (unsigned)st.st_uid, (unsigned)geteuid());
	return 0;
}

static int key_file_read(const char *path, uint8_t *key, char *err, size_t err_len)
{
	char what[320], buf[KEY_FILE_MAX + 1];
	size_t n = 0;
	int fd, rc;

	snprintf(what, sizeof(what), "KEEL_JOB_KEY_FILE=%.256s", path);
	fd = open(path, O_RDONLY | O_CLOEXEC | O_NOCTTY);
	if (fd < 0)
		return keel_fail(err, err_len, -EINVAL, "%s: cannot open it: %s", what,
				 strerror(errno));
	rc = key_file_check(fd, what, path, err, err_len);
	while (rc == 0 && n < sizeof(buf)) {
		ssize_t got = read(fd, buf + n, sizeof(buf) - n);

		if (got == 0)
			break;
		if (got < 0 && errno != EINTR)
			rc = keel_fail(err, err_len, -EINVAL, "%s: cannot read it: %s", what,
				       strerror(errno));
		n += got > 0 ? (size_t)got : 0;
	}
	close(fd);
	if (rc == 0 && n == KEEL_AUTH_KEY_BYTES)
		memcpy(key, buf, KEEL_AUTH_KEY_BYTES);
	else if (rc == 0 &&
		 (n == KEY_HEX_LEN || (n == KEY_HEX_LEN + 1 && buf[KEY_HEX_LEN] == '\n')))
		rc = key_from_hex(what, buf, KEY_HEX_LEN, key, err, err_len);
	else if (rc == 0)
		rc = keel_fail(err, err_len, -EINVAL,
			       "%s holds %s%zu bytes: expected 32 raw bytes, or 64 hex digits and "
			       "an optional newline",
			       what, n > KEY_FILE_MAX ? "more than " : "",
			       n > KEY_FILE_MAX ? (size_t)KEY_FILE_MAX : n);
	keel_rv_wipe(buf, sizeof(buf));
	return rc;
}

bool keel_launch_auth_available(void)
{
	return keel_rv_proof_available();
}

int keel_launch_read_key(struct keel_launch *out, char *err, size_t err_len)
{
	const char *file = NULL, *hex = NULL;
	/* set but empty is a bad value (the table's 1.. bytes), never "no key" */
	int rc = keel_env_text("KEEL_JOB_KEY_FILE", &file, err, err_len);
	if (rc >= 0)
		rc = keel_env_text("KEEL_JOB_KEY", &hex, err, err_len);
	if (rc < 0)
		return rc;
	const char *name = file != NULL ? "KEEL_JOB_KEY_FILE" : "KEEL_JOB_KEY";

	if (file == NULL && hex == NULL)
		return 0;
	if (file != NULL && hex != NULL)
		return keel_fail(err, err_len, -EINVAL,
				 "both KEEL_JOB_KEY_FILE and KEEL_JOB_KEY are set: give the key "
				 "one way only");
	if (!keel_rv_proof_available())
		return keel_fail(err, err_len, -ENOTSUP,
				 "%s is set but this keel was built without libsodium, so it can "
				 "neither prove nor check a key: install libsodium-dev and rebuild "
				 "keel (or unset %s to run unauthenticated)",
				 name, name);
	rc = file != NULL ? key_file_read(file, out->key, err, err_len)
			  : key_from_hex("KEEL_JOB_KEY", hex, strlen(hex), out->key, err, err_len);
	if (rc != 0)
		return rc;
	out->has_key = true;
	out->key_source = name;
	/* Ranks that meet without a rendezvous still share a job id no other job has. */
	if (!out->job_id_fixed)
		out->job_id = keel_rv_job_id_from_key(out->key);
	return 0;
}
