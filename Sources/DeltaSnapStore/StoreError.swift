/// What went wrong in a store, in words a data owner can act on. The server answers each
/// ``Code`` once (`404`, `503` + `Retry-After`, …); the CLI prints ``description``.
///
/// A struct, as PostgresNIO's `PSQLError`, so a new code is not a breaking change for a
/// caller that switches over the codes, and the database's own error travels along in
/// ``underlying`` instead of being flattened into text.
///
/// ```swift
/// do {
///     _ = try await store.openPage(of: "nothing", after: nil, limit: 10)
/// } catch let error as StoreError where error.code == .unknownCollection {
///     print(error)   // collection "nothing" does not exist
/// }
/// ```
public struct StoreError: Error, Sendable, Equatable, CustomStringConvertible {
    /// What kind of failure this is: what a caller decides on.
    public struct Code: Hashable, Sendable, CustomStringConvertible {
        private let name: String
        private init(_ name: String) { self.name = name }
        public var description: String { name }

        /// The collection (or partition) does not exist.
        public static let unknownCollection = Code("unknownCollection")
        /// One record id appeared twice in one write.
        public static let duplicateID = Code("duplicateID")
        /// An epoch that is not 16 lowercase hex digits.
        public static let invalidEpoch = Code("invalidEpoch")
        /// The file or database holds something other than a DeltaSnap store.
        public static let notADeltaSnapStore = Code("notADeltaSnapStore")
        /// `--db` names no store this release can open.
        public static let badLocation = Code("badLocation")
        /// The database cannot be reached, is shutting down or restarting: retry shortly.
        public static let unavailable = Code("unavailable")
        /// The database holds a newer schema than this release knows.
        public static let newerSchema = Code("newerSchema")
        /// A write to a store opened read-only.
        public static let readOnly = Code("readOnly")
        /// The data kept changing under an operation that needs a stable read: retry.
        public static let busy = Code("busy")
        /// The database refused an operation (see ``StoreError/underlying``).
        public static let database = Code("database")
        /// An attachment's bytes are not what its reference states (size or SHA-256): nothing
        /// was kept.
        public static let attachmentMismatch = Code("attachmentMismatch")
        /// A record refers to an attachment the store does not hold (or states another size
        /// for it): upload the blob first.
        public static let missingAttachment = Code("missingAttachment")
        /// An upload that does not exist (never, finished, cancelled or expired).
        public static let unknownUpload = Code("unknownUpload")
        /// An append to an upload at another offset than the bytes it holds (or while another
        /// append is under way).
        public static let uploadOffsetMismatch = Code("uploadOffsetMismatch")
        /// A record's value carries the attachment marker but is no valid reference.
        public static let invalidAttachmentReference = Code("invalidAttachmentReference")
    }

    public let code: Code
    /// The one-line message a user reads.
    public let message: String
    /// The database's own error, when there was one.
    public let underlying: (any Error)?

    public init(_ code: Code, _ message: String, underlying: (any Error)? = nil) {
        self.code = code
        self.message = message
        self.underlying = underlying
    }

    public var description: String { message }

    /// Same code and message (the underlying error is not compared: most errors are not
    /// `Equatable`).
    public static func == (lhs: StoreError, rhs: StoreError) -> Bool {
        lhs.code == rhs.code && lhs.message == rhs.message
    }

    public static func unknownCollection(_ name: String) -> StoreError {
        StoreError(.unknownCollection, "collection \"\(name)\" does not exist")
    }

    public static func duplicateID(_ id: String) -> StoreError {
        StoreError(.duplicateID, "duplicate id \"\(id)\": each record may appear once per write")
    }

    public static func invalidEpoch(_ epoch: String) -> StoreError {
        StoreError(.invalidEpoch, "invalid epoch \"\(epoch)\": use 16 lowercase hex digits")
    }

    public static func notADeltaSnapStore(path: String, reason: String) -> StoreError {
        StoreError(.notADeltaSnapStore, "\(path) is not a DeltaSnap store: \(reason)")
    }

    public static func badLocation(_ location: String, _ reason: String, underlying: (any Error)? = nil) -> StoreError {
        StoreError(.badLocation, "invalid database URL \(location): \(reason)", underlying: underlying)
    }

    /// `database` names what could not be reached as a user knows it (`PostgreSQL at
    /// postgres://app@db:5432/app`).
    public static func unavailable(_ database: String, _ reason: String, underlying: (any Error)? = nil) -> StoreError {
        StoreError(.unavailable, "cannot reach \(database): \(reason)", underlying: underlying)
    }

    public static func newerSchema(found: Int, supported: Int) -> StoreError {
        StoreError(.newerSchema, "the database holds DeltaSnap schema version \(found), newer than this release's \(supported); upgrade deltasnap")
    }

    public static func readOnly(_ path: String) -> StoreError {
        StoreError(.readOnly, "\(path) was opened read-only; open it for writing to change it")
    }

    public static func busy(_ message: String) -> StoreError {
        StoreError(.busy, message)
    }

    public static func attachmentMismatch(_ message: String) -> StoreError {
        StoreError(.attachmentMismatch, message)
    }

    public static func missingAttachment(_ message: String) -> StoreError {
        StoreError(.missingAttachment, message)
    }

    public static func unknownUpload(_ token: String) -> StoreError {
        StoreError(.unknownUpload, "upload \(token) does not exist (finished, cancelled or expired)")
    }

    public static func uploadOffsetMismatch(_ token: String, expected: UInt64) -> StoreError {
        StoreError(.uploadOffsetMismatch, "upload \(token) holds \(expected) bytes: append at that offset")
    }

    public static func invalidAttachmentReference(_ message: String) -> StoreError {
        StoreError(.invalidAttachmentReference, message)
    }

    /// `message` is the database's own words, prefixed by the backend's name (`PostgreSQL: …`).
    public static func database(_ message: String, underlying: (any Error)? = nil) -> StoreError {
        StoreError(.database, message, underlying: underlying)
    }
}
