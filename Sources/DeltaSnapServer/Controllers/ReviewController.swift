import DeltaSnapCore
import DeltaSnapStore
import Foundation
import Hummingbird
import Logging
import NIOCore

/// Review before publish (docs/PROTOCOL.md §13): the pending change as per-record diffs, the
/// steps (request, approve, decline, roll back) and the audit log, under `{base}/review`.
///
/// ```swift
/// routes.addRoutes(review.routes(context: BasicRequestContext.self))
/// ```
struct ReviewController: GatedController {
    let gate: Gate
    let store: any CollectionStore
    let heads: HeadCache

    /// What a caller wants to do with a review: see it, change it (request), or decide on it.
    enum ReviewRight { case see, request, decide }

    func routes<Context: RequestContext>(context: Context.Type) -> RouteCollection<Context> {
        let router = RouteCollection(context: Context.self)
        for base in CollectionRoutes.bases { register(at: base, on: router) }
        return router
    }

    private func register<Context: RequestContext>(at base: String, on router: RouteCollection<Context>) {
        router.get(RouterPath(base + "/review")) { request, context in try await reviewChanges(request, path: try collectionPath(context)) }
        router.get(RouterPath(base + "/review/log")) { request, context in try await reviewLog(request, path: try collectionPath(context)) }
        router.head(RouterPath(base + "/review")) { request, context in Self.headOnly(try await reviewChanges(request, path: try collectionPath(context))) }
        router.head(RouterPath(base + "/review/log")) { request, context in Self.headOnly(try await reviewLog(request, path: try collectionPath(context))) }
        for step in ReviewStep.allCases {
            router.post(RouterPath(base + "/review/\(step.rawValue)")) { request, context in
                try await takeReviewStep(step, request, path: try collectionPath(context), logger: context.logger)
            }
        }
        for method in [HTTPRequest.Method.post, .put, .delete, .patch, .options, .trace] {
            router.on(RouterPath(base + "/review"), method: method) { _, _ -> Response in throw APIError.methodNotAllowed("GET, HEAD") }
            router.on(RouterPath(base + "/review/log"), method: method) { _, _ -> Response in throw APIError.methodNotAllowed("GET, HEAD") }
        }
        for step in ReviewStep.allCases {
            for method in [HTTPRequest.Method.get, .head, .put, .delete, .patch, .options, .trace] {
                router.on(RouterPath(base + "/review/\(step.rawValue)"), method: method) { _, _ -> Response in throw APIError.methodNotAllowed("POST") }
            }
        }
    }

    /// `GET {base}/review[?after=ID&limit=N]`: the change under review — the frozen request
    /// when one waits, else the workspace — against what is published, one record a line of
    /// `changes`, in id order; `next` is the `after` of the next page (null: the last).
    func reviewChanges(_ request: Request, path: CollectionPath) async throws -> Response {
        let settings = try reviewSettings(of: path)
        _ = try await reviewPrincipal(request, path: path, settings: settings, for: .see)
        var limit = 100
        if let text = request.uri.queryParameters.get("limit") {
            guard let number = Int(text), (1...1000).contains(number) else { throw APIError(.badRequest, "invalid_limit", "limit must be an integer from 1 to 1000") }
            limit = number
        }
        let after = request.uri.queryParameters.get("after").flatMap { $0.isEmpty ? nil : String($0) }
        let (pending, changes, more) = try await store.reviewChanges(of: path.description, after: after, limit: limit)
        let document: JSONValue = .object([
            JSONMember("changes", .array(changes.map(\.json))),
            JSONMember("collection", .string(path.description)),
            JSONMember("next", more ? .string(changes.last!.id) : .null),
            JSONMember("pending", pending?.json ?? .null),
        ])
        return Self.privateJSON(document)
    }

    /// `GET {base}/review/log`: every step, oldest first.
    func reviewLog(_ request: Request, path: CollectionPath) async throws -> Response {
        let settings = try reviewSettings(of: path)
        _ = try await reviewPrincipal(request, path: path, settings: settings, for: .see)
        let state = try await store.reviewState(of: path.description)
        return Self.privateJSON(.object([
            JSONMember("collection", .string(path.description)), JSONMember("entries", .array(state.log.map(\.json))),
            JSONMember("pending", state.pending?.json ?? .null),
        ]))
    }

    /// `POST {base}/review/request|approve|decline|rollback` with an optional JSON body
    /// `{"comment":…}` (a decline needs one; a rollback needs `"version"`, and takes `"ids"`).
    func takeReviewStep(_ step: ReviewStep, _ request: Request, path: CollectionPath, logger: Logger) async throws -> Response {
        let settings = try reviewSettings(of: path)
        let principal = try await reviewPrincipal(request, path: path, settings: settings, for: step == .request ? .request : .decide)
        var request = request
        let body = try ReviewStepBody(try await collect(&request, limit: 1 << 20), step: step)
        let name = path.description
        let store = store
        let who = principal.subject
        let entry: ReviewLogEntry
        do {
            // One step of a path at a time, across every instance of the store.
            entry = try await store.exclusively("review:\(name)") {
                switch step {
                case .request:
                    return try await store.requestReview(of: name, by: who, comment: body.comment)
                case .approve:
                    if let pending = try await store.reviewState(of: name).pending, pending.by == who, !principal.isAdmin, !settings.selfApprove {
                        throw APIError(.forbidden, "self_approval", "\"\(who)\" requested this review and may not approve it: self-approve is off for \"\(path.name)\"")
                    }
                    return try await store.approveReview(of: name, by: who, comment: body.comment)
                case .decline:
                    return try await store.declineReview(of: name, by: who, comment: body.comment)
                case .rollback:
                    return try await store.rollbackReview(of: name, to: body.version!, ids: body.ids, by: who, comment: body.comment)
                }
            }
        } catch let error as ReviewError {
            throw APIError(error)
        }
        if let withdrawn = entry.withdrewRequest {
            logger.info("review request withdrawn by a rollback", metadata: [
                "collection": .string(name), "request": .stringConvertible(withdrawn), "by": .string(who), "step": .stringConvertible(entry.sequence),
            ])
        }
        var members = [JSONMember("collection", .string(name)), JSONMember("entry", entry.json)]
        if entry.published, let head = try await store.head(of: name) {
            heads.update(head)
            members.append(JSONMember("token", .string(head.token.description)))
        }
        return Self.privateJSON(.object(members))
    }

    // MARK: - Helpers

    /// The review settings of `path`'s collection; `404 not_reviewed` when it has none, and
    /// `404 unknown_collection` for the form its rule does not have (a partition of a
    /// collection that has none, a partitioned collection's bare name), as everywhere.
    func reviewSettings(of path: CollectionPath) throws -> ReviewSettings {
        guard let rule = accessControl.policy.rules[path.name], let settings = rule.review else {
            throw APIError(.notFound, "not_reviewed", ReviewError.notReviewed(path.description).description)
        }
        guard rule.partitioned == (path.key != nil) else { throw APIError.unknownCollection(path.description) }
        return settings
    }

    /// Who the caller is, once they may `right` the review of `path`: the admin token; an
    /// editor (role `settings.editors`) to see and request; a reviewer (`settings.reviewers`)
    /// to see and decide. A caller who may not read a hidden partition learns nothing (`404`).
    func reviewPrincipal(_ request: Request, path: CollectionPath, settings: ReviewSettings, for right: ReviewRight) async throws -> Principal {
        guard AccessControl.bearerToken(request) != nil else {
            // A partition one may not read answers as one that does not exist (PROTOCOL.md §10.2).
            if accessControl.policy.hidesRefusals(path) { throw APIError.unknownCollection(path.description) }
            throw APIError.missingToken("reviews need")
        }
        let principal = try await accessControl.principal(of: request)
        if principal.isAdmin { return principal }
        let editor = principal.claims?.has(role: settings.editors) == true
        let reviewer = principal.claims?.has(role: settings.reviewers) == true
        // The requester decides on their own request only where self-approval is on (checked by the step).
        let allowed = switch right {
        case .see: editor || reviewer
        case .request: editor
        case .decide: reviewer || (editor && settings.selfApprove)
        }
        if allowed { return principal }
        if accessControl.policy.hidesRefusals(path), !(try await accessControl.mayRead(path, as: principal, memberships: gate.memberships)) {
            throw APIError.unknownCollection(path.description)
        }
        let needed = switch right {
        case .see: "editors (role \"\(settings.editors)\") and reviewers (role \"\(settings.reviewers)\")"
        case .request: "editors (role \"\(settings.editors)\")"
        case .decide: "reviewers (role \"\(settings.reviewers)\")" + (settings.selfApprove ? " and editors" : "")
        }
        throw APIError(.forbidden, "forbidden", "only \(needed) may do this with the review of \"\(path)\"")
    }

}

/// The JSON body of a review step: `{"comment":"…","version":N,"ids":["…"]}`, each as the step needs.
struct ReviewStepBody {
    var comment: String?
    var version: UInt64?
    var ids: [String]?

    init(_ bytes: [UInt8], step: ReviewStep) throws {
        if !bytes.allSatisfy({ $0 == 0x20 || $0 == 0x0A || $0 == 0x0D || $0 == 0x09 }) {
            let value: JSONValue
            do {
                // One value and nothing after it, as the write API reads a record.
                let reader = JSONReader(bytes: bytes)
                value = try reader.readValue()
                guard try reader.isAtEnd() else { throw reader.error("unexpected data after the JSON object") }
            } catch {
                throw APIError(.badRequest, "invalid_json", "the body of a review step is a JSON object like {\"comment\":\"…\"}: \(error)")
            }
            guard case .object(let members) = value else { throw APIError(.badRequest, "invalid_review_step", "the body must be a JSON object") }
            for member in members {
                switch (member.key, member.value) {
                case ("comment", .string(let text)):
                    guard text.count <= 10_000 else { throw APIError(.badRequest, "invalid_review_step", "a comment is at most 10,000 characters") }
                    comment = text
                case ("comment", .null): comment = nil
                case ("version", .number(let text)) where step == .rollback:
                    guard let number = UInt64(text), number > 0 else { throw APIError(.badRequest, "invalid_review_step", "\"version\" must be a published version number") }
                    version = number
                case ("ids", .array(let list)) where step == .rollback:
                    var found: [String] = []
                    for element in list {
                        guard case .string(let id) = element, !id.isEmpty else { throw APIError(.badRequest, "invalid_review_step", "\"ids\" must be record ids (strings)") }
                        found.append(id)
                    }
                    guard !found.isEmpty else { throw APIError(.badRequest, "invalid_review_step", "\"ids\" must name at least one record (leave it out to roll back every record)") }
                    ids = found
                default:
                    let allowed = step == .rollback ? "\"comment\", \"version\" and \"ids\"" : "\"comment\""
                    throw APIError(.badRequest, "invalid_review_step", "unexpected \"\(member.key)\": a \(step.rawValue) takes \(allowed)")
                }
            }
        }
        if step == .decline, comment?.isEmpty ?? true {
            throw APIError(.badRequest, "comment_required", "a decline says why: send {\"comment\":\"…\"}")
        }
        if step == .rollback, version == nil {
            throw APIError(.badRequest, "invalid_review_step", "a rollback needs {\"version\":N}: the published version to go back to")
        }
    }
}

extension APIError {
    /// A review step refused for the state it found.
    init(_ error: ReviewError) {
        switch error {
        case .notReviewed: self.init(.notFound, error.code, error.description)
        case .unknownVersion: self.init(.badRequest, error.code, error.description)
        case .pending, .nothingPending, .nothingToReview: self.init(.conflict, error.code, error.description)
        }
    }
}
