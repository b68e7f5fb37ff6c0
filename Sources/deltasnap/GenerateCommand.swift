import ArgumentParser
import DeltaSnapCore
import DeltaSnapSynthetic

struct GenerateCommand: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "generate",
        abstract: "Print seeded synthetic records (~300 bytes, non-ASCII text) as NDJSON, for tests and benchmarks."
    )

    @Option(name: .long, help: "How many records.")
    var count: Int

    @Option(name: .long, help: "Index of the first record.")
    var start: Int = 0

    @Option(name: .long, help: "Seed: the same seed gives the same records.")
    var seed: UInt64 = 1

    @Option(name: .long, help: "Revision: a different revision changes every record's content, not its id.")
    var revision: Int = 0

    func validate() throws {
        guard count >= 0, start >= 0 else { throw ValidationError("--count and --start must be zero or more") }
    }

    func run() async throws {
        let generator = SyntheticRecords(seed: seed)
        let output = StandardOutput()
        var writer = NDJSONWriter { output.write($0) }
        for index in start..<(start + count) {
            try writer.append(line: generator.json(index: index, revision: revision))
        }
        try writer.flush()
    }
}
