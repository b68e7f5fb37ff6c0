import Dispatch
import Foundation
import Logging
import NIOConcurrencyHelpers

/// A swift-log handler that writes lines in `StreamLogHandler`'s format, but the way nginx
/// writes its access log with `buffer=`: formatted cheaply into memory on the answering
/// thread, written to the file in batches by a timer of its own (every 100 ms, or as soon
/// as 64 KiB are waiting). `StreamLogHandler` formats the time with `strftime` and makes one
/// `write` system call per line; at one `request` line per answer that cost a default
/// `deltasnap serve` 39 % of its delta rate (docs/BENCHMARKS.md).
///
/// Warnings and worse are written at once, with everything buffered before them, so an
/// error is never held back; at most the last 100 ms of `info` lines are lost when the
/// process is killed (as with nginx's buffer). Call ``BufferedLogOutput/flush()`` before a
/// clean exit.
///
/// ```swift
/// let output = BufferedLogOutput.standardError
/// LoggingSystem.bootstrap { label in BufferedLogHandler(label: label, output: output) }
/// defer { output.flush() }
/// ```
public struct BufferedLogHandler: LogHandler {
    public var logLevel: Logger.Level = .info
    public var metadata: Logger.Metadata = [:]
    public var metadataProvider: Logger.MetadataProvider?
    private let label: String
    private let output: BufferedLogOutput

    public init(label: String, output: BufferedLogOutput, metadataProvider: Logger.MetadataProvider? = LoggingSystem.metadataProvider) {
        self.label = label
        self.output = output
        self.metadataProvider = metadataProvider
    }

    public subscript(metadataKey key: String) -> Logger.Metadata.Value? {
        get { metadata[key] }
        set { metadata[key] = newValue }
    }

    public func log(event: LogEvent) {
        var merged = metadata
        if let provided = metadataProvider?.get() { merged.merge(provided) { _, new in new } }
        if let explicit = event.metadata { merged.merge(explicit) { _, new in new } }
        if let error = event.error {
            merged["error.message"] = "\(error)"
            merged["error.type"] = "\(String(reflecting: type(of: error)))"
        }
        var line = output.timestamp()
        line += " \(event.level)"
        if !label.isEmpty { line += " \(label)" }
        line += ":"
        for (key, value) in merged.sorted(by: { $0.key < $1.key }) { line += " \(key)=\(value)" }
        line += " [\(event.source)] \(event.message)\n"
        output.append(line, urgent: event.level >= .warning)
    }
}

/// The file a ``BufferedLogHandler`` writes to, its buffer and its flush timer; share one per
/// file.
public final class BufferedLogOutput: Sendable {
    /// Standard error, as swift-log's default handler writes.
    public static let standardError = BufferedLogOutput(fileDescriptor: STDERR_FILENO)

    static let capacity = 64 * 1024
    private let fileDescriptor: Int32
    /// The buffer and the timestamp of the current second, as one plain value.
    private struct State: Sendable {
        var pending: [UInt8] = []
        var second: Int64 = -1
        var formattedSecond = ""

        /// `StreamLogHandler`'s timestamp for `now`, formatted once per second.
        mutating func timestamp(_ now: Int64) -> String {
            if now != second {
                second = now
                var time = time_t(now)
                var parts = tm()
                gmtime_r(&time, &parts)
                formattedSecond = String(
                    format: "%04d-%02d-%02dT%02d:%02d:%02d+0000",
                    parts.tm_year + 1900, parts.tm_mon + 1, parts.tm_mday, parts.tm_hour, parts.tm_min, parts.tm_sec)
            }
            return formattedSecond
        }
    }

    private let state: NIOLockedValueBox<State>
    /// Held while a batch is taken and written — across the write(2) — so batches reach the
    /// file in order; it guards no value, so it is a plain lock.
    private let writing = NIOLock()
    // The timer is set up once in init and only cancelled after.
    nonisolated(unsafe) private let timer: DispatchSourceTimer

    /// Writes to `fileDescriptor` (left open), flushing every `interval`.
    public init(fileDescriptor: Int32, interval: DispatchTimeInterval = .milliseconds(100)) {
        self.fileDescriptor = fileDescriptor
        var initial = State()
        initial.pending.reserveCapacity(Self.capacity)
        state = NIOLockedValueBox(initial)
        timer = DispatchSource.makeTimerSource(queue: DispatchQueue(label: "deltasnap.log-flush", qos: .utility))
        timer.schedule(deadline: .now() + interval, repeating: interval, leeway: .milliseconds(20))
        timer.setEventHandler { [weak self] in self?.flush() }
        timer.resume()
    }

    deinit {
        timer.cancel()
        flush()
    }

    /// Adds one formatted line; `urgent` writes it (and what waits before it) now.
    func append(_ line: String, urgent: Bool) {
        let due = state.withLockedValue { state in
            state.pending.append(contentsOf: line.utf8)
            return urgent || state.pending.count >= Self.capacity
        }
        if due { flush() }
    }

    /// Adds a `request` line (``RequestLog``) formatted straight into the buffer: the same
    /// bytes ``BufferedLogHandler`` writes for `logger.info("request", metadata: …)` with
    /// these six keys, in their sorted order.
    /// `microseconds` is written as milliseconds with three decimals (`duration_ms=0.042`).
    func appendRequest(
        label: String, bytes: Int?, microseconds: Int64, method: String, path: String, requestID: String, status: Int
    ) {
        // `time(2)`, not `Date()`: one call per logged answer, and only the second is printed.
        let now = Int64(time(nil))
        let due = state.withLockedValue { state in
            let stamp = state.timestamp(now)
            return Self.appendRequest(
                to: &state.pending, stamp: stamp, label: label, bytes: bytes, microseconds: microseconds, method: method,
                path: path, requestID: requestID, status: status)
        }
        if due { flush() }
    }

    /// The bytes of one `request` line, appended to `pending`; whether the buffer is full.
    private static func appendRequest(
        to pending: inout [UInt8], stamp: String, label: String, bytes: Int?, microseconds: Int64, method: String, path: String,
        requestID: String, status: Int
    ) -> Bool {
        pending.append(contentsOf: stamp.utf8)
        pending.append(contentsOf: " info ".utf8)
        pending.append(contentsOf: label.utf8)
        pending.append(contentsOf: ": bytes=".utf8)
        if let bytes { Self.appendDecimal(bytes, to: &pending) } else { pending.append(contentsOf: "streamed".utf8) }
        pending.append(contentsOf: " duration_ms=".utf8)
        let micros = max(0, microseconds)
        Self.appendDecimal(Int(micros / 1000), to: &pending)
        pending.append(UInt8(ascii: "."))
        let fraction = Int(micros % 1000)
        pending.append(UInt8(ascii: "0") + UInt8(fraction / 100))
        pending.append(UInt8(ascii: "0") + UInt8(fraction / 10 % 10))
        pending.append(UInt8(ascii: "0") + UInt8(fraction % 10))
        pending.append(contentsOf: " method=".utf8)
        pending.append(contentsOf: method.utf8)
        pending.append(contentsOf: " path=".utf8)
        pending.append(contentsOf: path.utf8)
        pending.append(contentsOf: " request_id=".utf8)
        pending.append(contentsOf: requestID.utf8)
        pending.append(contentsOf: " status=".utf8)
        Self.appendDecimal(status, to: &pending)
        pending.append(contentsOf: " [DeltaSnapServer] request\n".utf8)
        return pending.count >= Self.capacity
    }

    private static func appendDecimal(_ value: Int, to bytes: inout [UInt8]) {
        guard value != 0 else { return bytes.append(UInt8(ascii: "0")) }
        if value < 0 { bytes.append(UInt8(ascii: "-")) }
        var magnitude = value.magnitude
        let start = bytes.count
        while magnitude > 0 {
            bytes.append(UInt8(ascii: "0") + UInt8(magnitude % 10))
            magnitude /= 10
        }
        bytes[start...].reverse()
    }

    /// Writes everything buffered.
    public func flush() {
        writing.withLock {
            let bytes: [UInt8] = state.withLockedValue { state in
                let bytes = state.pending
                state.pending.removeAll(keepingCapacity: true)
                return bytes
            }
            if !bytes.isEmpty { write(bytes) }
        }
    }

    /// `StreamLogHandler`'s timestamp (`2026-11-24T17:43:16+0000`, UTC), formatted once per second.
    func timestamp() -> String {
        let now = Int64(Date().timeIntervalSince1970)
        return state.withLockedValue { $0.timestamp(now) }
    }

    private func write(_ bytes: [UInt8]) {
        bytes.withUnsafeBytes { buffer in
            var offset = 0
            while offset < buffer.count {
                let written = Foundation.write(fileDescriptor, buffer.baseAddress! + offset, buffer.count - offset)
                if written > 0 {
                    offset += written
                } else if written < 0 && errno == EINTR {
                    continue
                } else {
                    return  // a closed or full descriptor: drop the batch rather than block answers
                }
            }
        }
    }
}
