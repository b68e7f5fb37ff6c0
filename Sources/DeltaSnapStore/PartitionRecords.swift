import DeltaSnapCore

/// The records of one partition in a partitioned import.
public struct PartitionRecords: Sendable {
    /// `NAME/KEY`.
    public var path: String
    public var records: [Record]

    public init(path: String, records: [Record]) {
        self.path = path
        self.records = records
    }

    /// Reads every record of `stream` and groups it into partitions of `collection` by the
    /// value of `field` (a string or a number that is a valid partition key), in path order.
    /// The whole input is read before anything is written, so a bad line commits nothing.
    ///
    /// ```swift
    /// let groups = try PartitionRecords.group(stream, collection: "sets", by: "set")
    /// // {"id":"q1","set":"8271"} lands in sets/8271
    /// ```
    public static func group(
        _ stream: RecordStream, collection: String, by field: String, progress: ((Int) -> Void)? = nil, progressInterval: Int = 100_000
    ) throws -> [PartitionRecords] {
        try CollectionName.validate(collection)
        var groups: [String: [Record]] = [:]
        while let record = try stream.next() {
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
            groups[path.description, default: []].append(record)
            if stream.count % progressInterval == 0 { progress?(stream.count) }
        }
        // The paths sorted alone: moving whole groups while sorting cost as much as reading them.
        return groups.keys.sorted { $0.utf8Precedes($1) }.map { PartitionRecords(path: $0, records: groups[$0]!) }
    }
}
