import Foundation
#if canImport(Glibc)
import Glibc
#elseif canImport(Darwin)
import Darwin
#endif

/// An exclusive advisory lock (flock(2)) on a small file, held until ``unlock()``: how the
/// processes that share a replica path (an app, its extension, `deltasnap`) take turns at
/// installing the copy of a bundled replica.
final class FileLock {
    private let descriptor: Int32

    /// Blocks until the lock on `path` (created if missing) is this process's.
    init(path: String) throws {
        descriptor = open(path, O_RDWR | O_CREAT | O_CLOEXEC, 0o644)
        guard descriptor >= 0 else { throw FileLockError(path: path, errno: errno) }
        while flock(descriptor, LOCK_EX) != 0 {
            guard errno == EINTR else {
                let failure = errno
                close(descriptor)
                throw FileLockError(path: path, errno: failure)
            }
        }
    }

    func unlock() {
        _ = flock(descriptor, LOCK_UN)
        close(descriptor)
    }
}

/// The lock file could not be opened or locked.
struct FileLockError: Error, CustomStringConvertible {
    var path: String
    var errno: Int32
    var description: String { "\(path): cannot take the lock (errno \(errno))" }
}
