import DeltaSnapCore
import DeltaSnapStore
import DeltaSnapTrust

extension PostgresStore {
    /// Writes `DIRECTORY/COLLECTION.snapshot` from one read transaction and updates the
    /// manifest: byte-identical to a bake of an SQLite store in the same state.
    ///
    /// ```swift
    /// let entry = try await store.bake(collection: "countries", into: "Snapshots")
    /// ```
    @discardableResult
    public func bake(collection: String, into directory: String, level: Int32 = 6) async throws -> ManifestEntry {
        let cursor = try await openRecords(in: collection, after: nil)
        do {
            let file = try Baker.SnapshotFile(head: cursor.head, into: directory, level: level)
            do {
                while try await cursor.next({ try file.append($0) }) {}
                await cursor.close()
                return try file.finish()
            } catch {
                file.abandon()
                throw error
            }
        } catch {
            await cursor.close()
            throw error
        }
    }

    /// Writes `DIRECTORY/COLLECTION.index`, signed, for the collection's current state.
    @discardableResult
    public func writeSignedIndex(collection: String, keys: [IndexSigningKey], into directory: String) async throws -> SignedIndex {
        // The head and the published entry come from two reads: retry until they agree.
        for _ in 0..<10 {
            let (sequence, entries) = try await publishedState { $0 == collection }
            guard let entry = entries.first, let head = try await head(of: collection) else { throw PostgresStoreError.unknownCollection(collection) }
            guard head.token.description == entry.token else { continue }
            return try Baker.writeSignedIndex(sequence: sequence, entry: entry, head: head, keys: keys, into: directory)
        }
        throw PostgresStoreError.database("collection \(collection) kept changing while its index was written; retry")
    }
}
