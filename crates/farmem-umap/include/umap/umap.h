/*
 * libfarmem's C API: UMap's interface (LLNL's user-space page management
 * library) over farmem's runtime, so a program written for UMap builds and
 * runs unchanged against farmem:
 *
 *     cc prog.c $(pkg-config --cflags --libs farmem)
 *
 * umap() maps `length` bytes of the file open on `fd`, from `offset`; its
 * pages are read on first touch, cached in a buffer of UMAP_BUFSIZE pages
 * and written back to the file when evicted, by umap_flush() and by
 * uunmap(). With `fd` -1 and UMAP_ANONYMOUS in `flags`, the region is far
 * memory on the rack named by FARMEM_CONTROLLER instead (farmem's own
 * store; see docs/umap.md). Errors return UMAP_FAILED (or -1) with errno
 * set, and name their cause on stderr.
 */
#ifndef FARMEM_UMAP_H
#define FARMEM_UMAP_H

#include <stddef.h>
#include <stdint.h>
#include <sys/mman.h>
#include <sys/types.h>
#include <unistd.h>

#ifdef __cplusplus
extern "C" {
#endif

/* Flags: a region is private to the process (UMap supports no other). */
#define UMAP_PRIVATE MAP_PRIVATE
/* Map at `addr` exactly: refused by farmem (EINVAL), which places regions. */
#define UMAP_FIXED MAP_FIXED
/* farmem: with fd -1, far memory on the rack instead of a file. */
#define UMAP_ANONYMOUS MAP_ANONYMOUS

#define UMAP_FAILED ((void *)-1)

void *umap(void *addr, size_t length, int prot, int flags, int fd, off_t offset);
int uunmap(void *addr, size_t length);

/* Writes every region's dirty pages back to its store; 0 or -1 (errno). */
int umap_flush(void);

struct umap_prefetch_item {
    void *page_base_addr;
};
/* Brings the pages named into the buffer before they are touched. */
void umap_prefetch(int npages, struct umap_prefetch_item *page_array);

/*
 * Configuration, read from UMAP_* environment variables at the first
 * umap() (UMAP_PAGESIZE, UMAP_BUFSIZE, UMAP_PAGE_FILLERS,
 * UMAP_PAGE_EVICTORS, UMAP_EVICT_HIGH_WATER_THRESHOLD,
 * UMAP_EVICT_LOW_WATER_THRESHOLD, UMAP_MAX_FAULT_EVENTS, UMAP_READ_AHEAD).
 * A setter takes effect for the buffer started by the next first umap();
 * getters return what is in effect.
 */
long umapcfg_get_system_page_size(void);
uint64_t umapcfg_get_umap_page_size(void);
void umapcfg_set_umap_page_size(uint64_t page_size);
uint64_t umapcfg_get_max_pages_in_buffer(void);
void umapcfg_set_max_pages_in_buffer(uint64_t max_pages);
uint64_t umapcfg_get_num_fillers(void);
void umapcfg_set_num_fillers(uint64_t num_fillers);
uint64_t umapcfg_get_num_evictors(void);
void umapcfg_set_num_evictors(uint64_t num_evictors);
uint64_t umapcfg_get_num_flushers(void);
void umapcfg_set_num_flushers(uint64_t num_flushers);
uint64_t umapcfg_get_max_fault_events(void);
void umapcfg_set_max_fault_events(uint64_t max_events);
uint64_t umapcfg_get_read_ahead(void);
void umapcfg_set_read_ahead(uint64_t pages);
int umapcfg_get_evict_low_water_threshold(void);
void umapcfg_set_evict_low_water_threshold(int percent);
int umapcfg_get_evict_high_water_threshold(void);
void umapcfg_set_evict_high_water_threshold(int percent);

#ifdef __cplusplus
}
#endif

#endif /* FARMEM_UMAP_H */
