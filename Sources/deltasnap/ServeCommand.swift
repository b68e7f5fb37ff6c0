import ArgumentParser
import DeltaSnapCore
import DeltaSnapServer
import DeltaSnapStore
import DeltaSnapStoreLocation
import DeltaSnapTrust
import Foundation
import Logging
import Metrics

struct ServeCommand: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "serve",
        abstract: "Serve collections over HTTP: conditional GETs answered with 304, a delta or a full body.",
        discussion: """
            GET  /v1/collections                       every collection's head
            GET  /v1/collections/NAME                  304, delta or full (If-None-Match / If-Modified-Since)
            PUT  /v1/collections/NAME/records/ID       upsert   (Authorization: Bearer TOKEN)
            DELETE /v1/collections/NAME/records/ID     hide     (Authorization: Bearer TOKEN)
            POST /v1/collections/NAME/records          a batch of NDJSON or a JSON array (?replace=true)
            POST /v1/collections/NAME/mutations        a client's batch of offline writes (two-way sync)
            GET  /v1/collections/NAME/records/ID/history   values writes replaced, newest first
            GET  /healthz                              liveness
            GET  /metrics                              Prometheus text, to the admin token only
                                                       (or to anyone on --metrics-listen's address)
            .../collections/NAME/partitions/KEY/...    the same endpoints for one partition (--rules)

            For shared caches (a CDN, nginx proxy_cache), docs/PROTOCOL.md §8:
            GET  /v1/index                              every collection's token and state digest,
                                                        signed with --signing-key; max-age --index-max-age
            GET  /v1/collections/NAME/deltas/BASE/TOKEN from BASE to TOKEN (the head), immutable
            GET  /v1/collections/NAME/snapshots/TOKEN   the full body of TOKEN (the head), immutable

            Every answer carries X-Request-Id (the client's own when it sends a safe one) and, \
            at --log-level info, logs one line with it: method, path, status, duration, bytes.

            Who may write: the admin token (--write-token) may do everything; per-user JWTs \
            (--jwt-secret for HS256, --jwt-public-key for EdDSA/ES256, --jwks-url for an \
            identity provider's key set: RS256, PS256, ES256, EdDSA) may write the \
            collections their "write" claim names and read the private ones their "read" \
            claim names. `deltasnap token` mints one for development.

            With --rules FILE (YAML), each named collection has its own readers and writers \
            (public, admin, owner, member, claims) and may be partitioned: NAME/KEY, one \
            token line per partition. GET /v1/index with a bearer token then answers the \
            caller's view: the public collections plus every partition they may read. A \
            partition the caller may not read answers 404, as one that does not exist.

            Imports by other processes into the same store are picked up within 100 ms; on \
            PostgreSQL, commits through any instance reach every instance by LISTEN/NOTIFY. \
            When the database is out of reach, what needs it answers 503 with Retry-After \
            (304s keep coming from the heads in memory) and the server reconnects by itself. \
            Stops gracefully on SIGINT or SIGTERM.

            Raises its soft limit on open files to the hard one (ulimit -Hn); up to half of \
            it (at most 16,384) may hold small attachments' files open, as nginx's \
            open_file_cache does. Expecting more connections than the other half? Raise the \
            hard limit.
            """
    )

    @Option(name: .long, help: "The store: an SQLite path (created if missing) or postgres://user@host:port/db (schema created on first use; TLS when the server offers it, ?sslmode=disable|require|verify-full to choose). Any number of instances may serve one PostgreSQL store.")
    var db: String

    @Option(name: .long, help: "A PostgreSQL streaming replica to read from (with --db postgres://… for writes and commit notifications).")
    var readDb: String?

    @Option(name: .long, help: "Address to listen on.")
    var host = "127.0.0.1"

    @Option(name: .long, help: "Port to listen on (0 picks a free one).")
    var port = 8080

    @Option(name: .long, help: ArgumentHelp("Serve /metrics (Prometheus text) to anyone on this separate address, e.g. 127.0.0.1:9464; keep it off the public network. Without it, /metrics on the API's address answers the admin token only: its counters move when anyone reads their own partition.", valueName: "HOST:PORT"))
    var metricsListen: String?

    @Option(name: .long, help: "Bearer token for the write API (or DELTASNAP_WRITE_TOKEN). Without one, writes answer 403.")
    var writeToken: String?

    @Option(name: .long, help: "Largest write body in bytes (413 above).")
    var maxBodyBytes = 32 * 1024 * 1024

    @Option(name: .long, help: "HS256 secret of per-user JWTs (or DELTASNAP_JWT_SECRET).")
    var jwtSecret: String?

    @Option(name: .long, help: "PEM file of the public key of per-user JWTs: Ed25519 (EdDSA) or P-256 (ES256).")
    var jwtPublicKey: String?

    @Option(name: .long, help: ArgumentHelp("An identity provider's JSON Web Key Set (https://…/.well-known/jwks.json; http:// on loopback only): a JWT whose kid is in it verifies with that key, by the key's algorithm (RS256, PS256, ES256, EdDSA…). Repeat for several providers. Fetched at start (exit 1 if it cannot be), again when its Cache-Control max-age runs out (kept 5 minutes to 24 hours; 1 hour without one) and for an unknown kid at most every 30 s; while the provider is unreachable the last good set stays in use. docs/CLIENT.md has each provider's URL.", valueName: "URL"))
    var jwksUrl: [String] = []

    @Option(name: .long, help: ArgumentHelp("A JSON Web Key Set file, used as --jwks-url uses a fetched set (read again hourly and for an unknown kid). Repeatable.", valueName: "FILE"))
    var jwksFile: [String] = []

    @Option(name: .long, help: ArgumentHelp("Accept only JWTs whose iss is this (repeatable: any of them). Tokens from a key set: exp, nbf and iat are checked with 60 s of leeway.", valueName: "ISSUER"))
    var jwtIssuer: [String] = []

    @Option(name: .long, help: ArgumentHelp("Accept only JWTs whose aud names this (repeatable: any of them), e.g. your API's identifier or the provider's project or client id.", valueName: "AUDIENCE"))
    var jwtAudience: [String] = []

    @Option(name: .long, help: ArgumentHelp("Where a JWT holds its user id: a claim path (dots step into objects; a claim whose own name has dots, like https://example.com/id, is matched whole).", valueName: "PATH"))
    var subjectClaim = "sub"

    @Option(name: .long, help: ArgumentHelp("Where a JWT holds its roles, e.g. realm_access.roles (Keycloak), cognito:groups (Cognito), https://example.com/roles (Auth0).", valueName: "PATH"))
    var rolesClaim = "roles"

    @Option(name: .long, help: ArgumentHelp("Where a JWT lists the collections it may read (a list, or one string separated by spaces or commas).", valueName: "PATH"))
    var readClaim = "read"

    @Option(name: .long, help: ArgumentHelp("Where a JWT lists the collections it may write (a list, or one string separated by spaces or commas).", valueName: "PATH"))
    var writeClaim = "write"

    @Option(name: .long, help: "Collections only token holders may read, comma-separated.")
    var privateCollections: String = ""

    @Option(name: .long, help: "Collections merged by forking, comma-separated: a pushed write whose record changed on the server since the device saw it (its \"base\") becomes a conflict copy next to it instead of overwriting it (docs/PROTOCOL.md §5.6). The others merge per field.")
    var mergeFork: String = ""

    @Option(name: .long, help: "Days push results and replaced values (history) are kept.")
    var retentionDays: Int = 30

    @Option(name: .long, help: "Log level: trace, debug, info, notice, warning, error, critical. At info, every answer but a 304 logs one line.")
    var logLevel = "info"

    @Flag(name: .long, help: "Log 304 Not Modified answers too (most of the traffic; off by default).")
    var logNotModified = false

    @Option(name: .long, help: "Compact every collection on a schedule, keeping deltas for the last N versions.")
    var compactKeepVersions: Int?

    @Option(name: .long, help: "Compact every collection on a schedule, dropping tombstones of versions older than DAYS days.")
    var compactOlderThan: Double?

    @Option(name: .long, help: "Minutes between scheduled compactions (with --compact-keep-versions or --compact-older-than).")
    var compactEvery: Double = 60

    @Option(name: .long, help: "A private key from `deltasnap keygen` that signs /v1/index; repeat it to sign with two keys while rotating.")
    var signingKey: [String] = []

    @Option(name: .long, help: "Seconds a shared cache may serve /v1/index without asking the server.")
    var indexMaxAge = 30

    @Option(name: .long, help: "Seconds a signed index stays valid; clients refuse an expired one (it is re-signed every quarter of this).")
    var indexLifetime = 86_400

    @Option(name: .long, help: ArgumentHelp("A YAML file of access rules: per collection who may read and write it (public, admin, owner, member, claims) and whether it is partitioned (NAME/KEY); the memberships collection. See docs/PROTOCOL.md §10.", valueName: "FILE"))
    var rules: String?

    @Option(name: .long, help: "Requests GET /v1/index?wait= may hold at once (a long-poll each); one more is answered 503 with Retry-After. Default: the connection cap.")
    var maxWaiters: Int?

    @Option(name: .long, help: ArgumentHelp("Seconds a request head may take to arrive whole (nginx's client_header_timeout); then 408 and the connection is closed.", valueName: "SECONDS"))
    var headerTimeout: Double = 60

    @Option(name: .long, help: ArgumentHelp("Seconds a request body may go without sending a byte the server asked for (nginx's client_body_timeout); then the connection is closed (a resumable upload resumes on the next one).", valueName: "SECONDS"))
    var bodyTimeout: Double = 60

    @Option(name: .long, help: ArgumentHelp("Seconds a keep-alive connection with no request in flight is kept (nginx's keepalive_timeout). A held long-poll is never idle.", valueName: "SECONDS"))
    var idleTimeout: Double = 75

    @Option(name: .long, help: ArgumentHelp("Seconds a client may read nothing of a response before the connection is closed (nginx's send_timeout).", valueName: "SECONDS"))
    var sendTimeout: Double = 60

    @Option(name: .long, help: ArgumentHelp("Connections held at once. At the cap the keep-alive connection idle the longest is closed for a new one; with none idle a new one is answered 503 with Retry-After. Default: the open-file limit (raised to its hard limit at start) less what the store, per-request files and the runtime keep; printed at start.", valueName: "N"))
    var maxConnections: Int?

    @Option(name: .long, help: "Milliseconds within which commits wake a waiting /v1/index request once: the first wakes it at once, the rest at the end of the interval.")
    var waitDebounceMs = 50

    @Option(name: .long, help: "Largest attachment accepted, in bytes (413 above; announced in Upload-Limit).")
    var maxAttachmentBytes: UInt64 = 1 << 30

    @Flag(name: .long, help: "Serve the operator's console at /console/ (sign in with the admin token): collections, partitions, records, reviews, pushes, health.")
    var console = false

    @Option(name: .long, help: "Days a blob no record refers to is kept before a scheduled compaction removes it.")
    var attachmentGraceDays: Double = 7

    @Option(name: .customLong("static"), help: ArgumentHelp("A directory of static files (a web app) served at / next to the API, on the same origin.", valueName: "DIR"))
    var staticDirectory: String?

    func validate() throws {
        if let staticDirectory {
            var isDirectory: ObjCBool = false
            guard FileManager.default.fileExists(atPath: staticDirectory, isDirectory: &isDirectory), isDirectory.boolValue else {
                throw ValidationError("--static \(staticDirectory) is not a directory")
            }
        }
        guard (0...65535).contains(port) else { throw ValidationError("--port must be 0...65535") }
        if let metricsListen, Self.hostAndPort(metricsListen) == nil {
            throw ValidationError("--metrics-listen must be HOST:PORT (a port 0...65535), e.g. 127.0.0.1:9464")
        }
        guard Logger.Level(rawValue: logLevel) != nil else { throw ValidationError("--log-level must be one of trace, debug, info, notice, warning, error, critical") }
        guard maxBodyBytes > 0 else { throw ValidationError("--max-body-bytes must be positive") }
        guard maxAttachmentBytes > 0 else { throw ValidationError("--max-attachment-bytes must be positive") }
        guard attachmentGraceDays >= 0 else { throw ValidationError("--attachment-grace-days must be 0 or more") }
        guard retentionDays > 0 else { throw ValidationError("--retention-days must be positive") }
        guard compactKeepVersions == nil || compactOlderThan == nil else { throw ValidationError("give at most one of --compact-keep-versions and --compact-older-than") }
        if let compactKeepVersions, compactKeepVersions < 0 { throw ValidationError("--compact-keep-versions must be 0 or more") }
        if let compactOlderThan, !(compactOlderThan >= 0) { throw ValidationError("--compact-older-than must be 0 or more days") }
        guard compactEvery > 0 else { throw ValidationError("--compact-every must be positive") }
        guard indexMaxAge > 0 else { throw ValidationError("--index-max-age must be positive") }
        if let maxWaiters, maxWaiters < 0 { throw ValidationError("--max-waiters must be 0 or more") }
        for (flag, seconds) in [("--header-timeout", headerTimeout), ("--body-timeout", bodyTimeout), ("--idle-timeout", idleTimeout), ("--send-timeout", sendTimeout)] {
            guard seconds > 0, seconds <= 86_400 else { throw ValidationError("\(flag) must be more than 0 and at most 86400 seconds") }
        }
        if let maxConnections, maxConnections < 1 { throw ValidationError("--max-connections must be 1 or more") }
        guard (0...10_000).contains(waitDebounceMs) else { throw ValidationError("--wait-debounce-ms must be 0...10000") }
        guard indexLifetime >= 60 else { throw ValidationError("--index-lifetime must be at least 60 seconds") }
        for name in TokenCommand.list(mergeFork) where !CollectionName.isValid(name) {
            throw ValidationError("invalid collection name \"\(name)\" in --merge-fork")
        }
        if readDb != nil {
            do {
                _ = try StoreLocation(db, readReplica: readDb)
            } catch {
                throw ValidationError("--read-db takes a postgres:// URL, and needs --db postgres://… (the primary) too")
            }
        }
    }

    private var compactionSchedule: CompactionSchedule? {
        let policy: CompactionPolicy? = compactKeepVersions.map { .keepVersions(UInt64($0)) }
            ?? compactOlderThan.map { .olderThan(seconds: Int64($0 * 86_400)) }
        return policy.map {
            CompactionSchedule(policy: $0, interval: .milliseconds(Int(compactEvery * 60_000)), attachmentGraceSeconds: Int64(attachmentGraceDays * 86_400))
        }
    }

    func run() async throws {
        // The request log written as nginx writes its access log: in batches, off the path
        // that answers (a line per answer at the default level would otherwise cost a write
        // system call each).
        let logOutput = BufferedLogOutput.standardError
        LoggingSystem.bootstrap { label in BufferedLogHandler(label: label, output: logOutput) }
        defer { logOutput.flush() }
        Self.raiseDescriptorLimit()
        try await reportingErrors {
            // Whatever was logged comes out before the one-line error that ends the run.
            do { try await serve(logOutput: logOutput) } catch {
                logOutput.flush()
                throw error
            }
        }
    }

    /// Raises the soft limit on open descriptors to the hard one, as Go's runtime does for every
    /// server and nginx's `worker_rlimit_nofile` allows: the soft default (often 1,024) is
    /// meant for programs that do not expect many connections, and the server also keeps small
    /// blobs' files open (half the limit, `AttachmentMemory`).
    static func raiseDescriptorLimit() {
        var limit = rlimit()
        guard getrlimit(Int32(RLIMIT_NOFILE.rawValue), &limit) == 0, limit.rlim_cur < limit.rlim_max else { return }
        limit.rlim_cur = limit.rlim_max
        _ = setrlimit(Int32(RLIMIT_NOFILE.rawValue), &limit)
    }

    /// The timeouts and the cap from the flags; the cap, unless given, from the open-file
    /// limit (already raised).
    var connectionLimits: ConnectionLimits {
        var limits = ConnectionLimits.forThisProcess()
        if let maxConnections {
            limits.maximumConnections = maxConnections
            limits.capIsSetByHand = true
        }
        limits.headerTimeout = .milliseconds(Int64(headerTimeout * 1000))
        limits.bodyTimeout = .milliseconds(Int64(bodyTimeout * 1000))
        limits.idleTimeout = .milliseconds(Int64(idleTimeout * 1000))
        limits.sendTimeout = .milliseconds(Int64(sendTimeout * 1000))
        return limits
    }

    /// `HOST:PORT`, `[::1]:PORT` for an IPv6 host.
    static func hostAndPort(_ text: String) -> (String, Int)? {
        guard let colon = text.lastIndex(of: ":"), let port = Int(text[text.index(after: colon)...]), (0...65535).contains(port) else { return nil }
        var host = String(text[..<colon])
        if host.hasPrefix("[") && host.hasSuffix("]") { host = String(host.dropFirst().dropLast()) }
        guard !host.isEmpty else { return nil }
        return (host, port)
    }

    private static func urlHost(_ host: String) -> String {
        host.contains(":") ? "[\(host)]" : host
    }

    private func serve(logOutput: BufferedLogOutput) async throws {
        var logger = Logger(label: "deltasnap")
        logger.logLevel = Logger.Level(rawValue: logLevel) ?? .info
        let token = writeToken ?? ProcessInfo.processInfo.environment["DELTASNAP_WRITE_TOKEN"].flatMap { $0.isEmpty ? nil : $0 }
        let environment = ProcessInfo.processInfo.environment
        var access = AccessPolicy()
        access.jwtSecret = jwtSecret ?? environment["DELTASNAP_JWT_SECRET"].flatMap { $0.isEmpty ? nil : $0 }
        if let jwtPublicKey {
            guard let pem = FileManager.default.contents(atPath: jwtPublicKey) else { throw FileError(path: jwtPublicKey, reason: "cannot be read") }
            access.jwtPublicKeyPEM = String(decoding: pem, as: UTF8.self)
        }
        try await configureIdentityProviders(&access, logger: logger)
        access.privateCollections = Set(TokenCommand.list(privateCollections))
        if let rules {
            guard let text = try? String(contentsOfFile: rules, encoding: .utf8) else { throw FileError(path: rules, reason: "cannot be read") }
            access.rules = try AccessRules(yaml: text)
        }
        let retention = Int64(retentionDays) * 86_400
        var configuration = DeltaSnapServerConfiguration(
            writeToken: token, maximumWriteBodyBytes: maxBodyBytes, access: access,
            pushRetention: PushRetention(results: retention, history: retention), logNotModified: logNotModified,
            compaction: compactionSchedule, signingKeys: try signingKey.map { try IndexSigningKey(contentsOf: $0) },
            indexMaxAge: indexMaxAge, indexLifetime: indexLifetime, requestLogOutput: logOutput,
            forkCollections: Set(TokenCommand.list(mergeFork)))
        configuration.connections = connectionLimits
        configuration.maximumWaiters = maxWaiters ?? configuration.connections.maximumConnections
        configuration.maximumAttachmentBytes = maxAttachmentBytes
        configuration.console = console
        configuration.waitDebounce = .milliseconds(waitDebounceMs)
        let location = try StoreLocation(db, readReplica: readDb)
        let store = try await location.open(maximumReaders: configuration.connections.storeReaders, logger: logger)
        var server = try await DeltaSnapServer(store: store, configuration: configuration, logger: logger)
        printError("deltasnap: \(configuration.connections.summary)")
        let safe = ConnectionLimits.forThisProcess().maximumConnections
        if configuration.connections.maximumConnections > safe {
            printError("deltasnap: warning: --max-connections \(configuration.connections.maximumConnections) is more than the open-file limit leaves room for (\(safe)): at that many connections the store or the runtime may find no descriptor free; raise the limit (ulimit -n) instead")
        }
        server.staticFiles = staticDirectory
        if let metricsListen, let (metricsHost, metricsPort) = Self.hostAndPort(metricsListen) {
            server.metricsAddress = .init(host: metricsHost, port: metricsPort) { boundPort in
                StandardOutput().write(Array("deltasnap: metrics on http://\(Self.urlHost(metricsHost)):\(boundPort)/metrics\n".utf8))
            }
        }
        // Anything else in the process that reports through swift-metrics lands on the same /metrics.
        MetricsSystem.bootstrap(server.service.metrics.factory)
        let writes = token != nil || access.jwtSecret != nil || access.jwtPublicKeyPEM != nil || !access.keySets.isEmpty
        let host = self.host
        try await server.run(host: host, port: port) { boundPort in
            // One parseable line on stdout: scripts and tests wait for it.
            // Written straight to the file handle: print() would sit in stdio's buffer.
            StandardOutput().write(Array("deltasnap: serving \(location) on http://\(host):\(boundPort) (writes \(writes ? "enabled" : "disabled"))\n".utf8))
        }
    }
}
