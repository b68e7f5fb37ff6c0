import DeltaSnapCore
import DeltaSnapStore
import Foundation
import Hummingbird
import NIOCore

extension DeltaSnapAPI {
    /// `PUT /v1/collections/{c}/records/{id}`: upsert one record.
    func putRecord(_ request: Request, context: some RequestContext) async throws -> Response {
        let name = try await ownerCollection(request, context: context)
        let id = try recordID(context)
        var request = request
        let body = try await collect(&request)
        let value: JSONValue
        do {
            let reader = JSONReader(bytes: body)
            value = try reader.readValue()
            guard try reader.isAtEnd() else { throw reader.error("unexpected data after the record") }
        } catch let error as JSONParseError {
            throw APIError(.badRequest, "invalid_json", "\(error)")
        }
        guard case .object(var members) = value else { throw APIError(.badRequest, "invalid_record", RecordError.notAnObject.description) }
        if let existing = members.first(where: { $0.key == Record.idKey }) {
            guard existing.value == .string(id) else {
                throw APIError(.badRequest, "id_mismatch", "the body's \"id\" must equal the id in the URL, \"\(id)\"")
            }
        } else {
            members.append(JSONMember(Record.idKey, .string(id)))
            members.sort { $0.key.utf8Precedes($1.key) }
        }
        let record: Record
        do {
            record = try Record(parsing: .object(members))
        } catch {
            throw APIError(.badRequest, "invalid_record", error.description)
        }
        if holdsMemberships(name), let problem = MembershipRecord.problem(in: record) { throw APIError.badMembership([problem]) }
        return try await commit(record, to: name)
    }

    /// `DELETE /v1/collections/{c}/records/{id}`: hide one record.
    func deleteRecord(_ request: Request, context: some RequestContext) async throws -> Response {
        let name = try await ownerCollection(request, context: context)
        let id = try recordID(context)
        return try await commit(Record.tombstone(id: id), to: name)
    }

    /// `POST /v1/collections/{c}/records[?replace=true]`: a batch as one version.
    func postRecords(_ request: Request, context: some RequestContext) async throws -> Response {
        let name = try await ownerCollection(request, context: context)
        var request = request
        let body = try await collect(&request)
        let replace = request.uri.queryParameters.get("replace").map { $0 == "true" || $0 == "1" } ?? false
        if holdsMemberships(name) { try Self.checkMemberships(in: body) }
        do {
            return written(try await store.importBatch(body, into: try await writeTarget(name), replace: replace), to: name)
        } catch let error as ImportError where error.isEmptyReplace {
            // A dropped body must not read as "the collection is now empty" and hide everything.
            throw APIError(.badRequest, "empty_batch", "a ?replace=true batch with no records would hide every record; send at least one, or hide them explicitly")
        } catch let error as ImportError {
            throw APIError(error, batch: true)
        }
    }

    // MARK: - Helpers

    /// Whether `name` is a partition of the memberships collection (``MembershipRecord``).
    func holdsMemberships(_ name: String) -> Bool {
        guard let memberships = accessControl.policy.rules.memberships else { return false }
        return CollectionPath(name)?.name == memberships
    }

    /// Refuses a batch for the memberships collection with every record that would grant
    /// nothing, one line each, before anything is written. A batch that does not parse is
    /// left to the import, which names its first bad line.
    private static func checkMemberships(in body: [UInt8]) throws {
        let stream = RecordStream(source: ChunkSources.bytes(body), name: "body")
        var problems: [String] = []
        while let record = try? stream.next() {
            if let problem = MembershipRecord.problem(in: record) { problems.append("line \(stream.line): \(problem)") }
        }
        if !problems.isEmpty { throw APIError.badMembership(problems) }
    }

    /// The valid collection name in the path, once the bearer token is the data owner's:
    /// these writes bypass the push ledger and history (and `?replace=true` can hide every
    /// record), so a per-user token never reaches them — users write through pushes.
    private func ownerCollection(_ request: Request, context: some RequestContext) async throws -> String {
        let (name, principal) = try await authorizedCollection(request, context: context)
        guard principal.isAdmin else {
            throw APIError(.forbidden, "owner_only", "this endpoint is for the data owner's admin token; users write through POST \(CollectionPath(name)?.urlPath ?? "/v1/collections/\(name)")/mutations")
        }
        return name
    }

    /// The valid collection name in the path, once the bearer token may write it.
    func authorizedCollection(_ request: Request, context: some RequestContext) async throws -> (name: String, principal: Principal) {
        let path = try collectionPath(context)
        return (path.description, try await authorize(request, path, for: .write))
    }

    /// The record id in the path, percent-decoded.
    func recordID(_ context: some RequestContext) throws -> String {
        let id = try Self.percentDecodedParameter("id", in: context) { _ in
            APIError(.badRequest, "invalid_record", "the record id in the path is not valid percent-encoded UTF-8")
        }
        guard !id.isEmpty else { throw APIError(.badRequest, "invalid_record", RecordError.emptyID.description) }
        guard !id.utf8.contains(0) else { throw APIError(.badRequest, "invalid_record", RecordError.idContainsNUL.description) }
        return id
    }

    /// Path parameter `name` percent-decoded: Hummingbird hands parameters over as sent, and
    /// record ids and tokens are opaque, so clients encode them (docs/PROTOCOL.md §8.3).
    /// `invalid` makes the error for a segment that is not valid percent-encoded UTF-8.
    static func percentDecodedParameter(
        _ name: String, in context: some RequestContext, invalid: (String) -> APIError
    ) throws -> String {
        let raw = try context.parameters.require(name)
        guard let decoded = raw.removingPercentEncoding else { throw invalid(raw) }
        return decoded
    }

    func collect(_ request: inout Request, limit: Int? = nil) async throws -> [UInt8] {
        let limit = limit ?? configuration.maximumWriteBodyBytes
        do {
            let buffer = try await request.collectBody(upTo: limit)
            return Array(buffer.readableBytesView)
        } catch is NIOTooManyBytesError {
            throw APIError(.contentTooLarge, "body_too_large", "the body is larger than this server's limit of \(limit) bytes; split the batch")
        } catch is CancellationError {
            throw CancellationError()
        } catch {
            // A body that stops early or whose framing is broken is the client's mistake, not
            // the server's: 400, and nothing was committed (nothing ran yet).
            throw APIError(.badRequest, "unreadable_body", "the request body could not be read to its end: \(error)")
        }
    }

    private func commit(_ record: Record, to name: String) async throws -> Response {
        do {
            return written(try await store.write([record], to: try await writeTarget(name)), to: name)
        } catch let error as ImportError {
            throw APIError(error, batch: false)
        }
    }

    private func written(_ result: WriteResult, to name: String) -> Response {
        if let head = result.head { heads.update(head) }
        // A reviewed collection's write went to its workspace: named as the collection, with
        // the workspace's version and token (PROTOCOL.md §13.1).
        var result = result
        result.collection = name
        var members = [
            JSONMember("collection", .string(result.collection)),
            JSONMember("committed", .bool(result.committed)),
            JSONMember("hidden", .number(String(result.hidden))),
            JSONMember("unchanged", .number(String(result.unchanged))),
            JSONMember("upserted", .number(String(result.upserted))),
        ]
        var headers: HTTPFields = [.contentType: "application/json"]
        if let head = result.head {
            members.append(JSONMember("token", .string(head.token.description)))
            members.append(JSONMember("version", .number(String(head.version))))
            headers[.eTag] = "\"\(head.token)\""
        }
        members.sort { $0.key.utf8Precedes($1.key) }
        var out = CanonicalJSON.bytes(.object(members))
        out.append(UInt8(ascii: "\n"))
        return Response(status: .ok, headers: headers, body: .init(byteBuffer: ByteBuffer(bytes: out)))
    }
}
