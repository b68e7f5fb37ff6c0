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

            Then attachments: a blob that no visible record and no value kept in history (for \
            revert) refers to, in any collection, is removed once it has been so for \
            --attachment-grace-days (7 by default) — long enough for an upload's record to \
            arrive. Writes that refer to attachments wait while the store is scanned.
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

    @Option(name: .long, help: "Days a blob no record refers to is kept before it is removed.")
    var attachmentGraceDays: Double = 7

    func validate() throws {
        guard (keepVersions == nil) != (olderThan == nil) else { throw ValidationError("give exactly one of --keep-versions N and --older-than DAYS") }
        if let keepVersions, keepVersions < 0 { throw ValidationError("--keep-versions must be 0 or more") }
        if let olderThan, !(olderThan >= 0) { throw ValidationError("--older-than must be 0 or more days") }
        guard attachmentGraceDays >= 0 else { throw ValidationError("--attachment-grace-days must be 0 or more") }
    }

    func run() async throws {
        try await reportingErrors {
            let policy: CompactionPolicy = keepVersions.map { .keepVersions(UInt64($0)) } ?? .olderThan(seconds: Int64((olderThan ?? 0) * 86_400))
            let grace = Int64(attachmentGraceDays * 86_400)
            let (result, head, garbage) = try await StoreLocation.withStore(db) { store in
                let result = try await store.compact(collection, policy: policy)
                let head = try await store.head(of: collection)
                let garbage = try await store.collectAttachmentGarbage(unreferencedFor: grace, now: Int64(Date().timeIntervalSince1970))
                return (result, head, garbage)
            }
            if let result {
                let removed = result.tombstonesRemoved
                print("\(collection): floor raised from version \(result.previousFloor) to \(result.floor); \(removed) tombstone\(removed == 1 ? "" : "s") removed; tokens below version \(result.floor) now get a full body")
            } else {
                print("\(collection): nothing to compact (floor stays at version \(head?.floor ?? 0), head is version \(head?.version ?? 0))")
            }
            // Only when there were attachments to look at: the line above stays the whole
            // output for a store without files, as scripts read it.
            if garbage.removed > 0 || garbage.waiting > 0 { print(garbage.summary) }
        }
    }
}
