import DeltaSnapCore
import DeltaSnapStore
import Foundation
import Hummingbird
import NIOCore

/// Writes (docs/PROTOCOL.md §5): the data owner's `PUT`/`DELETE` of one record and `POST` of
/// a batch, and every client's `POST …/mutations` push of offline writes — each committed as
/// one version, a reviewed collection's to its workspace (its writer is a
/// ``DeltaSnapStore/ReviewRoutedStore`` then: routing is decided where every write is).
///
/// ```swift
/// routes.addRoutes(writes.routes(context: BasicRequestContext.self))
/// ```
struct WritesController: GatedController {
    let gate: Gate
    /// Every write goes here: the store, or the store routed to the workspaces when a
    /// collection is reviewed (``ReviewRouting/writer``).
    let store: any StoreWriter
    let heads: HeadCache
    /// The proof a push's file references need.
    let attachments: AttachmentsController
    /// The last pushes answered, for the console (kept only when it is served).
    let recentPushes: RecentPushes
    let keepsRecentPushes: Bool
    /// The largest write body accepted (413 above).
    let maximumWriteBodyBytes: Int
    /// The largest push body accepted (413 above).
    let maximumPushBodyBytes: Int
    let pushRetention: PushRetention
    /// Collections whose pushes fork a conflict copy rather than merge per field.
    let forkCollections: Set<String>

    func routes<Context: RequestContext>(context: Context.Type) -> RouteCollection<Context> {
        let routes = RouteCollection(context: Context.self)
        for base in CollectionRoutes.bases {
            routes.post(RouterPath(base + "/mutations")) { request, context in try await pushMutations(request, context: context) }
            routes.put(RouterPath(base + "/records/:id")) { request, context in try await putRecord(request, context: context) }
            routes.delete(RouterPath(base + "/records/:id")) { request, context in try await deleteRecord(request, context: context) }
            routes.post(RouterPath(base + "/records")) { request, context in try await postRecords(request, context: context) }
            // Known paths with other methods get 405, not 404.
            for method in [HTTPRequest.Method.get, .patch, .options, .trace] {
                routes.on(RouterPath(base + "/records/:id"), method: method) { _, _ -> Response in throw APIError.methodNotAllowed("PUT, DELETE") }
            }
            for method in [HTTPRequest.Method.get, .put, .delete, .patch, .options, .trace] {
                routes.on(RouterPath(base + "/records"), method: method) { _, _ -> Response in throw APIError.methodNotAllowed("POST") }
                routes.on(RouterPath(base + "/mutations"), method: method) { _, _ -> Response in throw APIError.methodNotAllowed("POST") }
            }
        }
        return routes
    }

    /// `POST /v1/collections/{c}/mutations`: one client's ordered batch of offline writes,
    /// committed as at most one version and answered per write (docs/PROTOCOL.md §5.5).
    ///
    /// A problem with one write refuses that write inside the `200`; only a batch that
    /// cannot be read as a whole (or a token without the right) is answered with a 4xx.
    func pushMutations(_ request: Request, context: some RequestContext) async throws -> Response {
        let (name, principal) = try await authorizedCollection(request, context: context)
        var request = request
        let body = try await collect(&request, limit: maximumPushBodyBytes)
        let client: String
        let mutations: [ParsedMutation]
        do {
            (client, mutations) = try PushRequest.parse(body)
        } catch {
            throw APIError(.badRequest, "invalid_batch", error.description)
        }
        if holdsMemberships(name) { try Self.checkMemberships(in: mutations) }
        // A blob is named only by a writer who proves it holds the bytes (§12.2).
        let proof = try await attachments.attachmentProof(for: mutations, writing: try collectionPath(context), as: principal)
        // Write numbers are per client *of a user*: one user cannot advance another's.
        let outcome = try await store.push(
            mutations, from: client, user: principal.isAdmin ? nil : principal.subject, to: name, retention: pushRetention,
            merge: forkCollections.contains(CollectionPath(name)?.name ?? name) ? .fork : .fields, attachments: proof)
        if let head = outcome.head { heads.update(head) }
        var response = outcome.response
        // A reviewed collection's push went to its workspace: the answer names the collection
        // the client pushed to, and no token (nothing it could poll for is published).
        if response.collection != name {
            response.collection = name
            response.token = nil
        }
        if keepsRecentPushes { recordForConsole(response, mutations: mutations, user: principal.subject) }
        var headers: HTTPFields = [.contentType: "application/json", .cacheControl: "no-store"]
        if let token = response.token { headers[.eTag] = "\"\(token)\"" }
        return Response(status: .ok, headers: headers, body: .init(byteBuffer: ByteBuffer(bytes: response.bytes)))
    }

    /// Keeps what the console's "recent pushes" shows: counts, refused writes and conflict copies.
    private func recordForConsole(_ response: PushResponse, mutations: [ParsedMutation], user: String) {
        var ids: [UInt64: String] = [:]
        for parsed in mutations { if let id = parsed.id { ids[parsed.seq] = id } }
        var push = RecentPushes.Push(
            at: Int64(Date().timeIntervalSince1970), collection: response.collection, user: user, client: response.client, accepted: 0, refused: [], copies: [])
        for result in response.results {
            switch result.status {
            case .applied, .duplicate: push.accepted += 1
            case .refused(let refusal): push.refused.append((result.seq, ids[result.seq] ?? "?", refusal.code, refusal.message))
            case .copied(_, let copy):
                push.accepted += 1
                push.copies.append((ids[result.seq] ?? "?", copy))
            }
        }
        recentPushes.record(push)
    }

    /// Refuses a push to the memberships collection with every write that would leave a
    /// membership granting nothing, one line each, before anything is written.
    private static func checkMemberships(in mutations: [ParsedMutation]) throws {
        var problems: [String] = []
        for (index, parsed) in mutations.enumerated() {
            guard let mutation = parsed.mutation else { continue }
            let problem: String? = switch mutation.operation {
            case .put, .insert: MembershipRecord.problem(id: mutation.id, value: mutation.value ?? .null)
            case .patch: MembershipRecord.problem(patching: mutation.id, fields: mutation.value ?? .null)
            case .delete: nil
            }
            if let problem { problems.append("mutations[\(index)] (seq \(mutation.seq)): \(problem)") }
        }
        if !problems.isEmpty { throw APIError.badMembership(problems) }
    }

    /// `PUT /v1/collections/{c}/records/{id}`: upsert one record.
    func putRecord(_ request: Request, context: some RequestContext) async throws -> Response {
        let name = try await ownerCollection(request, context: context)
        let id = try recordID(context)
        var request = request
        let body = try await collect(&request, limit: maximumWriteBodyBytes)
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
        let body = try await collect(&request, limit: maximumWriteBodyBytes)
        let replace = request.uri.queryParameters.get("replace").map { $0 == "true" || $0 == "1" } ?? false
        if holdsMemberships(name) { try Self.checkMemberships(in: body) }
        do {
            return written(try await store.importBatch(body, into: name, replace: replace), to: name)
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

    private func commit(_ record: Record, to name: String) async throws -> Response {
        do {
            return written(try await store.write([record], to: name), to: name)
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
