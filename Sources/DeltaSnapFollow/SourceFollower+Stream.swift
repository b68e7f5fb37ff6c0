import DeltaSnapCore
import DeltaSnapStore
import Foundation
import NIOCore
import PostgresNIO

extension SourceFollower {
    /// Reads the slot's changes, publishing each source transaction as it commits, until
    /// the task is cancelled. `catalog` is a second connection to the source, for what a change makes the follower
    /// ask the catalog while the slot's changes are still streaming in on `connection`.
    func stream(from start: FollowPosition, shapes initial: [String: TableShape], on connection: PostgresConnection, catalog: PostgresConnection) async throws {
        var state = StreamState(position: start, shapes: initial, spillRows: options.spillRows)
        var lastLagCheck = ContinuousClock.now - .seconds(3600)
        var lastAdvanced: UInt64 = 0
        var unpublished: Set<String> = []
        while !Task.isCancelled {
            // First thing on start (a follower back from a stop sees how far behind it is),
            // then every `checkInterval`.
            if ContinuousClock.now - lastLagCheck > options.checkInterval {
                lastLagCheck = .now
                try await checkLag(on: connection)
                try await checkPublication(on: connection, reported: &unpublished)
            }
            // Everything up to `flushed` is in this read (or the batch was full).
            let flushed = try await scalarLSN("SELECT pg_current_wal_flush_lsn()::text", on: connection)
            var messages = 0
            let query: PostgresQuery = """
                SELECT data FROM pg_logical_slot_peek_binary_changes(\(options.slot), \(PgOutputMessage.lsnText(flushed))::pg_lsn, \(options.batchChanges)::int4,
                    'proto_version', '1', 'publication_names', \(options.publication))
                """
            // Transactions read are published together, up to a bound; one that must read
            // the store first goes alone, after those before it.
            var batch: [CommittedTransaction] = []
            var batchRows = 0
            // Taken as they stream in (a transaction of a million rows is never read whole);
            // what a change asks the catalog goes on the other connection.
            for try await data in try await connection.query(query, logger: logger).decode(ByteBuffer.self) {
                messages += 1
                let message = try PgOutputMessage(decoding: Array(buffer: data))
                let commit: CommittedTransaction
                switch try state.take(message) {
                case .none: continue
                case .report(let notes):
                    for note in notes { logger.log(level: note.level, "\(note.message)") }
                    continue
                case .resolve(let relation, let current):
                    if let adopted = try await adopt(relation, current: current, on: catalog) {
                        state.adopted(relation, shape: adopted.shape, reshape: adopted.reshape)
                    }
                    continue
                case .publish(let committed): commit = committed
                }
                if commit.readsStore {
                    try await publish(batch, state: &state)
                    try await publish([commit], state: &state)
                    batch = []
                    batchRows = 0
                    continue
                }
                batch.append(commit)
                batchRows += commit.changes.values.reduce(0) { $0 + $1.count }
                if batch.count >= Self.batchTransactions || batchRows >= Self.batchRows {
                    try await publish(batch, state: &state)
                    batch = []
                    batchRows = 0
                }
            }
            try await publish(batch, state: &state)
            // A full batch may have stopped short of `flushed`; the next read goes on from
            // the last commit applied.
            let safe = messages >= options.batchChanges ? state.position.applied : max(flushed, state.position.applied)
            if safe > lastAdvanced, state.position.applied == safe || messages == 0 || safe - lastAdvanced > 16 << 20 {
                try await connection.query("SELECT pg_replication_slot_advance(\(options.slot), \(PgOutputMessage.lsnText(safe))::pg_lsn)", logger: logger)
                lastAdvanced = safe
            }
            if messages == 0 { try await Task.sleep(for: options.pollInterval) }
        }
    }

    private func scalarLSN(_ sql: PostgresQuery, on connection: PostgresConnection) async throws -> UInt64 {
        for try await text in try await connection.query(sql, logger: logger).decode(String.self) {
            if let lsn = PgOutputMessage.lsn(text) { return lsn }
        }
        throw FollowError.source("the source did not give its WAL position")
    }

    /// Reports a slot that holds back more WAL than `--max-lag-bytes`.
    private func checkLag(on connection: PostgresConnection) async throws {
        for try await lag in try await connection.query(
            "SELECT (pg_current_wal_lsn() - confirmed_flush_lsn)::int8 FROM pg_replication_slots WHERE slot_name = \(options.slot)", logger: logger
        ).decode(Int64?.self) {
            guard let lag else { continue }
            FollowMetrics.slotLagBytes.record(lag)
            // For the operator's console, which reads the store, not this process's metrics.
            do {
                try await store.recordSourceLag(of: options.followerName, bytes: lag, at: Int64(Date().timeIntervalSince1970))
            } catch {
                logger.warning("could not note the slot's lag in the store: \(error)")
            }
            if lag > options.maxLagBytes {
                logger.warning("slot \(options.slot) holds back \(lag) bytes of WAL, more than --max-lag-bytes \(options.maxLagBytes)")
            }
        }
    }

    /// Logs, once, a followed table that left the publication (removed from it, or dropped):
    /// no change of it arrives any more, and its collection keeps its last version.
    private func checkPublication(on connection: PostgresConnection, reported: inout Set<String>) async throws {
        var published: Set<String> = []
        for try await name in try await connection.query(
            "SELECT schemaname::text || '.' || tablename::text FROM pg_publication_tables WHERE pubname = \(options.publication)", logger: logger
        ).decode(String.self) { published.insert(name) }
        for table in options.tables {
            let isPublished = published.contains(table.qualifiedName)
            if !isPublished, reported.insert(table.qualifiedName).inserted {
                logger.error("""
                    \(table.qualifiedName) is no longer in publication \(options.publication) (removed from it, or dropped): it is not followed \
                    any more, and \(table.collection) keeps its last version. Changes made while it is out are never sent: to follow it again, \
                    add it back, then drop the slot (--drop-slot) and start afresh (a new copy)
                    """)
            } else if isPublished, reported.remove(table.qualifiedName) != nil {
                logger.warning("\(table.qualifiedName) is in publication \(options.publication) again; changes made while it was out are missing until a new copy")
            }
        }
    }

    /// Publishes source transactions, each one version of every collection or partition it
    /// changed with the position after it, committed together where the store can
    /// (``DeltaSnapStore/StoreWriter/importTransactions(_:)``). A transaction that must
    /// read the store (a `TRUNCATE`, changed columns) or that is staged in a file is published alone.
    private func publish(_ commits: [CommittedTransaction], state: inout StreamState) async throws {
        guard let last = commits.last else { return }
        var transactions: [StoreTransaction] = []
        var rows = 0
        let results: [WriteResult]
        if let spill = last.spill {
            try await expand(last, into: spill)
            let position = position(after: last, state: state)
            results = try await store.importStreams(try spill.streams(), replace: false, recording: SourcePosition(follower: options.followerName, position: position.text))
            rows = results.reduce(0) { $0 + $1.upserted + $1.hidden + $1.unchanged }
            state.position = position
        } else {
            for commit in commits {
                let changes = commits.count == 1 ? try await expanded(commit) : commit.changes
                rows += changes.values.reduce(0) { $0 + $1.count }
                let position = position(after: commit, state: state)
                transactions.append(StoreTransaction(
                    partitions: changes.keys.sorted { $0.utf8Precedes($1) }.map { PartitionRecords(path: $0, records: Array(changes[$0]!.values)) },
                    position: SourcePosition(follower: options.followerName, position: position.text)))
                if commit.endLSN == last.endLSN { state.position = position }
            }
            results = Array(try await store.importTransactions(transactions).joined())
        }
        let lag = max(0, Date().timeIntervalSince1970 - (Double(last.commitTime) / 1e6 + 946_684_800))
        FollowMetrics.record(commitLag: lag, rows: rows)
        // One line per collection or partition this batch published: its last version.
        var published: [String: (version: UInt64, rows: Int)] = [:]
        for result in results where result.committed {
            let before = published[result.collection]?.rows ?? 0
            published[result.collection] = (result.head?.version ?? 0, before + result.upserted + result.hidden)
        }
        for (path, batch) in published.sorted(by: { $0.key.utf8Precedes($1.key) }) {
            report("\(path): version \(batch.version), \(batch.rows) row\(batch.rows == 1 ? "" : "s"), lag \(Int(lag * 1000)) ms")
        }
    }

    /// Where the follower stands once `commit` is published.
    private func position(after commit: CommittedTransaction, state: StreamState) -> FollowPosition {
        FollowPosition(
            applied: commit.endLSN, copy: state.position.copy.flatMap { $0.boundary > commit.endLSN ? $0 : nil },
            columns: state.shapes.mapValues { $0.columns.map { PgRelation.Column(name: $0.name, typeOID: $0.typeOID, isKey: false) } })
    }

    /// A transaction's changes with what its `TRUNCATE` hides and its changed columns rewrite,
    /// read from the store as it stands before it.
    private func expanded(_ commit: CommittedTransaction) async throws -> [String: [String: Record]] {
        var changes = commit.changes
        // Values an update did not send are the published record's.
        for (path, rows) in commit.pending {
            for (id, pending) in rows {
                guard let record = try await completed(pending) else { continue }
                changes[path, default: [:]][id] = record
            }
        }
        try await addStoreDerived(commit) { record, path in
            if changes[path]?[record.id] == nil { changes[path, default: [:]][record.id] = record }
        }
        return changes
    }

    /// ``expanded(_:)`` for a transaction staged in a file, done in the file: its waiting rows
    /// a page at a time, the records its reshape or `TRUNCATE` rewrites one by one.
    private func expand(_ commit: CommittedTransaction, into spill: TransactionSpill) async throws {
        while case let page = try spill.someWaiting(limit: 1_000), !page.isEmpty {
            for pending in page {
                if let record = try await completed(pending) {
                    try spill.set(record, at: pending.row.path)
                } else {
                    try spill.dropWaiting(at: pending.row.path, id: pending.row.id)
                }
            }
        }
        try await addStoreDerived(commit) { record, path in try spill.setIfAbsent(record, at: path) }
    }

    /// The row with the values its update did not send taken from the published record; nil
    /// (logged) when that record does not have them.
    private func completed(_ pending: PendingRow) async throws -> Record? {
        let published = try await store.record(pending.from.id, in: pending.from.path)
        guard let record = pending.row.record(filling: published) else {
            logger.error("\(pending.row.path): row \(pending.row.id) is not published: \(TableShape.RowProblem.unchangedValue(pending.row.unchanged[0]))")
            return nil
        }
        return record
    }

    /// Hands `add` every record the transaction's changed columns rewrite and its `TRUNCATE`
    /// hides, as the store holds them before it; `add` keeps a record only where the
    /// transaction did not write that row itself.
    private func addStoreDerived(_ commit: CommittedTransaction, _ add: (Record, String) throws -> Void) async throws {
        // A `TRUNCATE` first: what it hid takes no new columns.
        for collection in commit.truncated.sorted() {
            for path in try await paths(of: collection) {
                try await forEachRecord(in: path) { record in try add(.tombstone(id: record.id), path) }
            }
        }
        for (collection, reshape) in commit.reshapes.sorted(by: { $0.key < $1.key }) {
            // Every record of the table takes the new columns in this one version.
            for path in try await paths(of: collection) {
                try await forEachRecord(in: path) { record in
                    if let reshaped = reshape.apply(to: record) { try add(reshaped, path) }
                }
            }
        }
    }

    /// The collection itself, or every partition of it the store holds.
    private func paths(of collection: String) async throws -> [String] {
        guard options.tables.contains(where: { $0.collection == collection && $0.partitionBy != nil }) else { return [collection] }
        return try await store.partitions(of: collection)
    }

    /// Every visible record of `path` (none when it does not exist).
    private func forEachRecord(in path: String, _ body: (Record) throws -> Void) async throws {
        guard try await store.head(of: path) != nil else { return }
        let source = try await store.openRecords(in: path, after: nil)
        do {
            while try await source.next({ bytes in
                if let record = try? Record.parse(Array(bytes)) { try body(record) }
            }) {}
            await source.close()
        } catch {
            await source.close()
            throw error
        }
    }
}

extension SourceFollower {
    /// Source transactions published in one store commit at most (each still its own version).
    static let batchTransactions = 1_000
    /// Rows published in one store commit at most (a large transaction goes alone).
    static let batchRows = 50_000
}

extension SourceFollower {
    /// A `Relation` message of a followed table whose shape is `shape`: the table's shape
    /// now, and the change (columns added or dropped since the records were published),
    /// logged, to be applied to every record of the table in the next version; nil when its
    /// columns did not change.
    func adopt(_ relation: PgRelation, current shape: TableShape, on connection: PostgresConnection) async throws -> (shape: TableShape, reshape: Reshape?)? {
        // A domain's column is mapped as its base type, as the copy maps it.
        var relation = relation
        relation.columns = try await resolvingDomains(relation.columns, on: connection)
        let columns = relation.columns.map { PgRelation.Column(name: $0.name, typeOID: $0.typeOID, isKey: false) }
        let known = shape.columns.map { PgRelation.Column(name: $0.name, typeOID: $0.typeOID, isKey: false) }
        guard columns != known else { return nil }
        let fresh = try await self.shape(of: shape.table, on: connection)
        let added = columns.filter { column in !known.contains { $0.name == column.name } }
        let dropped = known.filter { column in !columns.contains { $0.name == column.name } }.map(\.name)
        let retyped = columns.filter { column in known.contains { $0.name == column.name && $0.typeOID != column.typeOID } }.map(\.name)
        logger.notice("""
            \(relation.qualifiedName): columns changed (added \(added.isEmpty ? "none" : added.map(\.name).joined(separator: ", ")), \
            dropped \(dropped.isEmpty ? "none" : dropped.joined(separator: ", "))); every record of \(shape.table.collection) takes them in its next version
            """)
        if !retyped.isEmpty {
            logger.warning("\(relation.qualifiedName): the type of \(retyped.joined(separator: ", ")) changed; a record shows the new type once its row changes")
        }
        // The stream's order of columns is the one its tuples use.
        let adopted = try TableShape(table: shape.table, columns: relation.columns, key: fresh.key)
        guard !added.isEmpty || !dropped.isEmpty else { return (adopted, nil) }
        return (adopted, Reshape(collection: shape.table.collection, added: try await missingValues(of: added, in: shape.table, on: connection), dropped: Set(dropped)))
    }

    /// What rows that existed before `ADD COLUMN` hold in the new columns: the default
    /// PostgreSQL stored for them (`attmissingval`), else `NULL`.
    private func missingValues(of columns: [PgRelation.Column], in table: FollowedTable, on connection: PostgresConnection) async throws -> [JSONMember] {
        var values: [String: JSONValue] = [:]
        for try await (name, missing) in try await connection.query("""
            SELECT attname::text, attmissingval::text FROM pg_attribute
            WHERE attrelid = to_regclass(quote_ident(\(table.schema)) || '.' || quote_ident(\(table.table))) AND atthasmissing AND attname = ANY(\(columns.map(\.name)))
            """, logger: logger).decode((String, String?).self) {
            guard let missing, let column = columns.first(where: { $0.name == name }) else { continue }
            // A one-element array of the column's type: `{value}`.
            let arrayType = PgType.arrayElement.first { $0.value == column.typeOID }?.key
            if let arrayType, case .array(let items) = PgTextMapping.value(missing, type: arrayType), let first = items.first {
                values[name] = first
            } else if case .array(let items) = PgTextMapping.array(missing, element: 25), case .string(let text)? = items.first {
                values[name] = PgTextMapping.value(text, type: column.typeOID)
            }
        }
        return columns.map { JSONMember($0.name, values[$0.name] ?? .null) }
    }
}

/// Columns added to (with the value existing rows take) and dropped from a table: applied
/// to every record of its collection in one version.
struct Reshape: Sendable {
    var collection: String
    var added: [JSONMember]
    var dropped: Set<String>

    /// This change, then `next` (two `Relation` changes before one commit).
    func then(_ next: Reshape) -> Reshape {
        var added = self.added.filter { !next.dropped.contains($0.key) }
        added += next.added
        return Reshape(collection: collection, added: added, dropped: dropped.union(next.dropped).subtracting(next.added.map(\.key)))
    }

    /// `record` with the columns changed; nil when that changes nothing.
    func apply(to record: Record) -> Record? {
        guard !record.isHidden, case .object(var members)? = try? JSONReader(bytes: record.bytes).readValue() else { return nil }
        let before = members
        members.removeAll { dropped.contains($0.key) }
        for member in added where !members.contains(where: { $0.key == member.key }) { members.append(member) }
        guard members != before else { return nil }
        members.sort { $0.key.utf8Precedes($1.key) }
        return try? Record(parsing: .object(members))
    }
}
