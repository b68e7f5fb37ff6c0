import ArgumentParser
import DeltaSnapStore
import DeltaSnapStoreLocation
import Foundation

struct CompactCommand: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "compact",
        abstract: "Drop old tombstones and raise the collection's floor: tokens below it get a full body.",
        discussion: """
            Hidden records pile up until compacted. Compaction deletes the tombstones of the \
            versions it covers and raises the floor to the last of them; a client whose token \
            is below the floor may have missed a delete, so every path answers it with a full \
            body (never a delta). Clients at or above the floor keep getting deltas.

              --keep-versions N    keep deltas for tokens of the last N versions
              --older-than DAYS    compact every version committed more than DAYS days ago

            A running `deltasnap serve` on the same store picks the new floor up within 100 ms \
            (on PostgreSQL, every instance: the compaction notifies them).
            """
    )

    @Option(name: .long, help: "The store: an SQLite path or postgres://user@host:port/db.")
    var db: String

    @Option(name: .long, help: "Collection name.")
    var collection: String

    @Option(name: .long, help: "Keep deltas for tokens of the last N versions.")
    var keepVersions: Int?

    @Option(name: .long, help: "Compact the versions committed more than DAYS days ago.")
    var olderThan: Double?

    func validate() throws {
        guard (keepVersions == nil) != (olderThan == nil) else { throw ValidationError("give exactly one of --keep-versions N and --older-than DAYS") }
        if let keepVersions, keepVersions < 0 { throw ValidationError("--keep-versions must be 0 or more") }
        if let olderThan, !(olderThan >= 0) { throw ValidationError("--older-than must be 0 or more days") }
    }

    func run() async throws {
        try await reportingErrors {
            let policy: CompactionPolicy = keepVersions.map { .keepVersions(UInt64($0)) } ?? .olderThan(seconds: Int64((olderThan ?? 0) * 86_400))
            let (result, head) = try await StoreLocation.withStore(db) { store in
                (try await store.compact(collection, policy: policy), try await store.head(of: collection))
            }
            guard let result else {
                print("\(collection): nothing to compact (floor stays at version \(head?.floor ?? 0), head is version \(head?.version ?? 0))")
                return
            }
            let removed = result.tombstonesRemoved
            print("\(collection): floor raised from version \(result.previousFloor) to \(result.floor); \(removed) tombstone\(removed == 1 ? "" : "s") removed; tokens below version \(result.floor) now get a full body")
        }
    }
}
