import DeltaSnapCore

/// The records of one partition in a partitioned import.
package struct PartitionRecords: Sendable {
    /// `NAME/KEY`.
    package var path: String
    package var records: [Record]
    /// Where each record came from (its input's name, and its line there) when it was read
    /// from a file: a store's refusal of a record then names its line, as a streamed
    /// import's does. Nil for records built in memory (a follower's rows).
    package var origin: (source: String, lines: [Int])?

    package init(path: String, records: [Record]) {
        self.path = path
        self.records = records
    }

    /// The store's refusal of the record at `index`: at its line when the records came from a
    /// file (``ImportError`` with the refusal's code), as it is otherwise.
    package func refusal(_ error: StoreError, of index: Int) -> any Error {
        guard let origin, origin.lines.indices.contains(index) else { return error }
        var failure = ImportError(source: origin.source, line: origin.lines[index], reason: error.message)
        failure.code = error.code
        return failure
    }

    /// The records of `stream` spread over partitions of `collection` by the value of `field`
    /// (a string or a number that is a valid partition key), as
    /// ``StoreWriter/importStreams(_:replace:recording:)`` takes them: partitions in path
    /// order, each one's records in id order, sorted in bounded memory (``RecordSorter``:
    /// runs spilled to temporary files). The whole input is read, and every line's JSON and
    /// partition checked, before this returns; a repeated id within a partition is refused
    /// at its later line as the store reads it. Either way nothing is committed. `seeing` is told each record's
    /// partition as it is read (what a reviewed collection's import prepares first).
    ///
    /// ```swift
    /// let partitions = try PartitionRecords.streams(stream, collection: "sets", by: "set")
    /// // {"id":"q1","set":"8271"} lands in sets/8271
    /// try await store.importStreams(partitions, replace: false, recording: nil)
    /// ```
    package static func streams(
        _ stream: RecordStream, collection: String, by field: String, memoryBudget: Int = RecordSorter.defaultMemoryBudget,
        progress: ((Int) -> Void)? = nil, seeing: ((String) -> Void)? = nil
    ) throws -> @Sendable () throws -> PathRecords? {
        try CollectionName.validate(collection)
        return try RecordSorter.grouped(stream, memoryBudget: memoryBudget, progress: progress) { record in
            let path = try partition(of: record, in: stream, collection: collection, by: field)
            seeing?(path)
            return path
        }
    }

    /// The partition of `collection` that `record` (just read from `stream`) names by `field`.
    private static func partition(of record: Record, in stream: RecordStream, collection: String, by field: String) throws -> String {
        // A tombstone names its partition as any record does (`{"id":"q1","set":"8271","hidden":true}`).
        let value = try? JSONReader(bytes: record.isHidden ? stream.lastWritten : record.bytes).member(field)
        let key: String
        switch value {
        case .string(let text)?: key = text
        case .number(let literal)?: key = literal
        case nil: throw stream.failure("record \"\(record.id)\" has no \"\(field)\" to partition by")
        default: throw stream.failure("record \"\(record.id)\": \"\(field)\" must be a string or a number to name a partition")
        }
        guard let path = CollectionPath(name: collection, key: key) else {
            throw stream.failure("record \"\(record.id)\": \"\(field)\" is \"\(key)\", not a partition key (1 to 128 of A-Z a-z 0-9 . _ : @ -)")
        }
        return path.description
    }
}
