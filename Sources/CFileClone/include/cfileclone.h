#ifndef CFILECLONE_H
#define CFILECLONE_H

/// Makes `destination_fd` a copy-on-write clone of `source_fd` (Linux FICLONE: Btrfs, XFS,
/// bcachefs). Returns 0 on success, -1 with errno set where the file system cannot
/// (EOPNOTSUPP, EXDEV…) or on other systems (ENOTSUP). A C function because Swift cannot
/// call the variadic ioctl(2).
int deltasnap_ficlone(int destination_fd, int source_fd);

/// Copies `length` bytes from the start of `source_fd` to `destination_fd` inside the
/// kernel (Linux copy_file_range(2): no trip through user space, and a server-side or
/// block-level copy where the file system offers one). Returns 0 on success, -1 with errno
/// set (ENOSYS, EXDEV… or ENOTSUP on other systems): the caller then copies by itself.
int deltasnap_copy_range(int destination_fd, int source_fd, long long length);

#endif
