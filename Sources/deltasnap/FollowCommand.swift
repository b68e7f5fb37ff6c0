import ArgumentParser
import DeltaSnapFollow
import DeltaSnapPostgresStore
import DeltaSnapServer
import DeltaSnapStore
import DeltaSnapStoreLocation
import Foundation
import Logging

struct FollowCommand: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "follow",
        abstract: "Publish PostgreSQL tables as collections, change by change (logical replication).",
        discussion: """
            Follows the source database through logical decoding (the built-in pgoutput plugin, \
            a publication and a replication slot) and publishes every source transaction as one \
            new version of each collection or partition it touched, committed together with the \
            source position: killed at any moment, a follower resumes exactly where it stopped, \
            and the slot is advanced only after the store commit.

            The first run copies every table in one snapshot (one version per collection), then \
            follows the changes made since. Each row is a record: its primary key is the id (a \
            composite key's parts joined by "/"), its columns are members (docs/FOLLOW.md gives \
            the type mapping); a DELETE hides the record and TRUNCATE hides them all.

              deltasnap follow --source postgres://app@db/appdb --db deltasnap.sqlite \\
                  --table public.countries --table public.attempts=attempts --partition-by user_id --create

            --table SCHEMA.TABLE[=COLLECTION] may repeat (the collection defaults to the table's \
            name); --partition-by COLUMN applies to the --table before it. The source needs \
            wal_level=logical; the role needs REPLICATION and SELECT on the tables (--create also \
            needs to own them, to create the publication). One line per published batch goes to \
            standard output (attempts/alice: version 12, 3 rows, lag 4 ms). Stop it with SIGINT \
            or SIGTERM (a clean stop, logged; a stopped follower's slot keeps the source's WAL \
            until it resumes); --drop-slot removes the slot (not the publication) when the follower is retired (a forgotten \
            slot keeps WAL on the source's disk: --max-lag-bytes reports one that holds back too much; \
            --metrics-listen serves deltasnap_follow_slot_lag_bytes and the other metrics at /metrics).

            When the source shuts down or restarts under it, the follower exits with status 1 \
            and one line (deltasnap: the source closed the connection (it shut down or \
            restarted)); nothing half-published is left. Run it again, or let a service \
            manager restart it: it resumes from the position it committed last (docs/FOLLOW.md).
            """
    )

    @Option(name: .long, help: "The source database: postgres://user[:password]@host[:port]/database[?sslmode=…].")
    var source: String

    @Option(name: .long, help: "The DeltaSnap store to publish into: an SQLite path or a PostgreSQL URL.")
    var db: String

    @Option(name: .long, help: ArgumentHelp("A table to follow (repeatable): SCHEMA.TABLE[=COLLECTION].", valueName: "SCHEMA.TABLE[=COLLECTION]"))
    var table: [String] = []

    @Option(name: .long, help: ArgumentHelp("Spread the rows of the --table before it over partitions COLLECTION/VALUE by this column.", valueName: "COLUMN"))
    var partitionBy: [String] = []

    @Option(name: .long, help: "The replication slot's name.")
    var slot = "deltasnap"

    @Option(name: .long, help: "The publication's name.")
    var publication = "deltasnap"

    @Flag(name: .long, help: "Create the replication slot and the publication (or add the tables to it) when missing.")
    var create = false

    @Option(name: .long, help: "Report the slot (log line and metric) when it holds back more than this many bytes of WAL.")
    var maxLagBytes: UInt64 = 1 << 30

    @Option(name: .long, help: ArgumentHelp(
        "Rows of one source transaction (or of the first copy) held in memory; more are staged in a temporary file until published.", valueName: "ROWS"))
    var spillRows = 50_000

    @Flag(name: .long, help: "Remove the replication slot (and the position the store keeps for it), then exit.")
    var dropSlot = false

    @Option(name: .long, help: "Log level: trace, debug, info, notice, warning, error, critical.")
    var logLevel = "info"

    @Option(name: .long, help: ArgumentHelp("Serve /metrics (slot lag, commit lag, rows) on this address, e.g. 127.0.0.1:9465.", valueName: "HOST:PORT"))
    var metricsListen: String?

    func validate() throws {
        guard PostgresURL.isPostgresURL(source) else { throw ValidationError("--source must be a postgres:// URL") }
        guard Logger.Level(rawValue: logLevel) != nil else { throw ValidationError("--log-level must be one of trace, debug, info, notice, warning, error, critical") }
        if let metricsListen, ServeCommand.hostAndPort(metricsListen) == nil {
            throw ValidationError("--metrics-listen must be HOST:PORT (a port 0...65535), e.g. 127.0.0.1:9465")
        }
        guard spillRows > 0 else { throw ValidationError("--spill-rows must be at least 1") }
        if !dropSlot && table.isEmpty { throw ValidationError("name at least one --table SCHEMA.TABLE[=COLLECTION] to follow") }
        do {
            let tables = try Self.tables(from: Array(CommandLine.arguments.dropFirst()))
            let collections = tables.map(\.collection)
            if let repeated = collections.first(where: { name in collections.filter { $0 == name }.count > 1 }) {
                throw ValidationError("two --table options publish into \(repeated); name one with =COLLECTION")
            }
        } catch let error as FollowError {
            throw ValidationError(error.description)
        }
    }

    /// The `--table` options in order, each with the `--partition-by` that follows it
    /// (ArgumentParser keeps each option's values, not how they interleave).
    static func tables(from arguments: [String]) throws(FollowError) -> [FollowedTable] {
        var specs: [(String, String?)] = []
        var index = 0
        func value(_ name: String) throws(FollowError) -> String? {
            let argument = arguments[index]
            if argument == name {
                guard index + 1 < arguments.count else { throw .badOption("\(name) needs a value") }
                index += 1
                return arguments[index]
            }
            if argument.hasPrefix(name + "=") { return String(argument.dropFirst(name.count + 1)) }
            return nil
        }
        while index < arguments.count {
            if let spec = try value("--table") {
                specs.append((spec, nil))
            } else if let column = try value("--partition-by") {
                guard !specs.isEmpty else { throw .badOption("--partition-by \(column) must follow the --table it applies to") }
                guard specs[specs.count - 1].1 == nil else { throw .badOption("--table \(specs[specs.count - 1].0) has two --partition-by") }
                specs[specs.count - 1].1 = column
            } else if arguments[index] == "--" {
                break
            }
            index += 1
        }
        return try specs.map { spec, partition throws(FollowError) in try FollowedTable(parsing: spec, partitionBy: partition) }
    }

    func run() async throws {
        LoggingSystem.bootstrap(StreamLogHandler.standardError)
        var logger = Logger(label: "deltasnap.follow")
        logger.logLevel = Logger.Level(rawValue: logLevel) ?? .info
        if let metricsListen, let (host, port) = ServeCommand.hostAndPort(metricsListen) {
            let metrics = ProcessMetrics.bootstrap()
            let address = DeltaSnapServer.MetricsAddress(host: host, port: port) { bound in
                StandardOutput().write(Array("deltasnap: metrics on http://\(host.contains(":") ? "[\(host)]" : host):\(bound)/metrics\n".utf8))
            }
            // For the life of the process: any stop of a follower is safe to end it with.
            let quietLogger = Logger(label: "deltasnap.metrics")
            Task { try await metrics.serve(at: address, logger: quietLogger) }
        }
        try await reportingErrors {
            let options = FollowOptions(
                source: try PostgresURL(source), tables: try Self.tables(from: Array(CommandLine.arguments.dropFirst())), slot: slot,
                publication: publication, create: create, maxLagBytes: maxLagBytes, spillRows: spillRows)
            try await StoreLocation.withStore(db) { store in
                if dropSlot {
                    let dropped = try await SourceFollower.dropSlot(options, store: store, logger: logger)
                    print(dropped ? "slot \(slot) dropped" : "slot \(slot) did not exist")
                    return
                }
                // A reviewed collection's changes go to its workspace (docs/PROTOCOL.md §13).
                let routed = try await ReviewRoutedStore.wrapping(store)
                if let routed = routed as? ReviewRoutedStore {
                    for table in options.tables { try await routed.prepareAll(of: table.collection) }
                }
                let follower = SourceFollower(options: options, store: routed, logger: logger) { line in
                    FileHandle.standardOutput.write(Data((line + "\n").utf8))
                }
                // SIGINT or SIGTERM stops it between two store commits: each commit holds the
                // position it reached, so nothing is lost, and the slot keeps the rest.
                let task = Task { try await follower.run() }
                let stop = StopRequest()
                let logger = logger
                StopSignals.install { name in
                    stop.set(name)
                    logger.notice("\(name): stopping")
                    task.cancel()
                }
                let result = await task.result
                if let name = stop.name {
                    logger.notice("stopped on \(name); slot \(options.slot) keeps the source's WAL from here until a follower resumes it (deltasnap follow --drop-slot removes it when this follower is retired)")
                    return
                }
                try result.get()
            }
        }
    }
}
