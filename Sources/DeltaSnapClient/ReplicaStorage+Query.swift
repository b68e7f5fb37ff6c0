import DeltaSnapCore
import DeltaSnapSQLite

extension ReplicaStorage {
    /// Indexes `field` of the server records, for ``ReplicaQuery`` filters and orders on it.
    func createIndex(on field: String) throws {
        let expression = try ReplicaQuery.expression(field, column: "body")
        guard field != Record.idKey else { return }  // the primary key already is one
        let name = "records_by_" + field.split(separator: ".").joined(separator: "__")
        // Led by the scope in a file with the column, so a query over one partition uses it.
        let columns = scope.hasColumn ? "collection, \(expression)" : expression
        guard try db.scalarInt("SELECT count(*) FROM sqlite_master WHERE type = 'index' AND name = '\(name)'") == 0 else { return }
        try writeTransaction { try db.execute("CREATE INDEX IF NOT EXISTS \(name) ON records(\(columns))") }
        // Statistics, sampled (bounded cost whatever the size): without them SQLite takes the
        // scope for a selective column and walks the primary key (scope, id) rather than sort.
        try db.execute("PRAGMA analysis_limit=1000; ANALYZE records")
    }

    /// Calls `body` with the canonical bytes of each record `query` selects, pending local
    /// writes included, in its order (then by id).
    func query(_ query: ReplicaQuery, _ body: (UnsafeRawBufferPointer) throws -> Void) throws {
        var values: [JSONValue] = []
        func conditions(on column: String) throws -> [String] {
            try query.filters.map { filter in
                let expression = try ReplicaQuery.expression(filter.field, column: column)
                switch filter.condition {
                case .isNull:
                    return "\(expression) IS NULL"
                case .compare(let comparison, let value):
                    values.append(value)
                    return "\(expression) \(comparison.rawValue) ?"
                }
            }
        }
        var sql: String
        var orderTerms: [String]
        if try hasOverlay() {
            // The server records a local write shadows are left out; the overlay's values
            // are filtered the same way. Only the first branch can use an index.
            var keyColumns: [String] = []
            var recordKeys: [String] = []
            var recordOrder: [String] = []
            var overlayKeys: [String] = []
            for (index, order) in query.orders.enumerated() {
                let recordKey = try ReplicaQuery.expression(order.field, column: "r.body")
                keyColumns.append("k\(index)")
                recordKeys.append("\(recordKey) AS k\(index)")
                recordOrder.append(recordKey + (order.descending ? " DESC" : ""))
                overlayKeys.append("\(try ReplicaQuery.expression(order.field, column: "o.body")) AS k\(index)")
            }
            let recordWhere = ([scope.condition("r")] + (try conditions(on: "r.body"))
                + ["NOT EXISTS (SELECT 1 FROM overlay o WHERE \(scope.sameRecord("o", "r")))"]).joined(separator: " AND ")
            let overlayWhere = ([scope.condition("o"), "o.body IS NOT NULL"] + (try conditions(on: "o.body"))).joined(separator: " AND ")
            var recordBranch = "SELECT r.id AS id, r.body AS body\((recordKeys.map { ", " + $0 }).joined()) FROM records r WHERE \(recordWhere)"
            if let limit = query.maximumCount {
                // Cut to its own first `limit` in the query's order, which the index gives
                // without a sort (as with no local write): a server record past them cannot
                // reach the result, whatever the overlay holds. Uncut, one pending write made
                // every limited query sort the whole collection (24 ms at 10k records).
                recordBranch = "SELECT * FROM (\(recordBranch) ORDER BY \((recordOrder + ["r.id"]).joined(separator: ", ")) LIMIT \(limit))"
            }
            sql = """
                SELECT body FROM (
                    \(recordBranch)
                    UNION ALL
                    SELECT o.id AS id, o.body AS body\((overlayKeys.map { ", " + $0 }).joined()) FROM overlay o WHERE \(overlayWhere)
                )
                """
            orderTerms = zip(keyColumns, query.orders).map { $0 + ($1.descending ? " DESC" : "") }
        } else {
            let conditions = [scope.condition()] + (try conditions(on: "body"))
            sql = "SELECT body FROM records WHERE " + conditions.joined(separator: " AND ")
            orderTerms = try query.orders.map { try ReplicaQuery.expression($0.field, column: "body") + ($0.descending ? " DESC" : "") }
        }
        sql += " ORDER BY " + (orderTerms + ["id"]).joined(separator: ", ")
        if query.maximumCount != nil { sql += " LIMIT ?" }

        let statement = try db.prepare(sql)
        var position: Int32 = 1
        for value in values {
            try bind(value, at: position, in: statement)
            position += 1
        }
        if let limit = query.maximumCount { try statement.bind(position, limit) }
        while try statement.step() { try statement.withBlob(0, body) }
    }

    /// Binds a filter's value as SQLite's JSON functions return that JSON type.
    private func bind(_ value: JSONValue, at index: Int32, in statement: SQLiteStatement) throws {
        switch value {
        case .string(let text): try statement.bind(index, text)
        case .bool(let flag): try statement.bind(index, flag)
        case .null: try statement.bindNull(index)
        case .number(let literal):
            if let integer = Int64(literal) { try statement.bind(index, integer) } else { try statement.bind(index, Double(literal) ?? .nan) }
        case .object, .array:
            throw ReplicaQuery.InvalidValue(value: value)
        }
    }
}
