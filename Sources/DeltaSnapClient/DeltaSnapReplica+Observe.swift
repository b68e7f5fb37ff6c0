import DeltaSnapCore

/// Live queries: a screen shows a query's result, and changes when — and only when — that
/// result changes, whatever changed it: a pull, a local write, a refused write rolled back, a
/// full reload.
extension DeltaSnapReplica {
    /// The records `query` selects (as ``query(_:)`` returns them), now and again after every
    /// change that alters them.
    ///
    /// The first value is the current result. After that a value comes only when a committed
    /// change made the result differ — records pulled, written locally, rolled back after a
    /// refusal, or replaced by a full reload; one value per transaction at most. A change that
    /// cannot affect the query (a record that is not in its result and does not pass its
    /// filters) runs nothing: what each transaction changed is known by id. A consumer that
    /// falls behind gets the newest result, not every one in between. The sequence ends when
    /// the consumer stops iterating, and with an error if a re-run fails.
    ///
    /// ```swift
    /// for try await cheapest in try await replica.observe(ReplicaQuery()
    ///     .filter("city", .equal, .string("Lisbon")).order(by: "price").limit(20)) {
    ///     show(cheapest)          // at once, then after every sync or local write that changes it
    /// }
    /// ```
    ///
    /// Throws at once what ``query(_:)`` throws for this query (a field that cannot be queried).
    public func observe(_ query: ReplicaQuery) throws -> AsyncThrowingStream<[JSONValue], any Error> {
        let current = try self.query(query)
        let (stream, continuation) = AsyncThrowingStream.makeStream(of: [JSONValue].self, bufferingPolicy: .bufferingNewest(1))
        continuation.yield(current)
        storage.observers.add(query, results: current, continuation: continuation)
        return stream
    }

    /// Record `id` as the app sees it (nil: none, or deleted), now and after every change to it.
    ///
    /// ```swift
    /// for try await country in try await replica.observe(id: "AD") { show(country) }
    /// ```
    public func observe(id: String) throws -> AsyncThrowingStream<JSONValue?, any Error> {
        let current = try record(id: id)
        let (stream, continuation) = AsyncThrowingStream.makeStream(of: JSONValue?.self, bufferingPolicy: .bufferingNewest(1))
        continuation.yield(current)
        storage.observers.add(id: id, value: current, continuation: continuation)
        return stream
    }

    /// Re-runs and notifications of live queries since the replica was opened: what the app's
    /// observed queries cost, and how ``observe(_:)`` is held to "only a change that can
    /// affect a query runs it".
    public var observationCounts: LiveQueryCounts { storage.observers.statistics }
}
