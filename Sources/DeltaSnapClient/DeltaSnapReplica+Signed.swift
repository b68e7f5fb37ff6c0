import DeltaSnapCore
import DeltaSnapTrust
import Foundation

/// Sync through the signed index and the cacheable URLs (docs/PROTOCOL.md §8), used when
/// the replica pins trusted keys.
///
/// The ladder: fetch and verify the index (signature by a trusted key, expiry, sequence not
/// below the one held) → nothing to do when the token and digest held are the signed ones →
/// the delta from the held token to the signed one (or the full body) → one full body when
/// the result does not match the index → keep the last verified state and back off.
extension DeltaSnapReplica {
    /// `…/v1/index`, next to `…/v1/collections/{name}` (and `…/{name}/partitions/{key}`).
    var indexURL: URL {
        let levels = CollectionPath(collection)?.key == nil ? 2 : 4
        return (0..<levels).reduce(url) { url, _ in url.deletingLastPathComponent() }.appendingPathComponent("index")
    }

    func deltaURL(from base: String, to target: String) -> URL { url.appendingSegments("deltas", base, target) }

    func snapshotURL(_ token: String) -> URL { url.appendingSegments("snapshots", token) }

    func signedSync(now: Date, droppingAcknowledgedThrough settled: UInt64?) async -> SyncOutcome {
        var entry: SignedIndex.Entry
        let indexAsked: Double?
        if let viewEntry {
            (entry, indexAsked) = (viewEntry, nil)
        } else {
            switch await verifiedEntry(now: now, revalidating: false) {
            case .success(let verified): (entry, indexAsked) = (verified.entry, verified.serverAsked)
            case .failure(let failure):
                return recordFailure(failure.reason, retryable: true, serverAsked: failure.serverAsked, now: now, unavailable: failure.unavailable)
            }
        }
        if let token = state.token, token == entry.token, heldDigestFingerprint() == entry.digest {
            return recordSuccess(.notModified, etag: nil, lastModified: nil, serverAsked: indexAsked, now: now, droppingAcknowledgedThrough: settled)
        }
        // The index asked for a wait (`Backoff` on its 200): the body waits too.
        if let indexAsked {
            let until = now.addingTimeInterval(indexAsked)
            noteServerWait(until: until)
            lastFailureKind = .unavailable
            return .deferred(until: until)
        }
        var response: SyncResponse
        do {
            response = try await fetchSignedBody(for: entry)
            let notYet = RetryPolicy.serverDelay(retryAfter: response.header("Retry-After"), backoff: response.header("Backoff"), now: now)
            if response.status == 404 && notYet == nil {
                // `superseded`: the index was older than the server (a cache's copy): ask for
                // a fresh one once. (`unknown_target` carries Retry-After: wait as asked.)
                response.bodyFile.map { try? FileManager.default.removeItem(at: $0) }
                switch await verifiedEntry(now: now, revalidating: true) {
                case .success(let fresher): entry = fresher.entry
                case .failure(let failure):
                    return recordFailure(failure.reason, retryable: true, serverAsked: failure.serverAsked, now: now, unavailable: failure.unavailable)
                }
                response = try await fetchSignedBody(for: entry)
            }
        } catch let over as SyncBodyOverBudget {
            return postpone(over)
        } catch {
            return recordFailure("request failed: \(Self.describe(error))", retryable: true, serverAsked: nil, now: now, unavailable: true)
        }
        defer { response.bodyFile.map { try? FileManager.default.removeItem(at: $0) } }
        let serverAsked = RetryPolicy.serverDelay(retryAfter: response.header("Retry-After"), backoff: response.header("Backoff"), now: now)
        guard response.status == 200 else {
            return recordFailure(
                "\(response.status) for the signed state \(entry.token)", retryable: true, serverAsked: serverAsked, now: now,
                unavailable: FallbackLadder.isUnavailable(status: response.status) || serverAsked != nil)
        }
        do {
            let result = try apply(response, droppingAcknowledgedThrough: settled, expected: entry)
            return recordSuccess(.applied(result), etag: nil, lastModified: nil, serverAsked: serverAsked, now: now)
        } catch {
            return await signedFullFetch(entry, reason: Self.describe(error), now: now, droppingAcknowledgedThrough: settled)
        }
    }

    /// The one full fetch after a body that did not verify.
    private func signedFullFetch(_ entry: SignedIndex.Entry, reason: String, now: Date, droppingAcknowledgedThrough settled: UInt64?) async -> SyncOutcome {
        let response: SyncResponse
        do {
            response = try await fetchBody(snapshotURL(entry.token), headers: requestHeaders())
        } catch let over as SyncBodyOverBudget {
            return postpone(over)
        } catch {
            return recordFailure("\(reason); full fetch failed: \(Self.describe(error))", retryable: true, serverAsked: nil, now: now, unavailable: true)
        }
        defer { response.bodyFile.map { try? FileManager.default.removeItem(at: $0) } }
        guard response.status == 200 else {
            return recordFailure(
                "\(reason); full fetch got status \(response.status)", retryable: true, serverAsked: nil, now: now,
                unavailable: FallbackLadder.isUnavailable(status: response.status))
        }
        do {
            let result = try apply(response, expectFull: true, droppingAcknowledgedThrough: settled, expected: entry)
            return recordSuccess(.reset(result, reason: reason), etag: nil, lastModified: nil, serverAsked: nil, now: now)
        } catch {
            return recordFailure("\(reason); full body unusable: \(Self.describe(error))", retryable: true, serverAsked: nil, now: now)
        }
    }

    private func fetchSignedBody(for entry: SignedIndex.Entry) async throws -> SyncResponse {
        let url = state.token.map { deltaURL(from: $0, to: entry.token) } ?? snapshotURL(entry.token)
        return try await fetchBody(url, headers: requestHeaders())
    }

    private func heldDigestFingerprint() -> String? {
        if let digest = state.digest { return digest.fingerprint }
        // Held from before the app pinned keys: compute it once; the next apply keeps it.
        guard let digest = try? storage.recomputedDigest(collection: collection) else { return nil }
        state.digest = digest
        return digest.fingerprint
    }

    /// A response body of at most 16 MiB (an index), gzip-decoded when it still is.
    static func readSmallBody(_ file: URL) throws -> [UInt8] {
        let source = try isGzip(file) ? ChunkSources.gunzip(try ChunkSources.file(at: file.path)) : try ChunkSources.file(at: file.path)
        var document: [UInt8] = []
        while let chunk = try source() {
            document += chunk
            guard document.count <= 16 * 1024 * 1024 else { throw TrustError.malformedIndex("larger than 16 MiB") }
        }
        return document
    }

    struct IndexFailure: Error {
        var reason: String
        var serverAsked: Double?
        /// No answer, or `408`/`429`/`5xx` (see ``recordFailure(_:retryable:serverAsked:now:unavailable:)``).
        var unavailable = false
    }

    /// A verified index's entry for this collection, and the wait its answer asked for.
    struct VerifiedEntry {
        var entry: SignedIndex.Entry
        var serverAsked: Double?
    }

    /// Fetches and verifies the index; on success the held sequence and expiry move up at
    /// once (a verified index is authentic even if its data then fails to arrive).
    func verifiedEntry(now: Date, revalidating: Bool) async -> Result<VerifiedEntry, IndexFailure> {
        // RFC 9111 §5.2.1.4: a cache must revalidate with the origin before answering.
        let headers = revalidating ? ["Cache-Control": "no-cache"] : [:]
        let verification = IndexClient.Verification(trustedKeys: trustedKeys, now: Int64(now.timeIntervalSince1970), heldSequence: state.indexSequence)
        let client = IndexClient(transport: transport, accessToken: accessToken, timeout: timeout)
        switch await client.fetch(indexURL, label: "index", headers: headers, verification: verification, now: now) {
        case .fetched(let index, _, let serverAsked):
            guard let entry = index.entry(for: collection) else {
                return .failure(IndexFailure(reason: "index refused: \(Self.describe(TrustError.collectionNotListed(collection)))", serverAsked: serverAsked))
            }
            state.acceptIndex(sequence: index.sequence, expires: Date(timeIntervalSince1970: TimeInterval(index.expires)))
            return .success(VerifiedEntry(entry: entry, serverAsked: serverAsked))
        case .notModified(let serverAsked):
            return .failure(IndexFailure(reason: "index: unexpected status 304", serverAsked: serverAsked))
        case .failed(let reason, let serverAsked, let unavailable, _):
            return .failure(IndexFailure(reason: reason, serverAsked: serverAsked, unavailable: unavailable))
        }
    }
}

extension URL {
    /// This URL with `segments` appended to its path, each percent-encoded as one path
    /// segment (tokens are opaque and may hold any character: docs/PROTOCOL.md §8.3); a
    /// query string stays where it is.
    func appendingSegments(_ segments: String...) -> URL {
        guard var components = URLComponents(url: self, resolvingAgainstBaseURL: true) else { return self }
        var path = components.percentEncodedPath
        while path.hasSuffix("/") { path.removeLast() }
        for segment in segments { path += "/" + segment.percentEncodedPathSegment }
        components.percentEncodedPath = path
        return components.url ?? self
    }
}
