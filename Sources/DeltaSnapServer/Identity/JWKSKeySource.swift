import AsyncHTTPClient
import Foundation
import Logging
import NIOConcurrencyHelpers
import NIOCore
import NIOHTTP1

/// One identity provider's published keys (`serve --jwks-url URL` or `--jwks-file FILE`),
/// kept fresh: fetched once when made (an error then is the operator's to fix), again in the
/// background when the provider's `Cache-Control: max-age` runs out (bounded by
/// ``KeySetRefreshPolicy``), and at most once per 30 s for a token whose `kid` it lacks — a
/// provider's rotation reaches the server with the first token signed by the new key. A
/// failed fetch keeps the last good set.
///
/// ```swift
/// var access = AccessPolicy()
/// access.keySets = [try await JWKSKeySource(url: URL(string: "https://example.eu.auth0.com/.well-known/jwks.json")!)]
/// access.issuers = ["https://example.eu.auth0.com/"]
/// access.audiences = ["https://api.example.com"]
/// ```
public final class JWKSKeySource: Sendable {
    public enum Location: Sendable, CustomStringConvertible {
        case url(URL)
        case file(String)

        public var description: String {
            switch self {
            case .url(let url): url.absoluteString
            case .file(let path): path
            }
        }
    }

    public let location: Location
    let policy: KeySetRefreshPolicy
    private let logger: Logger
    private let state: NIOLockedValueBox<State>

    private struct State: Sendable {
        var keys: VerificationKeys
        var schedule: KeySetSchedule
        var fetching: Task<Void, Never>?
        /// Counts refreshes that dropped a `kid`: a token verified before with such a key is
        /// verified again (and refused) rather than answered from memory.
        var removals = 0
        var fetchedAt: Date
    }

    /// Largest key set read (1 MiB; providers' are a few KiB).
    public static let maximumBytes = 1 << 20

    /// The key set at `url` (`https://`, or `http://` on a loopback address only: keys
    /// fetched in the clear could be anyone's), fetched now.
    public convenience init(url: URL, policy: KeySetRefreshPolicy = KeySetRefreshPolicy(), logger: Logger = Logger(label: "deltasnap.jwks")) async throws {
        guard let scheme = url.scheme?.lowercased(), let host = url.host, !host.isEmpty,
              scheme == "https" || (scheme == "http" && Self.isLoopback(host))
        else {
            throw KeySetError("cannot be fetched: give an https:// URL (http:// only on 127.0.0.1, ::1 or localhost)", location: url.absoluteString)
        }
        try await self.init(location: .url(url), policy: policy, logger: logger)
    }

    /// The key set at the URL `text` (`serve --jwks-url`), fetched now.
    public convenience init(url text: String, policy: KeySetRefreshPolicy = KeySetRefreshPolicy(), logger: Logger = Logger(label: "deltasnap.jwks")) async throws {
        guard let url = URL(string: text) else { throw KeySetError("cannot be fetched: it is not a URL", location: text) }
        try await self.init(url: url, policy: policy, logger: logger)
    }

    /// The key set in the file at `path` (an offline set), read now and again as a fetched
    /// set would be (``KeySetRefreshPolicy/defaultAge``, or for an unknown `kid`).
    public convenience init(file path: String, policy: KeySetRefreshPolicy = KeySetRefreshPolicy(), logger: Logger = Logger(label: "deltasnap.jwks")) async throws {
        try await self.init(location: .file(path), policy: policy, logger: logger)
    }

    private init(location: Location, policy: KeySetRefreshPolicy, logger: Logger) async throws {
        self.location = location
        self.policy = policy
        self.logger = logger
        let now = Date()
        let (keys, maxAge) = try await Self.load(location)
        if !keys.skipped.isEmpty {
            logger.notice("key set \(location): keys left out: \(keys.skipped.joined(separator: "; "))")
        }
        state = NIOLockedValueBox(State(keys: keys, schedule: KeySetSchedule(policy: policy, fetchedAt: now, maxAge: maxAge), fetchedAt: now))
    }

    /// The key `kid` names, if the set in use has it; starts a background refresh when the set is stale.
    func key(_ kid: String, now: Date = Date()) -> VerificationKeys.Key? {
        let (key, refresh) = state.withLockedValue { state in
            (state.keys.byKid[kid], state.fetching == nil && state.schedule.isStale(at: now))
        }
        if refresh { _ = startFetch() }
        return key
    }

    /// How many refreshes dropped a key so far (see ``VerifiedTokens``).
    var removals: Int { state.withLockedValue { $0.removals } }

    /// The `kid`s of the set in use.
    public var keyIdentifiers: Set<String> { state.withLockedValue { Set($0.keys.byKid.keys) } }

    /// Fetches the set again for a token naming `kid`, unless a fetch for an unknown `kid`
    /// happened within the interval; waits for it. Whether the set now has `kid`.
    func refresh(forUnknown kid: String, now: Date = Date()) async -> Bool {
        enum Step { case wait(Task<Void, Never>), fetch, throttled }
        let step: Step = state.withLockedValue { state in
            if let fetching = state.fetching { return .wait(fetching) }
            return state.schedule.mayFetchForUnknownKid(at: now) ? .fetch : .throttled
        }
        switch step {
        case .wait(let fetching): await fetching.value
        case .fetch: await startFetch().value
        case .throttled: break
        }
        return state.withLockedValue { $0.keys.byKid[kid] != nil }
    }

    /// Starts a fetch unless one is running; the running one otherwise.
    private func startFetch() -> Task<Void, Never> {
        state.withLockedValue { state in
            if let fetching = state.fetching { return fetching }
            let task = Task { await self.fetchNow() }
            state.fetching = task
            return task
        }
    }

    private func fetchNow() async {
        let result: Result<(VerificationKeys, TimeInterval?), any Error>
        do { result = .success(try await Self.load(location)) } catch { result = .failure(error) }
        let now = Date()
        switch result {
        case .success(let (keys, maxAge)):
            let dropped = state.withLockedValue { state in
                let dropped = Set(state.keys.byKid.keys).subtracting(keys.byKid.keys)
                if !dropped.isEmpty { state.removals += 1 }
                state.keys = keys
                state.schedule.fetched(at: now, maxAge: maxAge)
                state.fetchedAt = now
                state.fetching = nil
                return dropped
            }
            let removed = dropped.isEmpty ? "" : "; removed \(dropped.sorted().joined(separator: ", "))"
            logger.debug("key set \(location) fetched: kids \(keys.byKid.keys.sorted().joined(separator: ", "))\(removed)")
        case .failure(let error):
            let since = state.withLockedValue { state in
                state.schedule.failed(at: now)
                state.fetching = nil
                return state.fetchedAt
            }
            logger.warning("key set \(location) could not be fetched again (\(Self.reason(error))); keeping the set fetched at \(since)")
        }
    }

    private static func reason(_ error: any Error) -> String {
        (error as? KeySetError)?.reason ?? String(describing: error)
    }

    /// The set at `location` and the `max-age` it came with.
    private static func load(_ location: Location) async throws -> (VerificationKeys, TimeInterval?) {
        do {
            switch location {
            case .file(let path):
                guard let data = FileManager.default.contents(atPath: path) else { throw KeySetError("cannot be read") }
                guard data.count <= maximumBytes else { throw KeySetError("is larger than \(maximumBytes) bytes") }
                return (try await VerificationKeys.parse(data), nil)
            case .url(let url):
                let (data, maxAge) = try await fetch(url)
                return (try await VerificationKeys.parse(data), maxAge)
            }
        } catch var error as KeySetError {
            error.location = location.description
            throw error
        }
    }

    /// The HTTP client of every key set: connect and read timeouts, no redirects (a key set
    /// that moved is the operator's to re-point), made once for the process (AsyncHTTPClient's
    /// own `shared` pattern: never shut down).
    private static let client = HTTPClient(
        eventLoopGroup: HTTPClient.defaultEventLoopGroup,
        configuration: HTTPClient.Configuration(
            redirectConfiguration: .disallow, timeout: .init(connect: .seconds(5), read: .seconds(10))))

    private static func fetch(_ url: URL) async throws -> (Data, TimeInterval?) {
        var request = HTTPClientRequest(url: url.absoluteString)
        request.headers.add(name: "Accept", value: "application/jwk-set+json, application/json")
        let response: HTTPClientResponse
        do {
            response = try await client.execute(request, timeout: .seconds(15))
        } catch {
            throw KeySetError("cannot be fetched: \(error)")
        }
        guard response.status == .ok else { throw KeySetError("cannot be fetched: HTTP \(response.status.code)") }
        let body: ByteBuffer
        do {
            body = try await response.body.collect(upTo: maximumBytes)
        } catch is NIOTooManyBytesError {
            throw KeySetError("is larger than \(maximumBytes) bytes")
        } catch {
            throw KeySetError("cannot be fetched: \(error)")
        }
        return (Data(body.readableBytesView), maxAge(response.headers))
    }

    /// `max-age` (less `Age`) of `Cache-Control`; 0 for `no-cache`/`no-store` (then the minimum applies).
    static func maxAge(_ headers: HTTPHeaders) -> TimeInterval? {
        var maxAge: TimeInterval?
        for directive in headers[canonicalForm: "cache-control"] {
            let parts = directive.lowercased().split(separator: "=", maxSplits: 1).map { $0.trimmingCharacters(in: .whitespaces) }
            if parts[0] == "no-cache" || parts[0] == "no-store" { return 0 }
            if parts[0] == "max-age", parts.count == 2, let seconds = TimeInterval(parts[1].trimmingCharacters(in: CharacterSet(charactersIn: "\""))) {
                maxAge = seconds
            }
        }
        if let age = headers.first(name: "age").flatMap(TimeInterval.init), let value = maxAge { maxAge = max(0, value - age) }
        return maxAge
    }

    private static func isLoopback(_ host: String) -> Bool {
        let host = host.lowercased().trimmingCharacters(in: CharacterSet(charactersIn: "[]"))
        return host == "localhost" || host == "::1" || host.hasPrefix("127.")
    }
}
