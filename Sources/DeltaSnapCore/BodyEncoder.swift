/// Writes a body or snapshot in the v1 wire format, one record at a time.
///
/// The layout is fixed (metadata first, one record per line) so the same state always gives
/// the same bytes — that is what makes bakes reproducible.
///
/// ```swift
/// var encoder = BodyEncoder(header: header)
/// var out = encoder.start()
/// for record in records { encoder.append(record, into: &out) }
/// encoder.finish(into: &out)
/// ```
package struct BodyEncoder: Sendable {
    package let header: BodyHeader
    package private(set) var written = 0

    package init(header: BodyHeader) {
        self.header = header
    }

    /// The bytes before the first record: the metadata object up to `"records":[`.
    package func start() -> [UInt8] {
        var out: [UInt8] = []
        out.reserveCapacity(512)
        out.append(contentsOf: #"{"format":"#.utf8)
        out.append(contentsOf: String(header.format).utf8)
        field("collection", header.collection, into: &out)
        field("kind", header.kind.rawValue, into: &out)
        if let base = header.base { field("base", base, into: &out) }
        field("token", header.token, into: &out)
        field("lastModified", header.lastModified, into: &out)
        field("checksum", header.checksum.description, into: &out)
        out.append(contentsOf: #","count":"#.utf8)
        out.append(contentsOf: String(header.count).utf8)
        out.append(contentsOf: #","records":["#.utf8)
        return out
    }

    private func field(_ name: String, _ value: String, into out: inout [UInt8]) {
        out.append(UInt8(ascii: ","))
        CanonicalJSON.writeString(name, into: &out)
        out.append(UInt8(ascii: ":"))
        CanonicalJSON.writeString(value, into: &out)
    }

    /// Appends one record's canonical bytes (a tombstone for a hidden record).
    package mutating func append(_ record: Record, into out: inout [UInt8]) {
        appendCanonical(record.bytes, into: &out)
    }

    /// Appends bytes that are already a canonical record.
    package mutating func appendCanonical(_ bytes: some Collection<UInt8>, into out: inout [UInt8]) {
        out.append(contentsOf: written == 0 ? Self.firstSeparator : Self.separator)
        out.append(contentsOf: bytes)
        written += 1
    }

    /// Closes `records` and the object. Checks that as many records were written as announced.
    package func finish(into out: inout [UInt8]) {
        precondition(written == header.count, "body announced \(header.count) records but \(written) were written")
        out.append(contentsOf: written == 0 ? Self.emptyEnd : Self.end)
    }

    private static let firstSeparator: [UInt8] = [UInt8(ascii: "\n")]
    private static let separator: [UInt8] = [UInt8(ascii: ","), UInt8(ascii: "\n")]
    private static let end: [UInt8] = Array("\n]}\n".utf8)
    private static let emptyEnd: [UInt8] = Array("]}\n".utf8)
}
