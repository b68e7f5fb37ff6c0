/// Reading and verifying snapshot files (gzip-compressed full bodies).
///
/// ```swift
/// let header = try Snapshot.read(path: "Snapshots/countries.snapshot") { record in
///     try insert(record)   // called once per record, in id order
/// }
/// print(header.token, header.count, header.checksum)
/// ```
package enum Snapshot {
    /// The file name bake writes for `collection`.
    package static func fileName(for collection: String) -> String { "\(collection).snapshot" }

    /// Streams the snapshot at `path`, calling `body` for each record, and verifies it:
    /// it is a full body, its ids are unique and sorted, and its count and checksum match
    /// its records. Throws on the first problem, so `body`'s effects must be undone by the
    /// caller (e.g. by rolling back a transaction).
    @discardableResult
    package static func read(path: String, _ body: (Record) throws -> Void = { _ in }) throws -> BodyHeader {
        try verifyFull(BodyReader(nextChunk: try ChunkSources.gunzip(try ChunkSources.file(at: path))), body)
    }

    /// Verifies a full body from `reader` as ``read(path:_:)`` does.
    @discardableResult
    package static func verifyFull(_ reader: BodyReader, _ body: (Record) throws -> Void = { _ in }) throws -> BodyHeader {
        let header = try reader.readHeader()
        guard header.kind == .full else { throw BodyError.invalidField("kind", "must be \"full\" in a snapshot") }
        var checksum = StateChecksum.empty
        var previousID: String?
        while let record = try reader.nextRecord() {
            guard !record.isHidden else { throw BodyError.tombstoneInFullBody(id: record.id) }
            if let previousID, !previousID.utf8Precedes(record.id) {
                throw previousID == record.id
                    ? BodyError.duplicateRecord(id: record.id)
                    : BodyError.invalidField("records", "are not sorted by id at \"\(record.id)\"")
            }
            previousID = record.id
            checksum.add(record)
            try body(record)
        }
        guard reader.recordsRead == header.count else { throw BodyError.countMismatch(announced: header.count, found: reader.recordsRead) }
        guard checksum == header.checksum else { throw BodyError.checksumMismatch(expected: header.checksum, computed: checksum) }
        return header
    }
}
