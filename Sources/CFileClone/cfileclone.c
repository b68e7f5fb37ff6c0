#include "cfileclone.h"
#include <errno.h>
#ifdef __linux__
#include <sys/ioctl.h>
#include <linux/fs.h>
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
