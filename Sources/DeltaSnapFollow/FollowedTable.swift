import DeltaSnapCore

/// A source table `deltasnap follow` publishes, and how: `--table SCHEMA.TABLE[=COLLECTION]`,
/// with the `--partition-by COLUMN` that follows it.
///
/// ```swift
/// let table = try FollowedTable(parsing: "public.attempts=attempts", partitionBy: "user_id")
/// table.qualifiedName   // "public.attempts"
/// ```
package struct FollowedTable: Sendable, Equatable {
    package var schema: String
    package var table: String
    package var collection: String
    package var partitionBy: String?

    /// `schema.table`, as pgoutput names it.
    package var qualifiedName: String { schema + "." + table }

    package init(schema: String, table: String, collection: String, partitionBy: String? = nil) {
        self.schema = schema
        self.table = table
        self.collection = collection
        self.partitionBy = partitionBy
    }

    /// `[SCHEMA.]TABLE[=COLLECTION]`: the schema defaults to `public`, the collection to the
    /// table's name.
    package init(parsing spec: String, partitionBy: String?) throws(FollowError) {
        let sides = spec.split(separator: "=", maxSplits: 1, omittingEmptySubsequences: false).map(String.init)
        let names = sides[0].split(separator: ".", omittingEmptySubsequences: false).map(String.init)
        guard (1...2).contains(names.count), names.allSatisfy({ !$0.isEmpty }) else {
            throw .badOption("--table \(spec): expected SCHEMA.TABLE[=COLLECTION]")
        }
        schema = names.count == 2 ? names[0] : "public"
        table = names.last!
        collection = sides.count == 2 ? sides[1] : table
        do {
            try CollectionName.validate(collection)
        } catch {
            throw .badOption("--table \(spec): \"\(collection)\" is not a collection name ([a-z0-9][a-z0-9_-]{0,63}); name one with =COLLECTION")
        }
        if let partitionBy, partitionBy.isEmpty { throw .badOption("--partition-by needs a column name") }
        self.partitionBy = partitionBy
    }
}

/// What can stop a follower, each with what to do about it.
package enum FollowError: Error, Equatable, CustomStringConvertible {
    case badOption(String)
    /// The source cannot be followed as configured (wal_level, a missing slot, a table
    /// without a primary key …): the message says what to change.
    case source(String)

    package var description: String {
        switch self {
        case .badOption(let message), .source(let message): message
        }
    }
}
