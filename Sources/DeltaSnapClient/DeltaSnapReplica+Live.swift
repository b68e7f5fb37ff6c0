import DeltaSnapTrust
import Foundation

/// Live mode for one collection: wait on the server's public index (docs/PROTOCOL.md §11),
/// and sync when this collection's token in it moves.
extension DeltaSnapReplica {
    /// Waits on the server for a change, syncs (push, then pull) when the collection
    /// changed or writes are queued, and waits again, until the calling task is cancelled
    /// (cancel it when the app goes to the background). `onSync` receives each sync's
    /// outcome. Falls back to polling when held requests are cut (see ``LiveOptions``).
    ///
    /// ```swift
    /// let live = Task { await replica.live { outcome in print(outcome.name) } }
    /// ```
    ///
    /// The index is only a hint here, like a push notification: the sync that follows
    /// verifies everything as an ordinary one does (with trusted keys, against the signed
    /// index it fetches itself).
    public func live(_ options: LiveOptions = LiveOptions(), onSync: @Sendable (SyncOutcome) async -> Void) async {
        var loop = LiveLoop(options: options)
        var waiting = IndexWait()
        await loop.run { wait in
            let hint: IndexWait.Hint
            if let wait, state.token != nil {
                hint = await waiting.next(self, wait: wait)
            } else {
                hint = .changed
            }
            let queued = ((try? storage.pendingCount(acknowledged: false)) ?? 0) > 0
            switch hint {
            case .failed: return .failed
            case .unchanged where !queued: return .unchanged
            case .changed, .unchanged:
                let outcome = await sync()
                await onSync(outcome)
                switch outcome {
                case .applied, .reset: return .changed
                case .notModified, .postponed: return .unchanged
                case .deferred(let until): return .deferred(until: until)
                case .failed: return .failed
                }
            }
        }
    }

    /// One held request on the public index: `?wait=` with the index's `ETag` both in
    /// `If-None-Match` and in the URL (`?etag=`, with the `DeltaSnap-Cursor` last answered),
    /// so a shared cache between can collapse every client waiting for the same change.
    fileprivate func waitForIndex(wait: Int, etag: String?, cursor: String?) async throws -> (status: Int, index: SignedIndex?, etag: String?, cursor: String?) {
        var url = indexURL
        var items = [URLQueryItem(name: "wait", value: String(wait))]
        var headers = SyncRequest.headers(accessToken: accessToken)
        if let etag {
            items.append(URLQueryItem(name: "etag", value: etag))
            headers["If-None-Match"] = etag
        }
        if let cursor { items.append(URLQueryItem(name: "cursor", value: cursor)) }
        url.append(queryItems: items)
        let response = try await transport.fetch(SyncRequest(url: url, headers: headers, timeout: timeout + .seconds(wait)))
        defer { response.bodyFile.map { try? FileManager.default.removeItem(at: $0) } }
        let cursor = response.header("DeltaSnap-Cursor") ?? cursor
        guard response.status == 200, let file = response.bodyFile else { return (response.status, nil, etag, cursor) }
        return (200, try SignedIndex.parse(try Self.readSmallBody(file)), response.header("ETag"), cursor)
    }
}

/// What a live replica keeps between held requests (in memory: a restart asks afresh).
private struct IndexWait {
    enum Hint { case changed, unchanged, failed }

    var etag: String?
    var cursor: String?

    mutating func next(_ replica: isolated DeltaSnapReplica, wait: Int) async -> Hint {
        do {
            let answer = try await replica.waitForIndex(wait: wait, etag: etag, cursor: cursor)
            cursor = answer.cursor
            switch answer.status {
            case 304: return .unchanged
            case 200:
                etag = answer.etag
                let entry = answer.index?.entries.first { $0.collection == replica.collection }
                return entry?.token == replica.state.token ? .unchanged : .changed
            default: return .failed
            }
        } catch {
            return .failed
        }
    }
}
