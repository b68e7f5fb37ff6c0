import DeltaSnapCore

/// How one collection (each of its partitions on its own, when partitioned) is reviewed
/// before publish: who edits, who reviews, and whether an editor may approve their own
/// change. Kept in the store (``ReviewPaths/settings``), so every writer — the server, `deltasnap
/// import`, a source follower — sends a reviewed collection's writes to its workspace.
///
/// ```swift
/// let settings = ReviewSettings(editors: "editor", reviewers: "reviewer", selfApprove: false)
/// try await store.setReviewSettings(["catalogue": settings])
/// ```
public struct ReviewSettings: Sendable, Equatable {
    /// The JWT role (`roles` claim) of those who write the workspace.
    public var editors: String
    /// The JWT role of those who approve, decline and roll back.
    public var reviewers: String
    /// Whether the editor who requested a review may approve it.
    public var selfApprove: Bool

    public init(editors: String, reviewers: String, selfApprove: Bool = false) {
        self.editors = editors
        self.reviewers = reviewers
        self.selfApprove = selfApprove
    }

    /// The settings record of collection `name`.
    func record(for name: String) throws -> Record {
        try Record(parsing: .object([
            JSONMember("editors", .string(editors)), JSONMember(Record.idKey, .string(name)),
            JSONMember("reviewers", .string(reviewers)), JSONMember("selfApprove", .bool(selfApprove)),
        ]))
    }

    /// The settings a record states, or nil for one that is not a settings record.
    init?(record: Record) {
        guard !record.isHidden, let value = try? JSONReader(bytes: record.bytes).readValue(),
              case .string(let editors)? = value["editors"], case .string(let reviewers)? = value["reviewers"]
        else { return nil }
        let selfApprove: Bool = if case .bool(let flag)? = value["selfApprove"] { flag } else { false }
        self.init(editors: editors, reviewers: reviewers, selfApprove: selfApprove)
    }
}
