import DeltaSnapCore
import DeltaSnapStore
import Foundation
import PostgresNIO

extension PostgresDatabase {
    /// The staging tables a step may leave in its transaction (each `ON COMMIT DROP`): dropped
    /// between steps, so the next step can make its own.
    private static let stagingTables =
        "deltasnap_incoming, deltasnap_new_partitions, deltasnap_new_records, deltasnap_merging, deltasnap_merged, deltasnap_publishing"

    /// Runs every step of `write` in one PostgreSQL transaction on the primary, with its
    /// position: the one write primitive (``DeltaSnapStore/StoreWriter/commit(_:each:)``).
    /// `each` is told what every step wrote, before the commit.
    ///
    /// - A follower's source transactions (``DeltaSnapStore/StoreWrite/isSourceTransactions``)
    ///   are merged set-based whatever their number (``mergeTransactions(_:on:)``) when every
    ///   path exists and no record refers to an attachment; else, as any held paths, by
    ///   ``importPartitions(_:replace:on:)``.
    /// - Streamed paths go in runs of small paths written set-based, a large path merged as an
    ///   import merges a collection (``merge(_:into:replace:progress:on:)``: `COPY` into a
    ///   staging table, then set-based), in bounded memory either way (``DeltaSnapStore/PathBatches``).
    /// - An approval (a publication from a frozen request) is copied inside PostgreSQL
    ///   (``publishCopying(_:on:)``); any other publication is written as held paths once its
    ///   path's row is locked at the expected version.
    package func commit(_ write: StoreWrite, each: (StoreWrite.Outcome) -> Void) async throws {
        guard !write.isEmpty else { return }
        for step in write.steps {
            if case .paths(let partitions, _) = step { for partition in partitions { try CollectionPath.validate(partition.path) } }
        }
        try await transaction { connection in
            if let position = write.position { try await record(position, on: connection) }
            if let transactions = write.sourceTransactions, let merged = try await mergeTransactions(transactions, on: connection) {
                for (index, results) in merged.enumerated() {
                    for result in results { each(.written(step: index, result)) }
                }
                return
            }
            var staged = false
            for (index, step) in write.steps.enumerated() {
                if staged { try await dropStagingTables(on: connection) }
                try await run(step, on: connection) { each($0.outcome(of: index)) }
                if case .expect = step { continue }
                staged = true
            }
        }
    }

    /// What one step wrote: a path's result or a push's outcome.
    private enum StepOutcome {
        case written(WriteResult)
        case pushed(PushOutcome)

        func outcome(of step: Int) -> StoreWrite.Outcome {
            switch self {
            case .written(let result): .written(step: step, result)
            case .pushed(let outcome): .pushed(step: step, outcome)
            }
        }
    }

    /// Drops what ``stagingTables`` a step left, so the next step can make its own.
    private func dropStagingTables(on connection: PostgresConnection) async throws {
        try await connection.checkedQuery("DROP TABLE IF EXISTS \(unescaped: Self.stagingTables)", logger: logger)
    }

    /// One step of ``commit(_:each:)``, in the caller's transaction.
    private func run(_ step: StoreWrite.Step, on connection: PostgresConnection, each: (StepOutcome) -> Void) async throws {
        switch step {
        case .paths(let partitions, let replace):
            for result in try await importPartitions(partitions, replace: replace, on: connection) { each(.written(result)) }
        case .streamedPaths(let next, let replace):
            var batches = PathBatches(next)
            while let piece = try batches.next() {
                switch piece {
                case .small(let partitions):
                    for partition in partitions { try CollectionPath.validate(partition.path) }
                    for result in try await importPartitions(partitions, replace: replace, on: connection) { each(.written(result)) }
                    // Their staging tables go now rather than at the commit: the next run makes its own.
                    try await dropStagingTables(on: connection)
                case .large(let part):
                    try CollectionPath.validate(part.path)
                    let locked = try await lock(part.path, on: connection)
                    each(.written(try await merge(part.records, into: locked, replace: replace, progress: nil, on: connection)))
                    try await dropStagingTables(on: connection)
                }
            }
        case .records(let stream, let collection, let replace, let progress):
            try CollectionPath.validate(collection)
            let locked = try await lock(collection, on: connection)
            each(.written(try await merge(stream, into: locked, replace: replace, progress: progress, on: connection)))
        case .push(let batch):
            each(.pushed(try await push(batch, on: connection)))
        case .publish(let publication):
            if publication.source != nil, publication.expectedVersion != nil, !publication.changes.isEmpty {
                for result in try await publishCopying(publication, on: connection) { each(.written(result)) }
                return
            }
            for name in publication.partitions.map(\.path) { try CollectionPath.validate(name) }
            let version = try await lockedVersion(of: publication.path, on: connection)
            guard version == publication.expectedVersion else { throw publication.moved(to: version) }
            for result in try await importPartitions(publication.partitions, replace: false, on: connection) { each(.written(result)) }
        case .expect(let path, let expected):
            let version = try await lockedVersion(of: path, on: connection)
            guard version == expected else { throw StoreWrite.moved(path, to: version, expected: expected) }
        }
    }

    /// `path`'s version (nil: it has none), its row locked to the commit: nothing moves it
    /// between this check and the transaction's writes.
    private func lockedVersion(of path: String, on connection: PostgresConnection) async throws -> UInt64? {
        var version: UInt64?
        for try await head in try await connection.checkedQuery(
            "SELECT head FROM deltasnap_collections WHERE name = \(path) FOR UPDATE", logger: logger
        ).decode(Int64.self) where head > 0 { version = UInt64(head) }
        return version
    }
}

extension StoreWrite {
    /// A follower's write as the source transactions it holds; nil when it is not one (or
    /// a step was added that is not a transaction's held paths).
    fileprivate var sourceTransactions: [StoreTransaction]? {
        guard isSourceTransactions else { return nil }
        var transactions: [StoreTransaction] = []
        for step in steps {
            guard case .paths(let partitions, replace: false) = step else { return nil }
            transactions.append(StoreTransaction(partitions: partitions, position: nil))
        }
        return transactions
    }
}
