/* /metrics over HTTP in the start-up library (boot_metrics.c): what boot.c calls. The HTTP
 * server (metrics_http.c) and the GPU readings (gpu_nvml.c) live in runtime/obs/. Private to
 * runtime/boot/. */
#ifndef KEEL_BOOT_METRICS_H
#define KEEL_BOOT_METRICS_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

struct keel_boot;

/* KEEL_METRICS_ADDR set: listen on its PORT + the local rank (before the rendezvous, so a bad
 * address or a port in use stops the start at once). 0 when unset; else -errno with a message
 * naming the variable. */
int keel_boot_metrics_open(struct keel_boot *b, char *err, size_t err_len);
/* Once the POSIX waiter is set in b->cfg (before keel_init copies it): wrap it so that every
 * wait also serves HTTP. No-op without KEEL_METRICS_ADDR. */
void keel_boot_metrics_wrap(struct keel_boot *b);
/* Once the node runs: size and allocate the response buffer, start serving. */
int keel_boot_metrics_start(struct keel_boot *b, char *err, size_t err_len);
/* Serve what is ready, if it is time to look (keel_boot_poll). */
void keel_boot_metrics_poll(struct keel_boot *b);
/* KEEL_METRICS_LINGER_MS: the node keeps polling (heartbeats, views) and the server answering
 * for that long, so that a scraper sees how the job ended. No-op without it. */
void keel_boot_metrics_linger(struct keel_boot *b);
/* Close the server and free its memory; b->cfg.waiter is the POSIX waiter again. */
void keel_boot_metrics_stop(struct keel_boot *b);

#endif
