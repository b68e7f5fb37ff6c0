import ArgumentParser
import DeltaSnapClient
import DeltaSnapCore
import Foundation

struct LocalCommand: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "local",
        abstract: "Write to a replica with no network: the write is visible at once and queued for the next `sync`.",
        discussion: """
            deltasnap local put    --replica PATH ID JSON     replace record ID (or --file NDJSON for many)
            deltasnap local patch  --replica PATH ID JSON     merge top-level fields; "field": null removes one
            deltasnap local insert --replica PATH ID JSON     create-only (or --file NDJSON for many)
            deltasnap local delete --replica PATH ID          delete (succeeds if it is already gone)

            --attach FIELD=PATH (put, patch, insert; repeatable) copies a file into the replica \
            and sets FIELD to its reference; the file is uploaded before the write is pushed. \
            Its media type comes from the file's extension, case-insensitively (jpg/jpeg, png, \
            gif, webp, heic, svg, pdf, txt, md, html, json, csv, mp3, m4a, mp4, mov, zip); any \
            other extension, or none, is application/octet-stream — the bytes are never \
            sniffed. A reference must name a file the replica holds or a record it reads names \
            (the server refuses a bare hash: missing_attachment). \
            JSON may be given as - to read it from standard input. Each write commits to the \
            replica together with its queued write in one transaction. A write that can never \
            be accepted (an insert of an id that exists, a patch of one that does not, a value \
            that is not an object) is refused at once: exit 1 and nothing queued.
            """,
        subcommands: [Put.self, Patch.self, Insert.self, Delete.self]
    )

    struct Target: ParsableArguments {
        @Option(name: .long, help: "Path of the local replica (an SQLite file, created if missing).")
        var replica: String

        @Option(name: .long, help: "The bundled .replica it started from: while no data change has copied it to --replica, the write is checked against the bundle and copies it.")
        var snapshot: String?

        @Option(name: .long, help: "In a view's replica (sync --url BASE_URL): the collection or partition NAME/KEY the write is for.")
        var collection: String?

        func validate() throws {
            if collection != nil, snapshot != nil { throw ValidationError("--snapshot is for a one-collection replica; a view's partitions have none") }
            if let collection, !CollectionPath.isValid(collection) { throw ValidationError(InvalidCollectionName(name: collection).description) }
        }

        func open() throws -> LocalReplica {
            if let collection { return try LocalReplica(path: replica, collection: collection) }
            try refuseReadInPlace(replica, snapshot: snapshot)
            return try snapshot.map { try LocalReplica(path: replica, bundledReplica: $0) } ?? LocalReplica(path: replica)
        }
    }

    /// A whole record (put, insert): `ID JSON`, or many from `--file`.
    struct RecordArguments: ParsableArguments {
        @Option(name: .long, help: "An NDJSON file of records to queue, one write each (all or none).")
        var file: String?
        @Argument(help: "The record id.") var id: String?
        @Argument(help: "The record as a JSON object, or - for standard input.") var json: String?

        func validate() throws {
            if file != nil {
                guard id == nil, json == nil else { throw ValidationError("give either --file or ID JSON, not both") }
            } else {
                guard id != nil, json != nil else { throw ValidationError("give ID and JSON (or --file NDJSON)") }
            }
        }
    }

    /// `--attach FIELD=PATH`: files that travel with the write.
    struct AttachArguments: ParsableArguments {
        @Option(name: .long, help: ArgumentHelp(
            "Attach a file: FIELD gets its reference (repeatable). The file is copied into the replica now and uploaded before the write is pushed; its media type comes from its extension.",
            valueName: "FIELD=PATH"))
        var attach: [String] = []

        func validate() throws {
            for argument in attach {
                guard let equals = argument.firstIndex(of: "="), equals != argument.startIndex, argument.index(after: equals) != argument.endIndex else {
                    throw ValidationError("--attach takes FIELD=PATH, not \"\(argument)\"")
                }
                if argument[..<equals] == Record.idKey || argument[..<equals] == Record.hiddenKey {
                    throw ValidationError("--attach cannot set the reserved field \"\(argument[..<equals])\"")
                }
            }
        }

        var files: [(field: String, path: String)] {
            attach.map { argument in
                let equals = argument.firstIndex(of: "=")!
                return (String(argument[..<equals]), String(argument[argument.index(after: equals)...]))
            }
        }
    }

    struct Put: AsyncParsableCommand {
        static let configuration = CommandConfiguration(commandName: "put", abstract: "Replace (or create) a record locally and queue the write.")
        @OptionGroup var target: Target
        @OptionGroup var record: RecordArguments
        @OptionGroup var files: AttachArguments

        func run() async throws { try await queue(.put, target: target, id: record.id, json: record.json, file: record.file, attach: files.files) }
    }

    struct Patch: AsyncParsableCommand {
        static let configuration = CommandConfiguration(commandName: "patch", abstract: "Merge fields into a record locally (null removes a field) and queue them.")
        @OptionGroup var target: Target
        @Argument(help: "The record id.") var id: String
        @Argument(help: "The fields as a JSON object, or - for standard input.") var json: String
        @OptionGroup var files: AttachArguments

        func run() async throws { try await queue(.patch, target: target, id: id, json: json, file: nil, attach: files.files) }
    }

    struct Insert: AsyncParsableCommand {
        static let configuration = CommandConfiguration(commandName: "insert", abstract: "Create a record locally (create-only: never replaces) and queue it.")
        @OptionGroup var target: Target
        @OptionGroup var record: RecordArguments
        @OptionGroup var files: AttachArguments

        func run() async throws { try await queue(.insert, target: target, id: record.id, json: record.json, file: record.file, attach: files.files) }
    }

    struct Delete: AsyncParsableCommand {
        static let configuration = CommandConfiguration(commandName: "delete", abstract: "Delete a record locally and queue the delete.")
        @OptionGroup var target: Target
        @Argument(help: "The record id.") var id: String

        func run() async throws { try await queue(.delete, target: target, id: id, json: nil, file: nil, attach: []) }
    }
}

private func queue(
    _ operation: Mutation.Operation, target: LocalCommand.Target, id: String?, json: String?, file: String?, attach: [(field: String, path: String)]
) async throws {
    try await reportingErrors {
        let local = try target.open()
        if !attach.isEmpty, file != nil { throw ValidationError("--attach goes with ID JSON, not --file") }
        if let file {
            let records = try readNDJSONRecords(file)
            let seqs = try local.write(records, operation: operation)
            print("queued \(seqs.count) \(operation.rawValue)\(seqs.count == 1 ? "" : "s")\(seqs.first.map { " (seq \($0)…\(seqs.last ?? $0))" } ?? "")")
            return
        }
        guard let id else { return }
        var text = json == "-" ? String(decoding: FileHandle.standardInput.readDataToEndOfFile(), as: UTF8.self) : json
        if !attach.isEmpty, let given = text {
            text = try attaching(attach, to: given, in: local)
        }
        let seq: UInt64
        switch operation {
        case .put: seq = try local.put(id: id, json: text ?? "")
        case .patch: seq = try local.patch(id: id, json: text ?? "")
        case .insert: seq = try local.insert(id: id, json: text ?? "")
        case .delete: seq = try local.delete(id: id)
        }
        print("queued \(operation.rawValue) \(id) (seq \(seq))")
    }
}

/// `json` (an object) with each FIELD set to the reference of its file, copied into the
/// replica first; prints one line per file.
private func attaching(_ files: [(field: String, path: String)], to json: String, in local: LocalReplica) throws -> String {
    guard case .object(var members) = try JSONReader(bytes: Array(json.utf8)).readValue() else {
        throw ValidationError("--attach needs JSON that is an object")
    }
    for (field, path) in files {
        let reference = try local.attachments.attach(path, type: MediaType.guess(for: path))
        members.removeAll { $0.key == field }
        members.append(JSONMember(field, reference.json))
        print("attached \(field): \(reference.sha256) \(reference.size) \(reference.type)")
    }
    return CanonicalJSON.string(.object(members))
}

/// Reads an NDJSON file of records; a bad line is reported as `FILE:LINE: reason`.
private func readNDJSONRecords(_ path: String) throws -> [Record] {
    guard let data = FileManager.default.contents(atPath: path) else { throw FileError(path: path, reason: "cannot be read") }
    var records: [Record] = []
    var lineNumber = 0
    for line in data.split(separator: UInt8(ascii: "\n"), omittingEmptySubsequences: false) {
        lineNumber += 1
        let bytes = Array(line)
        guard bytes.contains(where: { $0 != 0x20 && $0 != 0x09 && $0 != 0x0D }) else { continue }
        do {
            records.append(try Record.parse(bytes))
        } catch {
            throw FileError(path: "\(path):\(lineNumber)", reason: "\(error)")
        }
    }
    return records
}

struct PendingCommand: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "pending",
        abstract: "List a replica's queued writes, one a line (SEQ OP ID [JSON]); prints nothing when none is queued.",
        discussion: "--all also lists accepted writes still waiting for the pull that brings them (marked 'acknowledged')."
    )

    @Option(name: .long, help: "Path of the local replica.")
    var replica: String

    @Flag(name: .long, help: "Also list writes the server accepted that no pull has brought back yet.")
    var all = false

    @Option(name: .long, help: "In a view's replica: the collection or partition NAME/KEY whose writes to list.")
    var collection: String?

    func run() async throws {
        try await reportingErrors {
            // Read in place from its bundle, a replica holds no queued write: the first one
            // copies the bundle to its own file.
            if collection == nil && BundledReplica.isReadInPlace(replica) { return }
            guard FileManager.default.fileExists(atPath: replica) else { throw FileError(path: replica, reason: "does not exist") }
            var out = ""
            let local = try collection.map { try LocalReplica(path: replica, collection: $0) } ?? LocalReplica(path: replica)
            for write in try local.pendingWrites(includeAcknowledged: all) {
                out += "\(write.seq) \(write.operation.rawValue) \(write.id)"
                if let value = write.value { out += " " + CanonicalJSON.string(value) }
                if write.isAcknowledged { out += " acknowledged" }
                out += "\n"
            }
            StandardOutput().write(Array(out.utf8))
        }
    }
}
