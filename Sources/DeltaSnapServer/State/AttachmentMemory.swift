import DeltaSnapCore
import Foundation
import NIOConcurrencyHelpers
import NIOCore

/// What the server remembers of the attachments it served: that a collection (or partition)
/// refers to a blob, with its reference, and — for a store that keeps no files of its own
/// (PostgreSQL) — the bytes of small blobs. A popular photo is then answered without a store
/// read, and from a public collection before the router (``FastPathHandler``), as nginx
/// answers a static file.
///
/// A reference is trusted for ``lifetime`` only: one that garbage collection dropped (in
/// another process) stops being served within it. A blob's bytes never change (it is named by
/// their hash), so only the reference can go stale.
///
/// ```swift
/// if let reference = memory.reference(of: hash, in: "notes") { … }
/// memory.remember(reference, in: "notes")
/// ```
final class AttachmentMemory: Sendable {
    private struct Key: Hashable, Sendable {
        var collection: String
        var sha256: String
    }

    private struct Remembered: Sendable {
        var reference: AttachmentReference
        var since: ContinuousClock.Instant
        /// The head of a public `200` of the whole blob, encoded once (``RawPollHandler``).
        var encodedHead: ByteBuffer?
    }

    /// Blobs up to this size are answered whole from memory or read at once.
    static let smallBlobBytes: UInt64 = 256 * 1024
    static let maximumReferences = 100_000
    /// The bytes of small blobs kept at most (for stores without files).
    static let budgetBytes = 64 << 20
    static let lifetime: Duration = .seconds(60)

    private let references = NIOLockedValueBox(BoundedCache<Key, Remembered>(capacity: AttachmentMemory.maximumReferences))
    private let bodies = NIOLockedValueBox(BoundedCache<String, ByteBuffer>(capacity: AttachmentMemory.maximumReferences, costLimit: AttachmentMemory.budgetBytes))

    /// The reference `collection` makes to `sha256`, while it is fresh.
    func reference(of sha256: String, in collection: String) -> AttachmentReference? {
        guard let remembered = references.withLockedValue({ $0.value(forKey: Key(collection: collection, sha256: sha256)) }) else { return nil }
        return ContinuousClock.now - remembered.since < Self.lifetime ? remembered.reference : nil
    }

    func remember(_ reference: AttachmentReference, in collection: String) {
        let key = Key(collection: collection, sha256: reference.sha256)
        references.withLockedValue { $0.set(Remembered(reference: reference, since: .now), forKey: key) }
    }

    /// Forgets what `collection` refers to: its blob turned out to be gone (collected).
    func forget(_ sha256: String, in collection: String) {
        _ = references.withLockedValue { $0.removeValue(forKey: Key(collection: collection, sha256: sha256)) }
    }

    /// The reference and the encoded head of a public `200` of the whole blob (`encode` makes
    /// it the first time), while the reference is fresh.
    func publicHead(of sha256: String, in collection: String, encode: (AttachmentReference) -> ByteBuffer) -> (AttachmentReference, ByteBuffer)? {
        let key = Key(collection: collection, sha256: sha256)
        let now = ContinuousClock.now
        return references.withLockedValue { cache -> (AttachmentReference, ByteBuffer)? in
            guard var remembered = cache.value(forKey: key), now - remembered.since < Self.lifetime else { return nil }
            if let head = remembered.encodedHead { return (remembered.reference, head) }
            let head = encode(remembered.reference)
            remembered.encodedHead = head
            cache.set(remembered, forKey: key)
            return (remembered.reference, head)
        }
    }

    /// Small blob files held open, as nginx's `open_file_cache`: a download then costs no
    /// `open`/`close` — which were a tenth of a 20 KiB download's CPU (docs/BENCHMARKS.md). A
    /// blob file never changes (it is named by its bytes' hash); one removed by garbage
    /// collection stays readable through a descriptor opened before, so a descriptor is
    /// trusted for ``lifetime`` only, as a reference is. Only small blobs: a large one's `open`
    /// is nothing beside its transfer, and a removed one's space is freed sooner.
    private let openFiles = NIOLockedValueBox(BoundedCache<String, BlobFile>(capacity: AttachmentMemory.openFileCapacity()))
    /// The descriptors downloads open for themselves (a large blob's, or a small one's when
    /// no more may be kept).
    let transfers: TransferGate
    /// How many descriptors connections leave for kept files now (``ConnectionGovernor``'s
    /// cap less the connections open): a file is kept only within it, so connections and
    /// kept files together never pass the cap, whichever comes first.
    private let roomToKeep: @Sendable () -> Int

    /// `roomToKeep`: the descriptors connections leave for kept files now (unbounded by default).
    init(transferDescriptors: Int = 256, roomToKeep: @escaping @Sendable () -> Int = { .max }) {
        transfers = TransferGate(capacity: transferDescriptors)
        self.roomToKeep = roomToKeep
    }

    /// Descriptors kept at most: half the process's limit (the rest is for connections and the
    /// store; `deltasnap serve` raises its soft limit to the hard one first), and no more than
    /// 16,384.
    static func openFileCapacity() -> Int {
        min(16_384, ConnectionLimits.currentDescriptorLimit() / 2)
    }

    /// The open file of blob `sha256` (`path` names it; nil when it cannot be opened, or when
    /// no descriptor may be taken for it now): kept for a small blob while there is room,
    /// opened for this request alone otherwise.
    func file(of sha256: String, size: UInt64, at path: () -> String?) -> BlobFile? {
        if size <= Self.smallBlobBytes {
            let now = ContinuousClock.now
            if let kept = openFiles.withLockedValue({ $0.value(forKey: sha256) }), now - kept.opened < Self.lifetime { return kept }
            if keptFileCount < roomToKeep() {
                guard let opened = path().flatMap({ BlobFile($0) }) else { return nil }
                openFiles.withLockedValue { $0.set(opened, forKey: sha256) }
                return opened
            }
        }
        // Opened per download, so counted: none is opened past the gate's capacity.
        guard let slot = transfers.enter() else { return nil }
        return path().flatMap { BlobFile($0, holding: slot) }
    }

    /// Descriptors kept open now.
    var keptFileCount: Int {
        openFiles.withLockedValue { $0.count }
    }

    /// Lets `count` kept descriptors go (each closes once no download holds it): they share
    /// the connections' budget and give way before a connection is refused
    /// (``ConnectionGovernor``).
    func releaseKeptFiles(_ count: Int) {
        openFiles.withLockedValue { $0.evict(count) }
    }

    /// The whole bytes of the small blob `sha256`, when kept.
    func body(of sha256: String) -> ByteBuffer? {
        bodies.withLockedValue { $0.value(forKey: sha256) }
    }

    func keep(_ body: ByteBuffer, of sha256: String) {
        bodies.withLockedValue { $0.set(body, forKey: sha256, cost: body.readableBytes) }
    }
}

/// A blob's file descriptor, shared by the requests reading it: closed once the last of them
/// and the cache let go of it, so evicting it never closes it under a reader — nor under a
/// `sendfile` in flight, whose completion holds it (``lend()``).
final class BlobFile: Sendable {
    let descriptor: Int32
    let opened = ContinuousClock.now
    /// The transfer slot a per-download descriptor is counted in (nil for a kept one).
    private let slot: TransferGate.Slot?

    init?(_ path: String, holding slot: TransferGate.Slot? = nil) {
        descriptor = open(path, O_RDONLY | O_CLOEXEC)
        self.slot = slot
        guard descriptor >= 0 else { return nil }
    }

    deinit {
        close(descriptor)
    }

    /// `size` bytes from the start (nil when the file is shorter).
    func read(_ size: UInt64) -> ByteBuffer? {
        var buffer = ByteBuffer()
        return read(0..<size, appendingTo: &buffer) ? buffer : nil
    }

    /// Appends the bytes of `range` to `buffer`; false (and `buffer` as it was) when the file
    /// is shorter.
    func read(_ range: Range<UInt64>, appendingTo buffer: inout ByteBuffer) -> Bool {
        let count = range.count
        let start = buffer.writerIndex
        let read = buffer.writeWithUnsafeMutableBytes(minimumWritableBytes: count) { target in
            var done = 0
            while done < count {
                let got = pread(descriptor, target.baseAddress! + done, count - done, off_t(range.lowerBound) + off_t(done))
                if got < 0 && errno == EINTR { continue }
                guard got > 0 else { break }
                done += got
            }
            return done
        }
        guard read == count else {
            buffer.moveWriterIndex(to: start)
            return false
        }
        return true
    }

    /// A handle over this descriptor for NIO's `FileRegion` (`sendfile` reads at explicit
    /// offsets, so requests sharing it never disturb each other). NIO's handle owns what it
    /// wraps: once the write completed, ``giveBack(_:)`` takes the descriptor back, while
    /// this object is still held.
    func lend() -> NIOFileHandle {
        NIOFileHandle(_deprecatedTakingOwnershipOfDescriptor: descriptor)
    }

    func giveBack(_ handle: NIOFileHandle) {
        _ = try? handle.takeDescriptorOwnership()
    }
}
