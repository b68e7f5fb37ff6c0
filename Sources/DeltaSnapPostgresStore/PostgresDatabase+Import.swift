import DeltaSnapCore
import DeltaSnapStore
import DeltaSnapTrust
import Foundation
import PostgresNIO

extension PostgresDatabase {
    /// Ids of an unsorted input kept in memory to name a repeat's line (~20 MB).
    static let seenInMemoryLimit = 250_000

    /// A collection's row, locked (`SELECT … FOR UPDATE`) in the caller's transaction: the
    /// lock every writer of the collection queues on, so versions follow commit order.
    struct LockedCollection {
        var name: String
        var cid: Int64
        var epoch: String
        var head: Int64
        var checksum: Int64
        var visible: Int64
        var floor: Int64
        var digest: ByteBuffer?
        var previousCommit: Int64
    }

    /// Refuses the write unless the store holds every blob in `referenced` with the size its
    /// reference states (``DeltaSnapStore/AttachmentRule``), naming the first line that
    /// refers to one it does not; then notes that the collection refers to them.
    private func requireAttachments(
        _ referenced: [String: (reference: AttachmentReference, record: Record, line: Int)], of locked: LockedCollection,
        from stream: RecordStream, on connection: PostgresConnection
    ) async throws {
        guard !referenced.isEmpty else { return }
        let references = referenced.values.map(\.reference)
        let held = try await attachmentSizes(references.map(\.sha256), on: connection)
        for (reference, record, line) in referenced.values.sorted(by: { $0.line < $1.line }) {
            do {
                try AttachmentRule.check(reference, in: record, heldSize: held[reference.sha256])
            } catch let error as StoreError {
                throw stream.failure(error, at: line)
            }
        }
        try await connection.checkedQuery("""
            INSERT INTO deltasnap_attachment_refs(cid, sha256, type)
            SELECT \(locked.cid), x.sha256, x.type FROM unnest(\(references.map(\.sha256))::text[], \(references.map(\.type))::text[]) AS x(sha256, type)
            ON CONFLICT DO NOTHING
            """, logger: logger)
    }

    /// Locks `collection`'s row, creating it (with no version yet) when it is new.
    func lock(_ collection: String, on connection: PostgresConnection) async throws -> LockedCollection {
        let epochForNew = configuration.epoch(forNew: collection)
        try await connection.checkedQuery("""
            INSERT INTO deltasnap_collections(name, epoch, head, checksum, visible) VALUES (\(collection), \(epochForNew), 0, 0, 0)
            ON CONFLICT (name) DO NOTHING
            """, logger: logger)
        var locked: LockedCollection?
        let rows = try await connection.checkedQuery("""
            SELECT cid, epoch, head, checksum, visible, floor, digest FROM deltasnap_collections WHERE name = \(collection) FOR UPDATE
            """, logger: logger)
        for try await (cid, epoch, head, checksum, visible, floor, digest) in rows.decode((Int64, String, Int64, Int64, Int64, Int64, ByteBuffer?).self) {
            locked = LockedCollection(
                name: collection, cid: cid, epoch: epoch, head: head, checksum: checksum, visible: visible, floor: floor, digest: digest,
                previousCommit: .min)
        }
        guard var locked else { throw StoreError.unknownCollection(collection) }
        for try await at in try await connection.checkedQuery(
            "SELECT committed_at FROM deltasnap_versions WHERE cid = \(locked.cid) AND version = \(locked.head)", logger: logger
        ).decode(Int64.self) { locked.previousCommit = at }
        return locked
    }

    /// Writes what `stream` changes in the locked collection as its next version (none when
    /// nothing changed), in the caller's transaction.
    func merge(
        _ stream: RecordStream, into locked: LockedCollection, replace: Bool, progress: ((Int) -> Void)?, on connection: PostgresConnection
    ) async throws -> WriteResult {
        let collection = locked.name
        let previousCommit = locked.previousCommit
        try await connection.checkedQuery("""
            CREATE TEMP TABLE deltasnap_incoming(id TEXT COLLATE "C" NOT NULL, hidden BOOLEAN NOT NULL, hash BIGINT NOT NULL, body BYTEA NOT NULL)
            ON COMMIT DROP
            """, logger: logger)
        // The ids of an input out of order, for refusing a repeat at its line — up to
        // `seenInMemoryLimit` of them (~20 MB): past that they are let go, and the temporary
        // table, which holds them all, is asked for a repeat once the input is in. Memory
        // stays bounded whatever the input's size (a Set of 4M ids was 150 MB).
        var seen = Set<String>()
        var seenOverflowed = false
        // Ids in ascending order need no memory of them: a repeat is one out of order.
        var lastAscending: String?
        var absentCount = 0
        // A collection with no version yet holds no record: everything in the input is new, so
        // the write rule runs while the input streams and no row has to come back.
        let fresh = locked.head == 0
        var state = StateAccumulator(
            collection: collection, checksum: StateChecksum(value: UInt64(bitPattern: locked.checksum)), count: Int(locked.visible), digest: nil)
        var digestChange = ParallelDigest(collection: collection)
        // The blobs the input refers to, each with the first line and record that did:
        // checked once the input is in (no query can run mid-`COPY`), before anything commits.
        var referenced: [String: (reference: AttachmentReference, record: Record, line: Int)] = [:]
        try await copy(into: connection) { rows in
            while let record = try stream.next() {
                if stream.idsAscend {
                    if let last = lastAscending, !last.utf8Precedes(record.id) { throw stream.failure(StoreError.duplicateID(record.id).description) }
                    lastAscending = record.id
                } else if !seenOverflowed {
                    guard seen.insert(record.id).inserted else { throw stream.failure(StoreError.duplicateID(record.id).description) }
                    if seen.count > Self.seenInMemoryLimit {
                        seen = []
                        seenOverflowed = true
                    }
                }
                do {
                    for reference in try AttachmentRule.references(in: record) where referenced[reference.sha256] == nil {
                        referenced[reference.sha256] = (reference, record, stream.line)
                    }
                } catch let error as StoreError {
                    throw stream.failure(error)
                }
                rows.append(record)
                if fresh && state.put(record, replacing: nil) == .upserted { await digestChange.add(id: record.id, canonical: record.bytes) }
                if stream.count % 100_000 == 0 { progress?(stream.count) }
                if rows.isFull { return true }
            }
            return false
        }
        if seenOverflowed {
            for try await id in try await connection.checkedQuery(
                "SELECT id FROM deltasnap_incoming GROUP BY id HAVING count(*) > 1 ORDER BY id LIMIT 1", logger: logger
            ).decode(String.self) { throw StoreError.duplicateID(id) }
        }
        try await requireAttachments(referenced, of: locked, from: stream, on: connection)
        if replace { try stream.refuseEmptyReplace() }
        // Without statistics the planner takes a fresh temporary table for a large one and
        // joins it to the whole collection by hash: a one-record write to 100,000 records
        // cost 70 ms. Counted, it looks each record up by the primary key.
        try await connection.checkedQuery("ANALYZE deltasnap_incoming", logger: logger)
        // What changes, with the values it replaces: the checksum and the digest move by
        // exactly these records.
        let changedWhere = "(r.id IS NULL AND NOT i.hidden) OR (r.id IS NOT NULL AND r.body <> i.body)"
        if !fresh {
            let changes = try await connection.checkedQuery(PostgresQuery(unsafeSQL: """
                SELECT i.id, i.hidden, i.hash, i.body, r.hidden, r.hash, r.body
                FROM deltasnap_incoming i LEFT JOIN deltasnap_records r ON r.cid = $1 AND r.id = i.id
                WHERE \(changedWhere)
                """, binds: Self.binds(locked.cid)), logger: logger)
            for try await (id, isHidden, hash, body, wasHidden, oldHash, oldBody) in changes.decode(
                (String, Bool, Int64, ByteBuffer, Bool?, Int64?, ByteBuffer?).self)
            {
                // The query returns changed rows only, so the old bytes need not be compared.
                let old = wasHidden.map { StateAccumulator.StoredValue(isHidden: $0, hash: UInt64(bitPattern: oldHash ?? 0), bytes: nil) }
                let change = body.withUnsafeReadableBytes {
                    state.put(id: id, isHidden: isHidden, hash: UInt64(bitPattern: hash), bytes: $0, replacing: old)
                }
                if old?.isHidden == false, let oldBody { await digestChange.remove(id: id, canonical: Array(oldBody.readableBytesView)) }
                if change == .upserted { await digestChange.add(id: id, canonical: Array(body.readableBytesView)) }
            }
        }
        // A replace hides the visible records its input did not mention. They are read and
        // then hidden in place, in the table's order, by one `UPDATE` — not staged as
        // tombstones and joined back: a join of millions of staged rows is a hash join in
        // batches, whose output visits the table's pages once per batch, and each visit after
        // a checkpoint writes the whole page to the WAL again (3M records hidden: 26 GB of WAL
        // and 93 s, against 3.6 GB and 22 s in place; 10M took 1.84× 1M's time per record).
        if replace && !fresh {
            let absent = try await connection.checkedQuery(PostgresQuery(unsafeSQL: """
                SELECT r.id, r.hash, r.body FROM deltasnap_records r
                WHERE r.cid = $1 AND NOT r.hidden AND NOT EXISTS (SELECT 1 FROM deltasnap_incoming i WHERE i.id = r.id)
                """, binds: Self.binds(locked.cid)), logger: logger)
            for try await (id, oldHash, oldBody) in absent.decode((String, Int64, ByteBuffer).self) {
                state.put(Record.tombstone(id: id), replacing: StateAccumulator.StoredValue(isHidden: false, hash: UInt64(bitPattern: oldHash), bytes: nil))
                await digestChange.remove(id: id, canonical: Array(oldBody.readableBytesView))
                absentCount += 1
            }
        }
        var digest = locked.digest.flatMap { StateDigest(bytes: $0.readableBytesView) } ?? .empty
        digest.add(await digestChange.digest())
        let (checksum, visible, upserted, hidden) = (state.checksum, state.count, state.upserted, state.hidden)
        // Tombstones for records a replace did not mention are changes, not input.
        let unchanged = stream.count - upserted - (hidden - absentCount)
        let previous = locked.head > 0
            ? CollectionHead(
                name: collection, epoch: locked.epoch, version: UInt64(locked.head),
                checksum: StateChecksum(value: UInt64(bitPattern: locked.checksum)), count: Int(locked.visible),
                committedAt: previousCommit, floor: UInt64(locked.floor))
            : nil
        guard upserted + hidden > 0 else {
            // Nothing changed: no version. A collection created by this call goes again.
            if previous == nil { try await connection.checkedQuery("DELETE FROM deltasnap_collections WHERE cid = \(locked.cid)", logger: logger) }
            return WriteResult(collection: collection, committed: false, head: previous, upserted: 0, hidden: 0, unchanged: unchanged)
        }

        let version = locked.head + 1
        let committedAt = configuration.commitTime(after: previousCommit)
        try await connection.checkedQuery(PostgresQuery(unsafeSQL: """
            INSERT INTO deltasnap_records(cid, id, version, hidden, hash, body)
            SELECT $1, i.id, $2, i.hidden, i.hash, i.body
            FROM deltasnap_incoming i LEFT JOIN deltasnap_records r ON r.cid = $1 AND r.id = i.id
            WHERE \(changedWhere)
            ON CONFLICT (cid, id) DO UPDATE SET
                version = excluded.version, hidden = excluded.hidden, hash = excluded.hash, body = excluded.body
            """, binds: Self.binds(locked.cid, version)), logger: logger)
        if absentCount > 0 { try await hideAbsent(absentCount, from: locked, atVersion: version, on: connection) }
        try await connection.checkedQuery(
            "INSERT INTO deltasnap_versions(cid, version, committed_at) VALUES (\(locked.cid), \(version), \(committedAt))", logger: logger)
        let digestBytes = ByteBuffer(bytes: digest.bytes)
        let checksumBits = Int64(bitPattern: checksum.value)
        let sequence = try await publishCommit(at: committedAt, on: connection)
        try await connection.checkedQuery("""
            UPDATE deltasnap_collections SET head = \(version), checksum = \(checksumBits), visible = \(Int64(visible)), digest = \(digestBytes),
                published = \(sequence)
            WHERE cid = \(locked.cid)
            """, logger: logger)
        // Delivered to every listening instance when (and only if) this transaction commits.
        try await connection.checkedQuery("SELECT pg_notify(\(Self.notificationChannel), \("\(collection) \(version)"))", logger: logger)
        let head = CollectionHead(
            name: collection, epoch: locked.epoch, version: UInt64(version), checksum: checksum, count: visible,
            committedAt: committedAt, floor: UInt64(locked.floor))
        return WriteResult(collection: collection, committed: true, head: head, upserted: upserted, hidden: hidden, unchanged: unchanged)
    }

    /// Hides, as of `version`, the visible records of `locked` that the staged input does
    /// not mention — the `count` records ``merge(_:into:replace:progress:on:)`` read and
    /// counted. The tombstone's body is `Record.tombstone(id:)`'s: PostgreSQL's `to_json`
    /// escapes a string as `CanonicalJSON.writeString` does (the short escapes of `"`, `\`,
    /// b, f, n, r and t, `\u00xx` in lower case for other control bytes, nothing else), and a
    /// hidden record's hash is 0 as `CopyRows` writes it.
    private func hideAbsent(_ count: Int, from locked: LockedCollection, atVersion version: Int64, on connection: PostgresConnection) async throws {
        var hidden = 0
        for try await written in try await connection.checkedQuery(PostgresQuery(unsafeSQL: """
            WITH hidden AS (
                UPDATE deltasnap_records r
                SET version = $2, hidden = TRUE, hash = 0, body = convert_to('{"hidden":true,"id":' || to_json(r.id)::text || '}', 'UTF8')
                WHERE r.cid = $1 AND NOT r.hidden AND NOT EXISTS (SELECT 1 FROM deltasnap_incoming i WHERE i.id = r.id)
                RETURNING 1)
            SELECT count(*) FROM hidden
            """, binds: Self.binds(locked.cid, version)), logger: logger).decode(Int64.self) { hidden = Int(written) }
        // The collection's row is locked, so nothing else writes its records: a difference
        // would mean the checksum and digest describe other records than these.
        guard hidden == count else { throw StoreError.busy("\"\(locked.name)\" changed while its replace was written (\(hidden) records hidden, \(count) counted)") }
    }

    /// Deletes tombstones of versions up to `version` and raises the collection's floor to
    /// it (see ``SQLiteDatabase/compact(_:throughVersion:)``), under the collection's
    /// row lock; returns how many tombstones went.
    @discardableResult
    package func compact(_ collection: String, throughVersion version: UInt64) async throws -> Int {
        try await transaction { connection in
            var locked: (Int64, Int64, Int64)?
            for try await row in try await connection.checkedQuery(
                "SELECT cid, head, floor FROM deltasnap_collections WHERE name = \(collection) AND head > 0 FOR UPDATE", logger: logger
            ).decode((Int64, Int64, Int64).self) { locked = row }
            guard let (cid, head, floor) = locked else { throw StoreError.unknownCollection(collection) }
            let target = min(Int64(clamping: version), head)
            var removed = 0
            for try await count in try await connection.checkedQuery("""
                WITH gone AS (DELETE FROM deltasnap_records WHERE cid = \(cid) AND hidden AND version <= \(target) RETURNING 1)
                SELECT count(*) FROM gone
                """, logger: logger).decode(Int64.self) { removed = Int(count) }
            try await connection.checkedQuery("UPDATE deltasnap_collections SET floor = GREATEST(floor, \(target)) WHERE cid = \(cid)", logger: logger)
            // As on SQLite: a raised floor is published under a new sequence.
            if target > floor {
                try await connection.checkedQuery("UPDATE deltasnap_publication SET sequence = sequence + 1 WHERE id = 1", logger: logger)
                try await connection.checkedQuery("""
                    UPDATE deltasnap_collections SET published = (SELECT sequence FROM deltasnap_publication WHERE id = 1) WHERE cid = \(cid)
                    """, logger: logger)
            }
            try await connection.checkedQuery("SELECT pg_notify(\(Self.notificationChannel), \("\(collection) \(head)"))", logger: logger)
            return removed
        }
    }

    /// Raises the publication sequence by the one rule every store follows
    /// (``DeltaSnapStore/PublicationSequence``), under the row's lock.
    @discardableResult
    func publishCommit(at committedAt: Int64, on connection: PostgresConnection) async throws -> Int64 {
        var previous: Int64 = 0
        for try await sequence in try await connection.checkedQuery(
            "SELECT sequence FROM deltasnap_publication WHERE id = 1 FOR UPDATE", logger: logger
        ).decode(Int64.self) { previous = sequence }
        let sequence = Int64(clamping: PublicationSequence.next(after: UInt64(max(0, previous)), at: committedAt))
        try await connection.checkedQuery("""
            INSERT INTO deltasnap_publication(id, sequence) VALUES (1, \(sequence))
            ON CONFLICT (id) DO UPDATE SET sequence = EXCLUDED.sequence
            """, logger: logger)
        return sequence
    }

    private static func binds(_ values: Int64...) -> PostgresBindings {
        var binds = PostgresBindings(capacity: values.count)
        for value in values { binds.append(value) }
        return binds
    }

    /// Streams rows into `deltasnap_incoming` with `COPY … FROM STDIN` (text format), in
    /// chunks of about 256 KiB. `fill` appends rows until the chunk is full (true: call again).
    ///
    /// Rows that fit one chunk — a write of a few records: every `PUT`, most pushes — go as one
    /// `INSERT` instead: a round trip fewer, and no `COPY` in flight should the server go away,
    /// which PostgresNIO (1.33) answers with a `preconditionFailure` that ends the process (a
    /// `COPY` write once its connection left the query state). A large import still uses `COPY`.
    private func copy(into connection: PostgresConnection, _ fill: (inout CopyRows) async throws -> Bool) async throws {
        var first = CopyRows(keepingColumns: true)
        guard try await fill(&first) else {
            guard !first.ids.isEmpty else { return }
            var binds = PostgresBindings(capacity: 4)
            binds.append(first.ids)
            binds.append(first.hidden)
            binds.append(first.hashes)
            binds.append(first.bodies)
            try await connection.checkedQuery(PostgresQuery(
                unsafeSQL: "INSERT INTO deltasnap_incoming(id, hidden, hash, body) SELECT * FROM unnest($1::text[], $2::bool[], $3::int8[], $4::bytea[])",
                binds: binds), logger: logger)
            return
        }
        try connection.refuseIfClosed()
        try await connection.copyFrom(table: "deltasnap_incoming", columns: ["id", "hidden", "hash", "body"], logger: logger) { writer in
            try await writer.write(ByteBuffer(bytes: first.buffer))
            var rows = CopyRows()
            var more = true
            while more {
                more = try await fill(&rows)
                if !rows.buffer.isEmpty {
                    try await writer.write(ByteBuffer(bytes: rows.buffer))
                    rows.buffer.removeAll(keepingCapacity: true)
                }
            }
        }
    }
}

/// The digest change of a merge, hashed by tasks of their own in batches of 2,048 records
/// (LtHash is additive, so batches sum in any order) while rows keep streaming; at most four
/// batches wait at a time, so memory stays bounded whatever the input's size. The rest of
/// the write rule (count, checksum, what counts as a change) is ``StateAccumulator``'s; only
/// the digest's arithmetic is spread over cores here, as a large merge's hottest part.
struct ParallelDigest {
    private var batch: DigestBatch
    private var pending: [Task<StateDigest, Never>] = []
    private var sum = StateDigest.empty

    init(collection: String) {
        batch = DigestBatch(collection: collection)
    }

    /// A value that enters the state.
    mutating func add(id: String, canonical: [UInt8]) async {
        batch.added.append((id, canonical))
        await flushIfFull()
    }

    /// A value that leaves it (replaced or hidden).
    mutating func remove(id: String, canonical: [UInt8]) async {
        batch.removed.append((id, canonical))
        await flushIfFull()
    }

    private mutating func flushIfFull() async {
        guard batch.isFull else { return }
        let full = batch
        pending.append(Task { full.digest() })
        batch = DigestBatch(collection: batch.collection)
        if pending.count > 4 { sum.add(await pending.removeFirst().value) }
    }

    /// The digest change of everything added and removed.
    mutating func digest() async -> StateDigest {
        sum.add(batch.digest())
        batch = DigestBatch(collection: batch.collection)
        while !pending.isEmpty { sum.add(await pending.removeFirst().value) }
        return sum
    }
}

/// Changed records whose digest contributions are computed together, off the row loop.
struct DigestBatch: Sendable {
    let collection: String
    var added: [(String, [UInt8])] = []
    var removed: [(String, [UInt8])] = []
    var isFull: Bool { added.count + removed.count >= 2048 }

    /// The digest change this batch makes: its new values in, its old values out.
    func digest() -> StateDigest {
        var digest = StateDigest.empty
        for (id, body) in added { digest.add(collection: collection, id: id, canonical: body) }
        for (id, body) in removed { digest.remove(collection: collection, id: id, canonical: body) }
        return digest
    }
}

/// Rows in `COPY`'s text format: tab-separated, `\` escapes, `bytea` as `\\x` + hex.
struct CopyRows {
    var buffer: [UInt8] = []
    var isFull: Bool { buffer.count >= 256 * 1024 }
    /// The rows' columns as well, for an `INSERT` of rows that fit one chunk (a few records).
    private let keepsColumns: Bool
    private(set) var ids: [String] = []
    private(set) var hidden: [Bool] = []
    private(set) var hashes: [Int64] = []
    private(set) var bodies: [ByteBuffer] = []

    static let hex = Array("0123456789abcdef".utf8)

    init(keepingColumns: Bool = false) {
        keepsColumns = keepingColumns
    }

    mutating func append(_ record: Record) {
        let hash = Int64(bitPattern: record.isHidden ? 0 : record.hash)
        appendText(record.id)
        appendText(record.isHidden ? "t" : "f")
        appendText(String(hash))
        appendBytes(record.bytes, last: true)
        if keepsColumns {
            ids.append(record.id)
            hidden.append(record.isHidden)
            hashes.append(hash)
            bodies.append(ByteBuffer(bytes: record.bytes))
        }
    }
}
