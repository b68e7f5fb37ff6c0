/// Why a byte sequence is not the JSON DeltaSnap expected, and where.
public struct JSONParseError: Error, Equatable, Sendable, CustomStringConvertible {
    /// 1-based line of the offending byte.
    public var line: Int
    /// 0-based byte offset from the start of the input.
    public var offset: Int
    public var reason: String

    public init(line: Int, offset: Int, reason: String) {
        self.line = line
        self.offset = offset
        self.reason = reason
    }

    public var description: String { "invalid JSON at line \(line), byte \(offset): \(reason)" }
}
