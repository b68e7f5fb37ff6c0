import DeltaSnapCore
import DeltaSnapStore
import Foundation
import Hummingbird

extension DeltaSnapAPI {
    /// `POST /v1/collections/{c}/mutations`: one client's ordered batch of offline writes,
    /// committed as at most one version and answered per write (docs/PROTOCOL.md §5.5).
    ///
    /// A problem with one write refuses that write inside the `200`; only a batch that
    /// cannot be read as a whole (or a token without the right) is answered with a 4xx.
    func pushMutations(_ request: Request, context: some RequestContext) async throws -> Response {
        let (name, principal) = try await authorizedCollection(request, context: context)
        var request = request
        let body = try await collect(&request, limit: configuration.maximumPushBodyBytes)
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
            mutations, from: client, user: principal.isAdmin ? nil : principal.subject, to: try await writeTarget(name), retention: configuration.pushRetention,
            merge: configuration.forkCollections.contains(CollectionPath(name)?.name ?? name) ? .fork : .fields, attachments: proof)
        if let head = outcome.head { heads.update(head) }
        var response = outcome.response
        // A reviewed collection's push went to its workspace: the answer names the collection
        // the client pushed to, and no token (nothing it could poll for is published).
        if response.collection != name {
            response.collection = name
            response.token = nil
        }
        if configuration.console { recordForConsole(response, mutations: mutations, user: principal.subject) }
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

    /// `GET /v1/collections/{c}/records/{id}/history[?limit=N]`: the values writes
    /// replaced, newest first.
    func recordHistory(_ request: Request, context: some RequestContext) async throws -> Response {
        let path = try collectionPath(context)
        let name = path.description
        _ = try await authorize(request, path, for: .read)
        guard try await heads.served(name, store: store) != nil else { throw APIError.unknownCollection(name) }
        let id = try recordID(context)
        var limit = 100
        if let text = request.uri.queryParameters.get("limit") {
            guard let number = Int(text), (1...1000).contains(number) else {
                throw APIError(.badRequest, "invalid_limit", "limit must be an integer from 1 to 1000")
            }
            limit = number
        }
        // A reviewed collection's published values change through review only: its history is
        // what publications replaced (pushes' stays with the unpublished workspace).
        let entries = reviewed[path.name] != nil
            ? try await store.reviewHistory(of: id, in: name, limit: limit)
            : try await store.history(of: id, in: name, limit: limit)
        var out = Array(#"{"collection":"#.utf8)
        CanonicalJSON.writeString(name, into: &out)
        out.append(contentsOf: Array(#","history":["#.utf8))
        for (index, entry) in entries.enumerated() {
            if index > 0 { out.append(UInt8(ascii: ",")) }
            out.append(contentsOf: Array(#"{"replacedAt":"#.utf8))
            CanonicalJSON.writeString(HTTPDate.format(entry.replacedAt), into: &out)
            out.append(contentsOf: Array(#","replacedBy":"#.utf8))
            CanonicalJSON.writeString(entry.replacedBy, into: &out)
            out.append(contentsOf: Array(#","replacedIn":\#(entry.replacedIn),"value":"#.utf8))
            out.append(contentsOf: entry.value)  // canonical record bytes, as stored
            out.append(contentsOf: Array(#","version":\#(entry.version)}"#.utf8))
        }
        out.append(contentsOf: Array(#"],"id":"#.utf8))
        CanonicalJSON.writeString(id, into: &out)
        out.append(contentsOf: Array("}\n".utf8))
        let cacheControl = accessControl.policy.isPublicRead(path) ? CacheRule.revalidate : CacheRule.privateAnswer
        return Response(status: .ok, headers: [.contentType: "application/json", .cacheControl: cacheControl], body: .init(byteBuffer: ByteBuffer(bytes: out)))
    }
}
