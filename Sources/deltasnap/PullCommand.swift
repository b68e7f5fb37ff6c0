import ArgumentParser
import DeltaSnapClient
import DeltaSnapCore
import DeltaSnapTrust
import Foundation

struct PullCommand: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "pull",
        abstract: "Sync a local replica from a DeltaSnap server, loading a bundled snapshot first if it is empty.",
        discussion: """
            Prints one line per sync: outcome, token, record count, body bytes received \
            (after HTTP decoding), milliseconds. A one-shot pull retries a network error at \
            once, but a wait the server asked for (Retry-After, Backoff) is kept in the replica \
            and honoured by later runs too ("deferred", unless --ignore-backoff); with --watch, \
            failures also back off exponentially. Queued local writes are not pushed (that is \
            `deltasnap sync`); they stay visible on top of what is pulled. The replica is bound \
            to the collection and URL of its first sync (a moved server: --rebind).

            Exit codes: 0 done; 1 error (no usable data, an answer that could not be used, \
            another collection…); 2 usage; 4 not done now, try later (server unreachable, \
            408/429/5xx, its wait still running, an update or a file over --max-bytes \
            postponed, or a file that could not be downloaded or did not match its SHA-256: \
            one line on stderr; pull prints no attachments: line). \
            With --collections, the worst of all.

            With --trusted-key (signing.pub from `deltasnap keygen`), the pull goes through the \
            server's signed index and cacheable URLs, and commits only data a trusted key \
            signed; an expired, replayed or forged index changes nothing.

            Several collections: --url is then the server's base URL, --collections names \
            them, --replica is a directory (one NAME.sqlite each) and --snapshot a directory \
            of bundles. One request to /v1/index tells which changed; only those are \
            fetched. One line per collection, prefixed with its name.
            """
    )

    @Option(name: .long, help: "The collection URL, e.g. http://127.0.0.1:8080/v1/collections/countries (with --collections: the base URL, http://127.0.0.1:8080).")
    var url: String

    @Option(name: .long, help: "Path of the local replica (an SQLite file, created if missing; with --collections a directory).")
    var replica: String

    @Option(name: .long, help: "A bundled .snapshot (loaded) or .replica (adopted) to start from when the replica is empty (with --collections a directory of them).")
    var snapshot: String?

    @Option(name: .long, help: "Several collections, comma-separated: one poll of /v1/index, then only the changed ones.")
    var collections: String?

    @Option(name: .long, help: "A public key (signing.pub) whose signature the data must carry; repeat it while keys rotate.")
    var trustedKey: [String] = []

    @Flag(name: .long, help: "Keep syncing every --interval seconds until interrupted.")
    var watch = false

    @Option(name: .long, help: "Seconds between syncs with --watch.")
    var interval: Double = 60

    @Option(name: .long, help: "A bearer token, for a private collection.")
    var token: String?

    @Option(name: .long, help: "Request timeout in seconds.")
    var timeout: Double = 30

    @OptionGroup var waits: WaitOptions

    @OptionGroup var budget: BudgetOptions

    @OptionGroup var files: AttachmentOptions

    func validate() throws {
        guard URL(string: url)?.scheme?.hasPrefix("http") == true else { throw ValidationError("--url must be an http(s) URL") }
        guard interval > 0, timeout > 0 else { throw ValidationError("--interval and --timeout must be positive") }
        if let collections {
            let names = TokenCommand.list(collections)
            guard !names.isEmpty else { throw ValidationError("--collections needs at least one name") }
            for name in names where !CollectionName.isValid(name) { throw ValidationError("invalid collection name \"\(name)\" in --collections") }
        }
    }

    func run() async throws {
        let code = try await reportingErrors { () async throws -> ExitCode? in
            let keys = try TrustedKeys.load(trustedKey)
            if let collections { return try await pullSeveral(TokenCommand.list(collections), keys: keys) }
            let collectionURL = URL(string: url)!
            let name = collectionURL.lastPathComponent
            try refuseReadInPlace(self.replica, snapshot: snapshot)
            let replica = try DeltaSnapReplica(
                path: self.replica, collection: name, url: collectionURL, bundledSnapshot: snapshot,
                timeout: .milliseconds(Int(timeout * 1000)), accessToken: token, trustedKeys: keys, acceptingServerChange: waits.rebind)
            await replica.setNetworkBudget(budget.budget)
            await replica.setAttachmentPolicy(files.attachments)
            var outcome: SyncOutcome
            repeat {
                let started = ContinuousClock.now
                // A one-shot pull is a person asking now; --watch backs off like an app.
                outcome = await replica.pull(waits: watch && !waits.ignoreBackoff ? .all : waits.policy)
                print(await PullLine.describe(outcome, replica: replica, since: started))
                if watch {
                    var wait = interval
                    if case .deferred(let until) = outcome { wait = max(1, until.timeIntervalSinceNow) }
                    try await Task.sleep(for: .milliseconds(Int(wait * 1000)))
                }
            } while watch
            await PullLine.noteDeferral(outcome)
            try await PullLine.requireData(replica, outcome: outcome)
            let files = await replica.lastAttachmentReport
            if files.postponed > 0 || !files.failures.isEmpty {
                printError("deltasnap: \(files.line); a later pull fetches them")
                return Exit.unavailable
            }
            return await PullLine.exitCode(for: outcome, replica: replica)
        }
        if let code { throw code }
    }
}

extension PullCommand {
    private func pullSeveral(_ names: [String], keys: [TrustedKey]) async throws -> ExitCode? {
        let set = try DeltaSnapReplicaSet(
            directory: replica, baseURL: URL(string: url)!, collections: names, bundledSnapshots: snapshot,
            timeout: .milliseconds(Int(timeout * 1000)), accessToken: token, trustedKeys: keys, acceptingServerChange: waits.rebind)
        for name in names { await set[name]?.setNetworkBudget(budget.budget) }
        var codes: [ExitCode?] = []
        repeat {
            let started = ContinuousClock.now
            let outcomes = await set.pull(waits: watch && !waits.ignoreBackoff ? .all : waits.policy)
            codes = []
            for name in names {
                guard let outcome = outcomes[name], let replica = set[name] else { continue }
                print("\(name): \(await PullLine.describe(outcome, replica: replica, since: started))")
                codes.append(await PullLine.exitCode(for: outcome, replica: replica))
            }
            if let deferred = outcomes.values.first(where: { if case .deferred = $0 { true } else { false } }) {
                await PullLine.noteDeferral(deferred)
            }
            if watch { try await Task.sleep(for: .milliseconds(Int(interval * 1000))) }
        } while watch
        var empty: [String] = []
        for name in names where await set[name]?.currentState.hasData != true { empty.append(name) }
        guard empty.isEmpty else {
            try PullLine.noData("no data for \(empty.joined(separator: ", "))", tryLater: Exit.combined(codes) == Exit.unavailable)
        }
        return Exit.combined(codes)
    }
}

/// `--trusted-key` files.
enum TrustedKeys {
    static func load(_ paths: [String]) throws -> [TrustedKey] { try paths.map { try TrustedKey(contentsOf: $0) } }
}

struct PullFailure: Error, CustomStringConvertible {
    var message: String
    var description: String { message }
}

struct DumpCommand: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "dump",
        abstract: "Print a replica's visible records as NDJSON sorted by id — the same bytes as the server's `export`."
    )

    @Option(name: .long, help: "Path of the local replica.")
    var replica: String

    @Option(name: .long, help: "The bundled .replica it started from: read in place while no data change has copied it to --replica.")
    var snapshot: String?

    @Option(name: .long, help: "In a view's replica (sync --url BASE_URL): the collection or partition NAME/KEY to print.")
    var collection: String?

    func run() async throws {
        try await reportingErrors {
            guard FileManager.default.fileExists(atPath: replica) || snapshot.map(BundledReplica.isReplica) == true else {
                throw BundledReplica.ReadInPlace(path: replica)
            }
            try ReplicaDump.dump(path: replica, bundledReplica: snapshot, collection: collection) { StandardOutput().write($0) }
        }
    }
}
