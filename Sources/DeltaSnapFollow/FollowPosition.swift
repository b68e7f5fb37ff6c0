import DeltaSnapCore

/// What a follower records in the store with every version it commits (as
/// ``DeltaSnapStore/SourcePosition``'s text): the end of the last source transaction applied,
/// and what the initial copy saw — a transaction the copy already held is never applied
/// twice.
///
/// ```swift
/// let position = FollowPosition(applied: 0x16B3748, copy: CopySnapshot(parsing: "100:104:101,102", boundary: 0x16B3700))
/// FollowPosition(parsing: position.text) == position   // true
/// ```
package struct FollowPosition: Sendable, Equatable {
    /// The end LSN of the last source transaction whose changes are in the store.
    package var applied: UInt64
    /// The initial copy's snapshot, while transactions it already held may still arrive.
    package var copy: CopySnapshot?
    /// Each table's columns as the published records have them (`schema.table` → name and
    /// type), so a restart compares the stream's next `Relation` with what was published,
    /// not with the catalog of now.
    package var columns: [String: [PgRelation.Column]]

    package init(applied: UInt64, copy: CopySnapshot?, columns: [String: [PgRelation.Column]] = [:]) {
        self.applied = applied
        self.copy = copy
        self.columns = columns
    }

    /// `{"applied":"0/16B3748","copy":{"snapshot":"100:104:101,102","boundary":"0/16B3700"}}`.
    package var text: String {
        var members = [JSONMember("applied", .string(PgOutputMessage.lsnText(applied)))]
        if let copy {
            members.append(JSONMember("copy", .object([
                JSONMember("boundary", .string(PgOutputMessage.lsnText(copy.boundary))), JSONMember("snapshot", .string(copy.snapshot)),
            ])))
        }
        if !columns.isEmpty {
            members.append(JSONMember("columns", .object(columns.keys.sorted().map { table in
                JSONMember(table, .array(columns[table]!.map { .array([.string($0.name), .number(String($0.typeOID))]) }))
            })))
        }
        return CanonicalJSON.string(.object(members))
    }

    package init?(parsing text: String) {
        guard let value = try? JSONReader(bytes: Array(text.utf8)).readValue(),
              case .string(let applied)? = value["applied"], let lsn = PgOutputMessage.lsn(applied)
        else { return nil }
        self.applied = lsn
        if case .object? = value["copy"] {
            guard case .string(let snapshot)? = value["copy"]?["snapshot"], case .string(let boundary)? = value["copy"]?["boundary"],
                  let end = PgOutputMessage.lsn(boundary), let parsed = CopySnapshot(parsing: snapshot, boundary: end)
            else { return nil }
            copy = parsed
        } else {
            copy = nil
        }
        columns = [:]
        if case .object(let tables)? = value["columns"] {
            for table in tables {
                guard case .array(let list) = table.value else { return nil }
                var parsed: [PgRelation.Column] = []
                for column in list {
                    guard case .array(let pair) = column, pair.count == 2, case .string(let name) = pair[0], case .number(let oid) = pair[1],
                          let type = UInt32(oid)
                    else { return nil }
                    parsed.append(PgRelation.Column(name: name, typeOID: type, isKey: false))
                }
                columns[table.key] = parsed
            }
        }
    }
}

/// The initial copy's MVCC snapshot (`pg_current_snapshot()`: `xmin:xmax:xip,…`) and the
/// WAL position read just after it was taken. A transaction the snapshot saw is in the copy;
/// it committed before `boundary`, so only transactions that commit before it are checked.
package struct CopySnapshot: Sendable, Equatable {
    package var snapshot: String
    package var boundary: UInt64
    private var xmin: UInt64
    private var xmax: UInt64
    private var running: Set<UInt64>

    package init?(parsing snapshot: String, boundary: UInt64) {
        let parts = snapshot.split(separator: ":", omittingEmptySubsequences: false)
        guard parts.count == 3, let xmin = UInt64(parts[0]), let xmax = UInt64(parts[1]) else { return nil }
        var running = Set<UInt64>()
        for xid in parts[2].split(separator: ",") {
            guard let value = UInt64(xid) else { return nil }
            running.insert(value)
        }
        self.snapshot = snapshot
        self.boundary = boundary
        self.xmin = xmin
        self.xmax = xmax
        self.running = running
    }

    /// Whether the copy already holds the transaction `xid` (pgoutput's 32-bit id) that
    /// commits at `commitLSN`.
    package func holds(xid: UInt32, commitLSN: UInt64) -> Bool {
        guard commitLSN < boundary else { return false }
        // The 32-bit id in the snapshot's epoch (transactions near the snapshot's time).
        var full = (xmax & ~0xFFFF_FFFF) | UInt64(xid)
        if full > xmax, full >= 1 << 32 { full -= 1 << 32 }
        if full < xmin { return true }
        if full >= xmax { return false }
        return !running.contains(full)
    }
}
