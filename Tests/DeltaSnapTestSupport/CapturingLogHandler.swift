import Logging

/// A swift-log handler that keeps every line, so a test can read what a server logged.
///
/// ```swift
/// let capture = CapturingLogHandler.Lines()
/// var logger = Logger(label: "t") { _ in CapturingLogHandler(lines: capture) }
/// logger.logLevel = .info
/// ```
package struct CapturingLogHandler: LogHandler {
    /// One logged line: its level, message and metadata (merged with the logger's).
    package struct Line: Sendable {
        package var level: Logger.Level
        package var message: String
        package var metadata: [String: String]
    }

    package typealias Lines = Locked<[Line]>

    package let lines: Lines
    package var metadata: Logger.Metadata = [:]
    package var logLevel: Logger.Level = .trace

    package init(lines: Lines) { self.lines = lines }

    package subscript(metadataKey key: String) -> Logger.Metadata.Value? {
        get { metadata[key] }
        set { metadata[key] = newValue }
    }

    package func log(event: LogEvent) {
        let merged = metadata.merging(event.metadata ?? [:]) { _, new in new }
        let line = Line(level: event.level, message: event.message.description, metadata: merged.mapValues { $0.description })
        lines.withLock { $0.append(line) }
    }
}
