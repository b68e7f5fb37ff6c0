/// Names held by a caller of ``CollectionStore/exclusively(_:_:)`` in this process: the
/// default, for a store only one process writes (SQLite is written by one server).
actor KeyedLocks {
    static let shared = KeyedLocks()
    private var waiting: [String: [CheckedContinuation<Void, Never>]] = [:]

    func lock(_ key: String) async {
        guard waiting[key] != nil else {
            waiting[key] = []
            return
        }
        await withCheckedContinuation { waiting[key]!.append($0) }
    }

    func unlock(_ key: String) {
        guard var queue = waiting[key], !queue.isEmpty else {
            waiting[key] = nil
            return
        }
        let next = queue.removeFirst()
        waiting[key] = queue
        next.resume()
    }
}

extension StoreLocks {
    /// In this process only: the stores one process writes.
    package func exclusively<T: Sendable>(_ name: String, _ body: @Sendable () async throws -> T) async throws -> T {
        await KeyedLocks.shared.lock(name)
        do {
            let result = try await body()
            await KeyedLocks.shared.unlock(name)
            return result
        } catch {
            await KeyedLocks.shared.unlock(name)
            throw error
        }
    }
}
