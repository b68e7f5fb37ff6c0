import DeltaSnapCore
import DeltaSnapTrust
import Foundation

/// Several collections of one server, kept fresh together: one request to `GET /v1/index`
/// tells which changed, and only those are fetched. Each collection lives in its own
/// replica file, `DIRECTORY/NAME.sqlite`, so each apply stays its own verified transaction
/// and a failure in one leaves the others applied.
///
/// ```swift
/// let set = try DeltaSnapReplicaSet(
///     directory: appSupport.path, baseURL: URL(string: "https://data.example.com")!,
///     collections: ["countries", "currencies", "blocklist"], bundledSnapshots: Bundle.main.resourcePath)
/// let outcomes = await set.pull()            // ["currencies": .applied(…)], the rest .notModified
/// let euro = try await set["currencies"]!.record(id: "EUR")
/// ```
public actor DeltaSnapReplicaSet {
    public let baseURL: URL
    public let directory: String
    /// The replicas, by collection name.
    public nonisolated let replicas: [String: DeltaSnapReplica]
    /// The collections in the order given.
    public nonisolated let collections: [String]
    private let transport: any SyncTransport
    private let trustedKeys: [TrustedKey]
    private let timeout: Duration
    private let accessToken: String?

    /// Opens (or creates) one replica per collection under `directory`. `bundledSnapshots`
    /// is a directory holding `NAME.snapshot` (or `NAME.replica`, and `NAME.index` when
    /// signed) for the collections the app bundles.
    public init(
        directory: String, baseURL: URL, collections: [String], bundledSnapshots: String? = nil,
        transport: any SyncTransport = URLSessionTransport(), timeout: Duration = .seconds(30), accessToken: String? = nil,
        trustedKeys: [TrustedKey] = [], acceptingServerChange: Bool = false
    ) throws {
        guard !collections.isEmpty else { throw ApplyError.decode("no collection given") }
        try FileManager.default.createDirectory(atPath: directory, withIntermediateDirectories: true)
        self.baseURL = baseURL
        self.directory = directory
        self.collections = collections
        self.transport = transport
        self.trustedKeys = trustedKeys
        self.timeout = timeout
        self.accessToken = accessToken
        var replicas: [String: DeltaSnapReplica] = [:]
        for name in collections {
            let bundle = bundledSnapshots.flatMap { Self.bundle(for: name, in: $0) }
            replicas[name] = try DeltaSnapReplica(
                path: (directory as NSString).appendingPathComponent(name + ".sqlite"), collection: name,
                url: baseURL.appendingPathComponent("v1").appendingPathComponent("collections").appendingPathComponent(name),
                bundledSnapshot: bundle, transport: transport, timeout: timeout, accessToken: accessToken, trustedKeys: trustedKeys,
                acceptingServerChange: acceptingServerChange)
        }
        self.replicas = replicas
    }

    public nonisolated subscript(collection: String) -> DeltaSnapReplica? { replicas[collection] }

    private static func bundle(for name: String, in directory: String) -> String? {
        for file in [name + ".replica", Snapshot.fileName(for: name)] {
            let path = (directory as NSString).appendingPathComponent(file)
            if FileManager.default.fileExists(atPath: path) { return path }
        }
        return nil
    }

    /// Pulls the collections whose token in the index differs from the one held; the others
    /// answer `.notModified` without a request. When the index cannot be had, every
    /// collection is pulled on its own (each still verified).
    public func pull(now: Date = Date(), ignoringBackoff: Bool = false) async -> [String: SyncOutcome] {
        await pull(now: now, waits: ignoringBackoff ? .none : .all)
    }

    /// Like ``pull(now:ignoringBackoff:)``, each replica respecting exactly the waits `waits` names.
    public func pull(now: Date = Date(), waits: WaitPolicy) async -> [String: SyncOutcome] {
        var outcomes: [String: SyncOutcome] = [:]
        // One server: a wait it asked any replica for holds the index request too (each
        // replica then answers `.deferred` itself).
        var waiting = false
        if waits != .none {
            for replica in replicas.values where await replica.serverWait(at: now) != nil { waiting = true }
        }
        let (tokens, asked) = waiting ? (nil, nil) : await publishedTokens(now: now)
        if let asked, waits != .none {
            let until = now.addingTimeInterval(asked)
            for name in collections {
                await replicas[name]?.noteServerWait(until: until)
                outcomes[name] = .deferred(until: until)
            }
            return outcomes
        }
        for name in collections {
            guard let replica = replicas[name] else { continue }
            if let tokens, let published = tokens[name], await replica.token == published {
                outcomes[name] = .notModified
                continue
            }
            outcomes[name] = await replica.pull(now: now, waits: waits)
        }
        return outcomes
    }

    /// Each listed collection's token from `GET /v1/index`, signature-checked when keys are
    /// pinned (each replica then checks expiry and sequence against what it holds); nil when
    /// the index is unavailable or refused. Also the wait the answer asked for, if any.
    private func publishedTokens(now: Date) async -> (tokens: [String: String]?, serverAsked: Double?) {
        let client = IndexClient(transport: transport, accessToken: accessToken, timeout: timeout)
        let url = baseURL.appendingPathComponent("v1").appendingPathComponent("index")
        switch await client.fetch(url, label: "index", verification: .init(trustedKeys: trustedKeys, now: nil, heldSequence: nil), now: now) {
        case .fetched(let index, _, let asked):
            return (Dictionary(index.entries.map { ($0.collection, $0.token) }, uniquingKeysWith: { first, _ in first }), asked)
        case .notModified(let asked), .failed(_, let asked, _, _):
            return (nil, asked)
        }
    }
}
