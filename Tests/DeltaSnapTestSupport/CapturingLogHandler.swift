import Logging

/// A swift-log handler that keeps every line, so a test can read what a server logged.
///
/// ```swift
/// let capture = CapturingLogHandler.Lines()
/// var logger = Logger(label: "t") { _ in CapturingLogHandler(lines: capture) }
/// logger.logLevel = .info
/// ```
public struct CapturingLogHandler: LogHandler {
    /// One logged line: its level, message and metadata (merged with the logger's).
    public struct Line: Sendable {
        public var level: Logger.Level
        public var message: String
        public var metadata: [String: String]
    }

    public typealias Lines = Locked<[Line]>

    public let lines: Lines
    public var metadata: Logger.Metadata = [:]
    public var logLevel: Logger.Level = .trace

    public init(lines: Lines) { self.lines = lines }

    public subscript(metadataKey key: String) -> Logger.Metadata.Value? {
        get { metadata[key] }
        set { metadata[key] = newValue }
    }

    public func log(event: LogEvent) {
        let merged = metadata.merging(event.metadata ?? [:]) { _, new in new }
        let line = Line(level: event.level, message: event.message.description, metadata: merged.mapValues { $0.description })
        lines.withLock { $0.append(line) }
    }
}
