/* One memfd mapped twice: see guarded_mem.h. */
#include "guarded_mem.h"

#include <errno.h>
#include <sys/mman.h>
#include <unistd.h>

#include "keel/device_cpu.h"

int guarded_mem_map(struct guarded_mem *g, const struct keel_device *dev, size_t bytes)
{
	long page = sysconf(_SC_PAGESIZE);
	if (g == NULL || bytes == 0 || page <= 0 || bytes > SIZE_MAX - (size_t)page)
		return -EINVAL;
	*g = (struct guarded_mem){.fd = -1, .dev = dev};
	size_t len = (bytes + (size_t)page - 1) / (size_t)page * (size_t)page;
	int fd = memfd_create("keel-device-cpu", MFD_CLOEXEC);
	if (fd < 0)
		return -errno;
	int rc = 0;
	void *view = MAP_FAILED, *work = MAP_FAILED;
	if (ftruncate(fd, (off_t)len) != 0)
		rc = -errno;
	if (rc == 0 && (view = mmap(NULL, len, PROT_NONE, MAP_SHARED, fd, 0)) == MAP_FAILED)
		rc = -errno;
	if (rc == 0 &&
	    (work = mmap(NULL, len, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0)) == MAP_FAILED)
		rc = -errno;
	if (rc == 0 && dev != NULL)
		rc = keel_device_cpu_guard(dev, view, work, len);
	if (rc != 0) {
		if (view != MAP_FAILED)
			(void)munmap(view, len);
		if (work != MAP_FAILED)
			(void)munmap(work, len);
		(void)close(fd);
		return rc;
	}
	g->fd = fd;
	g->view = view;
	g->work = work;
	g->bytes = len;
	return 0;
}

int guarded_mem_unmap(struct guarded_mem *g)
{
	if (g == NULL || g->view == NULL)
		return 0;
	int rc = g->dev != NULL ? keel_device_cpu_unguard(g->dev, g->view) : 0;
	if (rc != 0)
		return rc;
	(void)munmap(g->view, g->bytes);
	(void)munmap(g->work, g->bytes);
	(void)close(g->fd);
	*g = (struct guarded_mem){.fd = -1};
	return 0;
}
