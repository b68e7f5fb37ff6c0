import ArgumentParser
import DeltaSnapClient
import DeltaSnapCore
import DeltaSnapTrust
import Foundation
import Synchronization

struct SyncCommand: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "sync",
        abstract: "Push a replica's queued writes to the server, then pull: one line per step.",
        discussion: """
            pushed N                        writes the server accepted
            refused N                       writes it refused (rolled back locally),
              SEQ OP ID CODE: MESSAGE       then one line per refused write
            copied N                        accepted writes the server kept as conflict copies
              SEQ OP ID as COPY             (only when there are some; --merge-fork collections)
            REASON (N queued)               a failed push: the writes stay queued
            pulled: OUTCOME token=… …       as `deltasnap pull` prints it
            attachments: uploaded N (B bytes), downloaded M (C bytes)
                                            the files sent before the writes that refer to
                                            them, and those fetched (--attachments): N and M
                                            count files finished (M: proven and kept), B and
                                            C the bytes moved by this run — after a resume
                                            only the rest; C also counts bytes of a download
                                            refused as not matching, or cut. Then, when some:
                                            ", K postponed over the budget", ", K failed (…)".
                                            A view's sync (BASE_URL) prints no such line.

            Retries are safe: every write carries this replica's client id and write number, \
            so the server never applies one twice. A wait the server asked for (Retry-After, \
            Backoff) is kept in the replica and honoured by the next run too: nothing is sent \
            before it ends (the lines say "deferred"), unless --ignore-backoff.

            The replica is bound to the collection and URL of its first sync: another --url \
            is refused (a moved server: --rebind).

            With a base URL (http://HOST:PORT, no collection path) and --token, the replica \
            holds the token's whole view: every public collection and every partition the \
            token may read, in one file. Each partition's queued writes are pushed, the view \
            is asked for once, and only what changed is fetched: one line per partition that \
            changed (PARTITION: OUTCOME …; PARTITION: dropped, when it left the view — its \
            data leaves the file, its queued writes are reported as refused), then \
            view: N partitions, M changed, K dropped

            With --watch it runs until stopped (SIGINT), syncing every --interval seconds and \
            printing the lines of each sync that changed something. With --live, each \
            round waits on the server's index (GET /v1/index?wait=, up to --wait seconds) \
            instead, so a change shows up within moments of its commit; when something \
            between cuts held requests (a proxy's read timeout), it waits shorter, down to \
            polling every --interval seconds.

            Exit codes: 0 done; 1 error (the replica holds no data, an answer could not be \
            used, another collection…); 2 usage; 3 some writes refused; 4 not done now, try \
            later (server unreachable, 408/429/5xx, its wait still running, an update or a file \
            over --max-bytes postponed, a file that could not be downloaded or did not match its \
            SHA-256 — the records are there, the next sync fetches it again). When several \
            apply, the first of 1, 4, 3 wins.
            """
    )

    @Option(name: .long, help: "The collection URL, e.g. http://127.0.0.1:8080/v1/collections/notes; or the server's base URL (http://127.0.0.1:8080) to sync the token's whole view.")
    var url: String

    @Option(name: .long, help: "Path of the local replica (an SQLite file, created if missing).")
    var replica: String

    @Option(name: .long, help: "A bearer token (a per-user JWT, or the server's admin token) sent with every request.")
    var token: String?

    @Option(name: .long, help: "A bundled .snapshot to load when the replica is empty.")
    var snapshot: String?

    @Option(name: .long, help: "Request timeout in seconds.")
    var timeout: Double = 30

    @Option(name: .long, help: "A public key (signing.pub) whose signature pulled data must carry; repeat it while keys rotate.")
    var trustedKey: [String] = []

    @Flag(name: .long, help: "Keep syncing until stopped (SIGINT), printing each sync that changed something.")
    var watch = false

    @Flag(name: .long, help: "With --watch: wait on the server for changes (a long-poll on /v1/index) instead of polling.")
    var live = false

    @Option(name: .long, help: "Seconds between syncs with --watch (and between polls when --live falls back).")
    var interval: Double = 30

    @Option(name: .long, help: "Seconds each --live request waits on the server (1-60).")
    var wait = 30

    @OptionGroup var waits: WaitOptions

    @OptionGroup var budget: BudgetOptions

    @OptionGroup var files: AttachmentOptions

    func validate() throws {
        guard URL(string: url)?.scheme?.hasPrefix("http") == true else { throw ValidationError("--url must be an http(s) URL") }
        guard timeout > 0 else { throw ValidationError("--timeout must be positive") }
        guard !live || watch else { throw ValidationError("--live needs --watch: it keeps running") }
        guard interval > 0 else { throw ValidationError("--interval must be positive") }
        guard (1...60).contains(wait) else { throw ValidationError("--wait must be 1...60 seconds") }
    }

    private var liveOptions: LiveOptions {
        LiveOptions(wait: wait, pollInterval: .milliseconds(Int(interval * 1000)))
    }

    /// A base URL (no path) names the server, not a collection: the view of the token.
    private var isView: Bool { (URL(string: url)?.path ?? "").trimmingCharacters(in: CharacterSet(charactersIn: "/")).isEmpty }

    func run() async throws {
        if isView { return try await syncView() }
        let code = try await reportingErrors {
            let collectionURL = URL(string: url)!
            try refuseReadInPlace(self.replica, snapshot: snapshot)
            let replica = try DeltaSnapReplica(
                path: self.replica, collection: collectionURL.lastPathComponent, url: collectionURL, bundledSnapshot: snapshot,
                timeout: .milliseconds(Int(timeout * 1000)), accessToken: token ?? ProcessInfo.processInfo.environment["DELTASNAP_TOKEN"],
                trustedKeys: try TrustedKeys.load(trustedKey), acceptingServerChange: waits.rebind)
            await replica.setNetworkBudget(budget.budget)
            await replica.setAttachmentPolicy(files.attachments)
            if watch {
                try await watchCollection(replica)
                return ExitCode?.none
            }
            let started = ContinuousClock.now
            // A person ran this command: a network error is retried now, but never sooner
            // than the server asked (unless --ignore-backoff).
            let outcome = await replica.sync(waits: waits.policy)
            let (lines, code) = await Self.report(outcome, of: replica, since: started)
            print(lines.joined(separator: "\n"))
            await PullLine.noteDeferral(outcome)
            try await PullLine.requireData(replica, outcome: outcome)
            return code
        }
        if let code { throw code }
    }
}

extension SyncCommand {
    /// The lines of one sync of a collection (its push, then its pull), and its exit code.
    /// `quietFiles`: leave the attachments line out when no file moved or waits (`--watch`
    /// prints each change; a one-shot sync always says it).
    private static func report(
        _ outcome: SyncOutcome, of replica: DeltaSnapReplica, since started: ContinuousClock.Instant, quietFiles: Bool = false
    ) async -> ([String], ExitCode?) {
        let push = await replica.lastPushReport
        var lines: [String] = []
        if push.batches > 0 || push.failure != nil {
            lines.append("pushed \(push.accepted)")
            lines.append("refused \(push.refused.count)")
            for refused in push.refused {
                lines.append("  \(refused.seq) \(refused.operation.rawValue) \(refused.id) \(refused.refusal.code): \(refused.refusal.message)")
            }
            if !push.copied.isEmpty {
                lines.append("copied \(push.copied.count)")
                for copied in push.copied { lines.append("  \(copied.seq) \(copied.operation.rawValue) \(copied.id) as \(copied.copy)") }
            }
            if let failure = push.failure { lines.append("push failed: \(failure) (\(push.stillQueued) queued)") }
        }
        lines.append("pulled: " + (await PullLine.describe(outcome, replica: replica, since: started)))
        let files = await replica.lastAttachmentReport
        if !quietFiles || files != AttachmentReport() { lines.append(files.line) }
        let code = Exit.combined([
            await PullLine.exitCode(for: outcome, replica: replica),
            // A file left for a larger budget or a better network: trying later brings it.
            files.postponed > 0 || !files.failures.isEmpty ? Exit.unavailable : nil,
            push.failure == nil ? nil : (push.failureKind == .unavailable ? Exit.unavailable : Exit.error),
            push.refused.isEmpty ? nil : Exit.writesRefused,
        ])
        return (lines, code)
    }

    /// `--watch` on a collection.
    private func watchCollection(_ replica: DeltaSnapReplica) async throws {
        try await watching(
            live: { onSync in await replica.live(liveOptions, onSync: onSync) },
            sync: { await replica.sync(waits: waits.ignoreBackoff ? .none : .all) },
            worthReporting: { outcome in if case .notModified = outcome { false } else { true } },
            lines: { outcome, since in await Self.report(outcome, of: replica, since: since, quietFiles: true).0 })
    }

    /// The `--watch` loop of a collection or a view: a sync every --interval, or live; prints
    /// each sync that changed something, or failed.
    private func watching<Result: Sendable>(
        live runLive: (@escaping @Sendable (Result) async -> Void) async -> Void,
        sync: () async -> Result,
        worthReporting: @escaping @Sendable (Result) -> Bool,
        lines: @escaping @Sendable (Result, ContinuousClock.Instant) async throws -> [String]
    ) async throws {
        if live {
            // The `ms=` of a line counts from the end of the previous sync: the wait included.
            let started = Mutex(ContinuousClock.now)
            await runLive { result in
                let since = started.withLock { $0 }
                if worthReporting(result), let printed = try? await lines(result, since) { Self.emit(printed) }
                started.withLock { $0 = .now }
            }
            return
        }
        while !Task.isCancelled {
            let started = ContinuousClock.now
            let result = await sync()
            if worthReporting(result) { Self.emit(try await lines(result, started)) }
            try await Task.sleep(for: .milliseconds(Int(interval * 1000)))
        }
    }

    /// Prints `lines` and flushes them: a script reading a pipe sees each change as it comes.
    static func emit(_ lines: [String]) {
        FileHandle.standardOutput.write(Data((lines.joined(separator: "\n") + "\n").utf8))
    }

    /// `sync --url BASE_URL --token JWT`: the token's whole view into one replica file.
    private func syncView() async throws {
        let code = try await reportingErrors { () -> ExitCode? in
            guard let token = token ?? ProcessInfo.processInfo.environment["DELTASNAP_TOKEN"] else {
                throw ValidationError("syncing a view (a base --url) needs --token: the view is that token's")
            }
            let view = try DeltaSnapView(
                path: replica, baseURL: URL(string: url)!, accessToken: token, trustedKeys: try TrustedKeys.load(trustedKey),
                timeout: .milliseconds(Int(timeout * 1000)))
            if watch {
                try await watchView(view)
                return nil
            }
            let started = ContinuousClock.now
            let report = await view.sync()
            let (lines, code) = try await Self.report(report, of: view, since: started)
            print(lines.joined(separator: "\n"))
            return code
        }
        if let code { throw code }
    }

    /// The lines of one sync of a view, and its exit code.
    private static func report(_ report: ViewSyncReport, of view: DeltaSnapView, since started: ContinuousClock.Instant) async throws -> ([String], ExitCode?) {
        var lines: [String] = []
        var refused = 0
        var pushFailed: SyncFailureKind?
        for (partition, push) in report.pushes.sorted(by: { $0.key < $1.key }) {
            lines.append("\(partition): pushed \(push.accepted), refused \(push.refused.count)")
            refused += push.refused.count
            for write in push.refused {
                lines.append("  \(write.seq) \(write.operation.rawValue) \(write.id) \(write.refusal.code): \(write.refusal.message)")
            }
            // A partition that left the view reports its writes as dropped below instead.
            if let failure = push.failure, report.dropped[partition] == nil {
                lines.append("\(partition): push failed: \(failure) (\(push.stillQueued) queued)")
                pushFailed = pushFailed == .rejected ? .rejected : (push.failureKind ?? .rejected)
            }
        }
        var pullFailed = false
        for (partition, outcome) in report.partitions.sorted(by: { $0.key < $1.key }) {
            lines.append("\(partition): " + (await PullLine.describe(outcome, replica: try view.replica(for: partition), since: started)))
            if case .failed = outcome { pullFailed = true }
        }
        for (partition, lost) in report.dropped.sorted(by: { $0.key < $1.key }) {
            lines.append("\(partition): dropped (\(lost.count) queued writes refused)")
            refused += lost.count
            for write in lost { lines.append("  \(write.seq) \(write.operation.rawValue) \(write.id) revoked: the partition left the view") }
        }
        var viewCode: ExitCode?
        if case .failed(let reason, let unavailable) = report.index {
            lines.append("view: failed: \(reason)")
            viewCode = unavailable ? Exit.unavailable : Exit.error
        }
        lines.append("view: \(report.held) partitions, \(report.changed) changed, \(report.dropped.count) dropped")

        let code = Exit.combined([
            viewCode, pullFailed ? Exit.unavailable : nil,
            pushFailed.map { $0 == .unavailable ? Exit.unavailable : Exit.error }, refused > 0 ? Exit.writesRefused : nil,
        ])
        return (lines, code)
    }

    /// `--watch` on a view.
    private func watchView(_ view: DeltaSnapView) async throws {
        try await watching(
            live: { onSync in await view.live(liveOptions, onSync: onSync) },
            sync: { await view.sync() },
            worthReporting: { $0.isWorthReporting },
            lines: { report, since in try await Self.report(report, of: view, since: since).0 })
    }
}

/// `--ignore-backoff` and `--rebind`, shared by `pull` and `sync`.
struct WaitOptions: ParsableArguments {
    @Flag(name: .long, help: "Send requests now, even while a wait the server asked for (Retry-After, Backoff) is running.")
    var ignoreBackoff = false

    @Flag(name: .long, help: "The server moved: accept this --url for a replica that synced with another one.")
    var rebind = false

    /// One-shot commands retry a network error at once but respect the server's waits.
    var policy: WaitPolicy { ignoreBackoff ? .none : .serverRequested }
}

/// `--attachments`, shared by `pull` and `sync`.
struct AttachmentOptions: ParsableArguments {
    @Option(name: .long, help: "When files the records refer to are downloaded: eager (each sync fetches the new ones; --max-bytes applies), lazy (only on use: `attachment get`), none.")
    var attachments: AttachmentPolicy = .eager
}

extension AttachmentPolicy: ExpressibleByArgument {}

/// `--max-bytes`, shared by `pull` and `sync`: a metered network's budget.
struct BudgetOptions: ParsableArguments {
    @Option(name: .long, help: "Download no body over this many bytes (a metered network): a larger update is postponed — the line says so, exit 4 — and fetched by a run without it. 304s and small deltas still come.")
    var maxBytes: Int?

    func validate() throws {
        if let maxBytes, maxBytes < 0 { throw ValidationError("--max-bytes must be 0 or more") }
    }

    var budget: NetworkBudget { maxBytes.map { .metered(maximumBodyBytes: $0) } ?? .unlimited }
}

/// The one-line summary of a pull that `pull` and `sync` print.
enum PullLine {
    static func describe(_ outcome: SyncOutcome, replica: DeltaSnapReplica, since started: ContinuousClock.Instant) async -> String {
        let elapsed = ContinuousClock.now - started
        let milliseconds = elapsed.components.seconds * 1000 + elapsed.components.attoseconds / 1_000_000_000_000_000
        let count = await replica.count
        let token = await replica.token ?? "-"
        let bytes = await replica.lastSyncBytesReceived
        var line = "\(outcome.name) token=\(token) records=\(count) bytes=\(bytes) ms=\(milliseconds)"
        switch outcome {
        case .applied(let result): line += " changed=\(result.changed)"
        case .reset(let result, let reason): line += " changed=\(result.changed) reason=\"\(reason)\""
        case .failed(let reason, _): line += " error=\"\(reason)\""
        case .deferred(let until): line += " until=\(Int(until.timeIntervalSinceNow.rounded(.up)))s"
        case .postponed(let announced, let budget): line += (announced.map { " announced=\($0)" } ?? "") + " budget=\(budget)"
        case .notModified: break
        }
        return line
    }

    /// `nil` (done), ``Exit/unavailable`` or ``Exit/error`` for a pull's outcome.
    static func exitCode(for outcome: SyncOutcome, replica: DeltaSnapReplica) async -> ExitCode? {
        switch outcome {
        case .notModified, .applied, .reset: nil
        case .deferred, .postponed: Exit.unavailable
        case .failed: await replica.lastFailureKind == .unavailable ? Exit.unavailable : Exit.error
        }
    }

    /// Throws unless the replica holds data: exit 4 when trying later can bring it (no
    /// answer, 408/429/5xx, a wait still running), else exit 1.
    static func requireData(_ replica: DeltaSnapReplica, outcome: SyncOutcome) async throws {
        guard await !replica.currentState.hasData else { return }
        try noData(
            "the replica holds no data: \(await replica.lastError ?? "nothing was fetched")",
            tryLater: await exitCode(for: outcome, replica: replica) == Exit.unavailable)
    }

    /// `what` on stderr and exit 4 when trying later can bring the data, else exit 1.
    static func noData(_ what: String, tryLater: Bool) throws -> Never {
        guard tryLater else { throw PullFailure(message: what) }
        printError("deltasnap: \(what); try again later")
        throw Exit.unavailable
    }

    /// Says on stderr why nothing was sent, when a wait was still running.
    static func noteDeferral(_ outcome: SyncOutcome) async {
        guard case .deferred(let until) = outcome else { return }
        printError("deltasnap: deferred: waiting until \(HTTPDate.format(Int64(until.timeIntervalSince1970.rounded(.up)))) as the server asked; --ignore-backoff sends now")
    }
}

struct HistoryCommand: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "history",
        abstract: "Print the values writes replaced in a record, newest first, one JSON object a line.",
        discussion: """
            Each line: {"replacedAt":HTTP-date,"replacedBy":client,"replacedIn":version,"value":{…},"version":version} \
            — `value` is the record as it was, written by `version` and replaced in `replacedIn`. \
            Prints nothing when the record has no history.
            """
    )

    @Option(name: .long, help: "The collection URL, e.g. http://127.0.0.1:8080/v1/collections/notes.")
    var url: String

    @Option(name: .long, help: "A bearer token, for a private collection.")
    var token: String?

    @Option(name: .long, help: "At most this many entries (1 to 1000).")
    var limit = 100

    @Argument(help: "The record id.")
    var id: String

    func validate() throws {
        guard URL(string: url)?.scheme?.hasPrefix("http") == true else { throw ValidationError("--url must be an http(s) URL") }
        guard (1...1000).contains(limit) else { throw ValidationError("--limit must be 1...1000") }
    }

    func run() async throws {
        try await reportingErrors {
            guard let collectionURL = URL(string: url) else { throw ValidationError("cannot build a URL from --url \(url)") }
            let entries = try await RecordHistory.fetch(collectionURL: collectionURL, id: id, limit: limit, accessToken: token)
            StandardOutput().write(Array(entries.map { CanonicalJSON.string($0.json) + "\n" }.joined().utf8))
        }
    }
}
