/* The MTU of the link a rank's UDP socket sends on, so that keel's datagrams fit one IP packet
 * there: a 9000-byte default on a 1500-byte Ethernet made the kernel fragment every datagram,
 * and a fragmented datagram cannot be coalesced (UDP_SEGMENT needs datagrams that fit). */
#include <arpa/inet.h>
#include <ifaddrs.h>
#include <net/if.h>
#include <netinet/in.h>
#include <stdbool.h>
#include <string.h>
#include <sys/ioctl.h>
#include <sys/socket.h>
#include <unistd.h>

#include "boot_int.h"

static bool addr_is(const struct sockaddr *sa, int family, const void *want)
{
	if (sa == NULL || sa->sa_family != family)
		return false;
	if (family == AF_INET)
		return memcmp(&((const struct sockaddr_in *)(const void *)sa)->sin_addr, want,
			      sizeof(struct in_addr)) == 0;
	return memcmp(&((const struct sockaddr_in6 *)(const void *)sa)->sin6_addr, want,
		      sizeof(struct in6_addr)) == 0;
}

static bool addr_any(int family, const void *a)
{
	static const uint8_t zero[sizeof(struct in6_addr)];
	return memcmp(a, zero, family == AF_INET ? sizeof(struct in_addr) : sizeof(zero)) == 0;
}

static uint32_t if_mtu(int sock, const char *name)
{
	struct ifreq r;

	memset(&r, 0, sizeof(r));
	strncpy(r.ifr_name, name, IFNAMSIZ - 1);
	if (ioctl(sock, SIOCGIFMTU, &r) != 0 || r.ifr_mtu <= 0)
		return 0;
	return (uint32_t)r.ifr_mtu;
}

uint32_t keel_boot_link_mtu(const char *host, uint32_t *ip_udp_header)
{
	uint8_t want[sizeof(struct in6_addr)];
	int family = AF_INET;
	struct ifaddrs *list = NULL;
	uint32_t best = 0;

	*ip_udp_header = 28;
	if (inet_pton(AF_INET, host, want) != 1) {
		if (inet_pton(AF_INET6, host, want) != 1)
			return 0;
		family = AF_INET6;
		*ip_udp_header = 48;
	}
	int sock = socket(AF_INET, SOCK_DGRAM | SOCK_CLOEXEC, 0);
	if (sock < 0)
		return 0;
	if (getifaddrs(&list) != 0) {
		close(sock);
		return 0;
	}
	bool any = addr_any(family, want);
	for (const struct ifaddrs *i = list; i != NULL; i = i->ifa_next) {
		if (i->ifa_addr == NULL || i->ifa_addr->sa_family != family)
			continue;
		if (!any && addr_is(i->ifa_addr, family, want)) {
			best = if_mtu(sock, i->ifa_name); /* the interface holding the address */
			break;
		}
		/* Bound to every address: the smallest link that is up, loopback aside, so a
		 * datagram fits whichever one the route takes. */
		if (any && (i->ifa_flags & IFF_UP) && !(i->ifa_flags & IFF_LOOPBACK)) {
			uint32_t m = if_mtu(sock, i->ifa_name);
			if (m != 0 && (best == 0 || m < best))
				best = m;
		}
	}
	freeifaddrs(list);
	close(sock);
	return best;
}
