#ifndef CFILECLONE_H
#define CFILECLONE_H

/// Makes `destination_fd` a copy-on-write clone of `source_fd` (Linux FICLONE: Btrfs, XFS,
/// bcachefs). Returns 0 on success, -1 with errno set where the file system cannot
/// (EOPNOTSUPP, EXDEV…) or on other systems (ENOTSUP). A C function because Swift cannot
/// call the variadic ioctl(2).
int deltasnap_ficlone(int destination_fd, int source_fd);

#endif
