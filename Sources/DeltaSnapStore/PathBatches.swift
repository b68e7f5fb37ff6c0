import DeltaSnapCore

/// The paths of a streamed import (``StoreWriter/importStreams(_:replace:recording:)``)
/// cut into what a store writes best: runs of small paths held together, each run written by
/// the store's set-based partition path (one statement for many partitions, as
/// ``StoreWriter/importPartitions(_:replace:recording:)`` writes them), and large paths
/// streamed record by record. Memory stays within ``batchBudget`` whatever the number of
/// paths or their sizes.
///
/// Why: a million partitions of a few records each cost a million writers (SQLite) or a
/// dozen round trips each (PostgreSQL) streamed one by one, and a ten-million-record path
/// cannot be held at once; one import can hold both.
///
/// ```swift
/// var batches = PathBatches(next)
/// while let piece = try batches.next() {
///     switch piece {
///     case .small(let partitions): results += try writePartitions(partitions, replace: replace)
///     case .large(let part): results.append(try stream(part))
///     }
/// }
/// ```
package struct PathBatches {
    package enum Piece {
        /// Paths read whole, in input order: together under ``PathBatches/batchBudget``, at
        /// most ``PathBatches/maximumPaths`` of them.
        case small([PartitionRecords])
        /// A path too large to hold (or with no record: a replacing import of it is refused
        /// unless ``RecordStream/emptyIsIntended``), its stream as given.
        case large(PathRecords)
    }

    /// The bytes a run of small paths may hold (records, ids and bookkeeping).
    package static let batchBudget = 8 << 20
    /// A path larger than this is streamed on its own.
    package static let smallPathBudget = 1 << 20
    /// At most this many paths in one run, however small: a store keeps state per path while
    /// it writes a run (PostgreSQL a 2 KiB digest each — 100,000 one-record partitions in one
    /// 8 MiB run held 264 MB).
    package static let maximumPaths = 4_096

    private let nextPath: () throws -> PathRecords?
    private let batchBudget: Int
    private let smallPathBudget: Int
    private let maximumPaths: Int
    /// A large path met while a run of small ones was being gathered: the next piece.
    private var heldLarge: PathRecords?

    package init(
        _ next: @escaping () throws -> PathRecords?, batchBudget: Int = batchBudget, smallPathBudget: Int = smallPathBudget,
        maximumPaths: Int = maximumPaths
    ) {
        nextPath = next
        self.batchBudget = batchBudget
        self.smallPathBudget = min(smallPathBudget, batchBudget)
        self.maximumPaths = maximumPaths
    }

    /// The next piece, in the order the paths came; nil after the last.
    package mutating func next() throws -> Piece? {
        if let held = heldLarge {
            heldLarge = nil
            return .large(held)
        }
        var batch: [PartitionRecords] = []
        var batchBytes = 0
        while let part = try nextPath() {
            var records: [(record: Record, line: Int)] = []
            var bytes = 0
            var ended = false
            while bytes < smallPathBudget {
                guard let record = try part.records.next() else {
                    ended = true
                    break
                }
                records.append((record, part.records.line))
                bytes += record.bytes.count + record.id.utf8.count + 64
            }
            if ended, !records.isEmpty {
                var partition = PartitionRecords(path: part.path, records: records.map(\.record))
                // A refusal in the run then names its line, as a streamed path's does.
                partition.origin = (part.records.name, records.map(\.line))
                batch.append(partition)
                batchBytes += bytes + part.path.utf8.count + 64
                if batchBytes >= batchBudget || batch.count >= maximumPaths { return .small(batch) }
                continue
            }
            let large = Self.resumed(part, after: records)
            if batch.isEmpty { return .large(large) }
            heldLarge = large
            return .small(batch)
        }
        return batch.isEmpty ? nil : .small(batch)
    }

    /// `part`'s stream again from its first record: the ones read already, then the rest.
    private static func resumed(_ part: PathRecords, after read: [(record: Record, line: Int)]) -> PathRecords {
        guard !read.isEmpty else { return part }
        let rest = part.records
        var given = read.makeIterator()
        let records = RecordStream(name: rest.name, emptyIsIntended: rest.emptyIsIntended) {
            if let first = given.next() { return first }
            guard let record = try rest.next() else { return nil }
            return (record, rest.line)
        }
        records.idsAscend = rest.idsAscend
        return PathRecords(path: part.path, records: records)
    }
}
