/// What a `Range` header asks of a representation of `size` bytes (RFC 9110 §14.2): one
/// range is served as `206`; several, or one this server does not read, as the whole (which
/// RFC 9110 allows: a server may ignore `Range`); one that lies past the end as `416`.
///
/// ```swift
/// ByteRangeRequest(header: "bytes=100-", size: 1000)    // .partial(100..<1000)
/// ByteRangeRequest(header: "bytes=-10", size: 1000)     // .partial(990..<1000)
/// ByteRangeRequest(header: "bytes=2000-", size: 1000)   // .unsatisfiable
/// ```
package enum ByteRangeRequest: Equatable, Sendable {
    case whole
    case partial(Range<UInt64>)
    case unsatisfiable

    package init(header: String?, size: UInt64) {
        guard let header else {
            self = .whole
            return
        }
        let trimmed = header.trimmingSpaces
        guard trimmed.lowercased().hasPrefix("bytes=") else {
            self = .whole
            return
        }
        let spec = trimmed.dropFirst("bytes=".count)
        // Several ranges would need multipart/byteranges: the whole body answers them.
        guard !spec.contains(","), let dash = spec.firstIndex(of: "-") else {
            self = .whole
            return
        }
        let first = String(spec[..<dash]).trimmingSpaces
        let last = String(spec[spec.index(after: dash)...]).trimmingSpaces
        if first.isEmpty {
            // A suffix: the last N bytes.
            guard let suffix = UInt64(last) else {
                self = .whole
                return
            }
            guard suffix > 0, size > 0 else {
                self = .unsatisfiable
                return
            }
            self = .partial((size - min(suffix, size))..<size)
            return
        }
        guard let start = UInt64(first) else {
            self = .whole
            return
        }
        var end = size
        if !last.isEmpty {
            guard let inclusive = UInt64(last), inclusive >= start else {
                self = .whole
                return
            }
            end = min(size, inclusive &+ 1)
        }
        self = start < size ? .partial(start..<end) : .unsatisfiable
    }
}
