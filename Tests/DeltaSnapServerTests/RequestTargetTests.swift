import DeltaSnapCore
import Testing

@testable import DeltaSnapServer

/// The server's one URL grammar: what each layer (raw poll handler, fast path, informational
/// responder, router handlers) takes a path to name.
@Suite struct RequestTargetTests {
    static let hash = String(repeating: "ab", count: 32)

    static let table: [(String, RequestTarget)] = [
        ("/v1/index", .index),
        ("/v1/index?wait=30", .other),
        ("/v1/collections/items", .collection(CollectionPath(name: "items", key: nil)!)),
        ("/v1/collections/items/partitions/alice", .collection(CollectionPath(name: "items", key: "alice")!)),
        // Percent-encoded parts name what they decode to, as the router's handlers always read them.
        ("/v1/collections/%69tems/partitions/a%3Ab", .collection(CollectionPath(name: "items", key: "a:b")!)),
        ("/v1/collections/items/attachments/\(hash)", .attachment(CollectionPath(name: "items", key: nil)!, sha256: hash)),
        ("/v1/collections/items/partitions/alice/attachments/\(hash)", .attachment(CollectionPath(name: "items", key: "alice")!, sha256: hash)),
        ("/v1/uploads/\(String(repeating: "a", count: 32))", .upload(token: String(repeating: "a", count: 32))),
        // Everything else is the router's to match or refuse.
        ("/v1/collections/items?gzip=1", .other),
        ("/v1/collections/items/", .other),
        ("/v1/collections/", .other),
        ("/v1/collections/items/records/a", .other),
        ("/v1/collections/items/mutations", .other),
        ("/v1/collections/items/partitions/", .other),
        ("/v1/collections/items/partitions/alice/records", .other),
        ("/v1/collections/items/attachments/not-a-hash", .other),
        ("/v1/collections/items/attachments/\(hash)/x", .other),
        ("/v1/collections/%FF", .other),
        ("/v1/collections/deltasnap-review-log/partitions/items", .other),
        ("/v1/uploads/../etc", .other),
        ("/healthz", .other),
    ]

    @Test func pathsNameWhatTheGrammarSays() {
        for (path, expected) in Self.table {
            #expect(RequestTarget(path: path) == expected, "\(path)")
        }
    }

    @Test func theRouterAdapterRefusesWhatTheGrammarDoesNotName() throws {
        #expect(throws: APIError.self) { try RequestTarget.collectionPath(name: "%FF", key: nil as String?) }
        #expect(throws: APIError.self) { try RequestTarget.collectionPath(name: "items", key: "" as String?) }
        #expect(throws: APIError.self) { try RequestTarget.collectionPath(name: "deltasnap-review-log", key: "items" as String?) }
        #expect(try RequestTarget.collectionPath(name: "items", key: "a%40b" as String?) == CollectionPath(name: "items", key: "a@b"))
    }

    /// The raw poll handler takes its target through the same grammar: a partition is never
    /// answered before the router, a percent-encoded name is the name it decodes to.
    @Test func theRawPollParserUsesTheGrammar() {
        func target(_ path: String) -> PollRequestHead.Target? {
            PollRequestHead.parse(Array("GET \(path) HTTP/1.1\r\nIf-None-Match: \"a.1\"\r\n\r\n".utf8)[...])?.target
        }
        #expect(target("/v1/collections/%69tems") == .collection("items"))
        #expect(target("/v1/collections/items/partitions/alice") == nil)
        #expect(target("/v1/collections/items/attachments/\(Self.hash)") == .attachment(collection: "items", sha256: Self.hash))
        #expect(target("/v1/collections/items/records/a") == nil)
    }
}
