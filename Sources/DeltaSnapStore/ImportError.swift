import DeltaSnapCore

/// A bad input line: where it is and why, as `FILE:LINE: reason`.
package struct ImportError: Error, Equatable, Sendable, CustomStringConvertible {
    package var source: String
    package var line: Int
    package var reason: String
    /// Whether the input held no record at all while replacing: nothing was committed.
    package var isEmptyReplace = false
    /// The store's rule the line broke (``StoreError/Code/missingAttachment``, …); nil for a
    /// line that is no valid record.
    package var code: StoreError.Code?

    package init(source: String, line: Int, reason: String) {
        self.source = source
        self.line = line
        self.reason = reason
    }

    package var description: String { "\(source):\(line): \(reason)" }
}
