import ArgumentParser

@main
struct DeltaSnapCommand: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "deltasnap",
        abstract: "Bake, serve and consume delta snapshots of JSON collections.",
        discussion: """
            A data owner imports records into a versioned SQLite store; `bake` writes the \
            deterministic gzip snapshot an app bundles; `serve` answers conditional GETs with \
            304, a delta or a full body; `pull` keeps a local replica fresh; `local` writes to \
            a replica offline and `sync` pushes those writes, then pulls.

            Exit codes: 0 done; 1 error; 2 usage error; 3 `sync`: some writes refused; \
            4 not done now, try later (server unreachable, 408/429/5xx, or a wait it asked \
            for still running).

            Reproducible builds: set SOURCE_DATE_EPOCH (commit times) and DELTASNAP_EPOCH \
            (16 hex digits, the epoch of new collections) so a store built afresh from the \
            same input bakes byte-identical snapshots.
            """,
        subcommands: [
            ImportCommand.self, ExportCommand.self, BakeCommand.self, InspectCommand.self, ServeCommand.self, PullCommand.self, DumpCommand.self,
            CompactCommand.self, LocalCommand.self, SyncCommand.self, PendingCommand.self, HistoryCommand.self, RevertCommand.self, TokenCommand.self,
            GenerateCommand.self, KeygenCommand.self, AttachmentCommand.self, AttachmentsCommand.self, FollowCommand.self, ReviewCommand.self,
        ]
    )

    /// ArgumentParser's own entry point, with one change: a usage error exits 2 (as most Unix
    /// tools do), not 64, so every command follows the one scheme of ``Exit``.
    static func main() async {
        do {
            var command = try parseAsRoot()
            if var asyncCommand = command as? any AsyncParsableCommand {
                try await asyncCommand.run()
            } else {
                try command.run()
            }
        } catch {
            if exitCode(for: error) == .validationFailure {
                printError(fullMessage(for: error))
                exit(withError: Exit.usage)
            }
            exit(withError: error)
        }
    }
}
