import DeltaSnapCore
import DeltaSnapStore
import Logging

/// One source transaction, read whole: the last state of each row it changed, by path and id
/// — in memory, or in a file once it grew past ``FollowOptions/spillRows`` (`spill`).
struct CommittedTransaction {
    var changes: [String: [String: Record]]
    /// Where its rows are when they were too many to hold (then `changes` and `pending` are empty).
    var spill: TransactionSpill?
    /// Rows completed from the store's records when published.
    var pending: [String: [String: PendingRow]]
    /// Collections whose table's columns changed before this transaction's rows.
    var reshapes: [String: Reshape]
    /// Collections a `TRUNCATE` emptied (before the rows the transaction then wrote).
    var truncated: Set<String>
    var endLSN: UInt64
    var commitTime: Int64

    /// Whether publishing it reads the store (what a `TRUNCATE` hides, what changed columns
    /// rewrite): then it cannot share a commit with the transactions before it.
    var readsStore: Bool { !truncated.isEmpty || !reshapes.isEmpty || !pending.isEmpty || spill != nil }
}

/// The stream as a plain value: the tables' shapes by relation, the transaction being read,
/// and the position published so far. It never calls out: each message it takes returns a
/// ``StreamAction`` for the follower to carry out (publish, resolve a table's columns in the
/// catalog, log), as postgres-nio's `ConnectionStateMachine` hands its connection actions.
///
/// ```swift
/// var state = StreamState(position: start, shapes: shapes, spillRows: 50_000)
/// if case .publish(let commit) = try state.take(message) { … }
/// ```
struct StreamState {
    var position: FollowPosition
    var shapes: [String: TableShape]
    var relations: [UInt32: PgRelation] = [:]
    var open: OpenTransaction?
    /// Column changes seen and not yet published (they go with the next transaction).
    var reshapes: [String: Reshape] = [:]
    /// Past this many rows a transaction's rows go to a file (``FollowOptions/spillRows``).
    let spillRows: Int

    struct OpenTransaction {
        var xid: UInt32
        var finalLSN: UInt64
        /// Already published (a restart) or already in the copy: read and dropped.
        var skipped: Bool
        var changes: [String: [String: Record]] = [:]
        /// Rows waiting for values their update did not send (by path and id).
        var pending: [String: [String: PendingRow]] = [:]
        var truncated: Set<String> = []
        /// Rows changed so far (a row changed twice counts twice: a bound, not a count).
        var rows = 0
        /// Where the rows go once there are more than ``FollowOptions/spillRows``.
        var spill: TransactionSpill?
    }

    init(position: FollowPosition, shapes: [String: TableShape], spillRows: Int) {
        self.position = position
        self.shapes = shapes
        self.spillRows = spillRows
    }

    /// Takes one message and says what the follower does next.
    mutating func take(_ message: PgOutputMessage) throws -> StreamAction {
        switch message {
        case .begin(let finalLSN, _, let xid):
            let skipped = finalLSN < position.applied || (position.copy?.holds(xid: xid, commitLSN: finalLSN) ?? false)
            open = OpenTransaction(xid: xid, finalLSN: finalLSN, skipped: skipped)
        case .commit(_, let endLSN, let commitTime):
            defer { open = nil }
            guard let transaction = open, !transaction.skipped, endLSN > position.applied else { return .none }
            defer { reshapes = [:] }
            return .publish(CommittedTransaction(
                changes: transaction.changes, spill: transaction.spill, pending: transaction.pending, reshapes: reshapes,
                truncated: transaction.truncated, endLSN: endLSN, commitTime: commitTime))
        case .relation(let relation):
            relations[relation.id] = relation
            if let shape = shapes[relation.qualifiedName] { return .resolve(relation, current: shape) }
        case .insert(let relation, let new):
            return .report(try change(relation, old: nil, new: new))
        case .update(let relation, let old, let new):
            return .report(try change(relation, old: old, new: new))
        case .delete(let relation, let old):
            return .report(try change(relation, old: old, new: nil))
        case .truncate(let ids):
            guard open?.skipped == false else { return .none }
            for id in ids {
                guard let name = relations[id]?.qualifiedName, let shape = shapes[name] else { continue }
                open?.truncated.insert(shape.table.collection)
                // Rows written before the TRUNCATE in this transaction go too.
                try open?.hideAll(in: shape.table.collection)
            }
        case .other:
            break
        }
        return .none
    }

    /// The follower resolved `relation`'s columns against the catalog (``StreamAction/resolve(_:current:)``):
    /// `shape` is the table's shape from now on, `reshape` what its records take in the next version.
    mutating func adopted(_ relation: PgRelation, shape: TableShape, reshape: Reshape?) {
        shapes[relation.qualifiedName] = shape
        if let reshape {
            reshapes[reshape.collection] = reshapes[reshape.collection].map { $0.then(reshape) } ?? reshape
        }
    }

    /// One row's change, taken into the open transaction; what to say about it (usually nothing).
    private mutating func change(_ relationID: UInt32, old: [PgValue]?, new: [PgValue]?) throws -> [StreamNote] {
        guard open?.skipped == false, let relation = relations[relationID], let shape = shapes[relation.qualifiedName] else { return [] }
        var notes: [StreamNote] = []
        // Taken out while it changes: a copy left in `open` would make every change copy the
        // transaction's dictionaries (a 250,000-row transaction took 25 s).
        var transaction = open!
        open = nil
        defer { open = transaction }
        transaction.rows += 1
        if transaction.spill == nil, transaction.rows > spillRows {
            try transaction.moveToSpill()
            notes.append(.notice("transaction \(transaction.xid): more than \(spillRows) rows, staged in a temporary file until its commit"))
        }
        // A value the update left unsent (unchanged TOAST) is in the old row when the table
        // sends whole old rows (REPLICA IDENTITY FULL). An old key tuple (a key change under
        // the default identity) sends every other column as NULL: that NULL is no value, and
        // the unsent one stays to be taken from the row's earlier state.
        var new = new
        if let values = new, let old, old.count == values.count {
            new = zip(values, old).map { value, previous in
                if value == .unchangedToast, case .text = previous { return previous }
                return value
            }
        }
        var leaving: (path: String, id: String)?
        if let old, case .success(let named) = shape.path(of: old) { leaving = named }
        guard let new else {
            guard let leaving else { return notes + [.error("\(relation.qualifiedName): a delete without its key is not published")] }
            try transaction.set(.tombstone(id: leaving.id), at: leaving.path)
            return notes
        }
        switch shape.row(from: new) {
        case .failure(let problem):
            notes.append(.error("\(relation.qualifiedName): a row is not published: \(problem)"))
        case .success(let row):
            // Where the row stood before this change: its unsent values are there. Read
            // before a key change leaves a tombstone there (which would hide them).
            let from = leaving ?? (row.path, row.id)
            let waiting = row.unchanged.isEmpty ? nil : try transaction.pending(at: from.path, id: from.id)
            let written = row.unchanged.isEmpty || waiting != nil ? nil : try transaction.record(at: from.path, id: from.id)
            if from.path != row.path || from.id != row.id { try transaction.set(.tombstone(id: from.id), at: from.path) }
            if row.unchanged.isEmpty {
                try transaction.set(row.record(filling: nil)!, at: row.path)
            } else if let earlier = waiting {
                // Changed before in this transaction and still waiting for the store's values.
                var merged = row
                let known = Set(row.members.map(\.key))
                merged.members += earlier.row.members.filter { !known.contains($0.key) && row.unchanged.contains($0.key) }
                merged.unchanged = row.unchanged.filter { name in !merged.members.contains { $0.key == name } }
                try transaction.wait(PendingRow(row: merged, from: earlier.from))
            } else if let earlier = written {
                guard let record = row.record(filling: earlier) else {
                    return notes + [.error("\(relation.qualifiedName): a row is not published: \(TableShape.RowProblem.unchangedValue(row.unchanged[0]))")]
                }
                try transaction.set(record, at: row.path)
            } else {
                try transaction.wait(PendingRow(row: row, from: from))
            }
        }
        return notes
    }
}

/// What the follower does after ``StreamState`` took a message.
enum StreamAction {
    case none
    /// A transaction committed that is to be published.
    case publish(CommittedTransaction)
    /// A followed table's columns as the stream sends them now: the follower resolves them in
    /// the catalog (domains, the key) and hands the result to ``StreamState/adopted(_:shape:reshape:)``.
    case resolve(PgRelation, current: TableShape)
    /// Lines to log (a row not published, a transaction staged in a file); often empty.
    case report([StreamNote])
}

/// A line for the follower's log, at its level.
struct StreamNote: Equatable {
    var level: Logger.Level
    var message: String

    static func notice(_ message: String) -> StreamNote { StreamNote(level: .notice, message: message) }
    static func error(_ message: String) -> StreamNote { StreamNote(level: .error, message: message) }
}

/// The transaction's rows, in memory or in its spill: one set of operations for both.
extension StreamState.OpenTransaction {
    /// `record` is the row's state at `path` now.
    mutating func set(_ record: Record, at path: String) throws {
        if let spill { return try spill.set(record, at: path) }
        changes[path, default: [:]][record.id] = record
        pending[path]?[record.id] = nil
    }

    /// The row waits for the values its update did not send, read from the published record
    /// at `pending.from` when the transaction is published.
    mutating func wait(_ pending: PendingRow) throws {
        if let spill { return try spill.wait(pending) }
        changes[pending.row.path]?[pending.row.id] = nil
        self.pending[pending.row.path, default: [:]][pending.row.id] = pending
    }

    func record(at path: String, id: String) throws -> Record? {
        if let spill { return try spill.record(at: path, id: id) }
        return changes[path]?[id]
    }

    func pending(at path: String, id: String) throws -> PendingRow? {
        if let spill { return try spill.pending(at: path, id: id) }
        return pending[path]?[id]
    }

    /// Every row written (or waiting) in `collection`'s table so far becomes a tombstone.
    mutating func hideAll(in collection: String) throws {
        if let spill { return try spill.hideAll(in: collection) }
        let inTable = { (path: String) in path == collection || path.hasPrefix(collection + "/") }
        for (path, records) in changes where inTable(path) {
            changes[path] = records.mapValues { .tombstone(id: $0.id) }
        }
        for (path, rows) in pending where inTable(path) {
            for id in rows.keys { try set(.tombstone(id: id), at: path) }
        }
    }

    /// From now on the rows go to a file: what is held so far moves there.
    mutating func moveToSpill() throws {
        let spill = try TransactionSpill()
        for (path, records) in changes {
            for record in records.values { try spill.set(record, at: path) }
        }
        for rows in pending.values {
            for row in rows.values { try spill.wait(row) }
        }
        (changes, pending, self.spill) = ([:], [:], spill)
    }
}

/// A row an update changed without sending all its values, and where its published record is.
struct PendingRow {
    var row: TableShape.Row
    var from: (path: String, id: String)
}

