import DeltaSnapCore

/// A bad input line: where it is and why, as `FILE:LINE: reason`.
public struct ImportError: Error, Equatable, Sendable, CustomStringConvertible {
    public var source: String
    public var line: Int
    public var reason: String
    /// Whether the input held no record at all while replacing: nothing was committed.
    public var isEmptyReplace = false
    /// The store's rule the line broke (``StoreError/Code/missingAttachment``, …); nil for a
    /// line that is no valid record.
    public var code: StoreError.Code?

    public init(source: String, line: Int, reason: String) {
        self.source = source
        self.line = line
        self.reason = reason
    }

    public var description: String { "\(source):\(line): \(reason)" }
}
