#if canImport(Glibc)
import Glibc
#elseif canImport(Darwin)
import Darwin
#endif
import DeltaSnapCore
import Foundation

/// The write end of the pipe a stop signal's handler writes its number to (the one thing a
/// signal handler may safely do).
nonisolated(unsafe) private var stopSignalPipe: (read: Int32, write: Int32) = (-1, -1)

/// SIGINT and SIGTERM as a stop request, for a long-running command (`follow`). Handlers are
/// installed explicitly, so the signals arrive even when the process was started with them
/// ignored (a shell script's `deltasnap follow … &` leaves SIGINT ignored): the handler writes
/// the signal's number to a pipe, and a thread of its own reads it and calls `onStop` once.
enum StopSignals {
    static func install(_ onStop: @escaping @Sendable (String) -> Void) {
        var fds: [Int32] = [-1, -1]
        guard pipe(&fds) == 0 else { return }
        stopSignalPipe = (fds[0], fds[1])
        let handler: @convention(c) (Int32) -> Void = { signo in
            var byte = UInt8(truncatingIfNeeded: signo)
            _ = write(stopSignalPipe.write, &byte, 1)
        }
        signal(SIGINT, handler)
        signal(SIGTERM, handler)
        let readEnd = fds[0]
        Thread.detachNewThread {
            var byte: UInt8 = 0
            while true {
                let count = read(readEnd, &byte, 1)
                if count == 1 { break }
                if count < 0 && errno == EINTR { continue }
                return
            }
            onStop(Int32(byte) == SIGINT ? "SIGINT" : "SIGTERM")
        }
    }
}

/// Which stop signal arrived, if one did.
final class StopRequest: Sendable {
    private let received = LockedValue<String?>(nil)

    func set(_ name: String) { received.withLock { $0 = $0 ?? name } }
    var name: String? { received.withLock { $0 } }
}
