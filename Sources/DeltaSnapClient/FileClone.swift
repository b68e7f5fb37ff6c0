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
/// it copies bytes, so FICLONE (Btrfs, XFS) is asked first.
enum FileClone {
    /// Copies `source` to `destination`, which must not exist.
    static func copy(_ source: String, to destination: String) throws {
        #if os(Linux)
        if clone(source, to: destination) { return }
        #endif
        try FileManager.default.copyItem(atPath: source, toPath: destination)
    }

    #if os(Linux)
    /// Whether `destination` was created as a clone of `source` (nothing is left behind when not).
    private static func clone(_ source: String, to destination: String) -> Bool {
        let input = open(source, O_RDONLY | O_CLOEXEC)
        guard input >= 0 else { return false }
        defer { close(input) }
        let output = open(destination, O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0o644)
        guard output >= 0 else { return false }
        let cloned = deltasnap_ficlone(output, input) == 0
        close(output)
        if !cloned { unlink(destination) }
        return cloned
    }
    #endif
}
