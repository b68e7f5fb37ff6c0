import DeltaSnapCore

/// Which attachments a writer has proven it holds (docs/PROTOCOL.md §12.2): content-addressed
/// storage keeps one copy of a blob for everyone, so naming a hash must not be enough to
/// reference it — else a writer who learns another user's hash puts it in a record of its own
/// and downloads the bytes (the deduplication attack). A push names a blob only when the
/// writer proved it has the bytes: it uploaded them into the scope it writes, or it may read a
/// record that names them; the store adds the blobs the scope's own records already refer to
/// (a write there opens no new way to read them). Anything else is refused exactly like a
/// blob the store does not hold (`missing_attachment`).
///
/// ```swift
/// let proof: AttachmentProof = principal.isAdmin ? .unchecked : .proven(hashesTheWriterHolds)
/// try await store.push(mutations, from: client, user: user, to: "notes/alice", retention: retention, merge: .fields, attachments: proof)
/// ```
package struct AttachmentProof: Sendable, Equatable {
    /// nil: every held blob may be named (the data owner, who may read everything, and
    /// trusted writers: imports, follow, publication).
    private let hashes: Set<String>?

    /// Every blob the store holds may be named.
    package static let unchecked = AttachmentProof(hashes: nil)

    /// Only `hashes` may be named, besides the blobs the written scope already refers to.
    package static func proven(_ hashes: Set<String>) -> AttachmentProof { AttachmentProof(hashes: hashes) }

    /// Whether `sha256` may be named without the scope already referring to it.
    package func allows(_ sha256: String) -> Bool { hashes?.contains(sha256) ?? true }

    /// Whether every held blob may be named.
    package var isUnchecked: Bool { hashes == nil }
}

extension CollectionStore {
    /// A push by a trusted writer (the data owner, a tool, a test): every held blob may be
    /// named (``AttachmentProof/unchecked``).
    package func push(
        _ mutations: [ParsedMutation], from client: String, user: String?, to collection: String, retention: PushRetention, merge: MergePolicy
    ) async throws -> PushOutcome {
        try await push(mutations, from: client, user: user, to: collection, retention: retention, merge: merge, attachments: .unchecked)
    }
}
