import ArgumentParser

@main
struct DeltaSnapCommand: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "deltasnap",
        abstract: "Bake, serve and consume delta snapshots of JSON collections.",
        discussion: """
            A data owner imports records into a versioned SQLite store; `bake` writes the
            deterministic gzip snapshot an app bundles; `serve` answers conditional GETs with
            304, a delta or a full body; `pull` keeps a local replica fresh; `local` writes to
            a replica offline and `sync` pushes those writes, then pulls.

            Reproducible builds: set SOURCE_DATE_EPOCH (commit times) and DELTASNAP_EPOCH
            (16 hex digits, the epoch of new collections) so a store built afresh from the
            same input bakes byte-identical snapshots.
            """,
        subcommands: [
            ImportCommand.self, ExportCommand.self, BakeCommand.self, InspectCommand.self, ServeCommand.self, PullCommand.self, DumpCommand.self,
            CompactCommand.self, LocalCommand.self, SyncCommand.self, PendingCommand.self, HistoryCommand.self, TokenCommand.self,
            GenerateCommand.self, KeygenCommand.self,
        ]
    )
}
