import DeltaSnapCore
import DeltaSnapStore
import Foundation
import HTTPTypes
import Hummingbird
import NIOCore

/// One feature's endpoints: the collaborators it needs and nothing else, and its routes as a
/// `RouteCollection` that ``DeltaSnapAPI`` (the composition root) mounts — the shape of
/// Hummingbird's `TodoController`. What every controller shares is here, once: who may do
/// what (``Gate``), the path a route names, the `HEAD` form of an answer, a body read to a
/// limit.
///
/// ```swift
/// struct HealthController: Controller {
///     func routes<Context: RequestContext>(context: Context.Type) -> RouteCollection<Context> {
///         RouteCollection(context: Context.self).get("/healthz") { _, _ in "ok" }
///     }
/// }
/// ```
protocol Controller: Sendable {
    /// This feature's routes, with absolute paths (``CollectionRoutes/bases`` for the ones a
    /// collection and a partition both have).
    func routes<Context: RequestContext>(context: Context.Type) -> RouteCollection<Context>
}

/// A controller whose endpoints ask who may do what (every one but the index's, whose
/// documents are already cut to their reader).
protocol GatedController: Controller {
    var gate: Gate { get }
}

/// Where a collection's and a partition's endpoints hang: every endpoint a collection has,
/// a partition has too, under `…/partitions/KEY` (``RequestTarget`` parses both).
enum CollectionRoutes {
    static let bases = ["/v1/collections/:name", "/v1/collections/:name/partitions/:key"]
}

/// Who may do what, for every controller: the access rules and the membership directory
/// that per-user rules consult.
struct Gate: Sendable {
    let accessControl: AccessControl
    let memberships: MembershipDirectory

    /// The principal `request` acts as, once it may exercise `right` on `path`.
    func authorize(_ request: Request, _ path: CollectionPath, for right: AccessControl.Right) async throws -> Principal {
        try await accessControl.authorize(request, path: path, for: right, memberships: memberships)
    }

    /// Refuses (`401`) any request without the admin token. The counters move when anyone
    /// reads their own partition: public, they would let anyone watch others' traffic.
    func requireAdmin(_ request: Request, for what: String) throws {
        guard let token = AccessControl.bearerToken(request) else {
            throw APIError.missingToken("\(what) is for the operator: it needs the admin token in")
        }
        guard accessControl.knownPrincipal(token)?.isAdmin == true else {
            throw APIError(
                .unauthorized, "invalid_token",
                "\(what) answers the admin token only" + (what == "/metrics" ? " (or serve it apart with serve --metrics-listen HOST:PORT)" : ""),
                headers: [.wwwAuthenticate: "Bearer error=\"invalid_token\""])
        }
    }
}

extension Controller {
    /// A GET response as HEAD answers it: status and headers, no body.
    static func headOnly(_ response: Response) -> Response {
        Response(status: response.status, headers: response.headers)
    }

    /// The collection or partition a route's path names (`:name`, and `:key` on the
    /// partition routes). Their characters never need percent-encoding, but a client that
    /// encodes them anyway (`%3A` for `:`) names the same partition: each part is decoded,
    /// then checked. An invalid one is `400` for every caller alike: it is syntax, and says
    /// nothing of what exists.
    func collectionPath(_ context: some RequestContext) throws -> CollectionPath {
        try RequestTarget.collectionPath(name: try context.parameters.require("name"), key: context.parameters.get("key"))
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

    /// A `200` with `document` as canonical JSON, for the caller only (`private, no-store`):
    /// the review's and the console's answers.
    static func privateJSON(_ document: JSONValue) -> Response {
        var bytes = Array(CanonicalJSON.string(document).utf8)
        bytes.append(UInt8(ascii: "\n"))
        return Response(
            status: .ok, headers: [.contentType: "application/json", .cacheControl: CacheRule.privateAnswer],
            body: .init(byteBuffer: ByteBuffer(bytes: bytes)))
    }

    /// The request's body, up to `limit` bytes (`413` above; `400` for one that stops early).
    func collect(_ request: inout Request, limit: Int) async throws -> [UInt8] {
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
}

extension GatedController {
    /// The access rules (``Gate``'s).
    var accessControl: AccessControl { gate.accessControl }

    /// The principal `request` acts as, once it may exercise `right` on `path`.
    func authorize(_ request: Request, _ path: CollectionPath, for right: AccessControl.Right) async throws -> Principal {
        try await gate.authorize(request, path, for: right)
    }

    /// The valid collection name in the path, once the bearer token may write it.
    func authorizedCollection(_ request: Request, context: some RequestContext) async throws -> (name: String, principal: Principal) {
        let path = try collectionPath(context)
        return (path.description, try await authorize(request, path, for: .write))
    }
}
