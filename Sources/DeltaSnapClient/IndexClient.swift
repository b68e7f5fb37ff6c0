import DeltaSnapCore
import DeltaSnapTrust
import Foundation

/// The one client of `GET /v1/index` (PROTOCOL.md §8.1, §10.3, §11): one request, and its
/// answer read and checked by an explicit ``Verification`` — what a several-collection sync,
/// a signed pull and a user's view each ask of it. Nothing is accepted before it passes.
///
/// ```swift
/// let client = IndexClient(transport: URLSessionTransport(), accessToken: jwt, timeout: .seconds(30))
/// let answer = await client.fetch(
///     baseURL.appendingPathComponent("v1/index"), label: "view",
///     verification: .init(trustedKeys: keys, now: now, heldSequence: held, subject: .ofToken(jwt)), now: Date())
/// ```
package struct IndexClient: Sendable {
    let transport: any SyncTransport
    let accessToken: String?
    let timeout: Duration

    package init(transport: any SyncTransport, accessToken: String?, timeout: Duration) {
        self.transport = transport
        self.accessToken = accessToken
        self.timeout = timeout
    }

    /// What an index must be to be used.
    package struct Verification: Sendable {
        /// Whose index it must be.
        package enum Subject: Sendable {
            /// Any (the public index, or a view: the caller does not look at whose).
            case any
            /// The view of this bearer token's `sub`; without trusted keys an unsigned public
            /// index (no `subject`) passes too (a server without rules answers it).
            case ofToken(String?)
        }

        /// Keys one of which must sign it; empty: signatures are not checked.
        package var trustedKeys: [TrustedKey]
        /// Seconds since 1970 it must not be expired at (with keys); nil: expiry not checked.
        package var now: Int64?
        /// The `sequence` it must not be below (with keys); nil: not checked.
        package var heldSequence: UInt64?
        package var subject: Subject

        package init(trustedKeys: [TrustedKey], now: Int64?, heldSequence: UInt64?, subject: Subject = .any) {
            self.trustedKeys = trustedKeys
            self.now = now
            self.heldSequence = heldSequence
            self.subject = subject
        }

        /// Throws when `index` fails a check.
        func check(_ index: SignedIndex) throws {
            if !trustedKeys.isEmpty { try index.verify(trusting: trustedKeys, now: now, heldSequence: heldSequence) }
            guard case .ofToken(let token) = subject else { return }
            let expected = token.flatMap(JWTSubject.of)
            guard index.subject == expected || (trustedKeys.isEmpty && index.subject == nil) else {
                throw TrustError.malformedIndex("the view is \(index.subject.map { "\"\($0)\"'s" } ?? "the public index"), not \"\(expected ?? "?")\"'s")
            }
        }
    }

    package enum Answer: Sendable {
        /// `304`: the index held is current.
        case notModified(serverAsked: Double?)
        /// A `200` whose index passed every check.
        case fetched(SignedIndex, etag: String?, serverAsked: Double?)
        /// No answer, another status, or an index that failed a check (`refused`).
        case failed(reason: String, serverAsked: Double?, unavailable: Bool, refused: Bool)
    }

    /// `GET url` with `headers` (the bearer token added), then the checks of `verification`.
    /// `label` names the document in failure reasons ("index", "view"); `extraTimeout` covers
    /// a long-poll's wait.
    package func fetch(
        _ url: URL, label: String, headers: [String: String] = [:], extraTimeout: Duration = .zero, verification: Verification, now: Date
    ) async -> Answer {
        let sent = SyncRequest.headers(accessToken: accessToken).merging(headers) { $1 }
        let response: SyncResponse
        do {
            response = try await transport.fetch(SyncRequest(url: url, headers: sent, timeout: timeout + extraTimeout))
        } catch {
            return .failed(reason: "\(label) request failed: \(DeltaSnapReplica.describe(error))", serverAsked: nil, unavailable: true, refused: false)
        }
        defer { response.bodyFile.map { try? FileManager.default.removeItem(at: $0) } }
        let serverAsked = RetryPolicy.serverDelay(retryAfter: response.header("Retry-After"), backoff: response.header("Backoff"), now: now)
        if response.status == 304 { return .notModified(serverAsked: serverAsked) }
        guard response.status == 200, let file = response.bodyFile else {
            return .failed(
                reason: "\(label): unexpected status \(response.status)", serverAsked: serverAsked,
                unavailable: FallbackLadder.isUnavailable(status: response.status), refused: false)
        }
        do {
            let index = try SignedIndex.parse(try DeltaSnapReplica.readSmallBody(file))
            try verification.check(index)
            return .fetched(index, etag: response.header("ETag"), serverAsked: serverAsked)
        } catch {
            return .failed(reason: "\(label) refused: \(DeltaSnapReplica.describe(error))", serverAsked: serverAsked, unavailable: false, refused: true)
        }
    }
}
