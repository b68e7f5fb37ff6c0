import CFileClone
import Foundation
#if canImport(Glibc)
import Glibc
#elseif canImport(Darwin)
import Darwin
#endif

/// Copies a bundled replica to its own path when the app first changes its data: a
/// copy-on-write clone where the file system can — O(1) whatever the size — and a byte copy
/// elsewhere. On Apple platforms `FileManager.copyItem` clones on APFS by itself; on Linux
/// it copies through user space, so FICLONE (Btrfs, XFS) is asked first, then the kernel's
/// own copy (`copy_file_range`), and only then FileManager.
enum FileClone {
    /// Copies `source` to `destination`, which must not exist.
    static func copy(_ source: String, to destination: String) throws {
        #if os(Linux)
        if kernelCopy(source, to: destination) { return }
        #endif
        try FileManager.default.copyItem(atPath: source, toPath: destination)
    }

    #if os(Linux)
    /// Whether `destination` was created as a clone or an in-kernel copy of `source`
    /// (nothing is left behind when not).
    private static func kernelCopy(_ source: String, to destination: String) -> Bool {
        let input = open(source, O_RDONLY | O_CLOEXEC)
        guard input >= 0 else { return false }
        defer { close(input) }
        var status = stat()
        guard fstat(input, &status) == 0 else { return false }
        let output = open(destination, O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0o644)
        guard output >= 0 else { return false }
        let copied = deltasnap_ficlone(output, input) == 0 || deltasnap_copy_range(output, input, Int64(status.st_size)) == 0
        close(output)
        if !copied { unlink(destination) }
        return copied
    }
    #endif
}
