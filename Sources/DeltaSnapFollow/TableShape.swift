import DeltaSnapCore
import Foundation

/// A followed table's columns (from its latest `Relation` message or the catalog) and its
/// primary key: how a row's values become a record in a collection or partition.
///
/// Rules (docs/FOLLOW.md): the record's `id` is the primary key's text (a composite key's
/// parts joined by `/`, each with `%` and `/` percent-encoded; in a partitioned table, the
/// key less the partition column); every column is a member
/// (``PgTextMapping``); with `--partition-by`, the row goes to `COLLECTION/VALUE`.
package struct TableShape: Sendable, Equatable {
    package var table: FollowedTable
    package var columns: [PgRelation.Column]
    /// The primary key's columns, in key order.
    package var key: [String]

    package init(table: FollowedTable, columns: [PgRelation.Column], key: [String]) throws(FollowError) {
        guard !key.isEmpty else {
            throw .source("\(table.qualifiedName) has no primary key: a record needs one to be named by (ALTER TABLE \(table.qualifiedName) ADD PRIMARY KEY (…))")
        }
        let names = Set(columns.map(\.name))
        if names.contains("hidden") {
            throw .source("\(table.qualifiedName) has a column named \"hidden\", which DeltaSnap reserves for deleted records; follow a view or rename it")
        }
        // Within a partition, the partition column names nothing: the rest of the key does.
        let identifying = key.count > 1 ? key.filter { $0 != table.partitionBy } : key
        if names.contains("id") && identifying != ["id"] {
            throw .source("\(table.qualifiedName) has a column named \"id\" that is not what names its rows (\(identifying.joined(separator: ", "))); a record's id is its primary key")
        }
        if let partition = table.partitionBy, !names.contains(partition) {
            throw .source("--partition-by \(partition): \(table.qualifiedName) has no such column")
        }
        self.table = table
        self.columns = columns
        self.key = key
        self.identifying = identifying
    }

    /// The key columns a record's id is made of: the primary key, less the partition
    /// column when that is part of it (`attempts/alice`'s rows are named by `id` alone).
    package var identifying: [String]

    /// A row as a record's members, with the columns an update left unsent (large values
    /// it did not change: their values are the record's as published).
    package struct Row: Sendable, Equatable {
        package var path: String
        package var id: String
        package var members: [JSONMember]
        package var unchanged: [String]

        /// The record, once every member is known: those left unsent taken from `previous`
        /// (the row as published, or as this transaction left it); nil when one is missing.
        package func record(filling previous: Record?) -> Record? {
            var members = members
            if !unchanged.isEmpty {
                guard let previous, !previous.isHidden, case .object(let old)? = try? JSONReader(bytes: previous.bytes).readValue() else { return nil }
                for name in unchanged {
                    guard let value = old.first(where: { $0.key == name }) else { return nil }
                    members.append(value)
                }
            }
            // Canonical bytes list members in key order (docs/PROTOCOL.md §2).
            members.sort { $0.key.utf8Precedes($1.key) }
            return try? Record(parsing: .object(members))
        }
    }

    /// Where a row lives and its members; a reason when it cannot be published (a `NULL`
    /// key, a partition value that is no partition key).
    package func row(from values: [PgValue]) -> Result<Row, RowProblem> {
        switch path(of: values) {
        case .failure(let problem): return .failure(problem)
        case .success(let (path, id)):
            var row = Row(path: path, id: id, members: [JSONMember("id", .string(id))], unchanged: [])
            for (column, value) in zip(columns, values) where column.name != "id" {
                switch value {
                case .null: row.members.append(JSONMember(column.name, .null))
                case .text(let text): row.members.append(JSONMember(column.name, PgTextMapping.value(text, type: column.typeOID)))
                case .unchangedToast: row.unchanged.append(column.name)
                }
            }
            return .success(row)
        }
    }

    /// Where a row lives and its record, when every value was sent (the copy's rows).
    package func record(from values: [PgValue]) -> Result<(path: String, record: Record), RowProblem> {
        switch row(from: values) {
        case .failure(let problem): return .failure(problem)
        case .success(let row):
            if let column = row.unchanged.first { return .failure(.unchangedValue(column)) }
            guard let record = row.record(filling: nil) else { return .failure(.unpublishable("not a record")) }
            return .success((row.path, record))
        }
    }

    /// The collection (or partition) and id a row's values name; the key and the partition
    /// column are all a delete's old tuple needs to carry.
    package func path(of values: [PgValue]) -> Result<(path: String, id: String), RowProblem> {
        var parts: [String] = []
        for name in identifying {
            guard let index = columns.firstIndex(where: { $0.name == name }), index < values.count, case .text(let text) = values[index] else {
                return .failure(.missingKey(name))
            }
            parts.append(text)
        }
        let id = parts.count == 1 ? parts[0] : parts.map(Self.escapedKeyPart).joined(separator: "/")
        guard let partition = table.partitionBy else { return .success((table.collection, id)) }
        guard let index = columns.firstIndex(where: { $0.name == partition }), index < values.count, case .text(let value) = values[index] else {
            return .failure(.missingPartition(partition))
        }
        guard let path = CollectionPath(name: table.collection, key: value) else { return .failure(.badPartition(partition, value)) }
        return .success((path.description, id))
    }

    static func escapedKeyPart(_ part: String) -> String {
        part.replacingOccurrences(of: "%", with: "%25").replacingOccurrences(of: "/", with: "%2F")
    }

    /// Why one row is not published (logged; the rest of its transaction is).
    package enum RowProblem: Error, Equatable, CustomStringConvertible {
        case missingKey(String)
        case missingPartition(String)
        case badPartition(String, String)
        case unchangedValue(String)
        case unpublishable(String)

        package var description: String {
            switch self {
            case .missingKey(let column): "its key column \(column) is NULL or was not sent"
            case .missingPartition(let column): "its partition column \(column) is NULL or was not sent (the replica identity must include it: make it part of the primary key, or REPLICA IDENTITY FULL)"
            case .badPartition(let column, let value): "\(column) is \"\(value)\", not a partition key (1 to 128 of A-Z a-z 0-9 . _ : @ -)"
            case .unchangedValue(let column): "the update left the large value of \(column) unchanged and unsent, and no published record holds it"
            case .unpublishable(let reason): reason
            }
        }
    }
}
