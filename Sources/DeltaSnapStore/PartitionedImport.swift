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
            let value = try? JSONReader(bytes: record.bytes).readValue()
            let key: String
            switch value?[field] {
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
        return groups.map { PartitionRecords(path: $0.key, records: $0.value) }.sorted { $0.path.utf8Precedes($1.path) }
    }
}

extension Store {
    /// Every partition's records in one transaction, one version per partition that
    /// changed: a hundred thousand small partitions commit at the cost of one.
    public func importPartitions(_ partitions: [PartitionRecords], replace: Bool) throws -> [WriteResult] {
        try db.transaction(.immediate) {
            try partitions.map { partition in
                try CollectionPath.validate(partition.path)
                let writer = try CollectionWriter(db: db, statements: statements, collection: partition.path, configuration: configuration)
                for record in partition.records { try writer.put(record) }
                if replace { try writer.hideRecordsNotPut() }
                return try writer.commit()
            }
        }
    }
}
