#define _GNU_SOURCE
#include "cfileclone.h"
#include <errno.h>
#ifdef __linux__
#include <sys/ioctl.h>
#include <linux/fs.h>
#include <unistd.h>
#endif

int deltasnap_ficlone(int destination_fd, int source_fd) {
#if defined(__linux__) && defined(FICLONE)
    return ioctl(destination_fd, FICLONE, source_fd);
#else
    (void)destination_fd;
    (void)source_fd;
    errno = ENOTSUP;
    return -1;
#endif
}

int deltasnap_copy_range(int destination_fd, int source_fd, long long length) {
#ifdef __linux__
    long long remaining = length;
    while (remaining > 0) {
        size_t chunk = remaining > (1LL << 30) ? (size_t)(1LL << 30) : (size_t)remaining;
        ssize_t copied = copy_file_range(source_fd, NULL, destination_fd, NULL, chunk, 0);
        if (copied < 0) {
            if (errno == EINTR) continue;
            return -1;
        }
        if (copied == 0) {
            errno = EIO;  /* the source is shorter than it said */
            return -1;
        }
        remaining -= copied;
    }
    return 0;
#else
    (void)destination_fd;
    (void)source_fd;
    (void)length;
    errno = ENOTSUP;
    return -1;
#endif
}
